// RUN: %fuserc opt -p stream-pipeline %s | filecheck %s
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=none}' %s | filecheck %s --check-prefix=NONE

// Scheduling by dependencies (the last step of stream-pipeline): the
// allgather starts as soon as its input is ready, on a worker stream after
// an event of the main stream, and its wait sits before the first op that
// reads its output: the independent GEMM between runs beside it (a
// backward's weight-gradient GEMM beside a gather, say).
// CHECK-LABEL: func.func @bulk
// CHECK:      %g = hir.alloc "bulk/0" : tensor<64x8xf32>
// CHECK-NEXT: %[[MAIN:.*]] = hir.get_current_stream : !hir.stream
// CHECK-NEXT: %[[READY:.*]] = hir.record_event : !hir.event
// CHECK-NEXT: %[[C:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[SIDE:.*]] = hir.stream_for %[[C]] mod 1 : !hir.stream
// CHECK-NEXT: hir.set_current_stream %[[SIDE]] : !hir.stream
// CHECK-NEXT: hir.wait_event %[[READY]] : !hir.event
// CHECK-NEXT: %t0 = hir.allgather %x, %g
// CHECK-NEXT: hir.set_current_stream %[[MAIN]] : !hir.stream
// CHECK-NEXT: %o = hir.alloc "bulk/1" : tensor<64x64xf32>
// CHECK-NEXT: hir.matmul %a, %w, %o
// CHECK-NEXT: hir.wait %t0 : !hir.token
// CHECK-NEXT: hir.copy %g, %y
// A collective with nothing beside it stays as it was.
// CHECK-LABEL: func.func @alone
// CHECK-NOT: hir.stream_for
// CHECK: func.return
// Only allocations and deallocations beside it: no compute to overlap, no
// stream switch.
// CHECK-LABEL: func.func @bookkeeping
// CHECK-NOT: hir.stream_for
// CHECK: func.return
// NONE-LABEL: func.func @bulk
// NONE-NOT: hir.stream_for
// NONE-LABEL: func.func @alone
func.func @bulk(%x: tensor<16x8xf32>, %a: tensor<64x32xf32>, %w: tensor<32x64xf32>, %y: tensor<64x8xf32>) -> (tensor<64x64xf32>, tensor<64x8xf32>) attributes {hir.host} {
  %o = hir.alloc "bulk/1" : tensor<64x64xf32>
  hir.matmul %a, %w, %o : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %g = hir.alloc "bulk/0" : tensor<64x8xf32>
  %t0 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  hir.copy %g, %y : tensor<64x8xf32>, tensor<64x8xf32>
  func.return %o, %y : tensor<64x64xf32>, tensor<64x8xf32>
}
func.func @alone(%x: tensor<16x8xf32>, %y: tensor<64x8xf32>) -> tensor<64x8xf32> attributes {hir.host} {
  %g = hir.alloc "alone/0" : tensor<64x8xf32>
  %t0 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  hir.copy %g, %y : tensor<64x8xf32>, tensor<64x8xf32>
  func.return %y : tensor<64x8xf32>
}
func.func @bookkeeping(%x: tensor<16x8xf32>, %y: tensor<64x8xf32>) -> tensor<64x8xf32> attributes {hir.host} {
  %t = hir.alloc "bookkeeping/1" : tensor<8x8xf32>
  hir.dealloc %t : tensor<8x8xf32>
  %g = hir.alloc "bookkeeping/0" : tensor<64x8xf32>
  %t0 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  %u = hir.alloc "bookkeeping/2" : tensor<8x8xf32>
  hir.dealloc %u : tensor<8x8xf32>
  hir.copy %g, %y : tensor<64x8xf32>, tensor<64x8xf32>
  func.return %y : tensor<64x8xf32>
}
// The ops a collective needs run first: the input gradient's GEMM (%dx)
// moves above the weight gradient's (%dw), which it does not need, so the
// reduce-scatter of %dx starts before %dw's GEMM and runs beside it.
// CHECK-LABEL: func.func @needed_first
// CHECK:      hir.matmul %g, %w, %dx
// CHECK:      hir.reduce_scatter %dx, %r
// CHECK:      hir.matmul %xt, %g, %dw
// CHECK:      hir.wait
// CHECK-NEXT: func.return
func.func @needed_first(%g: tensor<64x32xf32>, %w: tensor<32x16xf32>, %xt: tensor<16x64xf32>) -> (tensor<16x32xf32>, tensor<16x16xf32>) attributes {hir.host} {
  %dw = hir.alloc "needed_first/0" : tensor<16x32xf32>
  hir.matmul %xt, %g, %dw : tensor<16x64xf32>, tensor<64x32xf32>, tensor<16x32xf32>
  %dx = hir.alloc "needed_first/1" : tensor<64x16xf32>
  hir.matmul %g, %w, %dx : tensor<64x32xf32>, tensor<32x16xf32>, tensor<64x16xf32>
  %r = hir.alloc "needed_first/2" : tensor<16x16xf32>
  %t = hir.reduce_scatter %dx, %r op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x16xf32>, tensor<16x16xf32>) -> !hir.token
  hir.wait %t : !hir.token
  func.return %dw, %r : tensor<16x32xf32>, tensor<16x16xf32>
}
// A pipeline's join (the main stream waiting for its worker streams) stays
// where it is: the compute after it reads what the workers wrote (%y),
// which the join names nowhere; reordering the ops before the
// reduce-scatter moves nothing across it.
// CHECK-LABEL: func.func @join_stays
// CHECK:      hir.matmul %a, %w, %y
// CHECK:      hir.for
// CHECK-NEXT:   hir.stream_for
// CHECK-NEXT:   hir.sync_stream
// CHECK-NEXT: }
// CHECK-NEXT: %dx = hir.alloc "join_stays/1"
// CHECK-NEXT: hir.matmul %y, %w2, %dx
// CHECK:      hir.reduce_scatter %dx, %r
// CHECK:      hir.matmul %a, %w, %dw
func.func @join_stays(%a: tensor<64x32xf32>, %w: tensor<32x32xf32>, %w2: tensor<32x16xf32>) -> (tensor<64x32xf32>, tensor<16x16xf32>) attributes {hir.host} {
  %main = hir.get_current_stream : !hir.stream
  %c0 = hir.constant 0 : index
  %s = hir.stream_for %c0 mod 2 : !hir.stream
  hir.set_current_stream %s : !hir.stream
  hir.sync_stream %main : !hir.stream
  %y = hir.alloc "join_stays/0" : tensor<64x32xf32>
  hir.matmul %a, %w, %y : tensor<64x32xf32>, tensor<32x32xf32>, tensor<64x32xf32>
  hir.set_current_stream %main : !hir.stream
  hir.for %c = 0 to 2 {
    %sc = hir.stream_for %c mod 2 : !hir.stream
    hir.sync_stream %sc : !hir.stream
  }
  %dw = hir.alloc "join_stays/2" : tensor<64x32xf32>
  hir.matmul %a, %w, %dw : tensor<64x32xf32>, tensor<32x32xf32>, tensor<64x32xf32>
  %dx = hir.alloc "join_stays/1" : tensor<64x16xf32>
  hir.matmul %y, %w2, %dx : tensor<64x32xf32>, tensor<32x16xf32>, tensor<64x16xf32>
  %r = hir.alloc "join_stays/3" : tensor<16x16xf32>
  %t = hir.reduce_scatter %dx, %r op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x16xf32>, tensor<16x16xf32>) -> !hir.token
  hir.wait %t : !hir.token
  hir.dealloc %dx : tensor<64x16xf32>
  func.return %dw, %r : tensor<64x32xf32>, tensor<16x16xf32>
}

// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring}' %s | filecheck %s

// A ring whose compute stream waits for its transfers (here every chunk's
// GEMM is short against its copy and fences) takes a GEMM from before it
// that it does not need: the GEMM runs on the main stream beside the
// ring's chunks, just before the join, and the deallocation of the buffer
// it read goes after the join; the plan's reason says so.
// CHECK-LABEL: func.func @beside
// CHECK:      hir.copy %a, %t
// CHECK-NOT:  hir.matmul %t
// CHECK:      reason = "{{.*}}; beside it 1 GEMM(s) from before it
// CHECK:      hir.get %h
// CHECK:      hir.set_current_stream %main
// CHECK-NEXT: hir.matmul %t, %b, %g
// CHECK-NEXT: hir.for
// CHECK-NEXT: hir.stream_for
// CHECK-NEXT: hir.sync_stream
// CHECK-NEXT: }
// CHECK-NEXT: hir.dealloc %t
// A GEMM that makes what the ring gathers stays before it.
// CHECK-LABEL: func.func @needed
// CHECK:      hir.matmul %x0, %v, %x
// CHECK-NOT:  beside it
// CHECK:      func.return
func.func @beside(%x: tensor<16x8xf32>, %w: tensor<8x4xf32>, %a: tensor<32x32xf32>, %b: tensor<32x32xf32>) -> (tensor<64x4xf32>, tensor<32x32xf32>) attributes {hir.host} {
  %t = hir.alloc "beside/2/0" : tensor<32x32xf32>
  hir.copy %a, %t : tensor<32x32xf32>, tensor<32x32xf32>
  %g = hir.alloc "beside/3/0" : tensor<32x32xf32>
  hir.matmul %t, %b, %g : tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x32xf32>
  hir.dealloc %t : tensor<32x32xf32>
  %xg = hir.alloc "beside/0/0" : tensor<64x8xf32>
  %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "beside/1/0" : tensor<64x4xf32>
  hir.matmul %xg, %w, %y : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  hir.dealloc %xg : tensor<64x8xf32>
  func.return %y, %g : tensor<64x4xf32>, tensor<32x32xf32>
}
func.func @needed(%x0: tensor<16x16xf32>, %v: tensor<16x8xf32>, %w: tensor<8x4xf32>) -> tensor<64x4xf32> attributes {hir.host} {
  %x = hir.alloc "needed/2/0" : tensor<16x8xf32>
  hir.matmul %x0, %v, %x : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>
  %xg = hir.alloc "needed/0/0" : tensor<64x8xf32>
  %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "needed/1/0" : tensor<64x4xf32>
  hir.matmul %xg, %w, %y : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  hir.dealloc %xg : tensor<64x8xf32>
  func.return %y : tensor<64x4xf32>
}

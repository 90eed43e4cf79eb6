// RUN: %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-slow-gemm.json"}' %s | filecheck %s
// RUN: %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-slow-nccl.json"}' %s | filecheck %s --check-prefix=SLOWNET

// Compute shared between collectives (schedule.share_compute, before the
// scheduling by dependencies): the reduce-scatter has two GEMMs it does not
// need, the allgather after it none. With GEMMs this slow (a links file of
// 1e-6 TFLOP/s) one of them hides the reduce-scatter alone, so the later
// one moves beside the allgather, the deallocation before it staying put.
// CHECK-LABEL: func.func @share
// CHECK:      %t0 = hir.reduce_scatter %x, %r
// CHECK-NEXT: hir.set_current_stream
// CHECK-NEXT: %o1 = hir.alloc "share/1"
// CHECK-NEXT: hir.matmul %a, %w, %o1
// CHECK:      hir.wait %t0
// CHECK:      %t1 = hir.allgather %s, %g
// CHECK-NEXT: hir.set_current_stream
// CHECK-NEXT: hir.dealloc %r
// CHECK-NEXT: hir.matmul %b, %v, %o2
// CHECK-NEXT: hir.wait %t1
// A GEMM whose output an op before the allgather reads stays where it is
// (beside the reduce-scatter); the other one moves instead.
// CHECK-LABEL: func.func @needed_later
// CHECK:      %t0 = hir.reduce_scatter %x, %r
// CHECK:      hir.matmul %b, %v, %o2
// CHECK-NEXT: hir.copy %o2, %q
// CHECK:      hir.wait %t0
// CHECK:      %t1 = hir.allgather %s, %g
// CHECK-NEXT: hir.set_current_stream
// CHECK-NEXT: hir.matmul %a, %w, %o1
// CHECK-NEXT: hir.wait %t1
// With collectives of a millisecond (a links file), the reduce-scatter
// needs both GEMMs to hide: none is spared, the allgather runs alone.
// SLOWNET-LABEL: func.func @share
// SLOWNET:      hir.matmul %b, %v, %o2
// SLOWNET:      hir.wait %t0
// SLOWNET:      %t1 = hir.allgather %s, %g
// SLOWNET-NEXT: hir.wait %t1
func.func @share(%x: tensor<64x8xf32>, %a: tensor<64x32xf32>, %w: tensor<32x64xf32>, %b: tensor<64x32xf32>, %v: tensor<32x64xf32>, %z: tensor<64x8xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x8xf32>) attributes {hir.host} {
  %o1 = hir.alloc "share/1" : tensor<64x64xf32>
  hir.matmul %a, %w, %o1 : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %o2 = hir.alloc "share/2" : tensor<64x64xf32>
  hir.matmul %b, %v, %o2 : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %r = hir.alloc "share/0" : tensor<16x8xf32>
  %t0 = hir.reduce_scatter %x, %r op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  %s = hir.alloc "share/3" : tensor<16x8xf32>
  hir.copy %r, %s : tensor<16x8xf32>, tensor<16x8xf32>
  hir.dealloc %r : tensor<16x8xf32>
  %g = hir.alloc "share/4" : tensor<64x8xf32>
  %t1 = hir.allgather %s, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t1 : !hir.token
  hir.copy %g, %z : tensor<64x8xf32>, tensor<64x8xf32>
  func.return %o1, %o2, %z : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x8xf32>
}
func.func @needed_later(%x: tensor<64x8xf32>, %a: tensor<64x32xf32>, %w: tensor<32x64xf32>, %b: tensor<64x32xf32>, %v: tensor<32x64xf32>, %z: tensor<64x8xf32>, %q: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x8xf32>) attributes {hir.host} {
  %o1 = hir.alloc "needed_later/1" : tensor<64x64xf32>
  hir.matmul %a, %w, %o1 : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %o2 = hir.alloc "needed_later/2" : tensor<64x64xf32>
  hir.matmul %b, %v, %o2 : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %r = hir.alloc "needed_later/0" : tensor<16x8xf32>
  %t0 = hir.reduce_scatter %x, %r op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  hir.copy %o2, %q : tensor<64x64xf32>, tensor<64x64xf32>
  %s = hir.alloc "needed_later/3" : tensor<16x8xf32>
  hir.copy %r, %s : tensor<16x8xf32>, tensor<16x8xf32>
  %g = hir.alloc "needed_later/4" : tensor<64x8xf32>
  %t1 = hir.allgather %s, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t1 : !hir.token
  hir.copy %g, %z : tensor<64x8xf32>, tensor<64x8xf32>
  func.return %o1, %z : tensor<64x64xf32>, tensor<64x8xf32>
}

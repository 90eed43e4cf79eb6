// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s

// Deallocation: each buffer made by hir.alloc is given back right after its
// last use (a communication's use lasts until its wait; a view's uses count
// for its buffer); never arguments nor returned buffers.

// %a is last used by the second GEMM: given back there, not at the end;
// %b and %c after the launch that reads them last; arguments and the
// result are kept.
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!w = tensor<16x16xf32, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [4]
func.func @last_use(%x: !t, %w: !w) -> !t {
  %a = fusion.relu %x : (!t) -> !t
  %b = fusion.matmul %a, %w : (!t, !w) -> !t
  %c = fusion.matmul %a, %w : (!t, !w) -> !t
  %d = fusion.tanh %c : (!t) -> !t
  %e = fusion.add %b, %d : (!t, !t) -> !t
  func.return %e : !t
}
// CHECK-LABEL: func.func @last_use(
// CHECK-NOT: hir.dealloc %x
// CHECK: %a = hir.alloc "last_use/0/0"
// CHECK: %b = hir.alloc "last_use/1/0"
// CHECK-NEXT: hir.matmul %a, %w, %b
// CHECK-NEXT: %c = hir.alloc "last_use/2/0"
// CHECK-NEXT: hir.matmul %a, %w, %c
// CHECK-NEXT: hir.dealloc %a : tensor<16x16xf32>
// CHECK-NEXT: %[[E:.*]] = hir.alloc "last_use/4/0"
// CHECK-NEXT: hir.launch ins(%c, %b : tensor<16x16xf32>, tensor<16x16xf32>) outs(%[[E]] : tensor<16x16xf32>) {
// CHECK: }
// CHECK-NEXT: hir.dealloc %b : tensor<16x16xf32>
// CHECK-NEXT: hir.dealloc %c : tensor<16x16xf32>
// CHECK-NEXT: hir.yield %[[E]] : tensor<16x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %e : tensor<16x16xf32>

// -----

// A buffer read by a communication through a view is given back after the
// communication's wait.
!c = tensor<1x64x16xf32, #fusion.sharding<@tp, [-, -, DIDx]>>
!r = tensor<1x64x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @through_view(%x: !c) -> !r {
  %a = fusion.exp %x : (!c) -> !c
  %y = fusion.set %a : (!c) -> !r
  func.return %y : !r
}
// CHECK-LABEL: func.func @through_view(
// CHECK: %a = hir.alloc "through_view/0/0" : tensor<1x64x4xf32>
// CHECK: %[[V:.*]] = hir.view %a : tensor<1x64x4xf32> -> tensor<4x16x4xf32>
// CHECK-NEXT: %[[S:.*]] = hir.alloc "through_view/1/0/s0/out" : tensor<4x16x4xf32>
// CHECK-NEXT: %[[T:.*]] = hir.alltoall %[[V]], %[[S]] team = [0, 1, 2, 3]
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.dealloc %a : tensor<1x64x4xf32>
// CHECK-NEXT: hir.launch ins(%[[S]] : tensor<4x16x4xf32>)
// CHECK: hir.dealloc %[[S]] : tensor<4x16x4xf32>
// CHECK-NOT: hir.dealloc
// CHECK: func.return %y

// -----

// Results are buffers of their own: a value returned twice is copied into a
// fresh buffer (site F/return/K); an argument is returned as it is (the
// caller's own input comes back, not a copy).
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @results(%x: !t) -> (!t, !t, !t) {
  %a = fusion.relu %x : (!t) -> !t
  func.return %x, %a, %a : !t, !t, !t
}
// CHECK-LABEL: func.func @results(
// CHECK-NEXT: %a, %[[R2:.*]] = hir.if_rank [0, 1, 2, 3] -> (tensor<16x16xf32>, tensor<16x16xf32>) {
// CHECK-NEXT: %[[A:.*]] = hir.alloc "results/0/0" : tensor<16x16xf32>
// CHECK-NOT: results/return/0
// CHECK: %[[C2:.*]] = hir.alloc "results/return/2" : tensor<16x16xf32>
// CHECK-NEXT: hir.copy %[[A]], %[[C2]] : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: hir.yield %[[A]], %[[C2]] : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %x, %a, %[[R2]] : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>

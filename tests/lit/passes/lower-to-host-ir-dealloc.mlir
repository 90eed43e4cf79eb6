// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s

// Deallocation: each buffer made by hir.alloc is given back right after its
// last use (a communication's use lasts until its wait; a view's uses count
// for its buffer); never arguments nor returned buffers.

// %a is last used by the launch computing %c: given back there, not at the
// end; %b after its last reader; arguments and the result are kept.
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!s = tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
fusion.mesh @tp shape = [4]
func.func @last_use(%x: !t) -> !s {
  %a = fusion.relu %x : (!t) -> !t
  %b = fusion.sum %a dims = [1] : (!t) -> !s
  %c = fusion.softmax %a dim = 1 : (!t) -> !t
  %d = fusion.max %c dims = [1] : (!t) -> !s
  %e = fusion.add %b, %d : (!s, !s) -> !s
  func.return %e : !s
}
// CHECK-LABEL: func.func @last_use(
// CHECK-NOT: hir.dealloc %x
// CHECK: %a = hir.alloc "last_use/0/0"
// CHECK: %b = hir.alloc "last_use/1/0"
// CHECK: hir.launch ins(%a : tensor<16x16xf32>) outs(%b : tensor<16xf32>)
// CHECK: %c = hir.alloc "last_use/2/0"
// CHECK-NEXT: hir.launch ins(%a : tensor<16x16xf32>) outs(%c : tensor<16x16xf32>) {
// CHECK: }
// CHECK-NEXT: hir.dealloc %a : tensor<16x16xf32>
// CHECK-NEXT: %d = hir.alloc "last_use/3/0"
// CHECK-NEXT: hir.launch ins(%c : tensor<16x16xf32>) outs(%d : tensor<16xf32>) {
// CHECK: }
// CHECK-NEXT: hir.dealloc %c : tensor<16x16xf32>
// CHECK-NEXT: %[[E:.*]] = hir.alloc "last_use/4/0"
// CHECK-NEXT: hir.launch ins(%b, %d : tensor<16xf32>, tensor<16xf32>) outs(%[[E]] : tensor<16xf32>) {
// CHECK: }
// CHECK-NEXT: hir.dealloc %b : tensor<16xf32>
// CHECK-NEXT: hir.dealloc %d : tensor<16xf32>
// CHECK-NEXT: hir.yield %[[E]] : tensor<16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %e : tensor<16xf32>

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

// Results are buffers of their own: an argument returned, or a value
// returned twice, is copied into a fresh buffer (site F/return/K).
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @results(%x: !t) -> (!t, !t, !t) {
  %a = fusion.relu %x : (!t) -> !t
  func.return %x, %a, %a : !t, !t, !t
}
// CHECK-LABEL: func.func @results(
// CHECK-NEXT: %a, %[[R0:.*]], %[[R2:.*]] = hir.if_rank [0, 1, 2, 3] -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) {
// CHECK-NEXT: %[[A:.*]] = hir.alloc "results/0/0" : tensor<16x16xf32>
// CHECK: %[[C0:.*]] = hir.alloc "results/return/0" : tensor<16x16xf32>
// CHECK-NEXT: hir.copy %x, %[[C0]] : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: %[[C2:.*]] = hir.alloc "results/return/2" : tensor<16x16xf32>
// CHECK-NEXT: hir.copy %[[A]], %[[C2]] : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: hir.yield %[[A]], %[[C0]], %[[C2]] : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %[[R0]], %a, %[[R2]] : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>

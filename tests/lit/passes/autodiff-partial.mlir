// Partial sums and meshes in the backward: the cotangent of a partial
// result is whole (the transpose of the sum over devices), a partial
// activation the backward reads is saved reduced (a function input is never
// partial), the cotangent of a move between meshes moves back, and zero
// gradients of arguments on two meshes keep a constant each. The backward
// compiles (tests/e2e/test_autodiff.py checks its numbers).
// RUN: %fuserc opt -p autodiff --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p autodiff,default --split-input-file %s > /dev/null

// CHECK-LABEL: func.func @main_fwd
// CHECK: %[[S:.*]] = fusion.set %p : (tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<8x12xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: func.return %p, %r, {{.*}}%[[S]]
// CHECK-LABEL: func.func @main_bwd
// CHECK-SAME: %p: tensor<8x12xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-SAME: %[[CT:.*]]: tensor<8x12xf32, #fusion.sharding<@tp, [-, -]>>, %[[CR:.*]]: tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>)
// CHECK: fusion.set %[[CR]] : (tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>) -> tensor<8x6xf32, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [4]
fusion.mesh @pair shape = [2] devices = [3, 1]
func.func @main(%a: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b: tensor<16x12xf32, #fusion.sharding<@tp, [DIDx, -]>>, %c: tensor<12x6xf32, #fusion.sharding<@tp, [-, -]>>) -> (tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>, tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>) {
  %p = fusion.matmul %a, %b : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x12xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  %q = fusion.matmul %p, %c : (tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>, tensor<12x6xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x6xf32>
  %t = fusion.tanh %q : (tensor<8x6xf32>) -> tensor<8x6xf32>
  %r = fusion.set %t : (tensor<8x6xf32>) -> tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>
  func.return %p, %r : tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>, tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>
}

// -----

// No float path reaches the result: every gradient is zeros, of its
// argument's shape, on its argument's mesh (one constant per zeros: one
// shared constant took one mesh, and the other broadcast mixed two).
// CHECK-LABEL: func.func @main_bwd
// CHECK-COUNT-2: fusion.constant 0.0
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [2] devices = [2, 3]
func.func @main(%x: tensor<4xf32, #fusion.sharding<@a, [DIDx]>>, %y: tensor<6xf32, #fusion.sharding<@b, [-]>>) -> tensor<4xi1, #fusion.sharding<@a, [DIDx]>> {
  %c = fusion.gt %x, %x : (tensor<4xf32, #fusion.sharding<@a, [DIDx]>>, tensor<4xf32, #fusion.sharding<@a, [DIDx]>>) -> tensor<4xi1, #fusion.sharding<@a, [DIDx]>>
  func.return %c : tensor<4xi1, #fusion.sharding<@a, [DIDx]>>
}

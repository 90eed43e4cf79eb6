// RUN: %fuserc opt -p autodiff %s | filecheck %s
// RUN: %fuserc opt -p 'autodiff{save=inputs}' %s | filecheck %s --check-prefix=INPUTS
// RUN: %fuserc opt -p autodiff,default %s | filecheck %s --check-prefix=LOWERED

// A sequence-parallel MLP: @main stays, @main_fwd returns y then what the
// backward reads, @main_bwd takes those and dy and returns dx, dw1, dw2
// sharded like x, w1, w2 (the replicated-row weight gradients of the
// sharded tokens are partial sums, reduced by the final sets).
fusion.mesh @tp shape = [2]
func.func @main(%x: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                %w1: tensor<4x16xf32, #fusion.sharding<@tp, [-, DIDx]>>,
                %w2: tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<4x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16xf32>
  %g = fusion.gelu %h : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = fusion.matmul %g, %w2 : (tensor<8x16xf32>, tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// CHECK-LABEL: func.func @main(
// CHECK: func.func @main_fwd(%{{.*}}: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>, %{{.*}}: tensor<4x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %{{.*}}: tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>)
// CHECK-SAME: -> (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>,
// CHECK: fusion.gelu
// CHECK: func.return %y,
// CHECK: func.func @main_bwd(
// CHECK-SAME: %{{.*}}: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<4x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>)
// CHECK-NOT: fusion.gelu %
// CHECK: fusion.erf
// CHECK: fusion.set {{.*}} -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: fusion.set {{.*}} -> tensor<4x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK: fusion.set {{.*}} -> tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: func.return

// With save = inputs the forward returns exactly the arguments after y, and
// the backward recomputes gelu's input from them.
// INPUTS: func.func @main_fwd(%[[X:.*]]: tensor<8x4xf32, {{.*}}, %[[W1:.*]]: tensor<4x16xf32, {{.*}}, %[[W2:.*]]: tensor<16x4xf32, {{.*}})
// INPUTS: func.return %y, %[[X]], %[[W1]], %[[W2]] :
// INPUTS: func.func @main_bwd(%{{.*}}: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>, %{{.*}}: tensor<4x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %{{.*}}: tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>, %{{.*}}: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>)
// INPUTS: fusion.matmul
// INPUTS: fusion.erf

// All three functions lower to host programs; the backward communicates
// (its column-parallel GEMM's input gradient is reduce-scattered).
// LOWERED: func.func @main(
// LOWERED: func.func @main_fwd(
// LOWERED: func.func @main_bwd(
// LOWERED: hir.reduce_scatter

// Sequence-parallel MLP (Megatron SP): the sequence of %x is sharded on
// entry and exit; w1 is column-parallel, w2 row-parallel. The intermediates
// are unannotated: propagate-shardings decides them (an AllGather before the
// first GEMM, a ReduceScatter after the second).
//   mpiexec -n 4 fuserc run examples/sp_mlp.mlir --check
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                %w1: tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>,
                %w2: tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<128x256xf32>
  %g = fusion.gelu %h : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %y = fusion.matmul %g, %w2 : (tensor<128x256xf32>, tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// Megatron tensor-parallel MLP with torch.nn.Linear layers ([out, in]
// weights, with bias): the first linear is column-parallel (its output
// features are sharded, so no communication), the second row-parallel (its
// input features are sharded: each device holds a partial sum, reduced by
// an AllReduce to the replicated result).
//   mpiexec -n 4 fuserc run examples/linear_column_row.mlir --check
#rep2 = #fusion.sharding<@tp, [-, -]>
#cols = #fusion.sharding<@tp, [-, DIDx]>
#rows = #fusion.sharding<@tp, [DIDx, -]>
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<32x64xf32, #rep2>,
                %w1: tensor<256x64xf32, #rows>, %b1: tensor<256xf32, #fusion.sharding<@tp, [DIDx]>>,
                %w2: tensor<64x256xf32, #cols>, %b2: tensor<64xf32, #fusion.sharding<@tp, [-]>>)
    -> tensor<32x64xf32, #rep2> {
  %h = fusion.linear %x, %w1, %b1 : (tensor<32x64xf32, #rep2>, tensor<256x64xf32, #rows>, tensor<256xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<32x256xf32, #cols>
  %a = fusion.silu %h : (tensor<32x256xf32, #cols>) -> tensor<32x256xf32, #cols>
  %y = fusion.linear %a, %w2, %b2 : (tensor<32x256xf32, #cols>, tensor<64x256xf32, #cols>, tensor<64xf32, #fusion.sharding<@tp, [-]>>) -> tensor<32x64xf32, #rep2>
  func.return %y : tensor<32x64xf32, #rep2>
}

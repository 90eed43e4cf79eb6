// GEMM + ReduceScatter (row-parallel): the contracted dimension is sharded,
// so each device computes a partial sum of the whole product; the result is
// reduced and scattered by rows.
//   mpiexec -n 4 fuserc run examples/matmul_reduce_scatter.mlir --check
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<256x128xf32, #fusion.sharding<@tp, [-, DIDx]>>,
                %w: tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.matmul %x, %w : (tensor<256x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

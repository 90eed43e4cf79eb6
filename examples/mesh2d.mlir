// A 2-D mesh of 2x2 devices: data parallel over DIDy (the batch), tensor
// parallel over DIDx (the features). The weight is replicated over DIDy and
// column-sharded over DIDx, so the GEMM needs no communication and each
// device holds one [32, 32] block of the result.
//   mpiexec -n 4 fuserc run examples/mesh2d.mlir --check
fusion.mesh @grid shape = [2, 2]
func.func @main(%x: tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -]>>,
                %w: tensor<48x64xf32, #fusion.sharding<@grid, [-, DIDx]>>,
                %b: tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>)
    -> tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>> {
  %h = fusion.matmul %x, %w : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -]>>, tensor<48x64xf32, #fusion.sharding<@grid, [-, DIDx]>>) -> tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
  %s = fusion.add %h, %b : (tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>, tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
  %y = fusion.tanh %s : (tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
  func.return %y : tensor<64x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
}

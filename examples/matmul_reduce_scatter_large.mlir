// GEMM + ReduceScatter at the headline shape (M=32768, K=16384, N=8192,
// bf16, 4 devices): each device multiplies its slice of the contracted
// dimension into a partial product of all of %y, reduced and scattered by
// rows. stream-pipeline's auto chooses the ring: each partial block is put
// into its owner's staging buffer as soon as it is computed, and summed there
// while the next block's GEMM runs.
//   mpiexec -n 4 fuserc run examples/matmul_reduce_scatter_large.mlir --backend cuda --warmup 3 --iters 10
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<32768x16384xbf16, #fusion.sharding<@tp, [-, DIDx]>>,
                %w: tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.matmul %x, %w : (tensor<32768x16384xbf16, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
}

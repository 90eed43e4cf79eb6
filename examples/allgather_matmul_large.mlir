// AllGather + GEMM at the headline shape (M=32768, K=16384, N=8192, bf16,
// 4 devices). The rows of %x are sharded over @tp; the product is computed in
// 4 stream chunks, so gathering one chunk of %x overlaps the GEMM of another.
//   mpiexec -n 4 fuserc run examples/allgather_matmul_large.mlir --backend cuda --warmup 3 --iters 10
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<32768x16384xbf16, #fusion.sharding<@tp, [DIDx, -]>>,
                %w: tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<32768x16384xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, -]>>) -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
}

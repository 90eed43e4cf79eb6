// AllGather + GEMM, small: x [DIDx, -] @ w [-, -] -> y [Stream(4), -].
// Each device holds 64 rows of %x; the result is computed in 4 chunks of 64
// rows, chunk i needing the rows of device i, so communication of one chunk
// overlaps the GEMM of another.
//   mpiexec -n 4 fuserc run examples/allgather_matmul.mlir --check
#rows = #fusion.sharding<@tp, [DIDx, -]>
#replicated = #fusion.sharding<@tp, [-, -]>
#chunks = #fusion.sharding<@tp, [Stream(4), -]>
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<256x128xf32, #rows>, %w: tensor<128x64xf32, #replicated>)
    -> tensor<256x64xf32, #chunks> {
  %y = fusion.matmul %x, %w : (tensor<256x128xf32, #rows>, tensor<128x64xf32, #replicated>) -> tensor<256x64xf32, #chunks>
  func.return %y : tensor<256x64xf32, #chunks>
}

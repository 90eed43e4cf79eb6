// The AllGather + GEMM of allgather_matmul_large.mlir in bf16 at a size that
// runs in moments on a CPU: x [DIDx, -] @ w [-, -] -> y [Stream(4), -].
//   mpiexec -n 4 fuserc run examples/allgather_matmul_bf16.mlir --check
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<1024x512xbf16, #fusion.sharding<@tp, [DIDx, -]>>,
                %w: tensor<512x256xbf16, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<1024x256xbf16, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<1024x512xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<512x256xbf16, #fusion.sharding<@tp, [-, -]>>) -> tensor<1024x256xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<1024x256xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
}

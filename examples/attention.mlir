// Head-parallel attention core: softmax(q @ k^T * scale) @ v with the 8
// heads sharded over 4 devices (2 heads each); every op is local, no
// communication. %scale is a one-element tensor broadcast over the scores.
//   mpiexec -n 4 fuserc run examples/attention.mlir --check
#heads = #fusion.sharding<@tp, [DIDx, -, -]>
fusion.mesh @tp shape = [4]
func.func @main(%q: tensor<8x32x16xf32, #heads>, %k: tensor<8x32x16xf32, #heads>,
                %v: tensor<8x32x16xf32, #heads>, %scale: tensor<1xf32, #fusion.sharding<@tp, [-]>>)
    -> tensor<8x32x16xf32, #heads> {
  %kt = fusion.permute %k dims = [0, 2, 1] : (tensor<8x32x16xf32, #heads>) -> tensor<8x16x32xf32, #heads>
  %s = fusion.matmul %q, %kt : (tensor<8x32x16xf32, #heads>, tensor<8x16x32xf32, #heads>) -> tensor<8x32x32xf32, #heads>
  %c = fusion.broadcast_in_dim %scale dims = [2] : (tensor<1xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x32x32xf32, #heads>
  %z = fusion.mul %s, %c : (tensor<8x32x32xf32, #heads>, tensor<8x32x32xf32, #heads>) -> tensor<8x32x32xf32, #heads>
  %p = fusion.softmax %z dim = 2 : (tensor<8x32x32xf32, #heads>) -> tensor<8x32x32xf32, #heads>
  %o = fusion.matmul %p, %v : (tensor<8x32x32xf32, #heads>, tensor<8x32x16xf32, #heads>) -> tensor<8x32x16xf32, #heads>
  func.return %o : tensor<8x32x16xf32, #heads>
}

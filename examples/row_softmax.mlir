// Softmax over the features of a tensor whose features are sharded, written
// out with reductions and broadcasts: the row max and the row sum reduce over
// the sharded dimension, so both need communication. Only the input and the
// result are annotated; propagate-shardings decides the rest.
//   mpiexec -n 4 fuserc run examples/row_softmax.mlir --check
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>)
    -> tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %m = fusion.max %x dims = [1] : (tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16xf32>
  %mb = fusion.broadcast_in_dim %m dims = [0] : (tensor<16xf32>) -> tensor<16x64xf32>
  %d = fusion.sub %x, %mb : (tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x64xf32>) -> tensor<16x64xf32>
  %e = fusion.exp %d : (tensor<16x64xf32>) -> tensor<16x64xf32>
  %s = fusion.sum %e dims = [1] keepdim = true : (tensor<16x64xf32>) -> tensor<16x1xf32>
  %sb = fusion.broadcast_in_dim %s dims = [0, 1] : (tensor<16x1xf32>) -> tensor<16x64xf32>
  %y = fusion.div %e, %sb : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// A transpose that keeps rows sharded: %x [DIDx, -] is resharded to
// [-, DIDx] (DIDx moves from dimension 0 to dimension 1: an AllToAll), after
// which each device transposes its own block, giving rows of the result.
//   mpiexec -n 4 fuserc run examples/alltoall_transpose.mlir --check
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<32x64xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %c = fusion.set %x : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %t = fusion.permute %c dims = [1, 0] : (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<32x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %t : tensor<32x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// Softmax over an unsharded dimension of a row-split tensor (local), and
// over the sharded dimension (gathered, computed, split again); the row
// softmax of examples/row_softmax.mlir written with reductions.
!rows = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<8x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rows, %y: !cols) -> (!rows, !cols, !cols) {
  %a = fusion.softmax %x dim = 1 : (!rows) -> !rows
  %b = fusion.softmax %y dim = 1 : (!cols) -> !cols
  %m = fusion.max %y dims = [1] : (!cols) -> tensor<8x${T}>
  %mb = fusion.broadcast_in_dim %m dims = [0] : (tensor<8x${T}>) -> tensor<8x24x${T}>
  %d = fusion.sub %y, %mb : (!cols, tensor<8x24x${T}>) -> tensor<8x24x${T}>
  %e = fusion.exp %d : (tensor<8x24x${T}>) -> tensor<8x24x${T}>
  %s = fusion.sum %e dims = [1] keepdim = true : (tensor<8x24x${T}>) -> tensor<8x1x${T}>
  %sb = fusion.broadcast_in_dim %s dims = [0, 1] : (tensor<8x1x${T}>) -> tensor<8x24x${T}>
  %c = fusion.div %e, %sb : (tensor<8x24x${T}>, tensor<8x24x${T}>) -> !cols
  func.return %a, %b, %c : !rows, !cols, !cols
}

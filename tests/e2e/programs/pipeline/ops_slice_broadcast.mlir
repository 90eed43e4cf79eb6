// Slices (of a whole dimension of a split tensor: local; of the split
// dimension: gathered first) and broadcast_in_dim of a replicated bias
// onto a split tensor, of a split vector onto the rows.
!rows = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!b = tensor<16x${T}, #fusion.sharding<@tp, [-]>>
!v = tensor<24x${T}, #fusion.sharding<@tp, [DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rows, %b: !b, %v: !v) -> (tensor<24x8x${T}>, tensor<10x16x${T}>, !rows, tensor<24x16x${T}>) {
  %a = fusion.slice %x starts = [0, 4] limits = [24, 12] : (!rows) -> tensor<24x8x${T}>
  %s = fusion.slice %x starts = [7, 0] limits = [17, 16] : (!rows) -> tensor<10x16x${T}>
  %bb = fusion.broadcast_in_dim %b dims = [1] : (!b) -> !rows
  %y = fusion.add %x, %bb : (!rows, !rows) -> !rows
  %vb = fusion.broadcast_in_dim %v dims = [0] : (!v) -> tensor<24x16x${T}>
  %z = fusion.mul %vb, %x : (tensor<24x16x${T}>, !rows) -> tensor<24x16x${T}>
  func.return %a, %s, %y, %z : tensor<24x8x${T}>, tensor<10x16x${T}>, !rows, tensor<24x16x${T}>
}

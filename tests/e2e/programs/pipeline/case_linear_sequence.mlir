// Sequence-parallel linear: the input's sequence is split. With a
// column-parallel weight the sequence is gathered first (the result's
// features split); with a replicated weight the op is local.
!x = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!wc = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!bc = tensor<24x${T}, #fusion.sharding<@tp, [DIDx]>>
!wr = tensor<8x16x${T}, #fusion.sharding<@tp, [-, -]>>
!cols = tensor<24x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %wc: !wc, %bc: !bc, %wr: !wr) -> (!cols, tensor<24x8x${T}>) {
  %y = fusion.linear %x, %wc, %bc : (!x, !wc, !bc) -> !cols
  %z = fusion.linear %x, %wr : (!x, !wr) -> tensor<24x8x${T}>
  func.return %y, %z : !cols, tensor<24x8x${T}>
}

// Interleaved placements made: a replicated operand of a pointwise op with
// an interleaved one (each device takes its block of every chunk), a
// broadcast bias, sets from replicated and from plainly split rows.
!x = tensor<48x12x${T}, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
!r = tensor<48x12x${T}, #fusion.sharding<@tp, [-, -]>>
!rows = tensor<48x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!b = tensor<12x${T}, #fusion.sharding<@tp, [-]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %r: !r, %rows: !rows, %b: !b) -> (tensor<48x12x${T}>, tensor<48x12x${T}>, !x, !x) {
  %a = fusion.add %x, %r : (!x, !r) -> tensor<48x12x${T}>
  %bb = fusion.broadcast_in_dim %b dims = [1] : (!b) -> tensor<48x12x${T}>
  %c = fusion.mul %x, %bb : (!x, tensor<48x12x${T}>) -> tensor<48x12x${T}>
  %d = fusion.set %r : (!r) -> !x
  %e = fusion.set %rows : (!rows) -> !x
  func.return %a, %c, %d, %e : tensor<48x12x${T}>, tensor<48x12x${T}>, !x, !x
}

// Every elementwise op on split operands, fused into launches, ending in a
// replicated result.
!rows = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!rep = tensor<24x16x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rows, %y: !rows) -> (!rows, !rep) {
  %a = fusion.sub %x, %y : (!rows, !rows) -> !rows
  %b = fusion.maximum %a, %x : (!rows, !rows) -> !rows
  %c = fusion.sigmoid %b : (!rows) -> !rows
  %d = fusion.silu %c : (!rows) -> !rows
  %e = fusion.exp %y : (!rows) -> !rows
  %f = fusion.div %d, %e : (!rows, !rows) -> !rows
  %g = fusion.gelu %f : (!rows) -> !rows
  %h = fusion.gelu %a {approximate = "tanh"} : (!rows) -> !rows
  %i = fusion.mul %g, %h : (!rows, !rows) -> !rows
  %j = fusion.neg %i : (!rows) -> !rep
  func.return %i, %j : !rows, !rep
}

// ranks: 2 3 4
// Broadcast from a sender that is not on the receiving mesh: the sender
// joins the team, then drops its copy.
!one = tensor<24x12x${T}, #fusion.sharding<@last, [-, -]>>
!rep = tensor<24x12x${T}, #fusion.sharding<@head, [-, -]>>
!rows = tensor<24x12x${T}, #fusion.sharding<@head, [DIDx, -]>>
fusion.mesh @head shape = [${N - 1}] devices = ${list(range(N - 1))}
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !one) -> (!rep, !rows) {
  %a = fusion.set %x : (!one) -> !rep
  %b = fusion.set %x : (!one) -> !rows
  func.return %a, %b : !rep, !rows
}

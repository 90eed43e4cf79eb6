// Reshard table, anything on mesh A to the same on mesh B, one sender:
// Broadcast from the one device of A to the replicated mesh B (the sender
// in B).
!one = tensor<24x12x${T}, #fusion.sharding<@first, [-, -]>>
!one_last = tensor<24x12x${T}, #fusion.sharding<@last, [-, -]>>
!rep = tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @first shape = [1] devices = [0]
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !one, %y: !one_last) -> (!rep, !rep) {
  %a = fusion.set %x : (!one) -> !rep
  %b = fusion.set %y : (!one_last) -> !rep
  func.return %a, %b : !rep, !rep
}

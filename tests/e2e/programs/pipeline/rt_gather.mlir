// Reshard table, `DIDx` to `-` on another mesh: Gather to a receiver in the
// team (the first or the last rank), from rows and from columns (staged).
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!first = tensor<24x12x${T}, #fusion.sharding<@first, [-, -]>>
!last = tensor<24x12x${T}, #fusion.sharding<@last, [-, -]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @first shape = [1] devices = [0]
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !rows, %y: !cols) -> (!first, !last, !first) {
  %a = fusion.set %x : (!rows) -> !first
  %b = fusion.set %x : (!rows) -> !last
  %c = fusion.set %y : (!cols) -> !first
  func.return %a, %b, %c : !first, !last, !first
}

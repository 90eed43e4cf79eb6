// ranks: 2 3 4
// Reshard table, `partial` to a mesh of one device that is not on the
// partial's mesh: Reduce to the team's first device, then a send.
!xk = tensor<12x24x${T}, #fusion.sharding<@head, [-, DIDx]>>
!wk = tensor<24x8x${T}, #fusion.sharding<@head, [DIDx, -]>>
!p = tensor<12x8x${T}, #fusion.sharding<@head, [-, -], partial = DIDx>>
!last = tensor<12x8x${T}, #fusion.sharding<@last, [-, -]>>
fusion.mesh @head shape = [${N - 1}] devices = ${list(range(N - 1))}
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !xk, %w: !wk) -> !last {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  %a = fusion.set %p : (!p) -> !last
  func.return %a : !last
}

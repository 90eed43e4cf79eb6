// Reshard table, `partial` to a mesh of one device: Reduce with that root,
// the first or the last rank of the team.
!xk = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<12x8x${T}, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!first = tensor<12x8x${T}, #fusion.sharding<@first, [-, -]>>
!last = tensor<12x8x${T}, #fusion.sharding<@last, [-, -]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @first shape = [1] devices = [0]
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !xk, %w: !wk) -> (!first, !last) {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  %a = fusion.set %p : (!p) -> !first
  %b = fusion.set %p : (!p) -> !last
  func.return %a, %b : !first, !last
}

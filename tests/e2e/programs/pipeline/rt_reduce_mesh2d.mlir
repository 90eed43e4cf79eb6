// ranks: 2 4
// Reshard table, `partial` to a mesh of one device on a 2-D mesh: the value
// is partial over DIDx and whole over DIDy, so every row holds all the
// summands and one row reduces to the root: the destination's own row
// (device 0 in the first, the last device in the last), one hir.reduce.
!xk = tensor<12x24x${T}, #fusion.sharding<@m, [-, DIDx]>>
!wk = tensor<24x8x${T}, #fusion.sharding<@m, [DIDx, -]>>
!p = tensor<12x8x${T}, #fusion.sharding<@m, [-, -], partial = DIDx>>
!first = tensor<12x8x${T}, #fusion.sharding<@first, [-, -]>>
!last = tensor<12x8x${T}, #fusion.sharding<@last, [-, -]>>
fusion.mesh @m shape = [2, ${N // 2}]
fusion.mesh @first shape = [1] devices = [0]
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !xk, %w: !wk) -> (!first, !last) {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  %a = fusion.set %p : (!p) -> !first
  %b = fusion.set %p : (!p) -> !last
  func.return %a, %b : !first, !last
}

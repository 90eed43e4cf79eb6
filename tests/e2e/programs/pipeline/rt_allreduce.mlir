// Reshard table, `partial` to `-`: Allreduce. The partial sums come from a
// matmul contracting a split dimension and from a sum over a split one.
!xk = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<12x8x${T}, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!y = tensor<12x8x${T}, #fusion.sharding<@tp, [-, -]>>
!ps = tensor<12x${T}, #fusion.sharding<@tp, [-], partial = DIDx>>
!s = tensor<12x${T}, #fusion.sharding<@tp, [-]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !xk, %w: !wk) -> (!y, !s) {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  %y = fusion.set %p : (!p) -> !y
  %q = fusion.sum %x dims = [1] : (!xk) -> !ps
  %s = fusion.set %q : (!ps) -> !s
  func.return %y, %s : !y, !s
}

// Reshard table, `partial` to `DIDx`: ReduceScatter, onto dimension 0 and
// onto dimension 1 (not outermost: staged or laid out first).
!xk = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x36x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<12x36x${T}, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!rows = tensor<12x36x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<12x36x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !xk, %w: !wk) -> (!rows, !cols) {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  %a = fusion.set %p : (!p) -> !rows
  %b = fusion.set %p : (!p) -> !cols
  func.return %a, %b : !rows, !cols
}

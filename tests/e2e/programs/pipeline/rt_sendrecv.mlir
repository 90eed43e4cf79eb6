// Reshard table, anything on mesh A to the same on mesh B: SendRecv pairs
// (device k of B from device k of A). B lists A's ranks in reverse, so
// every block moves; rows, columns, replicated, and a partial sum moved as
// it is and reduced on B.
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!rows_b = tensor<24x12x${T}, #fusion.sharding<@rev, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!cols_b = tensor<24x12x${T}, #fusion.sharding<@rev, [-, DIDx]>>
!rep = tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>
!rep_b = tensor<24x12x${T}, #fusion.sharding<@rev, [-, -]>>
!xk = tensor<8x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<8x12x${T}, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!p_b = tensor<8x12x${T}, #fusion.sharding<@rev, [-, -], partial = DIDx>>
!y_b = tensor<8x12x${T}, #fusion.sharding<@rev, [-, -]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @rev shape = [${N}] devices = ${list(range(N))[::-1]}
func.func @main(%x: !rows, %y: !cols, %z: !rep, %a: !xk, %w: !wk) -> (!rows_b, !cols_b, !rep_b, !y_b) {
  %r = fusion.set %x : (!rows) -> !rows_b
  %c = fusion.set %y : (!cols) -> !cols_b
  %z2 = fusion.set %z : (!rep) -> !rep_b
  %p = fusion.matmul %a, %w : (!xk, !wk) -> !p
  %pb = fusion.set %p : (!p) -> !p_b
  %s = fusion.set %pb : (!p_b) -> !y_b
  func.return %r, %c, %z2, %s : !rows_b, !cols_b, !rep_b, !y_b
}

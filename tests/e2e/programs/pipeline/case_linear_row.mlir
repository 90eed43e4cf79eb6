// Row-parallel linear (the contracted features split on both operands),
// with bias (the bias is added once, after the reduction) and without; to
// a replicated result (Allreduce) and to rows (ReduceScatter).
!x = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!w = tensor<16x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!b = tensor<16x${T}, #fusion.sharding<@tp, [-]>>
!rep = tensor<12x16x${T}, #fusion.sharding<@tp, [-, -]>>
!rows = tensor<12x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w, %b: !b) -> (!rep, !rep, !rows) {
  %y = fusion.linear %x, %w, %b : (!x, !w, !b) -> !rep
  %z = fusion.linear %x, %w : (!x, !w) -> !rep
  %r = fusion.linear %x, %w, %b : (!x, !w, !b) -> !rows
  func.return %y, %z, %r : !rep, !rep, !rows
}

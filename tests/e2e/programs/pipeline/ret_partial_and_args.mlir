// Results as they are: a partial sum returned without reduction (the
// summands are added when gathered), an argument returned twice (copied
// into buffers of their own).
!xk = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<12x8x${T}, #fusion.sharding<@tp, [-, -], partial = DIDx>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !xk, %w: !wk) -> (!p, !xk, !xk) {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  func.return %p, %x, %x : !p, !xk, !xk
}

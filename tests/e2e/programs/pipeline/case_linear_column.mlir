// Column-parallel linear ([out, in] weight split on out), with and without
// bias: no communication; the result's features are split. The result of
// the second is left to propagation.
!x = tensor<12x16x${T}, #fusion.sharding<@tp, [-, -]>>
!w = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!b = tensor<24x${T}, #fusion.sharding<@tp, [DIDx]>>
!y = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!rep = tensor<12x24x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w, %b: !b) -> (!y, tensor<12x24x${T}>, !rep) {
  %y = fusion.linear %x, %w, %b : (!x, !w, !b) -> !y
  %z = fusion.linear %x, %w : (!x, !w) -> tensor<12x24x${T}>
  %g = fusion.set %z : (tensor<12x24x${T}>) -> !rep
  func.return %y, %z, %g : !y, tensor<12x24x${T}>, !rep
}

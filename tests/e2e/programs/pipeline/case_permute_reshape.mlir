// Permute and reshape carry a split with its dimension: every result is
// left to propagation and returned as propagated (a transposed split, a
// merged group, a split group).
!x3 = tensor<24x4x6x${T}, #fusion.sharding<@tp, [DIDx, -, -]>>
!x2 = tensor<48x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!c2 = tensor<8x48x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x3, %y: !x2, %z: !c2) -> (tensor<4x24x6x${T}>, tensor<24x24x${T}>, tensor<384x${T}>, tensor<12x4x8x${T}>, tensor<48x8x${T}>) {
  %p = fusion.permute %x dims = [1, 0, 2] : (!x3) -> tensor<4x24x6x${T}>
  %m = fusion.reshape %x : (!x3) -> tensor<24x24x${T}>
  %f = fusion.reshape %y : (!x2) -> tensor<384x${T}>
  %s = fusion.reshape %y : (!x2) -> tensor<12x4x8x${T}>
  %t = fusion.permute %z dims = [1, 0] : (!c2) -> tensor<48x8x${T}>
  %e = fusion.exp %t : (tensor<48x8x${T}>) -> tensor<48x8x${T}>
  func.return %p, %m, %f, %s, %e : tensor<4x24x6x${T}>, tensor<24x24x${T}>, tensor<384x${T}>, tensor<12x4x8x${T}>, tensor<48x8x${T}>
}

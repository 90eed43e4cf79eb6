// Layouts: a value gathered along its columns gets a column-major buffer
// (alloc_order); its other uses (reshape, sum, permute, an alltoall) read
// it through that layout.
!c = tensor<24x48x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!rep = tensor<24x48x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !c) -> (!rep, tensor<1152x${T}>, tensor<48x${T}>, tensor<48x24x${T}>, tensor<24x48x${T}, #fusion.sharding<@tp, [DIDx, -]>>) {
  %e = fusion.exp %x : (!c) -> tensor<24x48x${T}>
  %g = fusion.set %e : (tensor<24x48x${T}>) -> !rep
  %r = fusion.reshape %e : (tensor<24x48x${T}>) -> tensor<1152x${T}>
  %s = fusion.sum %e dims = [0] : (tensor<24x48x${T}>) -> tensor<48x${T}>
  %t = fusion.permute %e dims = [1, 0] : (tensor<24x48x${T}>) -> tensor<48x24x${T}>
  %a = fusion.set %e : (tensor<24x48x${T}>) -> tensor<24x48x${T}, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %g, %r, %s, %t, %a : !rep, tensor<1152x${T}>, tensor<48x${T}>, tensor<48x24x${T}>, tensor<24x48x${T}, #fusion.sharding<@tp, [DIDx, -]>>
}

// Sum over a sharded dimension (a partial sum, reduced before the return)
// and over an unsharded one (local); with keepdim; max over a sharded one
// (per-device maxima, gathered and reduced); a sum over both dimensions.
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rows, %y: !cols) -> (tensor<24x${T}>, tensor<24x${T}>, tensor<24x1x${T}>, tensor<24x${T}>, tensor<12x${T}>, tensor<${T}>) {
  %a = fusion.sum %y dims = [1] : (!cols) -> tensor<24x${T}>
  %b = fusion.sum %x dims = [1] : (!rows) -> tensor<24x${T}>
  %c = fusion.sum %y dims = [1] keepdim = true : (!cols) -> tensor<24x1x${T}>
  %d = fusion.max %y dims = [1] : (!cols) -> tensor<24x${T}>
  %e = fusion.sum %x dims = [0] : (!rows) -> tensor<12x${T}>
  %f = fusion.sum %x dims = [0, 1] : (!rows) -> tensor<${T}>
  func.return %a, %b, %c, %d, %e, %f : tensor<24x${T}>, tensor<24x${T}>, tensor<24x1x${T}>, tensor<24x${T}>, tensor<12x${T}>, tensor<${T}>
}

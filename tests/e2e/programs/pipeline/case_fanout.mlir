// Values used several times: a pointwise result feeding a GEMM and a later
// product, two GEMMs on the same input, elementwise ops that cannot fuse.
!x = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!w = tensor<12x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w) -> (tensor<24x12x${T}>, tensor<24x12x${T}>, tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>) {
  %a = fusion.relu %x : (!x) -> tensor<24x12x${T}>
  %b = fusion.matmul %a, %w : (tensor<24x12x${T}>, !w) -> tensor<24x12x${T}>
  %c = fusion.matmul %x, %w : (!x, !w) -> tensor<24x12x${T}>
  %d = fusion.add %b, %c : (tensor<24x12x${T}>, tensor<24x12x${T}>) -> tensor<24x12x${T}>
  %e = fusion.mul %d, %a : (tensor<24x12x${T}>, tensor<24x12x${T}>) -> tensor<24x12x${T}>
  %f = fusion.set %e : (tensor<24x12x${T}>) -> tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>
  func.return %a, %e, %f : tensor<24x12x${T}>, tensor<24x12x${T}>, tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>
}

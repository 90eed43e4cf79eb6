// Ops on interleaved rows (Stream(2)*DIDx): reshapes merging and splitting
// the dimension, a permute, a sum over it and over the other dimension, a
// GEMM contracting it on both operands, an add with plainly split rows.
!x = tensor<48x12x${T}, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
!k = tensor<12x48x${T}, #fusion.sharding<@tp, [-, Stream(2)*DIDx]>>
!kw = tensor<48x12x${T}, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
!in = tensor<48x12x${T}, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %k: !k, %kw: !kw, %i: !in) -> (tensor<576x${T}>, tensor<2x24x12x${T}>, tensor<12x48x${T}>, tensor<12x${T}>, tensor<12x12x${T}>, tensor<48x12x${T}>, tensor<48x${T}>) {
  %m = fusion.reshape %x : (!x) -> tensor<576x${T}>
  %s = fusion.reshape %x : (!x) -> tensor<2x24x12x${T}>
  %p = fusion.permute %x dims = [1, 0] : (!x) -> tensor<12x48x${T}>
  %r = fusion.sum %x dims = [0] : (!x) -> tensor<12x${T}>
  %g = fusion.matmul %k, %kw : (!k, !kw) -> tensor<12x12x${T}>
  %a = fusion.add %x, %i : (!x, !in) -> tensor<48x12x${T}>
  %q = fusion.sum %p dims = [0] : (tensor<12x48x${T}>) -> tensor<48x${T}>
  func.return %m, %s, %p, %r, %g, %a, %q : tensor<576x${T}>, tensor<2x24x12x${T}>, tensor<12x48x${T}>, tensor<12x${T}>, tensor<12x12x${T}>, tensor<48x12x${T}>, tensor<48x${T}>
}

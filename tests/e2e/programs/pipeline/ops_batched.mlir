// Batched matmuls (head-parallel attention scores): heads split, every op
// local; then the heads merged into features by a permute and a reshape
// and gathered.
!q = tensor<12x8x4x${T}, #fusion.sharding<@tp, [DIDx, -, -]>>
!kt = tensor<12x4x8x${T}, #fusion.sharding<@tp, [DIDx, -, -]>>
!s = tensor<12x8x8x${T}, #fusion.sharding<@tp, [DIDx, -, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%q: !q, %k: !q) -> (!s, tensor<8x48x${T}, #fusion.sharding<@tp, [-, -]>>) {
  %kt = fusion.permute %k dims = [0, 2, 1] : (!q) -> !kt
  %s = fusion.matmul %q, %kt : (!q, !kt) -> !s
  %p = fusion.softmax %s dim = 2 : (!s) -> !s
  %o = fusion.matmul %p, %q : (!s, !q) -> !q
  %t = fusion.permute %o dims = [1, 0, 2] : (!q) -> tensor<8x12x4x${T}>
  %m = fusion.reshape %t : (tensor<8x12x4x${T}>) -> tensor<8x48x${T}>
  %g = fusion.set %m : (tensor<8x48x${T}>) -> tensor<8x48x${T}, #fusion.sharding<@tp, [-, -]>>
  func.return %p, %g : !s, tensor<8x48x${T}, #fusion.sharding<@tp, [-, -]>>
}

// A residual add whose second operand has no sharding: propagation gives
// it the placement of the first (backward onto a function argument), and
// an unannotated result of a split and an unannotated operand.
!x = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!w = tensor<16x16x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w, %r: tensor<24x16x${T}>) -> (!x, tensor<24x16x${T}>) {
  %h = fusion.matmul %x, %w : (!x, !w) -> tensor<24x16x${T}>
  %y = fusion.add %h, %r : (tensor<24x16x${T}>, tensor<24x16x${T}>) -> !x
  %z = fusion.sub %r, %x : (tensor<24x16x${T}>, !x) -> tensor<24x16x${T}>
  func.return %y, %z : !x, tensor<24x16x${T}>
}

// The sequence-parallel MLP (Megatron SP) with torch.nn.Linear layers and
// biases: sequence split on entry and exit, w1 column-parallel, w2
// row-parallel, intermediates unannotated (an AllGather before the first
// linear, a ReduceScatter after the second, the bias added once).
!x = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!w1 = tensor<48x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!b1 = tensor<48x${T}, #fusion.sharding<@tp, [DIDx]>>
!w2 = tensor<16x48x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!b2 = tensor<16x${T}, #fusion.sharding<@tp, [-]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w1: !w1, %b1: !b1, %w2: !w2, %b2: !b2) -> !x {
  %h = fusion.linear %x, %w1, %b1 : (!x, !w1, !b1) -> tensor<24x48x${T}>
  %g = fusion.gelu %h : (tensor<24x48x${T}>) -> tensor<24x48x${T}>
  %y = fusion.linear %g, %w2, %b2 : (tensor<24x48x${T}>, !w2, !b2) -> !x
  func.return %y : !x
}

// The sequence-parallel MLP of examples/sp_mlp.mlir at N ranks, followed
// by a residual add: the whole block is unannotated but for its inputs
// and its result.
!x = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!w1 = tensor<16x48x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!w2 = tensor<48x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w1: !w1, %w2: !w2) -> !x {
  %h = fusion.matmul %x, %w1 : (!x, !w1) -> tensor<24x48x${T}>
  %g = fusion.gelu %h {approximate = "tanh"} : (tensor<24x48x${T}>) -> tensor<24x48x${T}>
  %y = fusion.matmul %g, %w2 : (tensor<24x48x${T}>, !w2) -> tensor<24x16x${T}>
  %r = fusion.add %y, %x : (tensor<24x16x${T}>, !x) -> !x
  func.return %r : !x
}

// Pointwise ops on a sharded input with an unsharded output: computed on
// the local blocks, then gathered. A chain of elementwise ops (one launch)
// and a binary op of a split and a replicated operand.
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!rep = tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rows, %y: !cols, %z: !rep) -> (!rep, !rep, !rep) {
  %a = fusion.relu %x : (!rows) -> !rep
  %e = fusion.exp %y : (!cols) -> tensor<24x12x${T}>
  %t = fusion.tanh %e : (tensor<24x12x${T}>) -> tensor<24x12x${T}>
  %b = fusion.neg %t : (tensor<24x12x${T}>) -> !rep
  %c = fusion.mul %x, %z : (!rows, !rep) -> !rep
  func.return %a, %b, %c : !rep, !rep, !rep
}

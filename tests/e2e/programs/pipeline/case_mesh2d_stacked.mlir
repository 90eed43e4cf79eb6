// Two device splits on one dimension of a 2-D mesh ([2, N/2] for even N,
// [1, N] otherwise): DIDy*DIDx rows to DIDx rows (gathers, then a slice),
// to DIDx*DIDy (the other nesting), to columns, and a pointwise op on them.
!a = tensor<24x12x${T}, #fusion.sharding<@g, [DIDy*DIDx, -]>>
!b = tensor<24x12x${T}, #fusion.sharding<@g, [DIDx, -]>>
!c = tensor<24x12x${T}, #fusion.sharding<@g, [DIDx*DIDy, -]>>
!d = tensor<24x12x${T}, #fusion.sharding<@g, [-, DIDy*DIDx]>>
fusion.mesh @g shape = [${2 if N % 2 == 0 else 1}, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !a) -> (!b, !c, !d, tensor<24x12x${T}>) {
  %b = fusion.set %x : (!a) -> !b
  %c = fusion.set %x : (!a) -> !c
  %d = fusion.set %x : (!a) -> !d
  %e = fusion.exp %x : (!a) -> tensor<24x12x${T}>
  func.return %b, %c, %d, %e : !b, !c, !d, tensor<24x12x${T}>
}

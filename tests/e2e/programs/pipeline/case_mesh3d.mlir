// A 3-D mesh [2, 1, N/2] (even N; [1, 1, N] otherwise): DIDz and DIDx
// split the operands, DIDy has one device. The contraction split on DIDx
// makes a partial sum; the rows split on DIDz are gathered.
!x = tensor<8x12x${T}, #fusion.sharding<@m, [DIDz, DIDx]>>
!w = tensor<12x8x${T}, #fusion.sharding<@m, [DIDx, DIDy]>>
fusion.mesh @m shape = [${2 if N % 2 == 0 else 1}, 1, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !x, %w: !w) -> tensor<8x8x${T}, #fusion.sharding<@m, [-, -]>> {
  %y = fusion.matmul %x, %w : (!x, !w) -> tensor<8x8x${T}>
  %r = fusion.set %y : (tensor<8x8x${T}>) -> tensor<8x8x${T}, #fusion.sharding<@m, [-, -]>>
  func.return %r : tensor<8x8x${T}, #fusion.sharding<@m, [-, -]>>
}

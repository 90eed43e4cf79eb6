// Interleaved placements on a 2-D mesh: Stream(2)*DIDy*DIDx rows gathered
// (two per-chunk allgathers) and into the pipelined GEMM, Stream(2)*DIDx
// rows with DIDy columns kept by a pointwise op and gathered over DIDx.
!x = tensor<48x12x${T}, #fusion.sharding<@g, [Stream(2)*DIDy*DIDx, -]>>
!y = tensor<48x12x${T}, #fusion.sharding<@g, [Stream(2)*DIDx, DIDy]>>
!w = tensor<12x8x${T}, #fusion.sharding<@g, [-, -]>>
fusion.mesh @g shape = [${2 if N % 2 == 0 else 1}, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !x, %y: !y, %w: !w) -> (tensor<48x12x${T}, #fusion.sharding<@g, [-, -]>>, tensor<48x8x${T}, #fusion.sharding<@g, [Stream(2), -]>>, tensor<48x12x${T}>, tensor<48x12x${T}, #fusion.sharding<@g, [DIDy, -]>>) {
  %a = fusion.set %x : (!x) -> tensor<48x12x${T}, #fusion.sharding<@g, [-, -]>>
  %b = fusion.matmul %x, %w : (!x, !w) -> tensor<48x8x${T}, #fusion.sharding<@g, [Stream(2), -]>>
  %c = fusion.sigmoid %y : (!y) -> tensor<48x12x${T}>
  %d = fusion.set %y : (!y) -> tensor<48x12x${T}, #fusion.sharding<@g, [DIDy, -]>>
  func.return %a, %b, %c, %d : tensor<48x12x${T}, #fusion.sharding<@g, [-, -]>>, tensor<48x8x${T}, #fusion.sharding<@g, [Stream(2), -]>>, tensor<48x12x${T}>, tensor<48x12x${T}, #fusion.sharding<@g, [DIDy, -]>>
}

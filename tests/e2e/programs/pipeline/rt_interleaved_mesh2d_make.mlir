// Interleaved placements made on a 2-D mesh, behind one or two device
// splits (Stream(2)*DIDy*DIDx, DIDy*Stream(2)*DIDx), and gathered again.
!x = tensor<48x12x${T}, #fusion.sharding<@g, [Stream(2)*DIDy, -]>>
!y = tensor<48x12x${T}, #fusion.sharding<@g, [DIDy, -]>>
!r = tensor<48x12x${T}, #fusion.sharding<@g, [-, -]>>
!a = tensor<48x12x${T}, #fusion.sharding<@g, [Stream(2)*DIDy*DIDx, -]>>
!b = tensor<48x12x${T}, #fusion.sharding<@g, [DIDy*Stream(2)*DIDx, -]>>
!c = tensor<48x12x${T}, #fusion.sharding<@g, [Stream(2)*DIDx, DIDy]>>
fusion.mesh @g shape = [${2 if N % 2 == 0 else 1}, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !x, %y: !y, %r: !r) -> (!a, !b, !c, !a, tensor<48x12x${T}, #fusion.sharding<@g, [-, DIDx]>>) {
  %a = fusion.set %x : (!x) -> !a
  %b = fusion.set %y : (!y) -> !b
  %c = fusion.set %r : (!r) -> !c
  %d = fusion.set %y : (!y) -> !a
  %e = fusion.set %b : (!b) -> tensor<48x12x${T}, #fusion.sharding<@g, [-, DIDx]>>
  func.return %a, %b, %c, %d, %e : !a, !b, !c, !a, tensor<48x12x${T}, #fusion.sharding<@g, [-, DIDx]>>
}

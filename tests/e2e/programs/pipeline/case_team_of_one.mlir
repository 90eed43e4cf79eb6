// Teams of one device: on the mesh [N, 1], DIDx has one device, so every
// reshard over it moves nothing (no communication op: a local copy, a view
// or nothing), while the reshards over DIDy (N devices) communicate. The
// contraction split over DIDx gives a partial sum over one device.
!x = tensor<${4 * N}x8x${T}, #fusion.sharding<@m, [DIDy, DIDx]>>
!w = tensor<8x12x${T}, #fusion.sharding<@m, [DIDx, -]>>
!p = tensor<${4 * N}x12x${T}, #fusion.sharding<@m, [DIDy, -], partial = DIDx>>
!r = tensor<${4 * N}x12x${T}, #fusion.sharding<@m, [DIDy, DIDx]>>
!g = tensor<${4 * N}x12x${T}, #fusion.sharding<@m, [DIDy, -]>>
!t = tensor<${4 * N}x12x${T}, #fusion.sharding<@m, [DIDx, DIDy]>>
!f = tensor<${4 * N}x12x${T}, #fusion.sharding<@m, [-, -]>>
fusion.mesh @m shape = [${N}, 1]
func.func @main(%x: !x, %w: !w) -> (!r, !g, !t, !f, !f) {
  %y = fusion.matmul %x, %w : (!x, !w) -> !p
  %r = fusion.set %y : (!p) -> !r
  %g = fusion.set %r : (!r) -> !g
  %t = fusion.set %g : (!g) -> !t
  %f = fusion.set %t : (!t) -> !f
  %a = fusion.set %y : (!p) -> !f
  func.return %r, %g, %t, %f, %a : !r, !g, !t, !f, !f
}

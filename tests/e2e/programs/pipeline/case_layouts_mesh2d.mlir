// One value resharded three ways on a 2-D mesh with conflicting layout
// wishes (gathered along rows, along columns, split the other way round).
!x = tensor<24x24x${T}, #fusion.sharding<@g, [DIDy, DIDx]>>
fusion.mesh @g shape = [${2 if N % 2 == 0 else 1}, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !x) -> (tensor<24x24x${T}, #fusion.sharding<@g, [-, DIDx]>>, tensor<24x24x${T}, #fusion.sharding<@g, [DIDy, -]>>, tensor<24x24x${T}, #fusion.sharding<@g, [DIDx, DIDy]>>) {
  %e = fusion.sigmoid %x : (!x) -> tensor<24x24x${T}>
  %a = fusion.set %e : (tensor<24x24x${T}>) -> tensor<24x24x${T}, #fusion.sharding<@g, [-, DIDx]>>
  %b = fusion.set %e : (tensor<24x24x${T}>) -> tensor<24x24x${T}, #fusion.sharding<@g, [DIDy, -]>>
  %c = fusion.set %e : (tensor<24x24x${T}>) -> tensor<24x24x${T}, #fusion.sharding<@g, [DIDx, DIDy]>>
  func.return %a, %b, %c : tensor<24x24x${T}, #fusion.sharding<@g, [-, DIDx]>>, tensor<24x24x${T}, #fusion.sharding<@g, [DIDy, -]>>, tensor<24x24x${T}, #fusion.sharding<@g, [DIDx, DIDy]>>
}

// Blocks of local extent 1: gathers and alltoalls where the communicated
// dimension has one element per device, or only extent-1 dims before it.
!a = tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!b = tensor<1x${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, DIDx, -]>>
!c = tensor<2x${N}x3x${T}, #fusion.sharding<@tp, [-, DIDx, -]>>
!d = tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%a: !a, %b: !b, %c: !c, %d: !d) -> (tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, -]>>, tensor<1x${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, -, DIDx]>>, tensor<2x${N}x3x${T}, #fusion.sharding<@tp, [-, -, -]>>, tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [DIDx, -]>>, tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, DIDx]>>) {
  %a1 = fusion.set %a : (!a) -> tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, -]>>
  %b1 = fusion.set %b : (!b) -> tensor<1x${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, -, DIDx]>>
  %c1 = fusion.set %c : (!c) -> tensor<2x${N}x3x${T}, #fusion.sharding<@tp, [-, -, -]>>
  %d1 = fusion.set %d : (!d) -> tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [DIDx, -]>>
  %a2 = fusion.set %a : (!a) -> tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %a1, %b1, %c1, %d1, %a2 : tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, -]>>, tensor<1x${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, -, DIDx]>>, tensor<2x${N}x3x${T}, #fusion.sharding<@tp, [-, -, -]>>, tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [DIDx, -]>>, tensor<${N}x${2*N}x${T}, #fusion.sharding<@tp, [-, DIDx]>>
}

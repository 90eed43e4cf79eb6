// ranks: 2 4
// Interleaved rows between meshes: moved as they are between two stages,
// gathered to the other stage, regrouped onto a mesh of all ranks.
!a = tensor<48x12x${T}, #fusion.sharding<@s0, [Stream(2)*DIDx, -]>>
!b = tensor<48x12x${T}, #fusion.sharding<@s1, [Stream(2)*DIDx, -]>>
fusion.mesh @s0 shape = [${N // 2}] devices = ${list(range(N // 2))}
fusion.mesh @s1 shape = [${N // 2}] devices = ${list(range(N // 2, N))}
fusion.mesh @all shape = [${N}]
func.func @main(%x: !a) -> (!b, tensor<48x12x${T}, #fusion.sharding<@s1, [-, -]>>, tensor<48x12x${T}, #fusion.sharding<@all, [DIDx, -]>>) {
  %b = fusion.set %x : (!a) -> !b
  %c = fusion.set %x : (!a) -> tensor<48x12x${T}, #fusion.sharding<@s1, [-, -]>>
  %d = fusion.set %x : (!a) -> tensor<48x12x${T}, #fusion.sharding<@all, [DIDx, -]>>
  func.return %b, %c, %d : !b, tensor<48x12x${T}, #fusion.sharding<@s1, [-, -]>>, tensor<48x12x${T}, #fusion.sharding<@all, [DIDx, -]>>
}

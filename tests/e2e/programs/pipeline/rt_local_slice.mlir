// Reshard table, `-` to `DIDx`: a local slice, no communication; on the
// first, the last and the middle dimension.
!rep = tensor<24x12x${T}, #fusion.sharding<@tp, [-, -]>>
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!rep3 = tensor<2x24x4x${T}, #fusion.sharding<@tp, [-, -, -]>>
!mid = tensor<2x24x4x${T}, #fusion.sharding<@tp, [-, DIDx, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rep, %z: !rep3) -> (!rows, !cols, !mid) {
  %a = fusion.set %x : (!rep) -> !rows
  %b = fusion.set %x : (!rep) -> !cols
  %c = fusion.set %z : (!rep3) -> !mid
  func.return %a, %b, %c : !rows, !cols, !mid
}

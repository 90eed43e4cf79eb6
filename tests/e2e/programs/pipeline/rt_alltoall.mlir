// Reshard table, `DIDx` on dim i to `DIDx` on dim j: AllToAll. Rows to
// columns and back (blocks of local extent > 1 on both dims: the moved
// dimension is split first), and between the outer dims of a 3-D tensor.
!rows = tensor<24x48x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x48x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!a3 = tensor<12x4x24x${T}, #fusion.sharding<@tp, [DIDx, -, -]>>
!b3 = tensor<12x4x24x${T}, #fusion.sharding<@tp, [-, -, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !rows, %y: !cols, %z: !a3) -> (!cols, !rows, !b3) {
  %a = fusion.set %x : (!rows) -> !cols
  %b = fusion.set %y : (!cols) -> !rows
  %c = fusion.set %z : (!a3) -> !b3
  func.return %a, %b, %c : !cols, !rows, !b3
}

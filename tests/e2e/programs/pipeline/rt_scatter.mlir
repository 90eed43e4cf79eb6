// Reshard table, `-` to `DIDx` when the meshes differ: Scatter from the one
// device holding the tensor to the devices of the split mesh, on dimension
// 0 and on dimension 1 (staged); from the first and from the last rank.
!one = tensor<24x12x${T}, #fusion.sharding<@first, [-, -]>>
!one_last = tensor<24x12x${T}, #fusion.sharding<@last, [-, -]>>
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @first shape = [1] devices = [0]
fusion.mesh @last shape = [1] devices = [${LAST}]
func.func @main(%x: !one, %y: !one_last) -> (!rows, !cols, !rows) {
  %a = fusion.set %x : (!one) -> !rows
  %b = fusion.set %x : (!one) -> !cols
  %c = fusion.set %y : (!one_last) -> !rows
  func.return %a, %b, %c : !rows, !cols, !rows
}

// ranks: 2 3 4
// Blocks regrouped between meshes of different sizes (N - 1 devices to N):
// the blocks do not nest, so the tensor is gathered to the other mesh and
// sliced there; from rows and from columns.
!a = tensor<24x12x${T}, #fusion.sharding<@head, [DIDx, -]>>
!b = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!ac = tensor<24x12x${T}, #fusion.sharding<@head, [-, DIDx]>>
!bc = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @head shape = [${N - 1}] devices = ${list(range(N - 1))}
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !a, %y: !ac) -> (!b, !bc) {
  %b = fusion.set %x : (!a) -> !b
  %c = fusion.set %y : (!ac) -> !bc
  func.return %b, %c : !b, !bc
}

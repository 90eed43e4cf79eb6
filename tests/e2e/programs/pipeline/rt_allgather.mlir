// Reshard table, `DIDx` to `-`: Allgather over the team. On dimension 0 (in
// place), on dimension 1 (not outermost: the layout pass transposes) and
// on the middle dimension of a 3-D tensor.
!r = tensor<24x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!r_all = tensor<24x16x${T}, #fusion.sharding<@tp, [-, -]>>
!c = tensor<8x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!c_all = tensor<8x24x${T}, #fusion.sharding<@tp, [-, -]>>
!m = tensor<4x24x6x${T}, #fusion.sharding<@tp, [-, DIDx, -]>>
!m_all = tensor<4x24x6x${T}, #fusion.sharding<@tp, [-, -, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !r, %y: !c, %z: !m) -> (!r_all, !c_all, !m_all) {
  %a = fusion.set %x : (!r) -> !r_all
  %b = fusion.set %y : (!c) -> !c_all
  %c = fusion.set %z : (!m) -> !m_all
  func.return %a, %b, %c : !r_all, !c_all, !m_all
}

// Reshard table, `DIDx` to `-` on another mesh of several devices: each
// receiver collects every block by send/recv pairs; the other mesh lists
// the same ranks in reverse order, so blocks really move.
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<24x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!rev = tensor<24x12x${T}, #fusion.sharding<@rev, [-, -]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @rev shape = [${N}] devices = ${list(range(N))[::-1]}
func.func @main(%x: !rows, %y: !cols) -> (!rev, !rev) {
  %a = fusion.set %x : (!rows) -> !rev
  %b = fusion.set %y : (!cols) -> !rev
  func.return %a, %b : !rev, !rev
}

// Sets that change several things at once become chains of single steps:
// rows to columns of a transposed layout and back on one mesh, a partial
// sum to columns on another mesh.
!rows = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!xk = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x12x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<12x12x${T}, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!cols_b = tensor<12x12x${T}, #fusion.sharding<@rev, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @rev shape = [${N}] devices = ${list(range(N))[::-1]}
func.func @main(%x: !rows, %a: !xk, %w: !wk) -> (tensor<12x24x${T}, #fusion.sharding<@tp, [DIDx, -]>>, !cols_b) {
  %t = fusion.permute %x dims = [1, 0] : (!rows) -> tensor<12x24x${T}, #fusion.sharding<@tp, [DIDx, -]>>
  %p = fusion.matmul %a, %w : (!xk, !wk) -> !p
  %c = fusion.set %p : (!p) -> !cols_b
  func.return %t, %c : tensor<12x24x${T}, #fusion.sharding<@tp, [DIDx, -]>>, !cols_b
}

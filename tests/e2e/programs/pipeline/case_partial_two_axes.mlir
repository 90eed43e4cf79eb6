// A contraction over a dimension split over both axes of a 2-D mesh
// ([2, N/2] for even N, [1, N] otherwise): the product is a partial sum
// over [DIDy, DIDx], reduced by one allreduce over the team spanning the
// mesh (%whole), one reduce-scatter into the rows split DIDy*DIDx (%rows),
// or a reduce-scatter over DIDx then an allreduce over DIDy (%cols);
// returned as it is (%p, the summands added when gathered); a sum over
// two dimensions split [DIDy, DIDx] is partial over both (%s).
!xk = tensor<12x24x${T}, #fusion.sharding<@grid, [-, DIDy*DIDx]>>
!wk = tensor<24x12x${T}, #fusion.sharding<@grid, [DIDy*DIDx, -]>>
!p = tensor<12x12x${T}, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>
!whole = tensor<12x12x${T}, #fusion.sharding<@grid, [-, -]>>
!rows = tensor<12x12x${T}, #fusion.sharding<@grid, [DIDy*DIDx, -]>>
!cols = tensor<12x12x${T}, #fusion.sharding<@grid, [-, DIDx]>>
!h = tensor<12x24x${T}, #fusion.sharding<@grid, [DIDy, DIDx]>>
!s = tensor<${T}, #fusion.sharding<@grid, []>>
fusion.mesh @grid shape = [${2 if N % 2 == 0 else 1}, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !xk, %w: !wk, %h: !h) -> (!whole, !rows, !cols, !p, !s) {
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !p
  %whole = fusion.set %p : (!p) -> !whole
  %rows = fusion.set %p : (!p) -> !rows
  %cols = fusion.set %p : (!p) -> !cols
  %t = fusion.tanh %h : (!h) -> !h
  %sp = fusion.sum %t dims = [0, 1] : (!h) -> tensor<${T}, #fusion.sharding<@grid, [], partial = [DIDy, DIDx]>>
  %s = fusion.set %sp : (tensor<${T}, #fusion.sharding<@grid, [], partial = [DIDy, DIDx]>>) -> !s
  func.return %whole, %rows, %cols, %p, %s : !whole, !rows, !cols, !p, !s
}

// A 2-D mesh (DIDy: data parallel on the batch; DIDx: tensor parallel on
// the features), of shape [2, N/2] for even N and [1, N] otherwise. The
// column-parallel GEMM is local; the row-parallel one reduces within each
// DIDx slice; a set from rows-by-DIDx to columns-by-DIDy takes a local
// slice then a gather; a sum over the batch reduces over DIDy.
!x = tensor<24x12x${T}, #fusion.sharding<@grid, [DIDy, -]>>
!w = tensor<12x24x${T}, #fusion.sharding<@grid, [-, DIDx]>>
!h = tensor<24x24x${T}, #fusion.sharding<@grid, [DIDy, DIDx]>>
!w2 = tensor<24x12x${T}, #fusion.sharding<@grid, [DIDx, -]>>
!y = tensor<24x12x${T}, #fusion.sharding<@grid, [DIDy, -]>>
!rx = tensor<24x12x${T}, #fusion.sharding<@grid, [DIDx, -]>>
!cy = tensor<24x12x${T}, #fusion.sharding<@grid, [-, DIDy]>>
!s = tensor<24x${T}, #fusion.sharding<@grid, [-]>>
fusion.mesh @grid shape = [${2 if N % 2 == 0 else 1}, ${N // 2 if N % 2 == 0 else N}]
func.func @main(%x: !x, %w: !w, %b: !h, %w2: !w2, %r: !rx) -> (!h, !y, !cy, !s) {
  %h = fusion.matmul %x, %w : (!x, !w) -> !h
  %a = fusion.add %h, %b : (!h, !h) -> !h
  %t = fusion.tanh %a : (!h) -> !h
  %y = fusion.matmul %t, %w2 : (!h, !w2) -> !y
  %c = fusion.set %r : (!rx) -> !cy
  %s = fusion.sum %t dims = [0] : (!h) -> tensor<24x${T}>
  %s2 = fusion.set %s : (tensor<24x${T}>) -> !s
  func.return %t, %y, %c, %s2 : !h, !y, !cy, !s
}

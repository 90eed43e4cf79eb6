// Reshard table, `DIDx` to `Stream(d)` on the same dimension: the
// AllGather + GEMM of docs/language.md, with S = d and S = 2d chunks, by
// matmul and by linear (with bias).
!x = tensor<48x16x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!w = tensor<16x8x${T}, #fusion.sharding<@tp, [-, -]>>
!wl = tensor<8x16x${T}, #fusion.sharding<@tp, [-, -]>>
!b = tensor<8x${T}, #fusion.sharding<@tp, [-]>>
!y = tensor<48x8x${T}, #fusion.sharding<@tp, [Stream(${N}), -]>>
!y2 = tensor<48x8x${T}, #fusion.sharding<@tp, [Stream(${2 * N}), -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w, %wl: !wl, %b: !b) -> (!y, !y2) {
  %y = fusion.matmul %x, %w : (!x, !w) -> !y
  %z = fusion.linear %x, %wl, %b : (!x, !wl, !b) -> !y2
  func.return %y, %z : !y, !y2
}

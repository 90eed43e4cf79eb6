// The GEMM + ReduceScatter forms stream-pipeline takes: a result
// [DIDx*Stream(2), -] of a contraction split on DIDx, a partial product
// [Stream(N), -] reduce-scattered to rows; and a local GEMM and a copy
// computed in stream chunks.
!xk = tensor<24x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!rows_s = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
!ps = tensor<24x8x${T}, #fusion.sharding<@tp, [Stream(${N}), -], partial = DIDx>>
!rows = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!x = tensor<24x24x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!w = tensor<24x8x${T}, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !xk, %w: !wk, %x2: !x, %w2: !w) -> (!rows_s, !rows, !rows_s, tensor<24x24x${T}, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>) {
  %a = fusion.matmul %x, %w : (!xk, !wk) -> !rows_s
  %p = fusion.matmul %x, %w : (!xk, !wk) -> !ps
  %b = fusion.set %p : (!ps) -> !rows
  %c = fusion.matmul %x2, %w2 : (!x, !w) -> !rows_s
  %d = fusion.set %x2 : (!x) -> tensor<24x24x${T}, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
  func.return %a, %b, %c, %d : !rows_s, !rows, !rows_s, tensor<24x24x${T}, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
}

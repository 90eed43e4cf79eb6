// A reduce-scatter on a dimension that is not the outermost: GEMM with the
// contraction split, result split on its columns; and a sum over the
// outer dimension of a 3-D tensor scattered onto its last dimension.
!xk = tensor<12x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!wk = tensor<24x48x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<12x48x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!z = tensor<24x3x12x${T}, #fusion.sharding<@tp, [DIDx, -, -]>>
!zs = tensor<3x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !xk, %w: !wk, %z: !z) -> (!cols, !zs) {
  %y = fusion.matmul %x, %w : (!xk, !wk) -> !cols
  %s = fusion.sum %z dims = [0] : (!z) -> !zs
  func.return %y, %s : !cols, !zs
}

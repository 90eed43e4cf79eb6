// A Stream split outside a device split (docs/language.md): each device holds
// one block of each of the 2 stream chunks. The GEMM gathers it chunk by
// chunk (x [Stream(2)*DIDx, -] to [Stream(2), -]); a pointwise op keeps the
// interleaved placement; columns are reached by a gather then a slice; a
// sum over the other dimension stays interleaved.
!x = tensor<48x12x${T}, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
!w = tensor<12x8x${T}, #fusion.sharding<@tp, [-, -]>>
!y = tensor<48x8x${T}, #fusion.sharding<@tp, [Stream(2), -]>>
!cols = tensor<48x12x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w) -> (!y, tensor<48x12x${T}>, !cols, tensor<48x${T}>) {
  %y = fusion.matmul %x, %w : (!x, !w) -> !y
  %r = fusion.relu %x : (!x) -> tensor<48x12x${T}>
  %c = fusion.set %x : (!x) -> !cols
  %s = fusion.sum %r dims = [1] : (tensor<48x12x${T}>) -> tensor<48x${T}>
  func.return %y, %r, %c, %s : !y, tensor<48x12x${T}>, !cols, tensor<48x${T}>
}

// Zero-size dimensions are supported end to end (the results are empty, or
// zeros where a sum or a contraction runs over no elements): a pointwise op
// on a sharded empty tensor, an alltoall of empty blocks, a sum and a matmul
// over an extent of 0, a gather of empty blocks to another mesh, and a
// non-empty value beside them, an interleaved dimension behind an empty one
// gathered, a softmax along an empty split dimension.
!rows0 = tensor<0x${4*N}x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!e_rows = tensor<${4*N}x0x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!e_cols = tensor<${4*N}x0x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!k0 = tensor<${2*N}x0x${T}, #fusion.sharding<@tp, [-, DIDx]>>
!w0 = tensor<0x6x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!one = tensor<0x${4*N}x${T}, #fusion.sharding<@first, [-, -]>>
!inter = tensor<0x${8*N}x${T}, #fusion.sharding<@tp, [-, Stream(2)*DIDx]>>
!cols0 = tensor<0x${8*N}x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @first shape = [1] devices = [0]
func.func @main(%x: !rows0, %y: !e_rows, %a: !k0, %w: !w0, %v: !inter)
    -> (!rows0, !e_cols, tensor<${4*N}x${T}, #fusion.sharding<@tp, [DIDx]>>, tensor<${2*N}x6x${T}, #fusion.sharding<@tp, [DIDx, -]>>, !one, !cols0, !rows0) {
  %r = fusion.relu %x : (!rows0) -> !rows0
  %t = fusion.set %y : (!e_rows) -> !e_cols
  %s = fusion.sum %y dims = [1] : (!e_rows) -> tensor<${4*N}x${T}, #fusion.sharding<@tp, [DIDx]>>
  %m = fusion.matmul %a, %w : (!k0, !w0) -> tensor<${2*N}x6x${T}, #fusion.sharding<@tp, [DIDx, -]>>
  %g = fusion.set %r : (!rows0) -> !one
  %i = fusion.set %v : (!inter) -> !cols0
  %sm = fusion.softmax %x dim = 0 : (!rows0) -> !rows0
  func.return %r, %t, %s, %m, %g, %i, %sm : !rows0, !e_cols, tensor<${4*N}x${T}, #fusion.sharding<@tp, [DIDx]>>, tensor<${2*N}x6x${T}, #fusion.sharding<@tp, [DIDx, -]>>, !one, !cols0, !rows0
}

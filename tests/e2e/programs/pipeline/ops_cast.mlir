// dtypes: mixed
// Mixed precision: casts between f32 and bf16 on split tensors, a bf16 GEMM
// with the contraction split (a bf16 partial sum reduced), an f32 result.
!x = tensor<12x24xf32, #fusion.sharding<@tp, [-, DIDx]>>
!xh = tensor<12x24xbf16, #fusion.sharding<@tp, [-, DIDx]>>
!w = tensor<24x8xbf16, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%x: !x, %w: !w) -> (tensor<12x8xf32, #fusion.sharding<@tp, [-, -]>>, tensor<12x24xf32, #fusion.sharding<@tp, [-, -]>>) {
  %xh = fusion.cast %x : (!x) -> !xh
  %h = fusion.matmul %xh, %w : (!xh, !w) -> tensor<12x8xbf16>
  %y = fusion.cast %h : (tensor<12x8xbf16>) -> tensor<12x8xf32, #fusion.sharding<@tp, [-, -]>>
  %r = fusion.cast %xh : (!xh) -> tensor<12x24xf32>
  %z = fusion.add %r, %x : (tensor<12x24xf32>, !x) -> tensor<12x24xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y, %z : tensor<12x8xf32, #fusion.sharding<@tp, [-, -]>>, tensor<12x24xf32, #fusion.sharding<@tp, [-, -]>>
}

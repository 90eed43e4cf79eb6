// Long-context attention block, context parallel: causal grouped-query
// attention over 131072 tokens split over 4 ranks (32 query heads, 8
// key/value heads, head dim 128, bf16), y = x + attn(rms_norm(x)).
// Only the tokens' split is written ([DIDx, -] on x and y): propagation
// carries it through the norm, the projections (their weights whole) and
// the head reshapes to q, k and v's sequence, where sdpa becomes ring
// attention: k and v blocks pass around the 4 ranks (no rank ever holds
// the whole sequence's keys and values: 256 MiB each here), the causal
// work balanced by the zigzag layout the compiler chooses.
//   mpiexec -n 4 fuserc run examples/long_context.mlir --backend cuda --iters 5
//   fuserc opt examples/long_context.mlir -p default --comm-report -o /dev/null
// Its test runs it at 256 tokens and hidden 64 on the cpu backend
// (tests/e2e/test_ring_attention.py); tools/check_examples.py skips it on
// the cpu backend for its size.
fusion.mesh @cp shape = [4]
!x = tensor<131072x4096xbf16, #fusion.sharding<@cp, [DIDx, -]>>
!g = tensor<4096xbf16, #fusion.sharding<@cp, [-]>>
!w = tensor<4096x4096xbf16, #fusion.sharding<@cp, [-, -]>>
!wkv = tensor<1024x4096xbf16, #fusion.sharding<@cp, [-, -]>>
func.func @main(%x: !x, %g: !g, %wq: !w, %wk: !wkv, %wv: !wkv, %wo: !w) -> !x {
  %a = fusion.rms_norm %x, %g dims = [1] eps = 1.0e-06 : (!x, !g) -> tensor<131072x4096xbf16>
  %q = fusion.linear %a, %wq : (tensor<131072x4096xbf16>, !w) -> tensor<131072x4096xbf16>
  %k = fusion.linear %a, %wk : (tensor<131072x4096xbf16>, !wkv) -> tensor<131072x1024xbf16>
  %v = fusion.linear %a, %wv : (tensor<131072x4096xbf16>, !wkv) -> tensor<131072x1024xbf16>
  %q4 = fusion.reshape %q : (tensor<131072x4096xbf16>) -> tensor<1x131072x32x128xbf16>
  %k4 = fusion.reshape %k : (tensor<131072x1024xbf16>) -> tensor<1x131072x8x128xbf16>
  %v4 = fusion.reshape %v : (tensor<131072x1024xbf16>) -> tensor<1x131072x8x128xbf16>
  %qh = fusion.permute %q4 dims = [0, 2, 1, 3] : (tensor<1x131072x32x128xbf16>) -> tensor<1x32x131072x128xbf16>
  %kh = fusion.permute %k4 dims = [0, 2, 1, 3] : (tensor<1x131072x8x128xbf16>) -> tensor<1x8x131072x128xbf16>
  %vh = fusion.permute %v4 dims = [0, 2, 1, 3] : (tensor<1x131072x8x128xbf16>) -> tensor<1x8x131072x128xbf16>
  %o = fusion.sdpa %qh, %kh, %vh causal = true : (tensor<1x32x131072x128xbf16>, tensor<1x8x131072x128xbf16>, tensor<1x8x131072x128xbf16>) -> tensor<1x32x131072x128xbf16>
  %ot = fusion.permute %o dims = [0, 2, 1, 3] : (tensor<1x32x131072x128xbf16>) -> tensor<1x131072x32x128xbf16>
  %o2 = fusion.reshape %ot : (tensor<1x131072x32x128xbf16>) -> tensor<131072x4096xbf16>
  %y = fusion.linear %o2, %wo : (tensor<131072x4096xbf16>, !w) -> !x
  %r = fusion.add %x, %y : (!x, !x) -> !x
  func.return %r : !x
}

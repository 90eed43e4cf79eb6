// The GPT layer of gpt_layer.mlir with context parallelism: a 2 x 2 mesh,
// heads (tensor parallel) over DIDx and the sequence over DIDy.
//   h = x + attn(layer_norm(x)),  y = h + mlp(layer_norm(h))
// The tokens of x and y are split over both axes ([DIDy*DIDx, -]); q, k and
// v are written [DIDy, DIDx]: their heads over DIDx (column-parallel, as in
// gpt_layer.mlir) and their tokens still over DIDy, so the causal sdpa is
// ring attention over DIDy (zigzag-balanced) within each pair of heads,
// and no rank holds the whole sequence's keys and values. The rest is
// propagated.
//   mpiexec -n 4 fuserc run examples/gpt_layer_cp.mlir --check
fusion.mesh @tp shape = [2, 2]
!rows = tensor<64x64xf32, #fusion.sharding<@tp, [DIDy*DIDx, -]>>
!rep = tensor<64xf32, #fusion.sharding<@tp, [-]>>
!col = tensor<64x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
!colb = tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
!row = tensor<64x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
!qkv = tensor<64x64xf32, #fusion.sharding<@tp, [DIDy, DIDx]>>
func.func @main(%x: !rows, %ln1_w: !rep, %ln1_b: !rep,
                %wq: !col, %bq: !colb, %wk: !col, %bk: !colb, %wv: !col, %bv: !colb,
                %wo: !row, %bo: !rep, %ln2_w: !rep, %ln2_b: !rep,
                %w1: tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b1: tensor<256xf32, #fusion.sharding<@tp, [DIDx]>>,
                %w2: tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b2: !rep) -> !rows {
  %a = fusion.layer_norm %x, %ln1_w, %ln1_b dims = [1] eps = 1.0e-05 : (!rows, !rep, !rep) -> tensor<64x64xf32>
  %q = fusion.linear %a, %wq, %bq : (tensor<64x64xf32>, !col, !colb) -> !qkv
  %k = fusion.linear %a, %wk, %bk : (tensor<64x64xf32>, !col, !colb) -> !qkv
  %v = fusion.linear %a, %wv, %bv : (tensor<64x64xf32>, !col, !colb) -> !qkv
  %q4 = fusion.reshape %q : (!qkv) -> tensor<1x64x8x8xf32>
  %k4 = fusion.reshape %k : (!qkv) -> tensor<1x64x8x8xf32>
  %v4 = fusion.reshape %v : (!qkv) -> tensor<1x64x8x8xf32>
  %qh = fusion.permute %q4 dims = [0, 2, 1, 3] : (tensor<1x64x8x8xf32>) -> tensor<1x8x64x8xf32>
  %kh = fusion.permute %k4 dims = [0, 2, 1, 3] : (tensor<1x64x8x8xf32>) -> tensor<1x8x64x8xf32>
  %vh = fusion.permute %v4 dims = [0, 2, 1, 3] : (tensor<1x64x8x8xf32>) -> tensor<1x8x64x8xf32>
  %o = fusion.sdpa %qh, %kh, %vh causal = true : (tensor<1x8x64x8xf32>, tensor<1x8x64x8xf32>, tensor<1x8x64x8xf32>) -> tensor<1x8x64x8xf32>
  %ot = fusion.permute %o dims = [0, 2, 1, 3] : (tensor<1x8x64x8xf32>) -> tensor<1x64x8x8xf32>
  %o2 = fusion.reshape %ot : (tensor<1x64x8x8xf32>) -> tensor<64x64xf32>
  %att = fusion.linear %o2, %wo, %bo : (tensor<64x64xf32>, !row, !rep) -> !rows
  %h = fusion.add %x, %att : (!rows, !rows) -> !rows
  %c = fusion.layer_norm %h, %ln2_w, %ln2_b dims = [1] eps = 1.0e-05 : (!rows, !rep, !rep) -> tensor<64x64xf32>
  %u = fusion.linear %c, %w1, %b1 : (tensor<64x64xf32>, tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<256xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<64x256xf32>
  %g = fusion.gelu %u : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %m = fusion.linear %g, %w2, %b2 : (tensor<64x256xf32>, tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>, !rep) -> !rows
  %y = fusion.add %h, %m : (!rows, !rows) -> !rows
  func.return %y : !rows
}

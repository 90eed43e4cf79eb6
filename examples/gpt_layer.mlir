// A GPT layer, sequence-parallel + tensor-parallel (Megatron-LM's layout):
//   h = x + attn(layer_norm(x)),  y = h + mlp(layer_norm(h))
// 64 tokens of hidden 64, 8 heads of 8, MLP of 256. The tokens of x and y are
// sharded over the mesh ([DIDx, -]); q, k, v and the first MLP GEMM are
// column-parallel (their weights' output features, so the heads, sharded),
// the output projection and the second MLP GEMM row-parallel. Only those
// shardings are written: propagation gathers the normalized tokens before
// each column-parallel GEMM and reduce-scatters after each row-parallel one;
// attention is local to each device's heads.
//   mpiexec -n 4 fuserc run examples/gpt_layer.mlir --check
//   mpiexec -n 2 fuserc run examples/gpt_layer.mlir --mesh tp=2 --check
//   fuserc run examples/gpt_layer.mlir --mesh tp=1 --check
fusion.mesh @tp shape = [4]
!rows = tensor<64x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
!rep = tensor<64xf32, #fusion.sharding<@tp, [-]>>
!col = tensor<64x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
!colb = tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
!row = tensor<64x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
func.func @main(%x: !rows, %ln1_w: !rep, %ln1_b: !rep,
                %wq: !col, %bq: !colb, %wk: !col, %bk: !colb, %wv: !col, %bv: !colb,
                %wo: !row, %bo: !rep, %ln2_w: !rep, %ln2_b: !rep,
                %w1: tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b1: tensor<256xf32, #fusion.sharding<@tp, [DIDx]>>,
                %w2: tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b2: !rep) -> !rows {
  %a = fusion.layer_norm %x, %ln1_w, %ln1_b dims = [1] eps = 1.0e-05 : (!rows, !rep, !rep) -> tensor<64x64xf32>
  %q = fusion.linear %a, %wq, %bq : (tensor<64x64xf32>, !col, !colb) -> tensor<64x64xf32>
  %k = fusion.linear %a, %wk, %bk : (tensor<64x64xf32>, !col, !colb) -> tensor<64x64xf32>
  %v = fusion.linear %a, %wv, %bv : (tensor<64x64xf32>, !col, !colb) -> tensor<64x64xf32>
  %q4 = fusion.reshape %q : (tensor<64x64xf32>) -> tensor<1x64x8x8xf32>
  %k4 = fusion.reshape %k : (tensor<64x64xf32>) -> tensor<1x64x8x8xf32>
  %v4 = fusion.reshape %v : (tensor<64x64xf32>) -> tensor<1x64x8x8xf32>
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

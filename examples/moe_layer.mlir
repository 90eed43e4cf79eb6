// A mixture-of-experts layer, dropless: a softmax router picks the top 2 of
// 4 SwiGLU experts for each of 16 tokens, with its weights normalized; each
// (token, choice) pair's row goes to its expert's slot (dispatch), each
// expert's GEMMs run on the rows its slot holds (grouped GEMMs, the rows
// counted per expert), and the results come back to their tokens (combine),
// weighted, on top of a shared expert. The second result is the router's
// load-balancing loss, E * sum_e (fraction of choices routed to e) * (mean
// router probability of e).
// Expert parallel on 4 devices: the tokens of x and y are split over them
// (data parallel) and so are the experts' weights (one expert each), which
// stay where they are: dispatch and combine become all-to-alls whose sizes
// come from the routing (the counts per rank and expert first, then the
// rows), each device multiplies the rows routed to its own expert; the
// rest is propagated.
//   mpiexec -n 4 fuserc run examples/moe_layer.mlir --check
//   fuserc run examples/moe_layer.mlir --mesh tp=1 --check
#tok = #fusion.sharding<@tp, [DIDx, -]>
#ep = #fusion.sharding<@tp, [DIDx, -, -]>
#rep = #fusion.sharding<@tp, [-, -]>
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<16x8xf32, #tok>, %wr: tensor<4x8xf32, #rep>, %w1: tensor<4x12x8xf32, #ep>,
                %w3: tensor<4x12x8xf32, #ep>, %w2: tensor<4x8x12xf32, #ep>, %s1: tensor<12x8xf32, #rep>,
                %s3: tensor<12x8xf32, #rep>, %s2: tensor<8x12xf32, #rep>)
    -> (tensor<16x8xf32, #tok>, tensor<f32, #fusion.sharding<@tp, []>>) {
  // router
  %logits = fusion.linear %x, %wr : (tensor<16x8xf32, #tok>, tensor<4x8xf32, #rep>) -> tensor<16x4xf32>
  %probs = fusion.softmax %logits dim = 1 : (tensor<16x4xf32>) -> tensor<16x4xf32>
  %top, %ids = fusion.topk %probs k = 2 dim = 1 : (tensor<16x4xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
  %norm = fusion.sum %top dims = [1] keepdim = true : (tensor<16x2xf32>) -> tensor<16x1xf32>
  %weights = fusion.div %top, %norm : (tensor<16x2xf32>, tensor<16x1xf32>) -> tensor<16x2xf32>
  // dispatch: each (token, choice) pair's row into its expert's slot,
  // [E, T, H], and each expert's row count (the pairs counted per expert
  // again, for the load-balancing loss)
  %flat = fusion.reshape %ids : (tensor<16x2xi64>) -> tensor<32xi64>
  %counts = fusion.bincount %flat length = 4 : (tensor<32xi64>) -> tensor<4xi64>
  %xe, %rows = fusion.dispatch %x, %ids experts = 4 : (tensor<16x8xf32, #tok>, tensor<16x2xi64>) -> (tensor<4x16x8xf32>, tensor<4xi64>)
  // the experts: SwiGLU, as grouped GEMMs on the rows each slot holds
  %w1t = fusion.permute %w1 dims = [0, 2, 1] : (tensor<4x12x8xf32, #ep>) -> tensor<4x8x12xf32>
  %w3t = fusion.permute %w3 dims = [0, 2, 1] : (tensor<4x12x8xf32, #ep>) -> tensor<4x8x12xf32>
  %w2t = fusion.permute %w2 dims = [0, 2, 1] : (tensor<4x8x12xf32, #ep>) -> tensor<4x12x8xf32>
  %h1 = fusion.grouped_matmul %xe, %w1t, %rows : (tensor<4x16x8xf32>, tensor<4x8x12xf32>, tensor<4xi64>) -> tensor<4x16x12xf32>
  %h3 = fusion.grouped_matmul %xe, %w3t, %rows : (tensor<4x16x8xf32>, tensor<4x8x12xf32>, tensor<4xi64>) -> tensor<4x16x12xf32>
  %g = fusion.silu %h1 : (tensor<4x16x12xf32>) -> tensor<4x16x12xf32>
  %act = fusion.mul %g, %h3 : (tensor<4x16x12xf32>, tensor<4x16x12xf32>) -> tensor<4x16x12xf32>
  %ye = fusion.grouped_matmul %act, %w2t, %rows : (tensor<4x16x12xf32>, tensor<4x12x8xf32>, tensor<4xi64>) -> tensor<4x16x8xf32>
  // combine: each pair's result back at its token, weighted by its routing weight
  %yp = fusion.combine %ye, %ids : (tensor<4x16x8xf32>, tensor<16x2xi64>) -> tensor<16x2x8xf32>
  %wcol = fusion.reshape %weights : (tensor<16x2xf32>) -> tensor<16x2x1xf32>
  %yw = fusion.mul %yp, %wcol : (tensor<16x2x8xf32>, tensor<16x2x1xf32>) -> tensor<16x2x8xf32>
  %routed = fusion.sum %yw dims = [1] : (tensor<16x2x8xf32>) -> tensor<16x8xf32>
  // the shared expert, which every token goes through
  %sh1 = fusion.linear %x, %s1 : (tensor<16x8xf32, #tok>, tensor<12x8xf32, #rep>) -> tensor<16x12xf32>
  %sh3 = fusion.linear %x, %s3 : (tensor<16x8xf32, #tok>, tensor<12x8xf32, #rep>) -> tensor<16x12xf32>
  %sg = fusion.silu %sh1 : (tensor<16x12xf32>) -> tensor<16x12xf32>
  %sact = fusion.mul %sg, %sh3 : (tensor<16x12xf32>, tensor<16x12xf32>) -> tensor<16x12xf32>
  %shared = fusion.linear %sact, %s2 : (tensor<16x12xf32>, tensor<8x12xf32, #rep>) -> tensor<16x8xf32>
  %y = fusion.add %shared, %routed : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32, #tok>
  // load-balancing loss
  %pairs_n = fusion.constant 32.0 : () -> tensor<f32>
  %experts = fusion.constant 4.0 : () -> tensor<f32>
  %cf = fusion.cast %counts : (tensor<4xi64>) -> tensor<4xf32>
  %frac = fusion.div %cf, %pairs_n : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %pmean = fusion.mean %probs dims = [0] : (tensor<16x4xf32>) -> tensor<4xf32>
  %fp = fusion.mul %frac, %pmean : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %dot = fusion.sum %fp dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %aux = fusion.mul %dot, %experts : (tensor<f32>, tensor<f32>) -> tensor<f32, #fusion.sharding<@tp, []>>
  func.return %y, %aux : tensor<16x8xf32, #tok>, tensor<f32, #fusion.sharding<@tp, []>>
}

// A mixture-of-experts layer, dropless: a softmax router picks the top 2 of
// 4 SwiGLU experts for each of 16 tokens, with its weights normalized; the
// (token, choice) pairs are sorted by expert, each expert's GEMMs run on its
// tokens only (grouped GEMMs, groups given by the running sum of the counts),
// and the weighted results are added back to their tokens, on top of a
// shared expert. The second result is the router's load-balancing loss,
// E * sum_e (fraction of choices routed to e) * (mean router probability of e).
// Expert parallel on 4 devices: the tokens of x and y are split over them
// (data parallel) and so are the experts' weights (one expert each), which
// stay where they are: each device multiplies the rows routed to its own
// expert; the rest is propagated.
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
  // dispatch: the (token, choice) pairs sorted by expert, the groups' ends
  %flat = fusion.reshape %ids : (tensor<16x2xi64>) -> tensor<32xi64>
  %order = fusion.argsort %flat dim = 0 : (tensor<32xi64>) -> tensor<32xi64>
  %pairs = fusion.iota dim = 0 : () -> tensor<16x2xi64>
  %token = fusion.reshape %pairs : (tensor<16x2xi64>) -> tensor<32xi64>
  %rows = fusion.index_select %token, %order dim = 0 : (tensor<32xi64>, tensor<32xi64>) -> tensor<32xi64>
  %counts = fusion.bincount %flat length = 4 : (tensor<32xi64>) -> tensor<4xi64>
  %ends = fusion.cumsum %counts dim = 0 : (tensor<4xi64>) -> tensor<4xi64>
  %xs = fusion.index_select %x, %rows dim = 0 : (tensor<16x8xf32, #tok>, tensor<32xi64>) -> tensor<32x8xf32>
  // the experts: SwiGLU, as grouped GEMMs
  %w1t = fusion.permute %w1 dims = [0, 2, 1] : (tensor<4x12x8xf32, #ep>) -> tensor<4x8x12xf32>
  %w3t = fusion.permute %w3 dims = [0, 2, 1] : (tensor<4x12x8xf32, #ep>) -> tensor<4x8x12xf32>
  %w2t = fusion.permute %w2 dims = [0, 2, 1] : (tensor<4x8x12xf32, #ep>) -> tensor<4x12x8xf32>
  %h1 = fusion.grouped_matmul %xs, %w1t, %ends : (tensor<32x8xf32>, tensor<4x8x12xf32>, tensor<4xi64>) -> tensor<32x12xf32>
  %h3 = fusion.grouped_matmul %xs, %w3t, %ends : (tensor<32x8xf32>, tensor<4x8x12xf32>, tensor<4xi64>) -> tensor<32x12xf32>
  %g = fusion.silu %h1 : (tensor<32x12xf32>) -> tensor<32x12xf32>
  %act = fusion.mul %g, %h3 : (tensor<32x12xf32>, tensor<32x12xf32>) -> tensor<32x12xf32>
  %ys = fusion.grouped_matmul %act, %w2t, %ends : (tensor<32x12xf32>, tensor<4x12x8xf32>, tensor<4xi64>) -> tensor<32x8xf32>
  // combine: each result weighted by its routing weight, added to its token
  %wflat = fusion.reshape %weights : (tensor<16x2xf32>) -> tensor<32xf32>
  %wsorted = fusion.index_select %wflat, %order dim = 0 : (tensor<32xf32>, tensor<32xi64>) -> tensor<32xf32>
  %wcol = fusion.reshape %wsorted : (tensor<32xf32>) -> tensor<32x1xf32>
  %yw = fusion.mul %ys, %wcol : (tensor<32x8xf32>, tensor<32x1xf32>) -> tensor<32x8xf32>
  // the shared expert, which every token goes through
  %sh1 = fusion.linear %x, %s1 : (tensor<16x8xf32, #tok>, tensor<12x8xf32, #rep>) -> tensor<16x12xf32>
  %sh3 = fusion.linear %x, %s3 : (tensor<16x8xf32, #tok>, tensor<12x8xf32, #rep>) -> tensor<16x12xf32>
  %sg = fusion.silu %sh1 : (tensor<16x12xf32>) -> tensor<16x12xf32>
  %sact = fusion.mul %sg, %sh3 : (tensor<16x12xf32>, tensor<16x12xf32>) -> tensor<16x12xf32>
  %shared = fusion.linear %sact, %s2 : (tensor<16x12xf32>, tensor<8x12xf32, #rep>) -> tensor<16x8xf32>
  %y = fusion.index_add %shared, %rows, %yw dim = 0 : (tensor<16x8xf32>, tensor<32xi64>, tensor<32x8xf32>) -> tensor<16x8xf32, #tok>
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

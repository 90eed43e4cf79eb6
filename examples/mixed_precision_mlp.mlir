// A data-parallel MLP block in bf16 with an f32 residual: the batch is
// sharded, the weights replicated, so the whole block is local; the casts,
// the bias broadcast and the residual add are fused elementwise work.
//   mpiexec -n 4 fuserc run examples/mixed_precision_mlp.mlir --check
#batch = #fusion.sharding<@dp, [DIDx, -]>
#rep = #fusion.sharding<@dp, [-, -]>
fusion.mesh @dp shape = [4]
func.func @main(%x: tensor<64x32xf32, #batch>, %w: tensor<32x32xbf16, #rep>,
                %b: tensor<32xbf16, #fusion.sharding<@dp, [-]>>) -> tensor<64x32xf32, #batch> {
  %xh = fusion.cast %x : (tensor<64x32xf32, #batch>) -> tensor<64x32xbf16, #batch>
  %h = fusion.matmul %xh, %w : (tensor<64x32xbf16, #batch>, tensor<32x32xbf16, #rep>) -> tensor<64x32xbf16, #batch>
  %bb = fusion.broadcast_in_dim %b dims = [1] : (tensor<32xbf16, #fusion.sharding<@dp, [-]>>) -> tensor<64x32xbf16, #batch>
  %hb = fusion.add %h, %bb : (tensor<64x32xbf16, #batch>, tensor<64x32xbf16, #batch>) -> tensor<64x32xbf16, #batch>
  %a = fusion.sigmoid %hb : (tensor<64x32xbf16, #batch>) -> tensor<64x32xbf16, #batch>
  %af = fusion.cast %a : (tensor<64x32xbf16, #batch>) -> tensor<64x32xf32, #batch>
  %y = fusion.add %x, %af : (tensor<64x32xf32, #batch>, tensor<64x32xf32, #batch>) -> tensor<64x32xf32, #batch>
  func.return %y : tensor<64x32xf32, #batch>
}

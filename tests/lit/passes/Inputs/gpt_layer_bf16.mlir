// The GPT layer of examples/python/gpt_layer.py (build(256, 128, 4, 512, 4, "bf16")): 256 tokens,
// hidden 128, 4 heads of 32, MLP 512, bf16, sequence + tensor parallel over @tp. Read by
// gpt-layer-plan.mlir (the mesh's size replaced there).
fusion.mesh @tp shape = [4]
func.func @main(%in0: tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %in1: tensor<128xbf16, #fusion.sharding<@tp, [-]>>, %in2: tensor<128xbf16, #fusion.sharding<@tp, [-]>>, %in3: tensor<128x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %in4: tensor<128xbf16, #fusion.sharding<@tp, [DIDx]>>, %in5: tensor<128x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %in6: tensor<128xbf16, #fusion.sharding<@tp, [DIDx]>>, %in7: tensor<128x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %in8: tensor<128xbf16, #fusion.sharding<@tp, [DIDx]>>, %in9: tensor<128x128xbf16, #fusion.sharding<@tp, [-, DIDx]>>, %in10: tensor<128xbf16, #fusion.sharding<@tp, [-]>>, %in11: tensor<128xbf16, #fusion.sharding<@tp, [-]>>, %in12: tensor<128xbf16, #fusion.sharding<@tp, [-]>>, %in13: tensor<512x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %in14: tensor<512xbf16, #fusion.sharding<@tp, [DIDx]>>, %in15: tensor<128x512xbf16, #fusion.sharding<@tp, [-, DIDx]>>, %in16: tensor<128xbf16, #fusion.sharding<@tp, [-]>>) -> (tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>) {
  %t0 = fusion.layer_norm %in0, %in1, %in2 dims = [1] : (tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128xbf16, #fusion.sharding<@tp, [-]>>, tensor<128xbf16, #fusion.sharding<@tp, [-]>>) -> tensor<256x128xbf16>
  %t1 = fusion.linear %t0, %in3, %in4 : (tensor<256x128xbf16>, tensor<128x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128xbf16, #fusion.sharding<@tp, [DIDx]>>) -> tensor<256x128xbf16>
  %t2 = fusion.reshape %t1 : (tensor<256x128xbf16>) -> tensor<1x256x4x32xbf16>
  %t3 = fusion.permute %t2 dims = [0, 2, 1, 3] : (tensor<1x256x4x32xbf16>) -> tensor<1x4x256x32xbf16>
  %t4 = fusion.linear %t0, %in5, %in6 : (tensor<256x128xbf16>, tensor<128x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128xbf16, #fusion.sharding<@tp, [DIDx]>>) -> tensor<256x128xbf16>
  %t5 = fusion.reshape %t4 : (tensor<256x128xbf16>) -> tensor<1x256x4x32xbf16>
  %t6 = fusion.permute %t5 dims = [0, 2, 1, 3] : (tensor<1x256x4x32xbf16>) -> tensor<1x4x256x32xbf16>
  %t7 = fusion.linear %t0, %in7, %in8 : (tensor<256x128xbf16>, tensor<128x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128xbf16, #fusion.sharding<@tp, [DIDx]>>) -> tensor<256x128xbf16>
  %t8 = fusion.reshape %t7 : (tensor<256x128xbf16>) -> tensor<1x256x4x32xbf16>
  %t9 = fusion.permute %t8 dims = [0, 2, 1, 3] : (tensor<1x256x4x32xbf16>) -> tensor<1x4x256x32xbf16>
  %t10 = fusion.sdpa %t3, %t6, %t9 causal = true : (tensor<1x4x256x32xbf16>, tensor<1x4x256x32xbf16>, tensor<1x4x256x32xbf16>) -> tensor<1x4x256x32xbf16>
  %t11 = fusion.permute %t10 dims = [0, 2, 1, 3] : (tensor<1x4x256x32xbf16>) -> tensor<1x256x4x32xbf16>
  %t12 = fusion.reshape %t11 : (tensor<1x256x4x32xbf16>) -> tensor<256x128xbf16>
  %t13 = fusion.linear %t12, %in9, %in10 : (tensor<256x128xbf16>, tensor<128x128xbf16, #fusion.sharding<@tp, [-, DIDx]>>, tensor<128xbf16, #fusion.sharding<@tp, [-]>>) -> tensor<256x128xbf16>
  %t14 = fusion.add %in0, %t13 : (tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<256x128xbf16>) -> tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  %t15 = fusion.layer_norm %t14, %in11, %in12 dims = [1] : (tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128xbf16, #fusion.sharding<@tp, [-]>>, tensor<128xbf16, #fusion.sharding<@tp, [-]>>) -> tensor<256x128xbf16>
  %t16 = fusion.linear %t15, %in13, %in14 : (tensor<256x128xbf16>, tensor<512x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<512xbf16, #fusion.sharding<@tp, [DIDx]>>) -> tensor<256x512xbf16>
  %t17 = fusion.gelu %t16 : (tensor<256x512xbf16>) -> tensor<256x512xbf16>
  %t18 = fusion.linear %t17, %in15, %in16 : (tensor<256x512xbf16>, tensor<128x512xbf16, #fusion.sharding<@tp, [-, DIDx]>>, tensor<128xbf16, #fusion.sharding<@tp, [-]>>) -> tensor<256x128xbf16>
  %t19 = fusion.add %t14, %t18 : (tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<256x128xbf16>) -> tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %t19 : tensor<256x128xbf16, #fusion.sharding<@tp, [DIDx, -]>>
}

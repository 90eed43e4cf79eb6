fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

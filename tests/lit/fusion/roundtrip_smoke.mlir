// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s

fusion.mesh @tp shape = [4]
// CHECK: fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32> {
  // CHECK: %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}

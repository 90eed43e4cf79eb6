func.func @main(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %y = fusion.add %a, %b : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return %y : tensor<8x4xf32>
}

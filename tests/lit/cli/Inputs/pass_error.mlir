func.func @main(%x: tensor<8xf32>) {
  // expected-error @+1 {{test-error at 'fusion.exp'}}
  %y = fusion.exp %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return
}

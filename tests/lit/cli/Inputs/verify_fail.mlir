// Expectations that do not hold, for verify_diagnostics.mlir.
func.func @unmet(%a: tensor<8x4xf32>) {
  // expected-error @+1 {{this error is never produced}}
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @unexpected(%a: tensor<8x4xf32>) {
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
}

// -----

func.func @wrong_line(%a: tensor<8x4xf32>) {
  // expected-error @+2 {{does not match the expected}}
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
}

// -----

func.func @wrong_text(%a: tensor<8x4xf32>) {
  // expected-error @+1 {{some other message}}
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
}

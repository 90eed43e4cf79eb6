// The verifiers of the routing and grouped ops, each at the line of the op.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

func.func @f(%x: tensor<16x4xf32>) {
  // expected-error @+1 {{'fusion.topk' op fusion.topk: k = 5 must be in [1, 4] (the extent of dim 1)}}
  %v, %i = fusion.topk %x k = 5 dim = 1 : (tensor<16x4xf32>) -> (tensor<16x5xf32>, tensor<16x5xi64>)
  func.return
}

// -----

func.func @f(%x: tensor<16x4xf32>) {
  // expected-error @+1 {{'fusion.topk' op result #1 (indices) has type tensor<16x2xf32>, expected tensor<16x2xi64>}}
  %v, %i = fusion.topk %x k = 2 dim = 1 : (tensor<16x4xf32>) -> (tensor<16x2xf32>, tensor<16x2xf32>)
  func.return
}

// -----

func.func @f(%ids: tensor<4x8xi64>) {
  // expected-error @+1 {{'fusion.bincount' op fusion.bincount: ids must have rank 1, got [4, 8]}}
  %c = fusion.bincount %ids length = 4 : (tensor<4x8xi64>) -> tensor<4xi64>
  func.return
}

// -----

func.func @f(%ids: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.bincount' op operand #0 has element type f32; it must be i64}}
  %c = fusion.bincount %ids length = 4 : (tensor<8xf32>) -> tensor<4xi64>
  func.return
}

// -----

func.func @f(%x: tensor<16x8xf32>, %rows: tensor<32xi64>, %m: tensor<32x4xf32>) {
  // expected-error @+1 {{'fusion.index_add' op fusion.index_add: source [32, 4] must have shape [32, 8]}}
  %y = fusion.index_add %x, %rows, %m dim = 0 : (tensor<16x8xf32>, tensor<32xi64>, tensor<32x4xf32>) -> tensor<16x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<16x4xf32>, %i: tensor<8x2xi64>) {
  // expected-error @+1 {{'fusion.gather' op fusion.gather: index [8, 2] must have the shape of [16, 4] off dim 1}}
  %g = fusion.gather %x, %i dim = 1 : (tensor<16x4xf32>, tensor<8x2xi64>) -> tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%a: tensor<32x8xf32>, %w: tensor<4x6x12xf32>, %ends: tensor<4xi64>) {
  // expected-error @+1 {{'fusion.grouped_matmul' op fusion.grouped_matmul: [T, K] x [E, K, N] with E offsets, got [32, 8] x [4, 6, 12] with 4}}
  %h = fusion.grouped_matmul %a, %w, %ends : (tensor<32x8xf32>, tensor<4x6x12xf32>, tensor<4xi64>) -> tensor<32x12xf32>
  func.return
}

// -----

func.func @f(%a: tensor<32x8xf32>, %w: tensor<4x8x12xf32>, %ends: tensor<4xf32>) {
  // expected-error @+1 {{'fusion.grouped_matmul' op operand #2 has element type f32; it must be i64}}
  %h = fusion.grouped_matmul %a, %w, %ends : (tensor<32x8xf32>, tensor<4x8x12xf32>, tensor<4xf32>) -> tensor<32x12xf32>
  func.return
}

// -----

func.func @f(%a: tensor<32x8xf32>, %w: tensor<2x8x12xf32>, %ends: tensor<4xi64>) {
  // expected-error @+1 {{'fusion.grouped_matmul' op fusion.grouped_matmul: 2 experts' weights for 4 offsets}}
  %h = fusion.grouped_matmul %a, %w, %ends : (tensor<32x8xf32>, tensor<2x8x12xf32>, tensor<4xi64>) -> tensor<32x12xf32>
  func.return
}

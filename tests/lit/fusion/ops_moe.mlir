// The routing and grouped ops (topk, argsort, bincount, cumsum, gather,
// scatter_add, index_select, index_add, grouped_matmul in both forms) in
// their custom form: printed back as written, parsed again from its own
// output and from the generic form to the same text.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s -o %t.custom
// RUN: %fuserc opt %t.custom -o %t.again
// RUN: diff %t.custom %t.again
// RUN: %fuserc opt --print-generic %s -o %t.generic
// RUN: %fuserc opt %t.generic -o %t.from-generic
// RUN: diff %t.custom %t.from-generic

// CHECK-LABEL: func.func @route
func.func @route(%x: tensor<16x4xf32>, %ids: tensor<32xi64>, %rows: tensor<32xi64>, %m: tensor<32x8xf32>, %h: tensor<16x8xf32>) -> tensor<16x8xf32> {
  // CHECK-NEXT: %v, %i = fusion.topk %x k = 2 dim = 1 : (tensor<16x4xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
  %v, %i = fusion.topk %x k = 2 dim = 1 : (tensor<16x4xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
  // CHECK-NEXT: %o = fusion.argsort %ids dim = 0 descending = true : (tensor<32xi64>) -> tensor<32xi64>
  %o = fusion.argsort %ids dim = 0 descending = true : (tensor<32xi64>) -> tensor<32xi64>
  // CHECK-NEXT: %c = fusion.bincount %ids length = 4 : (tensor<32xi64>) -> tensor<4xi64>
  %c = fusion.bincount %ids length = 4 : (tensor<32xi64>) -> tensor<4xi64>
  // CHECK-NEXT: %e = fusion.cumsum %c dim = 0 : (tensor<4xi64>) -> tensor<4xi64>
  %e = fusion.cumsum %c dim = 0 : (tensor<4xi64>) -> tensor<4xi64>
  // CHECK-NEXT: %g = fusion.gather %x, %i dim = 1 : (tensor<16x4xf32>, tensor<16x2xi64>) -> tensor<16x2xf32>
  %g = fusion.gather %x, %i dim = 1 : (tensor<16x4xf32>, tensor<16x2xi64>) -> tensor<16x2xf32>
  // CHECK-NEXT: %s = fusion.scatter_add %x, %i, %g dim = 1 : (tensor<16x4xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x4xf32>
  %s = fusion.scatter_add %x, %i, %g dim = 1 : (tensor<16x4xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x4xf32>
  // CHECK-NEXT: %xs = fusion.index_select %h, %rows dim = 0 : (tensor<16x8xf32>, tensor<32xi64>) -> tensor<32x8xf32>
  %xs = fusion.index_select %h, %rows dim = 0 : (tensor<16x8xf32>, tensor<32xi64>) -> tensor<32x8xf32>
  // CHECK-NEXT: %y = fusion.index_add %h, %rows, %m dim = 0 : (tensor<16x8xf32>, tensor<32xi64>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %y = fusion.index_add %h, %rows, %m dim = 0 : (tensor<16x8xf32>, tensor<32xi64>, tensor<32x8xf32>) -> tensor<16x8xf32>
  func.return %y : tensor<16x8xf32>
}

// CHECK-LABEL: func.func @experts
func.func @experts(%a: tensor<32x8xbf16>, %w: tensor<4x8x12xbf16>, %ends: tensor<4xi64>, %at: tensor<8x32xbf16>, %g: tensor<32x12xbf16>) -> tensor<4x8x12xbf16> {
  // CHECK-NEXT: %h = fusion.grouped_matmul %a, %w, %ends : (tensor<32x8xbf16>, tensor<4x8x12xbf16>, tensor<4xi64>) -> tensor<32x12xbf16>
  %h = fusion.grouped_matmul %a, %w, %ends : (tensor<32x8xbf16>, tensor<4x8x12xbf16>, tensor<4xi64>) -> tensor<32x12xbf16>
  // CHECK-NEXT: %d = fusion.grouped_matmul %at, %g, %ends : (tensor<8x32xbf16>, tensor<32x12xbf16>, tensor<4xi64>) -> tensor<4x8x12xbf16>
  %d = fusion.grouped_matmul %at, %g, %ends : (tensor<8x32xbf16>, tensor<32x12xbf16>, tensor<4xi64>) -> tensor<4x8x12xbf16>
  func.return %d : tensor<4x8x12xbf16>
}

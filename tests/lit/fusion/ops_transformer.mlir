// Every op of a transformer layer (math functions, comparisons, where,
// constant, iota, mean/min/var, norms, log_softmax, sdpa, embedding, embedding_grad,
// cross_entropy, dropout, concat), with broadcasting and rank-0 operands, in
// its custom form: printed back as written, parsed again from its own output
// and from the generic form to the same text.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt %s -o %t.custom
// RUN: %fuserc opt %t.custom -o %t.again
// RUN: diff %t.custom %t.again
// RUN: %fuserc opt --print-generic %s -o %t.generic
// RUN: %fuserc opt %t.generic -o %t.from-generic
// RUN: diff %t.custom %t.from-generic

// CHECK: builtin.module {

// CHECK-NEXT: fusion.mesh @tp shape = [4]
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @math(%x: tensor<8x16xf32>, %y: tensor<16xf32>, %s: tensor<f32>, %i: tensor<8x16xi64>) -> tensor<8x16xf32> {
func.func @math(%x: tensor<8x16xf32>, %y: tensor<16xf32>, %s: tensor<f32>, %i: tensor<8x16xi64>) -> tensor<8x16xf32> {
  // CHECK-NEXT: %0 = fusion.rsqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %0 = fusion.rsqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %1 = fusion.sqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %1 = fusion.sqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %2 = fusion.log %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = fusion.log %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %3 = fusion.abs %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = fusion.abs %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %4 = fusion.abs %i : (tensor<8x16xi64>) -> tensor<8x16xi64>
  %4 = fusion.abs %i : (tensor<8x16xi64>) -> tensor<8x16xi64>
  // CHECK-NEXT: %5 = fusion.erf %y : (tensor<16xf32>) -> tensor<16xf32>
  %5 = fusion.erf %y : (tensor<16xf32>) -> tensor<16xf32>
  // CHECK-NEXT: %6 = fusion.reciprocal %s : (tensor<f32>) -> tensor<f32>
  %6 = fusion.reciprocal %s : (tensor<f32>) -> tensor<f32>
  // CHECK-NEXT: %7 = fusion.sin %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %7 = fusion.sin %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %8 = fusion.cos %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %8 = fusion.cos %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %9 = fusion.pow %x, %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  %9 = fusion.pow %x, %s : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %10 = fusion.minimum %x, %y : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %10 = fusion.minimum %x, %y : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %11 = fusion.minimum %i, %i : (tensor<8x16xi64>, tensor<8x16xi64>) -> tensor<8x16xi64>
  %11 = fusion.minimum %i, %i : (tensor<8x16xi64>, tensor<8x16xi64>) -> tensor<8x16xi64>
  // CHECK-NEXT: func.return %10 : tensor<8x16xf32>
  func.return %10 : tensor<8x16xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @compare(%x: tensor<8x16xbf16>, %y: tensor<8x1xbf16>, %s: tensor<bf16>, %i: tensor<8x16xi64>) -> tensor<8x16xbf16> {
func.func @compare(%x: tensor<8x16xbf16>, %y: tensor<8x1xbf16>, %s: tensor<bf16>, %i: tensor<8x16xi64>) -> tensor<8x16xbf16> {
  // CHECK-NEXT: %0 = fusion.lt %x, %y : (tensor<8x16xbf16>, tensor<8x1xbf16>) -> tensor<8x16xi1>
  %0 = fusion.lt %x, %y : (tensor<8x16xbf16>, tensor<8x1xbf16>) -> tensor<8x16xi1>
  // CHECK-NEXT: %1 = fusion.le %x, %s : (tensor<8x16xbf16>, tensor<bf16>) -> tensor<8x16xi1>
  %1 = fusion.le %x, %s : (tensor<8x16xbf16>, tensor<bf16>) -> tensor<8x16xi1>
  // CHECK-NEXT: %2 = fusion.gt %y, %x : (tensor<8x1xbf16>, tensor<8x16xbf16>) -> tensor<8x16xi1>
  %2 = fusion.gt %y, %x : (tensor<8x1xbf16>, tensor<8x16xbf16>) -> tensor<8x16xi1>
  // CHECK-NEXT: %3 = fusion.ge %x, %x : (tensor<8x16xbf16>, tensor<8x16xbf16>) -> tensor<8x16xi1>
  %3 = fusion.ge %x, %x : (tensor<8x16xbf16>, tensor<8x16xbf16>) -> tensor<8x16xi1>
  // CHECK-NEXT: %4 = fusion.eq %i, %i : (tensor<8x16xi64>, tensor<8x16xi64>) -> tensor<8x16xi1>
  %4 = fusion.eq %i, %i : (tensor<8x16xi64>, tensor<8x16xi64>) -> tensor<8x16xi1>
  // CHECK-NEXT: %5 = fusion.ne %s, %s : (tensor<bf16>, tensor<bf16>) -> tensor<i1>
  %5 = fusion.ne %s, %s : (tensor<bf16>, tensor<bf16>) -> tensor<i1>
  // CHECK-NEXT: %6 = fusion.where %0, %x, %s : (tensor<8x16xi1>, tensor<8x16xbf16>, tensor<bf16>) -> tensor<8x16xbf16>
  %6 = fusion.where %0, %x, %s : (tensor<8x16xi1>, tensor<8x16xbf16>, tensor<bf16>) -> tensor<8x16xbf16>
  // CHECK-NEXT: %7 = fusion.where %5, %y, %x : (tensor<i1>, tensor<8x1xbf16>, tensor<8x16xbf16>) -> tensor<8x16xbf16>
  %7 = fusion.where %5, %y, %x : (tensor<i1>, tensor<8x1xbf16>, tensor<8x16xbf16>) -> tensor<8x16xbf16>
  // CHECK-NEXT: %8 = fusion.where %4, %i, %i : (tensor<8x16xi1>, tensor<8x16xi64>, tensor<8x16xi64>) -> tensor<8x16xi64>
  %8 = fusion.where %4, %i, %i : (tensor<8x16xi1>, tensor<8x16xi64>, tensor<8x16xi64>) -> tensor<8x16xi64>
  // CHECK-NEXT: func.return %6 : tensor<8x16xbf16>
  func.return %6 : tensor<8x16xbf16>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @values() -> tensor<f32> {
func.func @values() -> tensor<f32> {
  // CHECK-NEXT: %0 = fusion.constant 0.125 : () -> tensor<f32>
  %0 = fusion.constant 0.125 : () -> tensor<f32>
  // CHECK-NEXT: %1 = fusion.constant -1.0e-05 : () -> tensor<bf16>
  %1 = fusion.constant -1.0e-05 : () -> tensor<bf16>
  // CHECK-NEXT: %2 = fusion.constant inf : () -> tensor<f32>
  %2 = fusion.constant inf : () -> tensor<f32>
  // CHECK-NEXT: %3 = fusion.constant -inf : () -> tensor<f16>
  %3 = fusion.constant -inf : () -> tensor<f16>
  // CHECK-NEXT: %4 = fusion.constant nan : () -> tensor<f64>
  %4 = fusion.constant nan : () -> tensor<f64>
  // CHECK-NEXT: %5 = fusion.constant 3.0 : () -> tensor<i64>
  %5 = fusion.constant 3.0 : () -> tensor<i64>
  // CHECK-NEXT: %6 = fusion.constant 1.0 : () -> tensor<i1>
  %6 = fusion.constant 1.0 : () -> tensor<i1>
  // CHECK-NEXT: %7 = fusion.iota dim = 1 : () -> tensor<8x16xi64>
  %7 = fusion.iota dim = 1 : () -> tensor<8x16xi64>
  // CHECK-NEXT: %8 = fusion.iota dim = -2 : () -> tensor<8x16xf32>
  %8 = fusion.iota dim = -2 : () -> tensor<8x16xf32>
  // CHECK-NEXT: %9 = fusion.iota dim = 0 : () -> tensor<8xi64, #fusion.sharding<@tp, [DIDx]>>
  %9 = fusion.iota dim = 0 : () -> tensor<8xi64, #fusion.sharding<@tp, [DIDx]>>
  // CHECK-NEXT: func.return %0 : tensor<f32>
  func.return %0 : tensor<f32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @reductions(%x: tensor<4x8x16xf32>) -> tensor<4xf32> {
func.func @reductions(%x: tensor<4x8x16xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %0 = fusion.mean %x dims = [1, 2] : (tensor<4x8x16xf32>) -> tensor<4xf32>
  %0 = fusion.mean %x dims = [1, 2] : (tensor<4x8x16xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %1 = fusion.mean %x dims = [-1] keepdim = true : (tensor<4x8x16xf32>) -> tensor<4x8x1xf32>
  %1 = fusion.mean %x dims = [-1] keepdim = true : (tensor<4x8x16xf32>) -> tensor<4x8x1xf32>
  // CHECK-NEXT: %2 = fusion.min %x dims = [0] : (tensor<4x8x16xf32>) -> tensor<8x16xf32>
  %2 = fusion.min %x dims = [0] : (tensor<4x8x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: %3 = fusion.min %x dims = [2, 0] keepdim = true : (tensor<4x8x16xf32>) -> tensor<1x8x1xf32>
  %3 = fusion.min %x dims = [2, 0] keepdim = true : (tensor<4x8x16xf32>) -> tensor<1x8x1xf32>
  // CHECK-NEXT: %4 = fusion.var %x dims = [1] : (tensor<4x8x16xf32>) -> tensor<4x16xf32>
  %4 = fusion.var %x dims = [1] : (tensor<4x8x16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: %5 = fusion.var %x dims = [1] correction = 0 : (tensor<4x8x16xf32>) -> tensor<4x16xf32>
  %5 = fusion.var %x dims = [1] correction = 0 : (tensor<4x8x16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: %6 = fusion.var %x dims = [1, 2] correction = 2 keepdim = true : (tensor<4x8x16xf32>) -> tensor<4x1x1xf32>
  %6 = fusion.var %x dims = [1, 2] correction = 2 keepdim = true : (tensor<4x8x16xf32>) -> tensor<4x1x1xf32>
  // CHECK-NEXT: func.return %0 : tensor<4xf32>
  func.return %0 : tensor<4xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @nn(%x: tensor<4x8x64xbf16>, %w: tensor<64xbf16>, %b: tensor<64xbf16>, %w2: tensor<8x64xbf16>, %l: tensor<8x32xf32>) -> tensor<8x32xf32> {
func.func @nn(%x: tensor<4x8x64xbf16>, %w: tensor<64xbf16>, %b: tensor<64xbf16>, %w2: tensor<8x64xbf16>, %l: tensor<8x32xf32>) -> tensor<8x32xf32> {
  // CHECK-NEXT: %0 = fusion.layer_norm %x, %w, %b dims = [2] eps = 1.0e-05 : (tensor<4x8x64xbf16>, tensor<64xbf16>, tensor<64xbf16>) -> tensor<4x8x64xbf16>
  %0 = fusion.layer_norm %x, %w, %b dims = [2] eps = 1.0e-05 : (tensor<4x8x64xbf16>, tensor<64xbf16>, tensor<64xbf16>) -> tensor<4x8x64xbf16>
  // CHECK-NEXT: %1 = fusion.layer_norm %x, %w dims = [-1] : (tensor<4x8x64xbf16>, tensor<64xbf16>) -> tensor<4x8x64xbf16>
  %1 = fusion.layer_norm %x, %w dims = [-1] : (tensor<4x8x64xbf16>, tensor<64xbf16>) -> tensor<4x8x64xbf16>
  // CHECK-NEXT: %2 = fusion.layer_norm %x, %w2, %w2 dims = [1, 2] eps = 0.001 : (tensor<4x8x64xbf16>, tensor<8x64xbf16>, tensor<8x64xbf16>) -> tensor<4x8x64xbf16>
  %2 = fusion.layer_norm %x, %w2, %w2 dims = [1, 2] eps = 0.001 : (tensor<4x8x64xbf16>, tensor<8x64xbf16>, tensor<8x64xbf16>) -> tensor<4x8x64xbf16>
  // CHECK-NEXT: %3 = fusion.rms_norm %x, %w dims = [2] eps = 1.0e-06 : (tensor<4x8x64xbf16>, tensor<64xbf16>) -> tensor<4x8x64xbf16>
  %3 = fusion.rms_norm %x, %w dims = [2] eps = 1.0e-06 : (tensor<4x8x64xbf16>, tensor<64xbf16>) -> tensor<4x8x64xbf16>
  // CHECK-NEXT: %4 = fusion.rms_norm %x, %w2 dims = [1, 2] : (tensor<4x8x64xbf16>, tensor<8x64xbf16>) -> tensor<4x8x64xbf16>
  %4 = fusion.rms_norm %x, %w2 dims = [1, 2] : (tensor<4x8x64xbf16>, tensor<8x64xbf16>) -> tensor<4x8x64xbf16>
  // CHECK-NEXT: %5 = fusion.log_softmax %l dim = 1 : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %5 = fusion.log_softmax %l dim = 1 : (tensor<8x32xf32>) -> tensor<8x32xf32>
  // CHECK-NEXT: %6 = fusion.log_softmax %l dim = -2 : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %6 = fusion.log_softmax %l dim = -2 : (tensor<8x32xf32>) -> tensor<8x32xf32>
  // CHECK-NEXT: func.return %5 : tensor<8x32xf32>
  func.return %5 : tensor<8x32xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @attention(%q: tensor<2x8x128x64xbf16>, %k: tensor<2x2x128x64xbf16>, %v: tensor<2x2x128x64xbf16>, %v2: tensor<2x2x128x32xbf16>) -> tensor<2x8x128x64xbf16> {
func.func @attention(%q: tensor<2x8x128x64xbf16>, %k: tensor<2x2x128x64xbf16>, %v: tensor<2x2x128x64xbf16>, %v2: tensor<2x2x128x32xbf16>) -> tensor<2x8x128x64xbf16> {
  // CHECK-NEXT: %0 = fusion.sdpa %q, %k, %v causal = true : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>) -> tensor<2x8x128x64xbf16>
  %0 = fusion.sdpa %q, %k, %v causal = true : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>) -> tensor<2x8x128x64xbf16>
  // CHECK-NEXT: %1 = fusion.sdpa %q, %k, %v2 scale = 0.125 : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x32xbf16>) -> tensor<2x8x128x32xbf16>
  %1 = fusion.sdpa %q, %k, %v2 scale = 0.125 : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x32xbf16>) -> tensor<2x8x128x32xbf16>
  // CHECK-NEXT: %2 = fusion.sdpa %q, %k, %v scale = 0.5 causal = false : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>) -> tensor<2x8x128x64xbf16>
  %2 = fusion.sdpa %q, %k, %v scale = 0.5 causal = false : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>) -> tensor<2x8x128x64xbf16>
  // CHECK-NEXT: %3, %4 = fusion.sdpa %q, %k, %v causal = true : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>) -> (tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>)
  %3, %4 = fusion.sdpa %q, %k, %v causal = true : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>) -> (tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>)
  // CHECK-NEXT: %5, %6, %7 = fusion.sdpa_grad %q, %k, %v, %3, %4, %0 causal = true : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>, tensor<2x8x128x64xbf16>) -> (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>)
  %5, %6, %7 = fusion.sdpa_grad %q, %k, %v, %3, %4, %0 causal = true : (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>, tensor<2x8x128x64xbf16>) -> (tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16>)
  // CHECK-NEXT: func.return %0 : tensor<2x8x128x64xbf16>
  func.return %0 : tensor<2x8x128x64xbf16>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @vocabulary(%ids: tensor<2x128xi64>, %table: tensor<1024x64xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %logits: tensor<256x1024xf32, #fusion.sharding<@tp, [-, DIDx]>>, %labels: tensor<256xi64>) -> tensor<f32> {
func.func @vocabulary(%ids: tensor<2x128xi64>, %table: tensor<1024x64xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %logits: tensor<256x1024xf32, #fusion.sharding<@tp, [-, DIDx]>>, %labels: tensor<256xi64>) -> tensor<f32> {
  // CHECK-NEXT: %0 = fusion.embedding %ids, %table : (tensor<2x128xi64>, tensor<1024x64xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x128x64xbf16>
  %0 = fusion.embedding %ids, %table : (tensor<2x128xi64>, tensor<1024x64xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x128x64xbf16>
  // CHECK-NEXT: %1 = fusion.cross_entropy %logits, %labels : (tensor<256x1024xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<256xi64>) -> tensor<f32>
  %1 = fusion.cross_entropy %logits, %labels : (tensor<256x1024xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<256xi64>) -> tensor<f32>
  // CHECK-NEXT: %2 = fusion.embedding_grad %0, %ids vocab = 1024 : (tensor<2x128x64xbf16>, tensor<2x128xi64>) -> tensor<1024x64xbf16>
  %2 = fusion.embedding_grad %0, %ids vocab = 1024 : (tensor<2x128x64xbf16>, tensor<2x128xi64>) -> tensor<1024x64xbf16>
  // CHECK-NEXT: func.return %1 : tensor<f32>
  func.return %1 : tensor<f32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @random_and_concat(%x: tensor<8x16xf32>, %seed: tensor<i64>, %a: tensor<8x4xf32>, %b: tensor<2x4xf32>) -> tensor<18x4xf32> {
func.func @random_and_concat(%x: tensor<8x16xf32>, %seed: tensor<i64>, %a: tensor<8x4xf32>, %b: tensor<2x4xf32>) -> tensor<18x4xf32> {
  // CHECK-NEXT: %0 = fusion.dropout %x, %seed p = 0.1 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  %0 = fusion.dropout %x, %seed p = 0.1 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  // CHECK-NEXT: %1 = fusion.dropout %x, %seed p = 0.0 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  %1 = fusion.dropout %x, %seed p = 0.0 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  // CHECK-NEXT: %2 = fusion.concat %a, %b, %a dim = 0 : (tensor<8x4xf32>, tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<18x4xf32>
  %2 = fusion.concat %a, %b, %a dim = 0 : (tensor<8x4xf32>, tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<18x4xf32>
  // CHECK-NEXT: %3 = fusion.concat %a dim = -1 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = fusion.concat %a dim = -1 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: func.return %2 : tensor<18x4xf32>
  func.return %2 : tensor<18x4xf32>
// CHECK-NEXT: }
}

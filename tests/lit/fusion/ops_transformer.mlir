// Round trip of the transformer ops: rsqrt ... cos, pow, minimum, the
// comparisons, where, constant, iota, mean, min, var, layer_norm (with and
// without bias), rms_norm, log_softmax, sdpa (causal GQA, scale), embedding,
// cross_entropy, dropout, concat, and broadcasting of rank-0 and size-1
// operands: printed as written, through the custom and the generic form.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt %s -o %t.custom
// RUN: %fuserc opt --print-generic %s | %fuserc opt - -o %t.again
// RUN: diff %t.custom %t.again

fusion.mesh @tp shape = [2]
// CHECK-LABEL: func.func @transformer_ops
func.func @transformer_ops(%x: tensor<8x16xf32>, %y: tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16xbf16>, %xb: tensor<4x8x16xbf16>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %seed: tensor<i64>) -> tensor<8x16xf32> {
// CHECK-NEXT: %0 = fusion.rsqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %0 = fusion.rsqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %1 = fusion.sqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %1 = fusion.sqrt %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %2 = fusion.log %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = fusion.log %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %3 = fusion.abs %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = fusion.abs %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %4 = fusion.erf %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %4 = fusion.erf %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %5 = fusion.reciprocal %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %5 = fusion.reciprocal %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %6 = fusion.sin %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %6 = fusion.sin %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %7 = fusion.cos %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %7 = fusion.cos %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %8 = fusion.pow %x, %y : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32>
  %8 = fusion.pow %x, %y : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32>
// CHECK-NEXT: %9 = fusion.minimum %x, %y : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32>
  %9 = fusion.minimum %x, %y : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32>
// CHECK-NEXT: %10 = fusion.lt %x, %y : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xi1>
  %10 = fusion.lt %x, %y : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xi1>
// CHECK-NEXT: %11 = fusion.le %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
  %11 = fusion.le %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
// CHECK-NEXT: %12 = fusion.gt %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
  %12 = fusion.gt %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
// CHECK-NEXT: %13 = fusion.ge %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
  %13 = fusion.ge %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
// CHECK-NEXT: %14 = fusion.eq %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
  %14 = fusion.eq %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
// CHECK-NEXT: %15 = fusion.ne %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
  %15 = fusion.ne %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xi1>
// CHECK-NEXT: %16 = fusion.where %10, %x, %0 : (tensor<8x16xi1>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %16 = fusion.where %10, %x, %0 : (tensor<8x16xi1>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %17 = fusion.constant 0.125 : () -> tensor<f32>
  %17 = fusion.constant 0.125 : () -> tensor<f32>
// CHECK-NEXT: %18 = fusion.constant -inf : () -> tensor<bf16>
  %18 = fusion.constant -inf : () -> tensor<bf16>
// CHECK-NEXT: %19 = fusion.iota dim = 1 : () -> tensor<8x16xi64>
  %19 = fusion.iota dim = 1 : () -> tensor<8x16xi64>
// CHECK-NEXT: %20 = fusion.mean %x dims = [1] : (tensor<8x16xf32>) -> tensor<8xf32>
  %20 = fusion.mean %x dims = [1] : (tensor<8x16xf32>) -> tensor<8xf32>
// CHECK-NEXT: %21 = fusion.min %x dims = [0, 1] keepdim = true : (tensor<8x16xf32>) -> tensor<1x1xf32>
  %21 = fusion.min %x dims = [0, 1] keepdim = true : (tensor<8x16xf32>) -> tensor<1x1xf32>
// CHECK-NEXT: %22 = fusion.var %x dims = [1] correction = 0 : (tensor<8x16xf32>) -> tensor<8xf32>
  %22 = fusion.var %x dims = [1] correction = 0 : (tensor<8x16xf32>) -> tensor<8xf32>
// CHECK-NEXT: %23 = fusion.layer_norm %xb, %w, %w dims = [2] eps = 1.0e-05 : (tensor<4x8x16xbf16>, tensor<16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
  %23 = fusion.layer_norm %xb, %w, %w dims = [2] eps = 1.0e-05 : (tensor<4x8x16xbf16>, tensor<16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
// CHECK-NEXT: %24 = fusion.layer_norm %xb, %w dims = [2] : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
  %24 = fusion.layer_norm %xb, %w dims = [2] : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
// CHECK-NEXT: %25 = fusion.rms_norm %xb, %w dims = [2] eps = 1.0e-06 : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
  %25 = fusion.rms_norm %xb, %w dims = [2] eps = 1.0e-06 : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
// CHECK-NEXT: %26 = fusion.log_softmax %x dim = 1 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %26 = fusion.log_softmax %x dim = 1 : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %27 = fusion.sdpa %q, %k, %k causal = true : (tensor<2x8x16x8xbf16>, tensor<2x2x16x8xbf16>, tensor<2x2x16x8xbf16>) -> tensor<2x8x16x8xbf16>
  %27 = fusion.sdpa %q, %k, %k causal = true : (tensor<2x8x16x8xbf16>, tensor<2x2x16x8xbf16>, tensor<2x2x16x8xbf16>) -> tensor<2x8x16x8xbf16>
// CHECK-NEXT: %28 = fusion.sdpa %q, %q, %q scale = 0.25 : (tensor<2x8x16x8xbf16>, tensor<2x8x16x8xbf16>, tensor<2x8x16x8xbf16>) -> tensor<2x8x16x8xbf16>
  %28 = fusion.sdpa %q, %q, %q scale = 0.25 : (tensor<2x8x16x8xbf16>, tensor<2x8x16x8xbf16>, tensor<2x8x16x8xbf16>) -> tensor<2x8x16x8xbf16>
// CHECK-NEXT: %29 = fusion.embedding %ids, %table : (tensor<2x8xi64>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %29 = fusion.embedding %ids, %table : (tensor<2x8xi64>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: %30 = fusion.cross_entropy %x, %labels : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
  %30 = fusion.cross_entropy %x, %labels : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
// CHECK-NEXT: %31 = fusion.dropout %x, %seed p = 0.1 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  %31 = fusion.dropout %x, %seed p = 0.1 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
// CHECK-NEXT: %32 = fusion.concat %x, %y, %x dim = 0 : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<8x16xf32>) -> tensor<24x16xf32>
  %32 = fusion.concat %x, %y, %x dim = 0 : (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<8x16xf32>) -> tensor<24x16xf32>
// CHECK-NEXT: %33 = fusion.mul %x, %17 : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  %33 = fusion.mul %x, %17 : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
// CHECK-NEXT: %34 = fusion.add %x, %21 : (tensor<8x16xf32>, tensor<1x1xf32>) -> tensor<8x16xf32>
  %34 = fusion.add %x, %21 : (tensor<8x16xf32>, tensor<1x1xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: func.return %33 : tensor<8x16xf32>
  func.return %33 : tensor<8x16xf32>
}

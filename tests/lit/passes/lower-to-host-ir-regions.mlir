// RUN: %fuserc opt -p default --split-input-file %s | filecheck %s

// Launch regions: consecutive local ops (elementwise, reductions,
// normalizations) form one hir.launch, which yields every value used after
// it (up to 4). A fork (z feeding two branches) stays in one region, and so
// does a layer norm written op by op, and a residual add with the layer norm
// after it (the sum, used again later, a second output); a GEMM ends a
// region.

// CHECK-LABEL: func.func @fork
// CHECK-COUNT-1: hir.launch
// CHECK-NOT: hir.launch
func.func @fork(%x: tensor<64x32xf32>, %y: tensor<64x32xf32>, %z: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %m = fusion.mul %x, %y : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %a = fusion.add %m, %z : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %g = fusion.gelu %a : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %s = fusion.sigmoid %z : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %r = fusion.mul %g, %s : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  func.return %r : tensor<64x32xf32>
}

// -----

// CHECK-LABEL: func.func @layer_norm_by_hand
// CHECK: hir.launch
// CHECK: fusion.mean
// CHECK: fusion.sub
// CHECK: fusion.mean
// CHECK: fusion.rsqrt
// CHECK: hir.yield
// CHECK-NOT: hir.launch
func.func @layer_norm_by_hand(%x: tensor<64x128xf32>, %w: tensor<128xf32>) -> tensor<64x128xf32> {
  %m = fusion.mean %x dims = [1] keepdim = true : (tensor<64x128xf32>) -> tensor<64x1xf32>
  %d = fusion.sub %x, %m : (tensor<64x128xf32>, tensor<64x1xf32>) -> tensor<64x128xf32>
  %s = fusion.mul %d, %d : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %v = fusion.mean %s dims = [1] keepdim = true : (tensor<64x128xf32>) -> tensor<64x1xf32>
  %r = fusion.rsqrt %v : (tensor<64x1xf32>) -> tensor<64x1xf32>
  %n = fusion.mul %d, %r : (tensor<64x128xf32>, tensor<64x1xf32>) -> tensor<64x128xf32>
  %y = fusion.mul %n, %w : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  func.return %y : tensor<64x128xf32>
}

// -----

// %h is read by the GEMM too: the region computing it ends with it.
// CHECK-LABEL: func.func @used_after
// CHECK: hir.launch
// CHECK: fusion.relu
// CHECK-NEXT: hir.yield
// CHECK: hir.matmul
// CHECK: hir.launch
// CHECK: fusion.tanh
// CHECK: fusion.add
func.func @used_after(%x: tensor<32x32xf32>, %w: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %h = fusion.relu %x : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %p = fusion.matmul %h, %w : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %t = fusion.tanh %p : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %o = fusion.add %t, %h : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  func.return %o : tensor<32x32xf32>
}

// -----

// The residual sum feeds the layer norm and a later add: one launch makes
// both the sum and the norm (the later add is the GEMM's epilogue).
// CHECK-LABEL: func.func @residual_norm
// CHECK: hir.launch
// CHECK-SAME: outs(%{{[^,]*}}, %{{[^ ]*}} :
// CHECK: fusion.add
// CHECK-NEXT: fusion.layer_norm
// CHECK-NEXT: hir.yield
// CHECK: hir.matmul %{{.*}}, %w, %{{[^ ]*}} acc %h
// CHECK-NOT: hir.launch
func.func @residual_norm(%x: tensor<32x32xf32>, %r: tensor<32x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>, %w: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %h = fusion.add %x, %r : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %n = fusion.layer_norm %h, %g, %b dims = [1] : (tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<32x32xf32>
  %p = fusion.matmul %n, %w : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %o = fusion.add %p, %h : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  func.return %o : tensor<32x32xf32>
}

// RUN: %fuserc opt -p default --split-input-file %s | filecheck %s

// Launch regions: consecutive local ops (elementwise, reductions,
// normalizations) form one hir.launch as long as every value made inside
// but the last is used only inside. A fork (z feeding two branches) stays
// in one region, and so does a layer norm written op by op; a value that
// is also used after the region (by a GEMM) ends it there.

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

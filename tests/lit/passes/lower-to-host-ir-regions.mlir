// RUN: %fuserc opt -p default --split-input-file %s | filecheck %s

// Launch regions: consecutive local ops (elementwise, reductions,
// normalizations) form one hir.launch, which yields every value used after
// it (up to 8). A fork (z feeding two branches) stays in one region, and so
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

// -----

// A bias gradient after a GEMM it does not read (the sum over rows of gelu's
// derivative, emitted after the GEMM that reads the derivative) moves up
// beside the ops making what it sums: one launch computes both, the GEMM
// after it. A set that moves nothing (a mesh of one device) is the same
// buffer: no copy, and inside a region the identity.
// CHECK-LABEL: func.func @hoisted
// CHECK: hir.launch
// CHECK: fusion.gelu
// CHECK: fusion.sum %{{.*}} dims = [0]
// CHECK: hir.yield
// CHECK-NEXT: }
// CHECK-NOT: hir.launch
// CHECK-NOT: hir.copy
// CHECK: hir.matmul
// CHECK-NOT: hir.launch
// CHECK-NOT: hir.copy
// CHECK: func.return
fusion.mesh @one shape = [1]
func.func @hoisted(%x: tensor<64x32xf32, #fusion.sharding<@one, [DIDx, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@one, [-, -]>>)
    -> (tensor<64x16xf32, #fusion.sharding<@one, [-, -]>>, tensor<32xf32, #fusion.sharding<@one, [-]>>) {
  %g = fusion.gelu %x : (tensor<64x32xf32, #fusion.sharding<@one, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@one, [DIDx, -]>>
  %r = fusion.set %g : (tensor<64x32xf32, #fusion.sharding<@one, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@one, [-, -]>>
  %y = fusion.matmul %r, %w : (tensor<64x32xf32, #fusion.sharding<@one, [-, -]>>, tensor<32x16xf32, #fusion.sharding<@one, [-, -]>>) -> tensor<64x16xf32, #fusion.sharding<@one, [-, -]>>
  %b = fusion.sum %r dims = [0] : (tensor<64x32xf32, #fusion.sharding<@one, [-, -]>>) -> tensor<32xf32, #fusion.sharding<@one, [-]>>
  func.return %y, %b : tensor<64x16xf32, #fusion.sharding<@one, [-, -]>>, tensor<32xf32, #fusion.sharding<@one, [-]>>
}

// -----

// Attention's operands and result, and a GEMM's transposed operand, cost no
// copy: the heads of a projection are read as a view (the permute inside
// sdpa's launch), sdpa writes its output in [B, S, H, D] order so the
// permute back and the reshape to rows are views, and x^T is a
// hir.transpose view.
// CHECK-LABEL: func.func @views
// CHECK: hir.linear
// CHECK-NEXT: %[[R:.*]] = hir.view %{{.*}} : tensor<64x32xf32> -> tensor<1x64x4x8xf32>
// CHECK: hir.launch ins(%[[R]] : tensor<1x64x4x8xf32>) outs(%[[O:.*]] : tensor<1x64x4x8xf32>)
// CHECK: fusion.permute %{{.*}} dims = [0, 2, 1, 3] : (tensor<1x64x4x8xf32>) -> tensor<1x4x64x8xf32>
// CHECK: fusion.sdpa
// CHECK: fusion.permute %{{.*}} dims = [0, 2, 1, 3] : (tensor<1x4x64x8xf32>) -> tensor<1x64x4x8xf32>
// CHECK: %[[Y:.*]] = hir.view %[[O]] : tensor<1x64x4x8xf32> -> tensor<64x32xf32>
// CHECK: %[[XT:.*]] = hir.transpose %[[Y]] : tensor<64x32xf32> -> tensor<32x64xf32>
// CHECK-NEXT: hir.matmul %[[XT]], %{{.*}}
// CHECK-NOT: hir.launch
// CHECK: func.return
func.func @views(%x: tensor<64x32xf32>, %w: tensor<32x32xf32>, %g: tensor<64x32xf32>) -> tensor<32x32xf32> {
  %l = fusion.linear %x, %w : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  %r = fusion.reshape %l : (tensor<64x32xf32>) -> tensor<1x64x4x8xf32>
  %q = fusion.permute %r dims = [0, 2, 1, 3] : (tensor<1x64x4x8xf32>) -> tensor<1x4x64x8xf32>
  %o = fusion.sdpa %q, %q, %q causal = true : (tensor<1x4x64x8xf32>, tensor<1x4x64x8xf32>, tensor<1x4x64x8xf32>) -> tensor<1x4x64x8xf32>
  %p = fusion.permute %o dims = [0, 2, 1, 3] : (tensor<1x4x64x8xf32>) -> tensor<1x64x4x8xf32>
  %y = fusion.reshape %p : (tensor<1x64x4x8xf32>) -> tensor<64x32xf32>
  %yt = fusion.permute %y dims = [1, 0] : (tensor<64x32xf32>) -> tensor<32x64xf32>
  %dw = fusion.matmul %yt, %g : (tensor<32x64xf32>, tensor<64x32xf32>) -> tensor<32x32xf32>
  func.return %dw : tensor<32x32xf32>
}

// -----

// A reduction over rows (an outer dimension) of a value its region also
// yields reads that value back in a region of its own (a bias's gradient
// beside the cotangent it sums): the first region stores it once. A
// reduction over the innermost dimension, or of a value used nowhere else,
// stays in its region.
// CHECK-LABEL: func.func @read_back
// CHECK:      hir.launch ins(%x, %y
// CHECK:      fusion.exp
// CHECK-NOT:  fusion.sum
// CHECK:      hir.yield
// CHECK:      hir.launch ins(%
// CHECK-NEXT: ^bb0
// CHECK-NEXT: fusion.sum %{{.*}} dims = [0]
// CHECK-LABEL: func.func @stays
// CHECK-COUNT-1: hir.launch
// CHECK-NOT: hir.launch
func.func @read_back(%x: tensor<64x32xf32>, %y: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<32xf32>) {
  %e = fusion.exp %x : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %d = fusion.mul %e, %y : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %s = fusion.sum %d dims = [0] : (tensor<64x32xf32>) -> tensor<32xf32>
  func.return %d, %s : tensor<64x32xf32>, tensor<32xf32>
}
func.func @stays(%x: tensor<64x32xf32>, %y: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64xf32>, tensor<32xf32>) {
  %e = fusion.exp %x : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %d = fusion.mul %e, %y : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %r = fusion.sum %d dims = [1] : (tensor<64x32xf32>) -> tensor<64xf32>
  %c = fusion.sum %e dims = [0] : (tensor<64x32xf32>) -> tensor<32xf32>
  func.return %d, %r, %c : tensor<64x32xf32>, tensor<64xf32>, tensor<32xf32>
}

// -----

// A permute of a permute read by a launched op is a view of a view: the
// backward of a grouped GEMM over a permuted weight reads the weight itself
// (permute(permute(w))), no copy of it in a launch of its own.

// CHECK-LABEL: func.func @permute_of_permute
// CHECK-COUNT-1: hir.launch
// CHECK-NOT: hir.launch
// CHECK: fusion.exp
func.func @permute_of_permute(%w: tensor<4x6x8xf32>) -> tensor<4x6x8xf32> {
  %t = fusion.permute %w dims = [0, 2, 1] : (tensor<4x6x8xf32>) -> tensor<4x8x6xf32>
  %b = fusion.permute %t dims = [0, 2, 1] : (tensor<4x8x6xf32>) -> tensor<4x6x8xf32>
  %e = fusion.exp %b : (tensor<4x6x8xf32>) -> tensor<4x6x8xf32>
  func.return %e : tensor<4x6x8xf32>
}

// RUN: %fuserc opt -p default --split-input-file %s | filecheck %s

// GEMM epilogues: the op right after a GEMM runs inside it where cuBLAS's
// epilogue can: a residual add as the GEMM's accumulator (a GEMM without a
// bias), a tanh GELU after a linear with a bias as cuBLASLt's activation.
// The erf GELU (cuBLASLt has none), a GEMM result used twice, and a GEMM
// beside a resharding stay a plain GEMM and a launch.

// CHECK-LABEL: func.func @mlp
// CHECK: hir.linear %x, %w, %b, %[[G:.*]] {activation = "gelu_tanh"}
// CHECK: hir.linear %[[G]], %w2, %{{.*}} acc %r
// CHECK-NOT: hir.launch
func.func @mlp(%x: tensor<16x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>, %w2: tensor<32x64xf32>, %r: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %u = fusion.linear %x, %w, %b : (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %g = fusion.gelu %u {approximate = "tanh"} : (tensor<16x64xf32>) -> tensor<16x64xf32>
  %m = fusion.linear %g, %w2 : (tensor<16x64xf32>, tensor<32x64xf32>) -> tensor<16x32xf32>
  %y = fusion.add %m, %r : (tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
  func.return %y : tensor<16x32xf32>
}

// -----

// CHECK-LABEL: func.func @matmul_residual
// CHECK: hir.matmul %a, %b, %{{.*}} acc %c
// CHECK-NOT: hir.launch
func.func @matmul_residual(%a: tensor<8x16xf32>, %b: tensor<16x8xf32>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %p = fusion.matmul %a, %b : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %y = fusion.add %c, %p : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %y : tensor<8x8xf32>
}

// -----

// CHECK-LABEL: func.func @stays_apart
// CHECK: hir.linear %x, %w, %b, %{{[^ ]*}} :
// CHECK: hir.launch
// CHECK: fusion.gelu
// CHECK: hir.linear %x, %w, %b, %{{[^ ]*}} :
// CHECK: hir.launch
// CHECK: fusion.gelu
// CHECK: fusion.add
// CHECK: hir.matmul %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} :
// CHECK: hir.launch
// CHECK: fusion.add
func.func @stays_apart(%x: tensor<16x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>, %wt: tensor<64x64xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  %u = fusion.linear %x, %w, %b : (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %g = fusion.gelu %u : (tensor<16x64xf32>) -> tensor<16x64xf32>
  %v = fusion.linear %x, %w, %b : (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %h = fusion.gelu %v {approximate = "tanh"} : (tensor<16x64xf32>) -> tensor<16x64xf32>
  %s = fusion.add %h, %v : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
  %p = fusion.matmul %g, %wt : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %q = fusion.add %p, %u : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
  func.return %s, %q, %p : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>
}

// -----

// A GEMM fed by an AllGather stays plain (stream-pipeline's site).
// CHECK-LABEL: func.func @beside_a_gather
// CHECK: hir.allgather
// CHECK: hir.matmul %{{[^ ]*}}, %w, %{{[^ ]*}} :
// CHECK: hir.launch
fusion.mesh @tp shape = [2]
func.func @beside_a_gather(%x: tensor<16x32xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %r: tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %g = fusion.set %x : (tensor<16x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>
  %p = fusion.matmul %g, %w : (tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %y = fusion.add %p, %r : (tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<16x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// -----

// An add that sums GEMMs' results after other work (autodiff's sum of a
// value's gradient contributions) moves up to the GEMM that makes its last
// operand and rides in it as the accumulator, written over that addend's
// buffer (read by nothing else); the work between follows. An add whose
// other operand is made after the GEMM stays where it is.
// CHECK-LABEL: func.func @sum_of_gemms
// CHECK:      hir.matmul %a, %w, %[[P:[^ ]*]] :
// CHECK-NEXT: hir.matmul %b, %w, %[[P]] acc %[[P]] :
// CHECK:      hir.launch
// CHECK:      fusion.sum
// CHECK-LABEL: func.func @made_after
// CHECK:      hir.matmul %a, %w, %{{[^ ]*}} :
// CHECK:      fusion.exp
// CHECK:      fusion.add
func.func @sum_of_gemms(%a: tensor<16x32xf32>, %b: tensor<16x32xf32>, %w: tensor<32x8xf32>) -> (tensor<16x8xf32>, tensor<32xf32>) {
  %p = fusion.matmul %a, %w : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %q = fusion.matmul %b, %w : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %s = fusion.sum %b dims = [0] : (tensor<16x32xf32>) -> tensor<32xf32>
  %y = fusion.add %p, %q : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  func.return %y, %s : tensor<16x8xf32>, tensor<32xf32>
}
func.func @made_after(%a: tensor<16x32xf32>, %w: tensor<32x8xf32>, %r: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %p = fusion.matmul %a, %w : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %e = fusion.exp %r : (tensor<16x8xf32>) -> tensor<16x8xf32>
  %y = fusion.add %p, %e : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  func.return %y : tensor<16x8xf32>
}

// -----

// The addend's buffer is not written over while another value read later
// lives in it (an identity permute is the same buffer).
// CHECK-LABEL: func.func @addend_read_later
// CHECK:      hir.matmul %a, %w, %[[P:[^ ]*]] :
// CHECK-NEXT: %[[Q:.*]] = hir.alloc
// CHECK-NEXT: hir.matmul %b, %w, %[[Q]] acc %[[P]] :
func.func @addend_read_later(%a: tensor<16x32xf32>, %b: tensor<16x32xf32>, %w: tensor<32x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %p = fusion.matmul %a, %w : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %i = fusion.permute %p dims = [0, 1] : (tensor<16x8xf32>) -> tensor<16x8xf32>
  %q = fusion.matmul %b, %w : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %y = fusion.add %i, %q : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  func.return %y, %p : tensor<16x8xf32>, tensor<16x8xf32>
}

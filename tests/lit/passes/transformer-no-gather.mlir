// RUN: %fuserc opt -p default %s | filecheck %s
// What is never gathered: a layer_norm or rms_norm over a split normalized
// dimension reduces its statistics (allreduce of per-device sums), and a
// vocabulary split over devices stays split through embedding (a masked
// lookup and one reduction of the partial rows) and cross_entropy
// (allreduces of the max and the sum of exponentials, and of the picked
// logits).

fusion.mesh @tp shape = [4]

// CHECK-LABEL: func.func @norms
// CHECK-NOT: hir.allgather {{.*}}tensor<8x64xf32>
// CHECK: hir.allreduce
// CHECK-NOT: hir.allgather {{.*}}tensor<8x64xf32>
// CHECK: func.return
func.func @norms(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>)
    -> (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) {
  %l = fusion.layer_norm %x, %w, %w dims = [1] : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>, tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %r = fusion.rms_norm %x, %w dims = [1] eps = 1.0e-06 : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %l, %r : tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// (The per-device maxima of the loss, one value per row and device, are
// gathered to take their max: 4x32 values, not the 32x1024 logits.)
// CHECK-LABEL: func.func @vocabulary
// CHECK-NOT: hir.allgather {{.*}}tensor<{{1024x32|32x1024}}xf32>
// CHECK: hir.allreduce
// CHECK-NOT: hir.allgather {{.*}}tensor<{{1024x32|32x1024}}xf32>
// CHECK: func.return
func.func @vocabulary(%ids: tensor<2x16xi64>, %table: tensor<1024x32xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                      %logits: tensor<32x1024xf32, #fusion.sharding<@tp, [-, DIDx]>>, %labels: tensor<32xi64>)
    -> (tensor<2x16x32xf32, #fusion.sharding<@tp, [-, -, -]>>, tensor<f32, #fusion.sharding<@tp, []>>) {
  %e = fusion.embedding %ids, %table : (tensor<2x16xi64>, tensor<1024x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x16x32xf32, #fusion.sharding<@tp, [-, -, -]>>
  %l = fusion.cross_entropy %logits, %labels : (tensor<32x1024xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32xi64>) -> tensor<f32, #fusion.sharding<@tp, []>>
  func.return %e, %l : tensor<2x16x32xf32, #fusion.sharding<@tp, [-, -, -]>>, tensor<f32, #fusion.sharding<@tp, []>>
}

// Attention over sharded heads: no communication at all.
// CHECK-LABEL: func.func @heads
// CHECK-NOT: hir.allgather
// CHECK-NOT: hir.allreduce
// CHECK: func.return
func.func @heads(%q: tensor<2x8x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>, %k: tensor<2x4x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>)
    -> tensor<2x8x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>> {
  %o = fusion.sdpa %q, %k, %k causal = true : (tensor<2x8x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>, tensor<2x4x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>, tensor<2x4x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<2x8x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
  func.return %o : tensor<2x8x16x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
}

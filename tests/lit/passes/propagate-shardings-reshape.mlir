// RUN: %fuserc opt -p propagate-shardings --split-input-file %s | filecheck %s

// Merging dimensions: the outermost one's split moves to the merged
// dimension; an inner split cannot (its blocks are not contiguous there).
fusion.mesh @tp shape = [4]
func.func @merge(%x: tensor<8x6xf32, #fusion.sharding<@tp, [DIDx, -]>>, %z: tensor<6x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> (tensor<48xf32>, tensor<48xf32>) {
  %a = fusion.reshape %x : (tensor<8x6xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<48xf32>
  %b = fusion.reshape %z : (tensor<6x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<48xf32>
  func.return %a, %b : tensor<48xf32>, tensor<48xf32>
}
// CHECK-LABEL: func.func @merge(
// CHECK: %a = fusion.reshape %x : {{.*}} -> tensor<48xf32, #fusion.sharding<@tp, [DIDx]>>
// CHECK: %b = fusion.reshape %z : {{.*}} -> tensor<48xf32, #fusion.sharding<@tp, [-]>>

// -----

// Splitting a dimension: the split stays on the outermost piece when its
// extent divides, else the dimension becomes whole.
fusion.mesh @tp shape = [4]
func.func @split(%x: tensor<48xf32, #fusion.sharding<@tp, [DIDx]>>) -> (tensor<8x6xf32>, tensor<2x24xf32>) {
  %a = fusion.reshape %x : (tensor<48xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<8x6xf32>
  %b = fusion.reshape %x : (tensor<48xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<2x24xf32>
  func.return %a, %b : tensor<8x6xf32>, tensor<2x24xf32>
}
// CHECK-LABEL: func.func @split(
// CHECK: %a = fusion.reshape %x : {{.*}} -> tensor<8x6xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %b = fusion.reshape %x : {{.*}} -> tensor<2x24xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// Dimensions kept as they are keep their splits; unit dimensions are not
// the "outermost piece".
fusion.mesh @grid shape = [2, 4]
func.func @keep(%x: tensor<4x8x6xf32, #fusion.sharding<@grid, [DIDy, DIDx, -]>>, %u: tensor<8x6xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> (tensor<4x48xf32>, tensor<1x8x6xf32>, tensor<1x48xf32>) {
  %a = fusion.reshape %x : (tensor<4x8x6xf32, #fusion.sharding<@grid, [DIDy, DIDx, -]>>) -> tensor<4x48xf32>
  %b = fusion.reshape %u : (tensor<8x6xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<1x8x6xf32>
  %c = fusion.reshape %u : (tensor<8x6xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<1x48xf32>
  func.return %a, %b, %c : tensor<4x48xf32>, tensor<1x8x6xf32>, tensor<1x48xf32>
}
// CHECK-LABEL: func.func @keep(
// CHECK: %a = fusion.reshape %x : {{.*}} -> tensor<4x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
// CHECK: %b = fusion.reshape %u : {{.*}} -> tensor<1x8x6xf32, #fusion.sharding<@grid, [-, DIDx, -]>>
// CHECK: %c = fusion.reshape %u : {{.*}} -> tensor<1x48xf32, #fusion.sharding<@grid, [-, DIDx]>>

// -----

// A group that both splits and merges ([6, 4] <-> [4, 6]), and a split of
// two device types moving together.
fusion.mesh @grid shape = [2, 2]
func.func @regroup(%x: tensor<6x4xf32, #fusion.sharding<@grid, [DIDx, -]>>, %z: tensor<8x3xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %a = fusion.reshape %x : (tensor<6x4xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<4x6xf32>
  %b = fusion.reshape %z : (tensor<8x3xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>) -> tensor<4x6xf32>
  func.return %a, %b : tensor<4x6xf32>, tensor<4x6xf32>
}
// CHECK-LABEL: func.func @regroup(
// CHECK: %a = fusion.reshape %x : {{.*}} -> tensor<4x6xf32, #fusion.sharding<@grid, [DIDx, -]>>
// CHECK: %b = fusion.reshape %z : {{.*}} -> tensor<4x6xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>

// -----

// Backward through a reshape: the annotated result decides the input.
fusion.mesh @tp shape = [4]
func.func @backward(%x: tensor<8x6xf32>) -> tensor<48xf32, #fusion.sharding<@tp, [DIDx]>> {
  %a = fusion.reshape %x : (tensor<8x6xf32>) -> tensor<48xf32, #fusion.sharding<@tp, [DIDx]>>
  func.return %a : tensor<48xf32, #fusion.sharding<@tp, [DIDx]>>
}
// CHECK-LABEL: func.func @backward(%x: tensor<8x6xf32, #fusion.sharding<@tp, [DIDx, -]>>)

// -----

// Attention-style head split: [tokens, heads*dim] -> [tokens, heads, dim]
// -> permute to [heads, tokens, dim]; the head split follows.
fusion.mesh @tp shape = [4]
func.func @heads(%x: tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16x8xf32> {
  %a = fusion.reshape %x : (tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16x8x8xf32>
  %b = fusion.permute %a dims = [1, 0, 2] : (tensor<16x8x8xf32>) -> tensor<8x16x8xf32>
  func.return %b : tensor<8x16x8xf32>
}
// CHECK-LABEL: func.func @heads(
// CHECK: %a = fusion.reshape %x : {{.*}} -> tensor<16x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
// CHECK: %b = fusion.permute %a dims = [1, 0, 2] : {{.*}} -> tensor<8x16x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>

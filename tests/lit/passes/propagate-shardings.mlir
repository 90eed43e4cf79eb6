// RUN: %fuserc opt -p propagate-shardings --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p propagate-shardings --split-input-file %s | %fuserc opt -p propagate-shardings --split-input-file - | filecheck %s

// Pointwise on a sharded input with an unsharded output: the intermediate
// follows the input, the annotated output stays as written.
fusion.mesh @tp shape = [4]
func.func @pointwise(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>> {
  %a = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %y = fusion.exp %a : (tensor<64x16xf32>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
}
// CHECK-LABEL: func.func @pointwise(
// CHECK-SAME: -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %a = fusion.relu %x : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %y = fusion.exp %a : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// An unannotated function result takes its producer's placement.
fusion.mesh @tp shape = [4]
func.func @pointwise_out(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32> {
  %y = fusion.tanh %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @pointwise_out(
// CHECK-SAME: -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// Column-parallel linear: the weight's output split goes to the result.
fusion.mesh @tp shape = [4]
func.func @column_parallel(%x: tensor<2x8x16xf32, #fusion.sharding<@tp, [-, -, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x8x32xf32> {
  %y = fusion.linear %x, %w : (tensor<2x8x16xf32, #fusion.sharding<@tp, [-, -, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x8x32xf32>
  func.return %y : tensor<2x8x32xf32>
}
// CHECK-LABEL: func.func @column_parallel(
// CHECK: %y = fusion.linear %x, %w : {{.*}} -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, -, DIDx]>>

// -----

// Column-parallel linear with a bias; the input is unannotated and is
// replicated by backward propagation.
fusion.mesh @tp shape = [4]
func.func @column_parallel_bias(%x: tensor<2x8x16xf32>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b: tensor<32xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<2x8x32xf32> {
  %y = fusion.linear %x, %w, %b : (tensor<2x8x16xf32>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<32xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<2x8x32xf32>
  func.return %y : tensor<2x8x32xf32>
}
// CHECK-LABEL: func.func @column_parallel_bias(
// CHECK-SAME: %x: tensor<2x8x16xf32, #fusion.sharding<@tp, [-, -, -]>>
// CHECK: %y = fusion.linear %x, %w, %b : {{.*}} -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, -, DIDx]>>

// -----

// Row-parallel linear: the contracted dimension is split on both operands,
// so the local result is a partial sum. It stays partial through a set (a
// linear op), but a function result is never partial: the reduction
// completes before the return.
fusion.mesh @tp shape = [4]
func.func @row_parallel(%x: tensor<2x8x16xf32, #fusion.sharding<@tp, [-, -, DIDx]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<2x8x32xf32> {
  %y = fusion.linear %x, %w : (tensor<2x8x16xf32, #fusion.sharding<@tp, [-, -, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<2x8x32xf32>
  %z = fusion.set %y : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  func.return %z : tensor<2x8x32xf32>
}
// CHECK-LABEL: func.func @row_parallel(
// CHECK-SAME: -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, -, -]>>
// CHECK: %y = fusion.linear %x, %w : {{.*}} -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, -, -], partial = DIDx>>
// CHECK: %z = fusion.set %y : {{.*}} -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, -, -]>>

// -----

// Row-parallel linear whose result is returned directly: replicated.
fusion.mesh @tp shape = [4]
func.func @row_parallel_out(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x32xf32> {
  %y = fusion.linear %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x32xf32>
  func.return %y : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @row_parallel_out(
// CHECK-SAME: -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %y = fusion.linear {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// Row-parallel linear with a bias: a partial sum would add the bias once per
// device, so even an intermediate result is whole.
fusion.mesh @tp shape = [4]
func.func @row_parallel_bias(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %y = fusion.linear %x, %w, %b : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32xf32>) -> tensor<8x32xf32>
  %z = fusion.relu %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @row_parallel_bias(
// CHECK-SAME: %b: tensor<32xf32, #fusion.sharding<@tp, [-]>>
// CHECK: %y = fusion.linear {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %z = fusion.relu {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// Row-parallel with a replicated weight: the input's split contracted
// dimension still makes a partial sum (the weight is sliced locally).
fusion.mesh @tp shape = [4]
func.func @row_parallel_replicated_weight(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x32xf32> {
  %y = fusion.matmul %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x32xf32>
  %z = fusion.neg %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %o = fusion.exp %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %o : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @row_parallel_replicated_weight(
// CHECK: %y = fusion.matmul {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK: %z = fusion.neg {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK: %o = fusion.exp {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// Sequence-parallel linear: the input is split on the sequence, the weight
// on its output features. The weight has priority (as nvFuser): DIDx goes
// to the features, and the input is gathered.
fusion.mesh @tp shape = [4]
func.func @sequence_parallel(%x: tensor<2x8x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x8x32xf32> {
  %y = fusion.linear %x, %w : (tensor<2x8x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x8x32xf32>
  func.return %y : tensor<2x8x32xf32>
}
// CHECK-LABEL: func.func @sequence_parallel(
// CHECK: %y = fusion.linear {{.*}} -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, -, DIDx]>>

// -----

// Sequence-parallel input with a replicated weight: the sequence split
// stays (a local linear).
fusion.mesh @tp shape = [4]
func.func @sequence_local(%x: tensor<2x8x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>, %w: tensor<32x16xf32>) -> tensor<2x8x32xf32> {
  %y = fusion.linear %x, %w : (tensor<2x8x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  func.return %y : tensor<2x8x32xf32>
}
// CHECK-LABEL: func.func @sequence_local(
// CHECK-SAME: %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %y = fusion.linear {{.*}} -> tensor<2x8x32xf32, #fusion.sharding<@tp, [-, DIDx, -]>>

// -----

// The sequence-parallel MLP: intermediates unannotated.
fusion.mesh @tp shape = [4]
func.func @sp_mlp(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w1: tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w2: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x32xf32>
  %g = fusion.gelu %h : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %y = fusion.matmul %g, %w2 : (tensor<64x32xf32>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}
// CHECK-LABEL: func.func @sp_mlp(
// CHECK: %h = fusion.matmul %x, %w1 : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK: %g = fusion.gelu %h : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK: %y = fusion.matmul %g, %w2 : (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// The MLP's second contraction, unannotated: split on both operands, partial.
fusion.mesh @tp shape = [4]
func.func @mlp_partial(%g: tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w2: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %p = fusion.matmul %g, %w2 : (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %y = fusion.set %p : (tensor<64x16xf32>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}
// CHECK-LABEL: func.func @mlp_partial(
// CHECK: %p = fusion.matmul {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>

// -----

// A residual add whose second operand has no sharding: backward propagation
// gives it (and the value it comes from) the add's sharding.
fusion.mesh @tp shape = [4]
func.func @residual(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %r0: tensor<64x16xf32>) -> tensor<64x16xf32> {
  %h = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %r = fusion.exp %r0 : (tensor<64x16xf32>) -> tensor<64x16xf32>
  %y = fusion.add %h, %r : (tensor<64x16xf32>, tensor<64x16xf32>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @residual(
// CHECK-SAME: %r0: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-SAME: -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %r = fusion.exp %r0 : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %y = fusion.add %h, %r : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// Backward through a chain: the function's only annotation is its result.
fusion.mesh @tp shape = [4]
func.func @backward_chain(%x: tensor<64x16xf32>, %w: tensor<16x8xf32>) -> tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %a = fusion.sigmoid %x : (tensor<64x16xf32>) -> tensor<64x16xf32>
  %y = fusion.matmul %a, %w : (tensor<64x16xf32>, tensor<16x8xf32>) -> tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
}
// CHECK-LABEL: func.func @backward_chain(
// CHECK-SAME: %x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-SAME: %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %a = fusion.sigmoid %x : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// Elementwise priority: the operand with the most device splits decides.
fusion.mesh @tp shape = [4]
func.func @elementwise_priority(%a: tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>, %b: tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x16xf32> {
  %y = fusion.mul %a, %b : (tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>, tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @elementwise_priority(
// CHECK: %y = fusion.mul {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>

// -----

// Elementwise tie: the first operand wins; DIDx is not used twice.
fusion.mesh @tp shape = [4]
func.func @elementwise_tie(%a: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b: tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x16xf32> {
  %y = fusion.sub %a, %b : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @elementwise_tie(
// CHECK: %y = fusion.sub {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// Elementwise on a 2-D mesh: splits of different types from both operands.
fusion.mesh @grid shape = [2, 4]
func.func @elementwise_merge(%a: tensor<64x16xf32, #fusion.sharding<@grid, [DIDy, -]>>, %b: tensor<64x16xf32, #fusion.sharding<@grid, [-, DIDx]>>) -> tensor<64x16xf32> {
  %y = fusion.maximum %a, %b : (tensor<64x16xf32, #fusion.sharding<@grid, [DIDy, -]>>, tensor<64x16xf32, #fusion.sharding<@grid, [-, DIDx]>>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @elementwise_merge(
// CHECK: %y = fusion.maximum {{.*}} -> tensor<64x16xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>

// -----

// Two partial sums over the same type add into a partial sum; adding a
// whole value needs the reduction first.
fusion.mesh @tp shape = [4]
func.func @partial_add(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, %v: tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x8xf32> {
  %p = fusion.matmul %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32>
  %q = fusion.add %p, %p : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %y = fusion.add %q, %v : (tensor<8x8xf32>, tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x8xf32>
  func.return %y : tensor<8x8xf32>
}
// CHECK-LABEL: func.func @partial_add(
// CHECK: %q = fusion.add %p, %p : {{.*}} -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK: %y = fusion.add %q, %v : {{.*}} -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// Permute carries a split with its dimension, forward and backward.
fusion.mesh @tp shape = [4]
func.func @permute(%x: tensor<8x16x4xf32, #fusion.sharding<@tp, [DIDx, -, -]>>, %u: tensor<16x8xf32>) -> (tensor<4x8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) {
  %y = fusion.permute %x dims = [2, 0, 1] : (tensor<8x16x4xf32, #fusion.sharding<@tp, [DIDx, -, -]>>) -> tensor<4x8x16xf32>
  %v = fusion.permute %u dims = [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y, %v : tensor<4x8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
}
// CHECK-LABEL: func.func @permute(
// CHECK-SAME: %u: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %y = fusion.permute %x dims = [2, 0, 1] : {{.*}} -> tensor<4x8x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>

// -----

// Sum over an unsharded dimension keeps the split; over a sharded one the
// result is a partial sum (reduced later by the set); keepdim too.
fusion.mesh @tp shape = [4]
func.func @sum(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %z: tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> (tensor<64xf32>, tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>, tensor<64x1xf32>) {
  %a = fusion.sum %x dims = [1] : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64xf32>
  %b = fusion.sum %z dims = [1] : (tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64xf32>
  %c = fusion.set %b : (tensor<64xf32>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
  %d = fusion.sum %z dims = [1] keepdim = true : (tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x1xf32>
  %e = fusion.relu %d : (tensor<64x1xf32>) -> tensor<64x1xf32>
  func.return %a, %c, %e : tensor<64xf32>, tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>, tensor<64x1xf32>
}
// CHECK-LABEL: func.func @sum(
// CHECK: %a = fusion.sum %x dims = [1] : {{.*}} -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
// CHECK: %b = fusion.sum %z dims = [1] : {{.*}} -> tensor<64xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
// CHECK: %d = fusion.sum %z dims = [1] keepdim = true : {{.*}} -> tensor<64x1xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK: %e = fusion.relu %d : {{.*}} -> tensor<64x1xf32, #fusion.sharding<@tp, [-, -]>>

// -----

// A sum over a sharded dimension returned directly: reduced, not partial.
// Max over a sharded dimension cannot be partial: the dimension is whole.
fusion.mesh @tp shape = [4]
func.func @reduce_out(%z: tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> (tensor<64xf32>, tensor<64xf32>) {
  %s = fusion.sum %z dims = [-1] : (tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64xf32>
  %m = fusion.max %z dims = [1] : (tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64xf32>
  %n = fusion.neg %m : (tensor<64xf32>) -> tensor<64xf32>
  func.return %s, %n : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @reduce_out(
// CHECK-SAME: -> (tensor<64xf32, #fusion.sharding<@tp, [-]>>, tensor<64xf32, #fusion.sharding<@tp, [-]>>)
// CHECK: %m = fusion.max %z dims = [1] : {{.*}} -> tensor<64xf32, #fusion.sharding<@tp, [-]>>

// -----

// A 2-D mesh: DIDy on the batch, DIDx on the features.
fusion.mesh @grid shape = [2, 4]
func.func @mesh2d(%x: tensor<8x16xf32, #fusion.sharding<@grid, [DIDy, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@grid, [DIDx, -]>>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %y = fusion.linear %x, %w, %b : (tensor<8x16xf32, #fusion.sharding<@grid, [DIDy, -]>>, tensor<32x16xf32, #fusion.sharding<@grid, [DIDx, -]>>, tensor<32xf32>) -> tensor<8x32xf32>
  %z = fusion.silu %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @mesh2d(
// CHECK-SAME: %b: tensor<32xf32, #fusion.sharding<@grid, [DIDx]>>
// CHECK: %y = fusion.linear {{.*}} -> tensor<8x32xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
// CHECK: %z = fusion.silu {{.*}} -> tensor<8x32xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>

// -----

// A batched matmul on a 2-D mesh: the batch split comes from the input, the
// feature split from the weight; a batch dimension of extent 1 broadcasts.
fusion.mesh @grid shape = [2, 4]
func.func @batched(%x: tensor<4x8x16xf32, #fusion.sharding<@grid, [DIDy, -, -]>>, %w: tensor<1x16x32xf32, #fusion.sharding<@grid, [-, -, DIDx]>>) -> tensor<4x8x32xf32> {
  %y = fusion.matmul %x, %w : (tensor<4x8x16xf32, #fusion.sharding<@grid, [DIDy, -, -]>>, tensor<1x16x32xf32, #fusion.sharding<@grid, [-, -, DIDx]>>) -> tensor<4x8x32xf32>
  func.return %y : tensor<4x8x32xf32>
}
// CHECK-LABEL: func.func @batched(
// CHECK: %y = fusion.matmul {{.*}} -> tensor<4x8x32xf32, #fusion.sharding<@grid, [DIDy, -, DIDx]>>

// -----

// Two meshes (pipeline stages): an op after a set to @stage1 runs on
// @stage1; unannotated weights take the mesh of the stage that uses them.
fusion.mesh @stage0 shape = [2]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
func.func @pipeline(%x: tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>, %w0: tensor<16x16xf32>, %w1: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %h = fusion.matmul %x, %w0 : (tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %a = fusion.relu %h : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %t = fusion.set %a : (tensor<8x16xf32>) -> tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  %y = fusion.matmul %t, %w1 : (tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>, tensor<16x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
// CHECK-LABEL: func.func @pipeline(
// CHECK-SAME: %w0: tensor<16x16xf32, #fusion.sharding<@stage0, [-, -]>>
// CHECK-SAME: %w1: tensor<16x16xf32, #fusion.sharding<@stage1, [-, -]>>
// CHECK-SAME: -> tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>
// CHECK: %h = fusion.matmul {{.*}} -> tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>
// CHECK: %a = fusion.relu {{.*}} -> tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>
// CHECK: %y = fusion.matmul {{.*}} -> tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>

// -----

// Softmax keeps every split: over a sharded dimension it expands later
// into reductions across devices (make-resharding-contiguous).
fusion.mesh @tp shape = [4]
func.func @softmax(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %a = fusion.softmax %x dim = 1 : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16xf32>
  %b = fusion.softmax %x dim = 0 : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16xf32>
  func.return %a, %b : tensor<8x16xf32>, tensor<8x16xf32>
}
// CHECK-LABEL: func.func @softmax(
// CHECK: %a = fusion.softmax %x dim = 1 : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK: %b = fusion.softmax %x dim = 0 : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>

// -----

// Slice: a sliced sharded dimension becomes whole; a dimension kept whole
// by the slice keeps its split.
fusion.mesh @tp shape = [4]
func.func @slice(%x: tensor<16x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> (tensor<8x16xf32>, tensor<16x8xf32>) {
  %a = fusion.slice %x starts = [0, 0] limits = [8, 16] : (tensor<16x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32>
  %b = fusion.slice %x starts = [0, 4] limits = [16, 12] : (tensor<16x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<16x8xf32>
  func.return %a, %b : tensor<8x16xf32>, tensor<16x8xf32>
}
// CHECK-LABEL: func.func @slice(
// CHECK: %a = fusion.slice {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %b = fusion.slice {{.*}} -> tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// broadcast_in_dim: a split follows its dimension (forward and backward);
// new and expanded dimensions are whole.
fusion.mesh @tp shape = [4]
func.func @broadcast(%x: tensor<16xf32, #fusion.sharding<@tp, [DIDx]>>, %u: tensor<16xf32>, %v: tensor<1x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> (tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<8x16xf32>) {
  %a = fusion.broadcast_in_dim %x dims = [1] : (tensor<16xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<8x16xf32>
  %b = fusion.broadcast_in_dim %u dims = [1] : (tensor<16xf32>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %c = fusion.broadcast_in_dim %v dims = [0, 1] : (tensor<1x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16xf32>
  func.return %a, %b, %c : tensor<8x16xf32>, tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<8x16xf32>
}
// CHECK-LABEL: func.func @broadcast(
// CHECK-SAME: %u: tensor<16xf32, #fusion.sharding<@tp, [DIDx]>>
// CHECK: %a = fusion.broadcast_in_dim {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK: %c = fusion.broadcast_in_dim {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>

// -----

// Cast and set follow their operand.
fusion.mesh @tp shape = [4]
func.func @cast_set(%x: tensor<64x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32> {
  %a = fusion.cast %x : (tensor<64x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %b = fusion.set %a : (tensor<64x16xf32>) -> tensor<64x16xf32>
  func.return %b : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @cast_set(
// CHECK: %a = fusion.cast {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %b = fusion.set {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// Stream splits that only say how an op is computed do not propagate: not
// backward onto a function input, not forward from one (DIDx*Stream(2)). A
// Stream split outside a device split (Stream(2)*DIDx) interleaves the
// device blocks: it is placement, and propagates as such.
fusion.mesh @tp shape = [4]
func.func @streams(%x: tensor<64x16xf32>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>, %s: tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>, %t: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>) -> (tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>, tensor<64x16xf32>, tensor<64x16xf32>) {
  %y = fusion.matmul %x, %w : (tensor<64x16xf32>, tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  %z = fusion.relu %s : (tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>) -> tensor<64x16xf32>
  %u = fusion.relu %t : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>) -> tensor<64x16xf32>
  func.return %y, %z, %u : tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>, tensor<64x16xf32>, tensor<64x16xf32>
}
// CHECK-LABEL: func.func @streams(
// CHECK-SAME: %x: tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK: %y = fusion.matmul {{.*}} -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
// CHECK: %z = fusion.relu {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
// CHECK: %u = fusion.relu {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// -----

// A user's annotation is never changed, even where propagation would choose
// otherwise; later ops follow the annotation.
fusion.mesh @tp shape = [4]
func.func @keep_annotation(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32> {
  %a = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %b = fusion.exp %a : (tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x16xf32>
  func.return %b : tensor<64x16xf32>
}
// CHECK-LABEL: func.func @keep_annotation(
// CHECK: %a = fusion.relu {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK: %b = fusion.exp {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>

// -----

// A function with no annotation in a module with one mesh: replicated.
// A function in a module without meshes is left as is.
fusion.mesh @tp shape = [4]
func.func @unannotated(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}
// CHECK-LABEL: func.func @unannotated(%x: tensor<8xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>>
// CHECK: %y = fusion.relu %x : (tensor<8xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>>

// -----

// A module without any mesh runs on one device: the implicit mesh is
// declared (under a name no symbol takes) and everything is replicated on it.
func.func @no_mesh(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}
func.func private @implicit(tensor<8xf32>) -> tensor<8xf32>
// CHECK: fusion.mesh @implicit_1 shape = [1]
// CHECK-LABEL: func.func @no_mesh(%x: tensor<8xf32, #fusion.sharding<@implicit_1, [-]>>) -> tensor<8xf32, #fusion.sharding<@implicit_1, [-]>>
// CHECK: %y = fusion.relu %x : (tensor<8xf32, #fusion.sharding<@implicit_1, [-]>>) -> tensor<8xf32, #fusion.sharding<@implicit_1, [-]>>

// -----

// An input connected to nothing sharded is replicated on the function's
// only mesh, although the module declares two.
fusion.mesh @tp shape = [4]
fusion.mesh @other shape = [2]
func.func @unconnected(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %u: tensor<4xf32>) -> (tensor<64x16xf32>, tensor<4xf32>) {
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %v = fusion.neg %u : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y, %v : tensor<64x16xf32>, tensor<4xf32>
}
// CHECK-LABEL: func.func @unconnected(
// CHECK-SAME: %u: tensor<4xf32, #fusion.sharding<@tp, [-]>>
// CHECK: %v = fusion.neg %u : {{.*}} -> tensor<4xf32, #fusion.sharding<@tp, [-]>>

// -----

// A user's partial annotation carried by linear ops is accepted.
fusion.mesh @tp shape = [4]
func.func @partial_carried(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>> {
  %p = fusion.matmul %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  %q = fusion.reshape %p : (tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<64xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
  %y = fusion.set %q : (tensor<64xf32, #fusion.sharding<@tp, [-], partial = DIDx>>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
  func.return %y : tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
}
// CHECK-LABEL: func.func @partial_carried(
// CHECK: %q = fusion.reshape %p : {{.*}} -> tensor<64xf32, #fusion.sharding<@tp, [-], partial = DIDx>>

// -----

// Backward into a contraction whose consumer needs a partial sum: the
// contraction's result is partial and its operands split on K.
fusion.mesh @tp shape = [4]
func.func @backward_partial(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  %p = fusion.matmul %x, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %y = fusion.set %p : (tensor<8x8xf32>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}
// CHECK-LABEL: func.func @backward_partial(
// CHECK-SAME: %x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-SAME: %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK: %p = fusion.matmul {{.*}} -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>

// -----

// Host programs hold local buffers: left as they are.
fusion.mesh @tp shape = [4]
func.func @host(%x: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {hir.host} {
  func.return %x : tensor<16x16xf32>
}
// CHECK-LABEL: func.func @host(%x: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {hir.host}

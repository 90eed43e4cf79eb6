// RUN: %fuserc opt -p make-resharding-contiguous --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p make-resharding-contiguous --split-input-file %s | %fuserc opt -p make-resharding-contiguous --split-input-file - | filecheck %s

// Resharding ops become local compute plus pure reshards (fusion.set of one
// step each). Inputs are fully annotated, as propagate-shardings leaves them.

// Non-resharding ops are left alone: no set, no layout.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @local_chain
// CHECK-NOT: fusion.set
// CHECK-NOT: alloc_order
// CHECK: %h = fusion.matmul %x, %w : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: %g = fusion.gelu %h
// CHECK-NEXT: %s = fusion.sum %g dims = [1] : {{.*}} -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
// CHECK-NEXT: func.return %s
func.func @local_chain(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>> {
  %h = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
  %g = fusion.gelu %h : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
  %s = fusion.sum %g dims = [1] : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
  func.return %s : tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
}

// -----

// Column-parallel linear with a bias: local.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @column_parallel_bias
// CHECK-NEXT: %y = fusion.linear %x, %w, %b : {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: func.return %y
func.func @column_parallel_bias(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b: tensor<32xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %y = fusion.linear %x, %w, %b : (tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<32xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// -----

// Column-parallel linear without bias, result wanted whole: the local linear
// writes its block with dim 1 outermost, so the allgather of dim 1 is
// contiguous (no transpose).
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @column_parallel_gathered
// CHECK-NEXT: [[L:%[^ ]+]] = fusion.linear %x, %w {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: %y = fusion.set [[L]] {alloc_order = array<i64: 1, 0>} : (tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: func.return %y
func.func @column_parallel_gathered(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.linear %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x32xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// Row-parallel linear: local linear (a partial sum), then the allreduce.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @row_parallel
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.linear %x, %w : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set [[P]] : (tensor<8x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: func.return %y
func.func @row_parallel(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.linear %x, %w : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// Row-parallel linear with a bias: local linear without the bias, the
// reduction, then the bias added (broadcast) once.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @row_parallel_bias
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.linear %x, %w : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT: [[R:%[^ ]+]] = fusion.set [[P]] : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: %y = fusion.add [[R]], %b : (tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>, tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: func.return %y
func.func @row_parallel_bias(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b: tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.linear %x, %w, %b : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// Sequence-parallel row-parallel linear with a bias: reduce-scatter of
// dim 0, then the bias added (broadcast) to the scattered rows.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @row_parallel_bias_scattered
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.linear %x, %w : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT: [[R:%[^ ]+]] = fusion.set [[P]] : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: %y = fusion.add [[R]], %b : {{.*}} -> tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: func.return %y
func.func @row_parallel_bias_scattered(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b: tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.linear %x, %w, %b : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x64xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// Sequence-parallel column-parallel linear: the sequence-sharded input is
// allgathered (dim 0 of a row-major argument: contiguous as is), then the
// linear is local.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @sequence_parallel_linear
// CHECK-NEXT: [[G:%[^ ]+]] = fusion.set %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: %y = fusion.linear [[G]], %w, %b : {{.*}} -> tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: func.return %y
func.func @sequence_parallel_linear(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<128x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b: tensor<128xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %y = fusion.linear %x, %w, %b : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<128xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// -----

// Sequence-parallel MLP (examples/sp_mlp.mlir after propagate-shardings):
// allgather, column-parallel matmul, gelu, row-parallel matmul, reduce-scatter.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @sp_mlp
// CHECK-NEXT: [[G:%[^ ]+]] = fusion.set %x : (tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<128x64xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: %h = fusion.matmul [[G]], %w1 : {{.*}} -> tensor<128x256xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: %g = fusion.gelu %h
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.matmul %g, %w2 : {{.*}} -> tensor<128x64xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set [[P]] : {{.*}} -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: func.return %y
func.func @sp_mlp(%x: tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w1: tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w2: tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<128x256xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %g = fusion.gelu %h : (tensor<128x256xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<128x256xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %y = fusion.matmul %g, %w2 : (tensor<128x256xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// Pointwise op on a sharded input with an unsharded result: computed on the
// local block, then allgathered (the same traffic as gathering the input,
// a quarter of the compute).
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @pointwise_gathered
// CHECK-NEXT: [[L:%[^ ]+]] = fusion.relu %x : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: %y = fusion.set [[L]] : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: func.return %y
func.func @pointwise_gathered(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// A replicated operand of an op with a sharded result: a local slice.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @add_replicated
// CHECK-NEXT: [[S:%[^ ]+]] = fusion.set %b : (tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: %y = fusion.add %x, [[S]]
// CHECK-NEXT: func.return %y
func.func @add_replicated(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b: tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.add %x, %b : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// Sum over a sharded dim: local sum (a partial sum), then the allreduce.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @sum_sharded_dim
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.sum %x dims = [1] : {{.*}} -> tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set [[P]] : (tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>>
// CHECK-NEXT: func.return %y
func.func @sum_sharded_dim(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>> {
  %y = fusion.sum %x dims = [1] : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>>
  func.return %y : tensor<8xf32, #fusion.sharding<@tp, [-]>>
}

// -----

// Max over a sharded dim cannot be partial: each device reduces its block
// (the dim seen as [devices, block]), the per-device maxima are gathered
// and reduced; the input itself is never gathered.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @max_sharded_dim
// CHECK-NEXT: [[R:%[^ ]+]] = fusion.reshape %x : (tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x16x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
// CHECK-NEXT: [[M:%[^ ]+]] = fusion.max [[R]] dims = [1] : {{.*}} -> tensor<4x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: [[G:%[^ ]+]] = fusion.set [[M]] : (tensor<4x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x8xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: %y = fusion.max [[G]] dims = [0] : {{.*}} -> tensor<8xf32, #fusion.sharding<@tp, [-]>>
// CHECK-NEXT: func.return %y
func.func @max_sharded_dim(%x: tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>> {
  %y = fusion.max %x dims = [0] : (tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>>
  func.return %y : tensor<8xf32, #fusion.sharding<@tp, [-]>>
}

// -----

// 2-D mesh: the local matmul gives [DIDy, DIDx]; the allgather over DIDx
// (within each DIDy row of the mesh) gathers dim 1, laid out outermost.
fusion.mesh @grid shape = [2, 4]
// CHECK-LABEL: func.func @mesh2d
// CHECK-NEXT: [[L:%[^ ]+]] = fusion.matmul %x, %w {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<16x64xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
// CHECK-NEXT: %y = fusion.set [[L]] {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<16x64xf32, #fusion.sharding<@grid, [DIDy, -]>>
// CHECK-NEXT: func.return %y
func.func @mesh2d(%x: tensor<16x32xf32, #fusion.sharding<@grid, [DIDy, -]>>, %w: tensor<32x64xf32, #fusion.sharding<@grid, [-, DIDx]>>) -> tensor<16x64xf32, #fusion.sharding<@grid, [DIDy, -]>> {
  %y = fusion.matmul %x, %w : (tensor<16x32xf32, #fusion.sharding<@grid, [DIDy, -]>>, tensor<32x64xf32, #fusion.sharding<@grid, [-, DIDx]>>) -> tensor<16x64xf32, #fusion.sharding<@grid, [DIDy, -]>>
  func.return %y : tensor<16x64xf32, #fusion.sharding<@grid, [DIDy, -]>>
}

// -----

// A set that changes two things on a 2-D mesh: a local slice to DIDy first
// (no traffic), then the allgather over DIDx moves a half-size block.
fusion.mesh @grid shape = [2, 4]
// CHECK-LABEL: func.func @two_changes
// CHECK-NEXT: [[S:%[^ ]+]] = fusion.set %x : (tensor<16x32xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@grid, [DIDx, DIDy]>>
// CHECK-NEXT: %y = fusion.set [[S]] : (tensor<16x32xf32, #fusion.sharding<@grid, [DIDx, DIDy]>>) -> tensor<16x32xf32, #fusion.sharding<@grid, [-, DIDy]>>
// CHECK-NEXT: func.return %y
func.func @two_changes(%x: tensor<16x32xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@grid, [-, DIDy]>> {
  %y = fusion.set %x : (tensor<16x32xf32, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@grid, [-, DIDy]>>
  func.return %y : tensor<16x32xf32, #fusion.sharding<@grid, [-, DIDy]>>
}

// -----

// A partial sum to rows: one reduce-scatter, not an allreduce then a local
// slice (which would move more).
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @partial_to_split
// CHECK-NEXT: %p = fusion.matmul %x, %w
// CHECK-NEXT: %y = fusion.set %p : (tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: func.return %y
func.func @partial_to_split(%x: tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %p = fusion.matmul %x, %w : (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  %y = fusion.set %p : (tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// Pipeline: the same sharding on another mesh is one set (send/recv); the
// second stage's result is gathered there.
fusion.mesh @stage0 shape = [2] devices = [0, 1]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
// CHECK-LABEL: func.func @pipeline
// CHECK-NEXT: %h = fusion.relu %x : {{.*}} -> tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>
// CHECK-NEXT: %a = fusion.set %h : (tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [DIDx, -]>>
// CHECK-NEXT: [[L:%[^ ]+]] = fusion.neg %a : {{.*}} -> tensor<16x32xf32, #fusion.sharding<@stage1, [DIDx, -]>>
// CHECK-NEXT: %b = fusion.set [[L]] : (tensor<16x32xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
// CHECK-NEXT: func.return %b
func.func @pipeline(%x: tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>> {
  %h = fusion.relu %x : (tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>
  %a = fusion.set %h : (tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  %b = fusion.neg %a : (tensor<16x32xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
  func.return %b : tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
}

// -----

// Between two meshes, a gather to the other mesh is one step; a set that
// also moves the split is decomposed (alltoall on the first mesh, then the
// transfer).
fusion.mesh @stage0 shape = [2] devices = [0, 1]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
// CHECK-LABEL: func.func @pipeline_decomposed
// CHECK-NEXT: %g = fusion.set %x : (tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
// CHECK: [[A:%[^ ]+]] = fusion.set {{.*}} -> tensor<2x16x16xf32, #fusion.sharding<@stage0, [DIDx, -, -]>>
// CHECK: [[M:%[^ ]+]] = fusion.reshape {{.*}} -> tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>
// CHECK-NEXT: %b = fusion.set [[M]] : (tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, DIDx]>>
func.func @pipeline_decomposed(%x: tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> (tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>, tensor<16x32xf32, #fusion.sharding<@stage1, [-, DIDx]>>) {
  %g = fusion.set %x : (tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
  %b = fusion.set %x : (tensor<16x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, DIDx]>>
  func.return %g, %b : tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>, tensor<16x32xf32, #fusion.sharding<@stage1, [-, DIDx]>>
}

// -----

// A partial sum onto a mesh of one device: one set (reduce to that root).
fusion.mesh @tp shape = [4]
fusion.mesh @one shape = [1] devices = [0]
// CHECK-LABEL: func.func @reduce_to_one
// CHECK-NEXT: %y = fusion.sum %x dims = [1]
// CHECK-NEXT: %z = fusion.set %y : (tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>) -> tensor<8xf32, #fusion.sharding<@one, [-]>>
// CHECK-NEXT: func.return %z
func.func @reduce_to_one(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8xf32, #fusion.sharding<@one, [-]>> {
  %y = fusion.sum %x dims = [1] : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
  %z = fusion.set %y : (tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>) -> tensor<8xf32, #fusion.sharding<@one, [-]>>
  func.return %z : tensor<8xf32, #fusion.sharding<@one, [-]>>
}

// -----

// DIDx -> Stream(4): AllGather+GEMM (docs/language.md) stays one set, whose
// result carries the Stream split, followed by the local matmul.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @stream
// CHECK-NEXT: [[S:%[^ ]+]] = fusion.set %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>
// CHECK-NEXT: %y = fusion.matmul [[S]], %w : (tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>>
// CHECK-NEXT: func.return %y
func.func @stream(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>>
}

// -----

// A user-written DIDx -> Stream set is already one step: kept.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @stream_set
// CHECK-NEXT: %s = fusion.set %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>
// CHECK-NEXT: %y = fusion.matmul %s, %w
// CHECK-NEXT: func.return %y
func.func @stream_set(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  %s = fusion.set %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  %y = fusion.matmul %s, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), -]>>
}

// -----

// GEMM + ReduceScatter with a Stream split on the result: the local matmul
// is computed in the same chunks, the reduce-scatter keeps the split.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @stream_reduce_scatter
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.matmul %x, %w : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [-, Stream(2)], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set [[P]] : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, Stream(2)]>>
// CHECK-NEXT: func.return %y
func.func @stream_reduce_scatter(%x: tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<128x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, Stream(2)]>> {
  %y = fusion.matmul %x, %w : (tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<128x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, Stream(2)]>>
  func.return %y : tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, Stream(2)]>>
}

// -----

// A Stream split inside the device split of the result places nothing: the
// replicated operand is sliced locally (no gather to make a `[Stream(4)]`
// operand that the split result would then have to reshard again).
fusion.mesh @m shape = [2]
// CHECK-LABEL: func.func @stream_inside_split
// CHECK-NEXT: %0 = fusion.set %x : (tensor<8xf32, #fusion.sharding<@m, [-]>>) -> tensor<8xf32, #fusion.sharding<@m, [DIDx]>>
// CHECK-NEXT: %z = fusion.mul %0, %y : {{.*}} -> tensor<8xf32, #fusion.sharding<@m, [DIDx*Stream(4)]>>
// CHECK-NEXT: func.return %z
func.func @stream_inside_split(%x: tensor<8xf32, #fusion.sharding<@m, [-]>>, %y: tensor<8xf32, #fusion.sharding<@m, [DIDx]>>) -> tensor<8xf32, #fusion.sharding<@m, [DIDx*Stream(4)]>> {
  %z = fusion.mul %x, %y : (tensor<8xf32, #fusion.sharding<@m, [-]>>, tensor<8xf32, #fusion.sharding<@m, [DIDx]>>) -> tensor<8xf32, #fusion.sharding<@m, [DIDx*Stream(4)]>>
  func.return %z : tensor<8xf32, #fusion.sharding<@m, [DIDx*Stream(4)]>>
}

// -----

// An alltoall of empty blocks: every layout of an empty buffer is
// contiguous, so the set stays one step (no reshape of the moved dim).
fusion.mesh @m shape = [2]
// CHECK-LABEL: func.func @empty_alltoall
// CHECK-NEXT: %z = fusion.set %x : (tensor<4x0xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<4x0xf32, #fusion.sharding<@m, [-, DIDx]>>
// CHECK-NEXT: func.return %z
func.func @empty_alltoall(%x: tensor<4x0xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<4x0xf32, #fusion.sharding<@m, [-, DIDx]>> {
  %z = fusion.set %x : (tensor<4x0xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<4x0xf32, #fusion.sharding<@m, [-, DIDx]>>
  func.return %z : tensor<4x0xf32, #fusion.sharding<@m, [-, DIDx]>>
}

// -----

// A softmax over a split dimension expands into cross-device statistics; an
// empty one computes nothing (and a max of no elements has no value): it
// becomes a set of its operand, a reshard of no data.
fusion.mesh @m shape = [2]
// CHECK-LABEL: func.func @empty_softmax
// CHECK-NEXT: %v = fusion.set %x : (tensor<0x8xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<0x8xf32, #fusion.sharding<@m, [-, DIDx]>>
// CHECK-NEXT: func.return %v
func.func @empty_softmax(%x: tensor<0x8xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<0x8xf32, #fusion.sharding<@m, [-, DIDx]>> {
  %v = fusion.log_softmax %x dim = 0 : (tensor<0x8xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<0x8xf32, #fusion.sharding<@m, [-, DIDx]>>
  func.return %v : tensor<0x8xf32, #fusion.sharding<@m, [-, DIDx]>>
}

// -----

// An empty op whose second result is used (sdpa's log-sum-exp, saved for its
// backward) has no set standing for both results: it is decomposed as any
// other, its operands gathered by sets.
fusion.mesh @m shape = [2]
// CHECK-LABEL: func.func @empty_sdpa_with_lse
// CHECK-NEXT: %0 = fusion.set %q : (tensor<0x1x4x4xf32, #fusion.sharding<@m, [-, -, -, DIDx]>>) -> tensor<0x1x4x4xf32, #fusion.sharding<@m, [-, -, -, -]>>
// CHECK-NEXT: %1 = fusion.set %k
// CHECK-NEXT: %o, %lse = fusion.sdpa %0, %1, %v causal = true
// CHECK-NEXT: func.return %o, %lse
func.func @empty_sdpa_with_lse(%q: tensor<0x1x4x4xf32, #fusion.sharding<@m, [-, -, -, DIDx]>>, %k: tensor<0x1x4x4xf32, #fusion.sharding<@m, [-, -, -, DIDx]>>, %v: tensor<0x1x4x2xf32, #fusion.sharding<@m, [-, -, -, -]>>) -> (tensor<0x1x4x2xf32, #fusion.sharding<@m, [-, -, -, -]>>, tensor<0x1x4xf32, #fusion.sharding<@m, [-, -, -]>>) {
  %o, %lse = fusion.sdpa %q, %k, %v causal = true : (tensor<0x1x4x4xf32, #fusion.sharding<@m, [-, -, -, DIDx]>>, tensor<0x1x4x4xf32, #fusion.sharding<@m, [-, -, -, DIDx]>>, tensor<0x1x4x2xf32, #fusion.sharding<@m, [-, -, -, -]>>) -> (tensor<0x1x4x2xf32, #fusion.sharding<@m, [-, -, -, -]>>, tensor<0x1x4xf32, #fusion.sharding<@m, [-, -, -]>>)
  func.return %o, %lse : tensor<0x1x4x2xf32, #fusion.sharding<@m, [-, -, -, -]>>, tensor<0x1x4xf32, #fusion.sharding<@m, [-, -, -]>>
}

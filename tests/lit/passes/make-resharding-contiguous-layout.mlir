// RUN: %fuserc opt -p make-resharding-contiguous --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p make-resharding-contiguous --split-input-file %s | %fuserc opt -p make-resharding-contiguous --split-input-file - | filecheck %s

// Contiguous communication: the gathered or scattered dim is outermost in
// memory (alloc_order) on both sides of a reshard; a transpose only where no
// layout choice does it.

// Reduce-scatter on dim 1: the local matmul writes its partial sum with
// dim 1 outermost; the set's result has the same layout.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @reduce_scatter_dim1
// CHECK-NEXT: [[P:%[^ ]+]] = fusion.matmul %x, %w {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<64x64xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set [[P]] {alloc_order = array<i64: 1, 0>} : (tensor<64x64xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<64x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: func.return %y
func.func @reduce_scatter_dim1(%x: tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x64xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %y = fusion.matmul %x, %w : (tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<64x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// -----

// Reduce-scatter on dim 0: row-major already, no attribute.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @reduce_scatter_dim0
// CHECK-NOT: alloc_order
// CHECK: func.return
func.func @reduce_scatter_dim0(%x: tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x64xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.matmul %x, %w : (tensor<64x128xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// Allgather of a dim-1 split of a function argument (row-major, fixed):
// transpose, allgather dim 0, and a permute back laid out as the gathered
// buffer (a view, no copy).
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @allgather_arg_dim1
// CHECK-NEXT: [[T:%[^ ]+]] = fusion.permute %x dims = [1, 0] : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: [[G:%[^ ]+]] = fusion.set [[T]] : (tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: %y = fusion.permute [[G]] dims = [1, 0] {alloc_order = array<i64: 1, 0>} : (tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: func.return %y
func.func @allgather_arg_dim1(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.set %x : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// The same gather of a value a local op produces: a layout, no transpose.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @allgather_local_dim1
// CHECK-NOT: fusion.permute
// CHECK: %a = fusion.neg %x {alloc_order = array<i64: 1, 0>}
// CHECK-NEXT: %y = fusion.set %a {alloc_order = array<i64: 1, 0>}
func.func @allgather_local_dim1(%x: tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>> {
  %a = fusion.neg %x : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %y = fusion.set %a : (tensor<8x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// Leading dims of local extent 1 count as contiguous: gathering dim 1 of a
// [1, 64] block needs nothing.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @leading_unit_dim
// CHECK-NOT: alloc_order
// CHECK-NOT: fusion.permute
// CHECK: %y = fusion.set %x : (tensor<1x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<1x64xf32, #fusion.sharding<@tp, [-, -]>>
func.func @leading_unit_dim(%x: tensor<1x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<1x64xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.set %x : (tensor<1x64xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<1x64xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<1x64xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// One value gathered along two different dims: the first reshard picks the
// producer's layout, the second needs a transpose.
fusion.mesh @grid shape = [2, 2]
// CHECK-LABEL: func.func @conflicting_layouts
// CHECK-NEXT: %a = fusion.neg %x {alloc_order = array<i64: 1, 0>}
// CHECK-NEXT: %r = fusion.set %a {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, -]>>
// CHECK-NEXT: [[T:%[^ ]+]] = fusion.permute %a dims = [0, 1] : (tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>)
// CHECK-NEXT: %c = fusion.set [[T]] : {{.*}} -> tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>
func.func @conflicting_layouts(%x: tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> (tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, -]>>, tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>) {
  %a = fusion.neg %x : (tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
  %r = fusion.set %a : (tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, -]>>
  %c = fusion.set %a : (tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>
  func.return %r, %c : tensor<8x8xf32, #fusion.sharding<@grid, [DIDy, -]>>, tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>
}

// -----

// A user-given alloc_order is kept; when it puts the gathered dim inside, a
// copy into row-major (an identity permute) feeds the reshard.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @user_layout
// CHECK-NEXT: %a = fusion.relu %x {alloc_order = array<i64: 1, 0>}
// CHECK-NEXT: [[T:%[^ ]+]] = fusion.permute %a dims = [0, 1] : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: %y = fusion.set [[T]] : {{.*}} -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: func.return %y
func.func @user_layout(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>> {
  %a = fusion.relu %x {alloc_order = array<i64: 1, 0>} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  %y = fusion.set %a : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
}

// -----

// AllToAll from dim 0 to dim 1 with blocks of local extent > 1 on both: no
// layout has dim 1 outermost on the operand and dim 0 on the result. Dim 1
// is split into (4 blocks, 8), one transpose brings the block dim first, and
// the alltoall then scatters dim 0 and gathers dim 1 behind a local extent
// of 1. The permute and reshape back are views.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @alltoall
// CHECK-NEXT: [[R:%[^ ]+]] = fusion.reshape %x : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x4x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
// CHECK-NEXT: [[T:%[^ ]+]] = fusion.permute [[R]] dims = [1, 0, 2] : {{.*}} -> tensor<4x64x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
// CHECK-NEXT: [[A:%[^ ]+]] = fusion.set [[T]] : (tensor<4x64x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<4x64x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
// CHECK-NEXT: [[B:%[^ ]+]] = fusion.permute [[A]] dims = [1, 0, 2] {alloc_order = array<i64: 1, 0, 2>} : {{.*}} -> tensor<64x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
// CHECK-NEXT: %y = fusion.reshape [[B]] : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: func.return %y
func.func @alltoall(%x: tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %y = fusion.set %x : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// -----

// The other direction: the reshaped-back result keeps dim 1 outermost.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @alltoall_back
// CHECK-NEXT: [[R:%[^ ]+]] = fusion.reshape %x : {{.*}} -> tensor<4x16x32xf32, #fusion.sharding<@tp, [-, -, DIDx]>>
// CHECK-NEXT: [[T:%[^ ]+]] = fusion.permute [[R]] dims = [0, 2, 1] : {{.*}} -> tensor<4x32x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
// CHECK-NEXT: [[A:%[^ ]+]] = fusion.set [[T]] : {{.*}} -> tensor<4x32x16xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
// CHECK-NEXT: [[B:%[^ ]+]] = fusion.permute [[A]] dims = [0, 2, 1] {alloc_order = array<i64: 0, 2, 1>}
// CHECK-NEXT: %y = fusion.reshape [[B]] {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
func.func @alltoall_back(%x: tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.set %x : (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// AllToAll whose source blocks have local extent 1 on the gathered dim:
// contiguous as is.
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @alltoall_unit
// CHECK-NEXT: %y = fusion.set %x : (tensor<4x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: func.return %y
func.func @alltoall_unit(%x: tensor<4x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x64xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %y = fusion.set %x : (tensor<4x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<4x64xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// -----

// A gather onto another mesh along dim 1: the layout is chosen on the
// producer, on both meshes alike.
fusion.mesh @stage0 shape = [2] devices = [0, 1]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
// CHECK-LABEL: func.func @gather_other_mesh
// CHECK-NEXT: %a = fusion.neg %x {alloc_order = array<i64: 1, 0>}
// CHECK-NEXT: %b = fusion.set %a {alloc_order = array<i64: 1, 0>} : (tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
func.func @gather_other_mesh(%x: tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>> {
  %a = fusion.neg %x : (tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>) -> tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>
  %b = fusion.set %a : (tensor<16x32xf32, #fusion.sharding<@stage0, [-, DIDx]>>) -> tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
  func.return %b : tensor<16x32xf32, #fusion.sharding<@stage1, [-, -]>>
}

// -----

// A chain of reshards shares one layout: the allreduce's result feeds the
// gather of dim 1, so both sets and the producer get dim 1 outermost.
fusion.mesh @grid shape = [2, 2]
// CHECK-LABEL: func.func @chain_layout
// CHECK-NEXT: %p = fusion.matmul %x, %w {alloc_order = array<i64: 1, 0>}
// CHECK-NEXT: %r = fusion.set %p {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>
// CHECK-NEXT: %y = fusion.set %r {alloc_order = array<i64: 1, 0>} : {{.*}} -> tensor<8x8xf32, #fusion.sharding<@grid, [-, -]>>
func.func @chain_layout(%x: tensor<8x16xf32, #fusion.sharding<@grid, [-, DIDy]>>, %w: tensor<16x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [-, -]>> {
  %p = fusion.matmul %x, %w : (tensor<8x16xf32, #fusion.sharding<@grid, [-, DIDy]>>, tensor<16x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDy>>
  %r = fusion.set %p : (tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDy>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>
  %y = fusion.set %r : (tensor<8x8xf32, #fusion.sharding<@grid, [-, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@grid, [-, -]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@grid, [-, -]>>
}

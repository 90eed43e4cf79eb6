// RUN: %fuserc opt --split-input-file -p default %s | filecheck %s
// Teams of one device emit no communication: a reshard over a mesh axis of
// one device, or on a mesh of one device, is a view, a local copy or
// nothing; a partial sum over one device is already the sum. Reshards over
// the other axes of the same mesh still communicate, over their teams.

// The mesh [4, 1]: DIDx has one device, DIDy four. The contraction split
// over DIDx is a partial sum over one device: no allreduce nor
// reduce-scatter; only the DIDy reshards (the alltoall and the two
// allgathers) communicate, over the four ranks of DIDy.
// CHECK-LABEL: func.func @mesh_4x1
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK: hir.matmul %x, %w, %y_1 : tensor<4x8xf32>, tensor<8x12xf32>, tensor<4x12xf32>
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK: hir.alltoall {{.*}} team = [0, 1, 2, 3] {{.*}}hir.reshard = "DIDy->DIDy"
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK: hir.allgather {{.*}} team = [0, 1, 2, 3] {{.*}}hir.reshard = "DIDy->-"
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK: hir.allgather {{.*}} team = [0, 1, 2, 3] {{.*}}hir.reshard = "DIDy->-"
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK-NOT: hir.alltoall
// CHECK-NOT: hir.allgather
// CHECK: func.return
!x = tensor<16x8xf32, #fusion.sharding<@g, [DIDy, DIDx]>>
!w = tensor<8x12xf32, #fusion.sharding<@g, [DIDx, -]>>
!p = tensor<16x12xf32, #fusion.sharding<@g, [DIDy, -], partial = DIDx>>
!r = tensor<16x12xf32, #fusion.sharding<@g, [DIDy, DIDx]>>
!gy = tensor<16x12xf32, #fusion.sharding<@g, [DIDy, -]>>
!t = tensor<16x12xf32, #fusion.sharding<@g, [DIDx, DIDy]>>
!f = tensor<16x12xf32, #fusion.sharding<@g, [-, -]>>
fusion.mesh @g shape = [4, 1]
func.func @mesh_4x1(%x: !x, %w: !w) -> (!r, !gy, !t, !f, !f) {
  %y = fusion.matmul %x, %w : (!x, !w) -> !p
  %r = fusion.set %y : (!p) -> !r
  %g = fusion.set %r : (!r) -> !gy
  %t = fusion.set %g : (!gy) -> !t
  %f = fusion.set %t : (!t) -> !f
  %a = fusion.set %y : (!p) -> !f
  func.return %r, %g, %t, %f, %a : !r, !gy, !t, !f, !f
}

// -----

// A mesh of one device: every step of the reshard table moves nothing
// (allgather, alltoall, allreduce, reduce-scatter), and a Stream split on
// the gathered GEMM is a loop of local chunks, with no collective per chunk.
// CHECK-LABEL: func.func @one_device
// CHECK-NOT: hir.allgather
// CHECK-NOT: hir.alltoall
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK-NOT: hir.broadcast
// CHECK: hir.pipeline = {algorithm = "local"
// CHECK-NOT: hir.allgather
// CHECK-NOT: hir.alltoall
// CHECK-NOT: hir.allreduce
// CHECK-NOT: hir.reduce_scatter
// CHECK-NOT: hir.broadcast
// CHECK: func.return
!rows = tensor<8x4xf32, #fusion.sharding<@one, [DIDx, -]>>
!cols = tensor<8x4xf32, #fusion.sharding<@one, [-, DIDx]>>
!whole = tensor<8x4xf32, #fusion.sharding<@one, [-, -]>>
!w1 = tensor<4x4xf32, #fusion.sharding<@one, [DIDx, -]>>
!part = tensor<8x4xf32, #fusion.sharding<@one, [-, -], partial = DIDx>>
!chunks = tensor<8x4xf32, #fusion.sharding<@one, [Stream(2), -]>>
fusion.mesh @one shape = [1]
func.func @one_device(%x: !rows, %w: !w1) -> (!whole, !whole, !rows, !chunks) {
  %g = fusion.set %x : (!rows) -> !whole
  %t = fusion.set %x : (!rows) -> !cols
  %y = fusion.matmul %t, %w : (!cols, !w1) -> !part
  %s = fusion.set %y : (!part) -> !whole
  %rs = fusion.set %y : (!part) -> !rows
  %c = fusion.matmul %x, %w : (!rows, !w1) -> !chunks
  func.return %g, %s, %rs, %c : !whole, !whole, !rows, !chunks
}

// -----

// No mesh at all: the implicit one-device mesh, every op on rank 0, no
// communication.
// CHECK: fusion.mesh @implicit shape = [1]
// CHECK-LABEL: func.func @no_mesh
// CHECK-SAME: hir.host
// CHECK: hir.if_rank [0]
// CHECK: hir.matmul
// CHECK-NOT: hir.allgather
// CHECK-NOT: hir.allreduce
// CHECK: func.return
func.func @no_mesh(%x: tensor<8x4xf32>, %w: tensor<4x6xf32>) -> tensor<8xf32> {
  %y = fusion.matmul %x, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  %s = fusion.sum %y dims = [1] : (tensor<8x6xf32>) -> tensor<8xf32>
  func.return %s : tensor<8xf32>
}

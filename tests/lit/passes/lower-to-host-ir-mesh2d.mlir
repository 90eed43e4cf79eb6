// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s

// On a 2-D mesh a collective over DIDx (DIDy) runs within each mesh slice:
// one communication op for all of them, whose team is the first slice's
// ranks `translated` to the others (each rank runs it in its own slice), in
// the hir.if_rank of the whole mesh. Slices that are not translates of one
// another (ids not equally spaced) get one op per slice, each in the
// hir.if_rank of its team.

// DIDy -> - on a 2x4 mesh: the columns' Allgathers, one op.
!rows = tensor<8x16xf32, #fusion.sharding<@g, [DIDy, -]>>
!rep = tensor<8x16xf32, #fusion.sharding<@g, [-, -]>>
fusion.mesh @g shape = [2, 4]
func.func @allgather_y(%x: !rows) -> !rep {
  %y = fusion.set %x : (!rows) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @allgather_y(%x: tensor<4x16xf32>
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3, 4, 5, 6, 7] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "allgather_y/0/0" : tensor<8x16xf32>
// CHECK-NEXT: %[[T0:.*]] = hir.allgather %x, %[[Y]] team = [0, 4] translated [4 step 1] backend = nccl {hir.reshard = "DIDy->-"} : (tensor<4x16xf32>, tensor<8x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x16xf32>

// -----

// - -> DIDx on a 2x2 mesh: a local slice per row of the mesh; each row's
// ranks find their position in their own team.
!rep = tensor<8x16xf32, #fusion.sharding<@g, [-, -]>>
!cols = tensor<8x16xf32, #fusion.sharding<@g, [-, DIDx]>>
fusion.mesh @g shape = [2, 2]
func.func @slice_x(%x: !rep) -> !cols {
  %y = fusion.set %x : (!rep) -> !cols
  func.return %y : !cols
}
// CHECK-LABEL: func.func @slice_x(%x: tensor<8x16xf32>
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x8xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "slice_x/0/0" : tensor<8x8xf32>
// CHECK-NEXT: %[[P:.*]] = hir.team_index team = [0, 1] translated [2 step 2] : index
// CHECK-NEXT: %[[V:.*]] = hir.chunk %x [%[[P]]] dim = 1 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: hir.copy %[[V]], %[[Y]] {hir.reshard = "-->DIDx"} : tensor<8x8xf32>, tensor<8x8xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x8xf32>

// -----

// partial over DIDx -> -: the rows' Allreduces, one op.
!x = tensor<8x16xf32, #fusion.sharding<@g, [-, DIDx]>>
!w = tensor<16x4xf32, #fusion.sharding<@g, [DIDx, -]>>
!p = tensor<8x4xf32, #fusion.sharding<@g, [-, -], partial = DIDx>>
!rep = tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>
fusion.mesh @g shape = [2, 2]
func.func @allreduce_x(%x: !x, %w: !w) -> !rep {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %y = fusion.set %p : (!p) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @allreduce_x(
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x4xf32>) {
// CHECK: hir.matmul %x, %w, %[[P:.*]] : tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "allreduce_x/1/0" : tensor<8x4xf32>
// CHECK-NEXT: %[[T0:.*]] = hir.allreduce %[[P]], %[[Y]] op = sum team = [0, 1] translated [2 step 2] backend = nccl {hir.reshard = "partial->-"}
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: hir.dealloc %[[P]] : tensor<8x4xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x4xf32>

// -----

// Two splits on one dimension ([DIDy*DIDx, -] -> -): the inner split is
// gathered first (over rows), then the outer one (over columns).
!both = tensor<8x16xf32, #fusion.sharding<@g, [DIDy*DIDx, -]>>
!rep = tensor<8x16xf32, #fusion.sharding<@g, [-, -]>>
fusion.mesh @g shape = [2, 2]
func.func @nested(%x: !both) -> !rep {
  %y = fusion.set %x : (!both) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @nested(%x: tensor<2x16xf32>
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[H:.*]] = hir.alloc "nested/0/0/s0" : tensor<4x16xf32>
// CHECK-NEXT: %[[T0:.*]] = hir.allgather %x, %[[H]] team = [0, 1] translated [2 step 2] backend = nccl {hir.reshard = "DIDx->-"}
// CHECK-NEXT: hir.wait %[[T0]]
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "nested/0/0" : tensor<8x16xf32>
// CHECK-NEXT: %[[T1:.*]] = hir.allgather %[[H]], %[[Y]] team = [0, 2] translated [2 step 1] backend = nccl {hir.reshard = "DIDy->-"} : (tensor<4x16xf32>, tensor<8x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T1]]
// CHECK-NEXT: hir.dealloc %[[H]] : tensor<4x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x16xf32>

// -----

// Ids not equally spaced: the slices are not translates of one another,
// one op per slice, each in the hir.if_rank of its team.
!x = tensor<8x16xf32, #fusion.sharding<@g, [-, DIDx]>>
!w = tensor<16x4xf32, #fusion.sharding<@g, [DIDx, -]>>
!p = tensor<8x4xf32, #fusion.sharding<@g, [-, -], partial = DIDx>>
!rep = tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>
fusion.mesh @g shape = [2, 2] devices = [3, 0, 2, 1]
func.func @literal_teams(%x: !x, %w: !w) -> !rep {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %y = fusion.set %p : (!p) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @literal_teams(
// CHECK: hir.if_rank [0, 3] {
// CHECK-NEXT: %[[T0:.*]] = hir.allreduce %p, %y op = sum team = [3, 0] backend = nccl {hir.reshard = "partial->-"}
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1, 2] {
// CHECK-NEXT: %[[T1:.*]] = hir.allreduce %p, %y op = sum team = [2, 1] backend
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: }

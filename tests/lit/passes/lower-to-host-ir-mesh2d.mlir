// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s

// On a 2-D mesh a collective over DIDx (DIDy) runs within each mesh slice:
// one communication op per slice, each with its own team, each in the
// hir.if_rank of its team.

// DIDy -> - on a 2x4 mesh: four Allgathers, teams are the columns.
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
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 4] {
// CHECK-NEXT: %[[T0:.*]] = hir.allgather %x, %y team = [0, 4] backend = nccl {hir.reshard = "DIDy->-"} : (tensor<4x16xf32>, tensor<8x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1, 5] {
// CHECK-NEXT: %[[T1:.*]] = hir.allgather %x, %y team = [1, 5]
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2, 6] {
// CHECK-NEXT: %[[T2:.*]] = hir.allgather %x, %y team = [2, 6]
// CHECK-NEXT: hir.wait %[[T2]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [3, 7] {
// CHECK-NEXT: %[[T3:.*]] = hir.allgather %x, %y team = [3, 7]
// CHECK-NEXT: hir.wait %[[T3]] : !hir.token
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
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1] {
// CHECK-NEXT: %[[P0:.*]] = hir.team_index team = [0, 1] : index
// CHECK-NEXT: %[[V0:.*]] = hir.chunk %x [%[[P0]]] dim = 1 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: hir.copy %[[V0]], %y {hir.reshard = "-->DIDx"} : tensor<8x8xf32>, tensor<8x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2, 3] {
// CHECK-NEXT: %[[P1:.*]] = hir.team_index team = [2, 3] : index
// CHECK-NEXT: %[[V1:.*]] = hir.chunk %x [%[[P1]]] dim = 1 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: hir.copy %[[V1]], %y {hir.reshard = "-->DIDx"} : tensor<8x8xf32>, tensor<8x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x8xf32>

// -----

// partial over DIDx -> -: an Allreduce per row.
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
// CHECK-NEXT: %p, %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x4xf32>, tensor<8x4xf32>) {
// CHECK: hir.matmul %x, %w, %[[P:.*]] : tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>
// CHECK: hir.if_rank [0, 1] {
// CHECK-NEXT: %[[T0:.*]] = hir.allreduce %p, %y op = sum team = [0, 1] backend = nccl {hir.reshard = "partial->-"}
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2, 3] {
// CHECK-NEXT: %[[T1:.*]] = hir.allreduce %p, %y op = sum team = [2, 3]
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3] {
// CHECK-NEXT: hir.dealloc %p : tensor<8x4xf32>
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
// CHECK-NEXT: %[[H:.*]] = hir.if_rank [0, 1, 2, 3] -> (tensor<4x16xf32>) {
// CHECK-NEXT: %[[B:.*]] = hir.alloc "nested/0/0/s0" : tensor<4x16xf32>
// CHECK-NEXT: hir.yield %[[B]] : tensor<4x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1] {
// CHECK-NEXT: %[[T0:.*]] = hir.allgather %x, %[[H]] team = [0, 1] backend = nccl {hir.reshard = "DIDx->-"}
// CHECK-NEXT: hir.wait %[[T0]]
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2, 3] {
// CHECK-NEXT: %[[T1:.*]] = hir.allgather %x, %[[H]] team = [2, 3]
// CHECK-NEXT: hir.wait %[[T1]]
// CHECK-NEXT: }
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "nested/0/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 2] {
// CHECK-NEXT: %[[T2:.*]] = hir.allgather %[[H]], %y team = [0, 2] backend = nccl {hir.reshard = "DIDy->-"} : (tensor<4x16xf32>, tensor<8x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T2]]
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1, 3] {
// CHECK-NEXT: %[[T3:.*]] = hir.allgather %[[H]], %y team = [1, 3]
// CHECK-NEXT: hir.wait %[[T3]]
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3] {
// CHECK-NEXT: hir.dealloc %[[H]] : tensor<4x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x16xf32>

// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | %fuserc opt --split-input-file - | filecheck %s

// Every row of the reshard table on a 1-D mesh (docs/passes.md): each
// fusion.set becomes its communication, inside the mesh's hir.if_rank.

// DIDx -> -: Allgather over the mesh, straight into the result buffer (the
// gathered dimension is outermost).
!rows = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!rep = tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [4]
func.func @allgather(%x: !rows) -> !rep {
  %y = fusion.set %x : (!rows) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @allgather(%x: tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>})
// CHECK-SAME: -> (tensor<64x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>}) attributes {hir.host} {
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<64x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "allgather/0/0" : tensor<64x16xf32>
// CHECK-NEXT: %[[T:.*]] = hir.allgather %x, %[[Y]] team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->-"} : (tensor<16x16xf32>, tensor<64x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.yield %[[Y]] : tensor<64x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<64x16xf32>

// -----

// DIDx -> - on an inner dimension that is not outermost in memory: the
// blocks are gathered into a staging buffer [4 x 64, 4] and a launch puts
// block k at columns 4k..4k+3.
!cols = tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
!rep = tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [4]
func.func @allgather_inner(%x: !cols) -> !rep {
  %y = fusion.set %x : (!cols) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @allgather_inner(%x: tensor<64x4xf32>
// CHECK: %[[Y:.*]] = hir.alloc "allgather_inner/0/0" : tensor<64x16xf32>
// CHECK-NEXT: %[[S:.*]] = hir.alloc "allgather_inner/0/0/s0/out" : tensor<256x4xf32>
// CHECK-NEXT: %[[T:.*]] = hir.allgather %x, %[[S]] team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->-"} : (tensor<64x4xf32>, tensor<256x4xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.launch ins(%[[S]] : tensor<256x4xf32>) outs(%[[Y]] : tensor<64x16xf32>) {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<256x4xf32>):
// CHECK-NEXT: %[[B:.*]] = fusion.reshape %[[A]] : (tensor<256x4xf32>) -> tensor<4x64x4xf32>
// CHECK-NEXT: %[[C:.*]] = fusion.permute %[[B]] dims = [1, 0, 2] : (tensor<4x64x4xf32>) -> tensor<64x4x4xf32>
// CHECK-NEXT: %[[D:.*]] = fusion.reshape %[[C]] : (tensor<64x4x4xf32>) -> tensor<64x16xf32>
// CHECK-NEXT: hir.yield %[[D]] : tensor<64x16xf32>
// CHECK-NEXT: } {hir.reshard = "DIDx->-"}
// CHECK-NEXT: hir.dealloc %[[S]] : tensor<256x4xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<64x16xf32>

// -----

// DIDx -> - where every outer dimension has local extent 1: a view, no staging.
!cols = tensor<1x64x16xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
!rep = tensor<1x64x16xf32, #fusion.sharding<@tp, [-, -, -]>>
fusion.mesh @tp shape = [4]
func.func @allgather_view(%x: !cols) -> !rep {
  %y = fusion.set %x : (!cols) -> !rep
  func.return %y : !rep
}
// CHECK-LABEL: func.func @allgather_view(%x: tensor<1x16x16xf32>
// CHECK: %[[Y:.*]] = hir.alloc "allgather_view/0/0" : tensor<1x64x16xf32>
// CHECK-NEXT: %[[V:.*]] = hir.view %[[Y]] : tensor<1x64x16xf32> -> tensor<4x16x16xf32>
// CHECK-NEXT: %[[T:.*]] = hir.allgather %x, %[[V]] team = [0, 1, 2, 3] backend = nccl {{.*}} : (tensor<1x16x16xf32>, tensor<4x16x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.yield %[[Y]] : tensor<1x64x16xf32>

// -----

// - -> DIDx: a local slice, this rank's block at its team position, copied
// into a buffer of its own.
!rep = tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
!rows = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @slice(%x: !rep) -> !rows {
  %y = fusion.set %x : (!rep) -> !rows
  func.return %y : !rows
}
// CHECK-LABEL: func.func @slice(%x: tensor<64x16xf32>
// CHECK-SAME: -> (tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>})
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<16x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "slice/0/0" : tensor<16x16xf32>
// CHECK-NEXT: %pos = hir.team_index team = [0, 1, 2, 3] : index
// CHECK-NEXT: %[[V:.*]] = hir.chunk %x [%pos] dim = 0 chunks = 4 : (tensor<64x16xf32>, index) -> tensor<16x16xf32>
// CHECK-NEXT: hir.copy %[[V]], %[[Y]] {hir.reshard = "-->DIDx"} : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<16x16xf32>

// -----

// DIDx on dim 0 -> DIDx on dim 1: AllToAll. The send buffer holds the four
// column blocks outermost (a launch); the received row blocks land in the
// result directly.
!rows = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!cols = tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [4]
func.func @alltoall(%x: !rows) -> !cols {
  %y = fusion.set %x : (!rows) -> !cols
  func.return %y : !cols
}
// CHECK-LABEL: func.func @alltoall(%x: tensor<16x16xf32>
// CHECK-SAME: -> (tensor<64x4xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>})
// CHECK: %[[Y:.*]] = hir.alloc "alltoall/0/0" : tensor<64x4xf32>
// CHECK-NEXT: %[[S:.*]] = hir.alloc "alltoall/0/0/s0/in" : tensor<64x4xf32>
// CHECK-NEXT: hir.launch ins(%x : tensor<16x16xf32>) outs(%[[S]] : tensor<64x4xf32>) {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<16x16xf32>):
// CHECK-NEXT: %[[B:.*]] = fusion.reshape %[[A]] : (tensor<16x16xf32>) -> tensor<16x4x4xf32>
// CHECK-NEXT: %[[C:.*]] = fusion.permute %[[B]] dims = [1, 0, 2] : (tensor<16x4x4xf32>) -> tensor<4x16x4xf32>
// CHECK-NEXT: %[[D:.*]] = fusion.reshape %[[C]] : (tensor<4x16x4xf32>) -> tensor<64x4xf32>
// CHECK-NEXT: hir.yield %[[D]] : tensor<64x4xf32>
// CHECK-NEXT: } {hir.reshard = "DIDx->DIDx"}
// CHECK-NEXT: %[[T:.*]] = hir.alltoall %[[S]], %[[Y]] team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->DIDx"} : (tensor<64x4xf32>, tensor<64x4xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.dealloc %[[S]] : tensor<64x4xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<64x4xf32>

// -----

// partial -> -: Allreduce; partial -> DIDx: ReduceScatter. The partial sum
// comes from a matmul contracting a split dimension.
!x = tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
!w = tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<64x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!rep = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>
!rows = tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @reductions(%x: !x, %w: !w) -> (!rep, !rows) {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %r = fusion.set %p : (!p) -> !rep
  %s = fusion.set %p : (!p) -> !rows
  func.return %r, %s : !rep, !rows
}
// CHECK-LABEL: func.func @reductions(
// CHECK-NEXT: %r, %s = hir.if_rank [0, 1, 2, 3] -> (tensor<64x8xf32>, tensor<16x8xf32>) {
// CHECK-NEXT: %p = hir.alloc "reductions/0/0" : tensor<64x8xf32>
// CHECK-NEXT: hir.matmul %x, %w, %p : tensor<64x4xf32>, tensor<4x8xf32>, tensor<64x8xf32>
// CHECK-NEXT: %[[R:.*]] = hir.alloc "reductions/1/0" : tensor<64x8xf32>
// CHECK-NEXT: %[[T1:.*]] = hir.allreduce %p, %[[R]] op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->-"} : (tensor<64x8xf32>, tensor<64x8xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: %[[S:.*]] = hir.alloc "reductions/2/0" : tensor<16x8xf32>
// CHECK-NEXT: %[[T2:.*]] = hir.reduce_scatter %p, %[[S]] op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T2]] : !hir.token
// CHECK-NEXT: hir.dealloc %p : tensor<64x8xf32>
// CHECK-NEXT: hir.yield %[[R]], %[[S]] : tensor<64x8xf32>, tensor<16x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %r, %s : tensor<64x8xf32>, tensor<16x8xf32>

// -----

// A set that moves nothing (same placement, another Stream split) is a copy.
!rows = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!rows2 = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
fusion.mesh @tp shape = [4]
func.func @copy(%x: !rows) -> !rows2 {
  %y = fusion.set %x : (!rows) -> !rows2
  func.return %y : !rows2
}
// CHECK-LABEL: func.func @copy(
// CHECK: %[[Y:.*]] = hir.alloc "copy/0/0" : tensor<16x16xf32>
// CHECK-NEXT: hir.copy %x, %[[Y]] {hir.stream = [0 : i64, 2 : i64], hir.reshard = "copy"} : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<16x16xf32>

// -----

// DIDx -> Stream(4) on the same dimension: before stream-pipeline, an
// Allgather, marked for the pipelining pass; the GEMM computing the
// Stream-split result carries hir.stream too.
!x = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!xs = tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>
!w = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>
!y = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
fusion.mesh @tp shape = [4]
func.func @stream(%x: !x, %w: !w) -> !y {
  %xs = fusion.set %x : (!x) -> !xs
  %y = fusion.matmul %xs, %w : (!xs, !w) -> !y
  func.return %y : !y
}
// CHECK-LABEL: func.func @stream(
// CHECK-SAME: -> (tensor<64x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>})
// CHECK: %xs = hir.alloc "stream/0/0" : tensor<64x16xf32>
// CHECK-NEXT: %[[T:.*]] = hir.allgather %x, %xs team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 4 : i64], hir.reshard = "DIDx->Stream"} : (tensor<16x16xf32>, tensor<64x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "stream/1/0" : tensor<64x8xf32>
// CHECK-NEXT: hir.matmul %xs, %w, %[[Y]] {hir.stream = [0 : i64, 4 : i64]} : tensor<64x16xf32>, tensor<16x8xf32>, tensor<64x8xf32>
// CHECK-NEXT: hir.dealloc %xs : tensor<64x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<64x8xf32>

// RUN: %fuserc opt -p propagate-shardings,make-resharding-contiguous,lower-to-host-ir --split-input-file %s | filecheck %s

// A Stream split outside a device split (Stream(S)*DIDx) interleaves the
// device blocks: it is placement. Local ops keep it, and gathering such a
// dimension is one allgather per stream chunk (a hir.for that
// stream-pipeline runs on rotating streams).

// The pattern of docs/language.md: x [Stream(2)*DIDx, -] to [Stream(2), -]
// for the GEMM; and relu keeps the interleaved placement of its operand.
!s = tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
!w = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>
!y = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2), -]>>
fusion.mesh @tp shape = [4]
func.func @outer(%x: !s, %w: !w) -> (!y, tensor<64x16xf32>) {
  %y = fusion.matmul %x, %w : (!s, !w) -> !y
  %r = fusion.relu %x : (!s) -> tensor<64x16xf32>
  func.return %y, %r : !y, tensor<64x16xf32>
}
// CHECK-LABEL: func.func @outer(
// CHECK-SAME: -> (tensor<64x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2), -]>>}, tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>})
// CHECK: %[[XG:.*]] = hir.alloc "outer/0/0" : tensor<64x16xf32>
// CHECK-NEXT: hir.for %[[C:.*]] = 0 to 2 {
// CHECK-NEXT: %[[A:.*]] = hir.chunk %x [%[[C]]] dim = 0 chunks = 2 : (tensor<16x16xf32>, index) -> tensor<8x16xf32>
// CHECK-NEXT: %[[B:.*]] = hir.chunk %[[XG]] [%[[C]]] dim = 0 chunks = 2 : (tensor<64x16xf32>, index) -> tensor<32x16xf32>
// CHECK-NEXT: %[[T:.*]] = hir.allgather %[[A]], %[[B]] team = [0, 1, 2, 3] {{.*}}hir.reshard = "DIDx->Stream"
// CHECK-NEXT: hir.wait %[[T]]
// CHECK-NEXT: }
// CHECK: hir.matmul %[[XG]], %w, {{.*}} {hir.stream = [0 : i64, 2 : i64]}
// CHECK: fusion.relu {{.*}} : (tensor<16x16xf32>) -> tensor<16x16xf32>

// -----

// Interleaved rows to columns: no alltoall moves interleaved blocks, so each
// chunk is gathered, then the columns are sliced locally.
!s = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
!c = tensor<64x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [4]
func.func @to_columns(%x: !s) -> !c {
  %y = fusion.set %x : (!s) -> !c
  func.return %y : !c
}
// CHECK-LABEL: func.func @to_columns(
// CHECK: hir.for
// CHECK: hir.allgather {{.*}} : (tensor<8x8xf32>, tensor<32x8xf32>)
// CHECK: hir.team_index
// CHECK-NEXT: hir.chunk {{.*}} dim = 1 chunks = 4
// CHECK-NEXT: hir.copy {{.*}} {hir.reshard = "-->DIDx"}

// -----

// The interleaved dimension is not the first: the gathered dimension is put
// outermost in memory, and chunked there.
!s = tensor<8x64xf32, #fusion.sharding<@tp, [-, Stream(2)*DIDx]>>
!r = tensor<8x64xf32, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [4]
func.func @inner(%x: !s) -> !r {
  %e = fusion.exp %x : (!s) -> tensor<8x64xf32>
  %y = fusion.set %e : (tensor<8x64xf32>) -> !r
  func.return %y : !r
}
// CHECK-LABEL: func.func @inner(
// CHECK: %[[E:.*]] = hir.alloc "inner/0/0" : tensor<16x8xf32>
// CHECK: hir.for %[[C:.*]] = 0 to 2 {
// CHECK-NEXT: hir.chunk %[[E]] [%[[C]]] dim = 0 chunks = 2 : (tensor<16x8xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: hir.chunk {{.*}} dim = 0 chunks = 2 : (tensor<64x8xf32>, index) -> tensor<32x8xf32>
// CHECK-NEXT: hir.allgather

// -----

// A 2-D mesh: one loop for every DIDx team (a team with its translates).
!s = tensor<32x8xf32, #fusion.sharding<@g, [Stream(2)*DIDx, DIDy]>>
!r = tensor<32x8xf32, #fusion.sharding<@g, [-, DIDy]>>
fusion.mesh @g shape = [2, 2]
func.func @grid(%x: !s) -> !r {
  %y = fusion.set %x : (!s) -> !r
  func.return %y : !r
}
// CHECK-LABEL: func.func @grid(
// CHECK: hir.if_rank [0, 1, 2, 3] -> (tensor<32x4xf32>) {
// CHECK: hir.for
// CHECK: hir.allgather {{.*}} team = [0, 1] translated [2 step 2]
// CHECK-NOT: hir.for
// CHECK: func.return

// -----

// Between meshes, interleaved blocks move as they are, device by device.
!a = tensor<32x8xf32, #fusion.sharding<@m0, [Stream(2)*DIDx, -]>>
!b = tensor<32x8xf32, #fusion.sharding<@m1, [Stream(2)*DIDx, -]>>
fusion.mesh @m0 shape = [2] devices = [0, 1]
fusion.mesh @m1 shape = [2] devices = [2, 3]
func.func @meshes(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @meshes(
// CHECK: hir.send %x to {{.*}} team = [0, 2]
// CHECK: hir.recv {{.*}} team = [0, 2]
// CHECK: hir.send %x to {{.*}} team = [1, 3]
// CHECK: hir.recv {{.*}} team = [1, 3]

// -----

// Made by a local slice: from a replicated tensor each device copies its
// block of every chunk (views splitting the dim into the 2 chunks); from
// rows split plainly, a gather first.
!r = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>
!d = tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!s = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @make(%x: !r, %y: !d) -> (!s, !s) {
  %a = fusion.set %x : (!r) -> !s
  %b = fusion.set %y : (!d) -> !s
  func.return %a, %b : !s, !s
}
// CHECK-LABEL: func.func @make(
// CHECK: %[[POS:.*]] = hir.team_index team = [0, 1, 2, 3]
// CHECK-NEXT: %[[V:.*]] = hir.view %x : tensor<64x8xf32> -> tensor<2x32x8xf32>
// CHECK-NEXT: %[[O:.*]] = hir.view %{{.*}} : tensor<16x8xf32> -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[C:.*]] = hir.chunk %[[V]] [%[[POS]]] dim = 1 chunks = 4 : (tensor<2x32x8xf32>, index) -> tensor<2x8x8xf32>
// CHECK-NEXT: hir.copy %[[C]], %[[O]] {{.*}}hir.reshard = "-->DIDx"
// CHECK: hir.allgather %y, {{.*}} : (tensor<16x8xf32>, tensor<64x8xf32>)
// CHECK: hir.team_index
// CHECK-NEXT: hir.view {{.*}} -> tensor<2x32x8xf32>

// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s

// Reshards between meshes. Work on one mesh's tensors runs in the
// hir.if_rank of its devices; point-to-point transfers run in one
// hir.if_rank per rank.

// The same sharding on two meshes of the same shape: SendRecv pairs, rank
// A[i] sends to B[i] (team [A[i], B[i]], the sender at position 0). Each rank
// issues its part, then waits.
!a = tensor<8x16xf32, #fusion.sharding<@a, [DIDx, -]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [DIDx, -]>>
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [2] devices = [2, 3]
func.func @pairs(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @pairs(%x: tensor<4x16xf32>
// CHECK-NEXT: %y = hir.if_rank [2, 3] -> (tensor<4x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "pairs/0/0" : tensor<4x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<4x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0] {
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[T0:.*]] = hir.send %x to %[[C1]] team = [0, 2] backend = nccl {hir.reshard = "@a->@b"} : (tensor<4x16xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2] {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[T1:.*]] = hir.recv %y from %[[C0]] team = [0, 2] backend = nccl {hir.reshard = "@a->@b"} : (tensor<4x16xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1] {
// CHECK: hir.send %x to %{{.*}} team = [1, 3]
// CHECK: hir.if_rank [3] {
// CHECK: hir.recv %y from %{{.*}} team = [1, 3]
// CHECK: func.return %y : tensor<4x16xf32>

// -----

// One device to a replicated mesh it is not part of: Broadcast over
// [sender, receivers...] in a buffer made on the whole team; the sender
// gives its copy back and the value is kept on the receivers only.
!a = tensor<8x16xf32, #fusion.sharding<@a, [-, -]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [-, -]>>
fusion.mesh @a shape = [1] devices = [4]
fusion.mesh @b shape = [4]
func.func @broadcast(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @broadcast(%x: tensor<8x16xf32>
// CHECK-NEXT: %[[B:.*]] = hir.if_rank [0, 1, 2, 3, 4] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[A:.*]] = hir.alloc "broadcast/0/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.yield %[[A]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [4] {
// CHECK-NEXT: hir.copy %x, %[[B]] {hir.reshard = "@a->@b"} : tensor<8x16xf32>, tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3, 4] {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[T:.*]] = hir.broadcast %[[B]] root %[[C0]] team = [4, 0, 1, 2, 3] backend = nccl {hir.reshard = "@a->@b"} : (tensor<8x16xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [4] {
// CHECK-NEXT: hir.dealloc %[[B]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x16xf32>) {
// CHECK-NEXT: hir.yield %[[B]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x16xf32>

// -----

// One device to a replicated mesh that contains it: Broadcast over the
// mesh, rooted at the sender's position.
!a = tensor<8x16xf32, #fusion.sharding<@a, [-, -]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [-, -]>>
fusion.mesh @a shape = [1] devices = [2]
fusion.mesh @b shape = [4]
func.func @broadcast_member(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @broadcast_member(%x: tensor<8x16xf32>
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[A:.*]] = hir.alloc "broadcast_member/0/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.yield %[[A]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2] {
// CHECK-NEXT: hir.copy %x, %y
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3] {
// CHECK-NEXT: %[[C2:.*]] = hir.constant 2 : index
// CHECK-NEXT: %[[T:.*]] = hir.broadcast %y root %[[C2]] team = [0, 1, 2, 3] backend = nccl
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x16xf32>

// -----

// One device to a sharded mesh that contains it: Scatter rooted at it (its
// input exists on the root only).
!a = tensor<8x16xf32, #fusion.sharding<@a, [-, -]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [DIDx, -]>>
fusion.mesh @a shape = [1] devices = [1]
fusion.mesh @b shape = [4]
func.func @scatter(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @scatter(%x: tensor<8x16xf32>
// CHECK-SAME: -> (tensor<2x16xf32> {hir.global = tensor<8x16xf32, #fusion.sharding<@b, [DIDx, -]>>})
// CHECK-NEXT: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<2x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "scatter/0/0" : tensor<2x16xf32>
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[T:.*]] = hir.scatter %x, %[[Y]] root %[[C1]] team = [0, 1, 2, 3] backend = nccl {hir.reshard = "@a->@b"} : (tensor<8x16xf32>, tensor<2x16xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.yield %[[Y]] : tensor<2x16xf32>

// -----

// A sharded mesh to one of its devices: Gather to that root (its output
// exists on the root only).
!a = tensor<8x16xf32, #fusion.sharding<@a, [DIDx, -]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [-, -]>>
fusion.mesh @a shape = [4]
fusion.mesh @b shape = [1] devices = [3]
func.func @gather(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @gather(%x: tensor<2x16xf32>
// CHECK-NEXT: %y = hir.if_rank [3] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "gather/0/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3] {
// CHECK-NEXT: %[[C3:.*]] = hir.constant 3 : index
// CHECK-NEXT: %[[T:.*]] = hir.gather %x, %y root %[[C3]] team = [0, 1, 2, 3] backend = nccl {hir.reshard = "@a->@b"} : (tensor<2x16xf32>, tensor<8x16xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x16xf32>

// -----

// partial -> a mesh of one device: Reduce with that root.
!x = tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
!w = tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<8x4xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!one = tensor<8x4xf32, #fusion.sharding<@one, [-, -]>>
fusion.mesh @tp shape = [4]
fusion.mesh @one shape = [1] devices = [2]
func.func @reduce(%x: !x, %w: !w) -> !one {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %y = fusion.set %p : (!p) -> !one
  func.return %y : !one
}
// CHECK-LABEL: func.func @reduce(
// CHECK: %y = hir.if_rank [2] -> (tensor<8x4xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "reduce/1/0" : tensor<8x4xf32>
// CHECK-NEXT: hir.yield %[[Y]] : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3] {
// CHECK-NEXT: %[[C2:.*]] = hir.constant 2 : index
// CHECK-NEXT: %[[T:.*]] = hir.reduce %p, %y root %[[C2]] op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial@tp->@one"} : (tensor<8x4xf32>, tensor<8x4xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.dealloc %p : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x4xf32>

// -----

// partial -> a device outside the mesh: Reduce to the team's first device,
// then a send.
!x = tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
!w = tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<8x4xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!one = tensor<8x4xf32, #fusion.sharding<@one, [-, -]>>
fusion.mesh @tp shape = [4]
fusion.mesh @one shape = [1] devices = [4]
func.func @reduce_outside(%x: !x, %w: !w) -> !one {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %y = fusion.set %p : (!p) -> !one
  func.return %y : !one
}
// CHECK-LABEL: func.func @reduce_outside(
// CHECK: %[[R:.*]] = hir.if_rank [0] -> (tensor<8x4xf32>) {
// CHECK-NEXT: %[[A:.*]] = hir.alloc "reduce_outside/1/0/s0/reduced" : tensor<8x4xf32>
// CHECK-NEXT: hir.yield %[[A]] : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3] {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[T:.*]] = hir.reduce %p, %[[R]] root %[[C0]] op = sum team = [0, 1, 2, 3]
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.dealloc %p : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %y = hir.if_rank [4] -> (tensor<8x4xf32>) {
// CHECK-NEXT: %[[Y:.*]] = hir.alloc "reduce_outside/1/0" : tensor<8x4xf32>
// CHECK: hir.if_rank [0] {
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[TS:.*]] = hir.send %[[R]] to %[[C1]] team = [0, 4] backend = nccl {hir.reshard = "@tp->@one"}
// CHECK-NEXT: hir.wait %[[TS]] : !hir.token
// CHECK-NEXT: hir.dealloc %[[R]] : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [4] {
// CHECK-NEXT: %[[D0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[TR:.*]] = hir.recv %y from %[[D0]] team = [0, 4]
// CHECK-NEXT: hir.wait %[[TR]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: func.return %y : tensor<8x4xf32>

// -----

// DIDx -> - on another mesh of two devices: each receiver gets every block
// from its holder, straight into its rows of the result.
!a = tensor<8x16xf32, #fusion.sharding<@a, [DIDx, -]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [-, -]>>
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [2] devices = [2, 3]
func.func @gather_each(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @gather_each(%x: tensor<4x16xf32>
// CHECK: hir.if_rank [0] {
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[T0:.*]] = hir.send %x to %[[C1]] team = [0, 2]
// CHECK-NEXT: %[[T1:.*]] = hir.send %x to %[[C1]] team = [0, 3]
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2] {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[V0:.*]] = hir.chunk %y [%[[C0]]] dim = 0 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<4x16xf32>
// CHECK-NEXT: %[[R0:.*]] = hir.recv %[[V0]] from %[[C0]] team = [0, 2]
// CHECK-NEXT: %[[D1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[V1:.*]] = hir.chunk %y [%[[D1]]] dim = 0 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<4x16xf32>
// CHECK-NEXT: %[[R1:.*]] = hir.recv %[[V1]] from %[[C0]] team = [1, 2]
// CHECK-NEXT: hir.wait %[[R0]] : !hir.token
// CHECK-NEXT: hir.wait %[[R1]] : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1] {
// CHECK: hir.if_rank [3] {
// CHECK: func.return %y

// -----

// Blocks received into columns (not contiguous in the result) go through a
// staging buffer copied in after the waits.
!a = tensor<8x16xf32, #fusion.sharding<@a, [-, DIDx]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [-, -]>>
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [1] devices = [2]
func.func @staged(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @staged(%x: tensor<8x8xf32>
// CHECK: hir.if_rank [2] {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[V0:.*]] = hir.chunk %y [%[[C0]]] dim = 1 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: %[[S0:.*]] = hir.alloc "staged/0/0/recv2from0" : tensor<8x8xf32>
// CHECK-NEXT: %[[R0:.*]] = hir.recv %[[S0]] from %[[C0]] team = [0, 2]
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[V1:.*]] = hir.chunk %y [%[[C1]]] dim = 1 chunks = 2
// CHECK-NEXT: %[[S1:.*]] = hir.alloc "staged/0/0/recv2from1" : tensor<8x8xf32>
// CHECK-NEXT: %[[R1:.*]] = hir.recv %[[S1]] from %[[C0]] team = [1, 2]
// CHECK-NEXT: hir.wait %[[R0]] : !hir.token
// CHECK-NEXT: hir.wait %[[R1]] : !hir.token
// CHECK-NEXT: hir.copy %[[S0]], %[[V0]] {hir.reshard = "@a->@b"} : tensor<8x8xf32>, tensor<8x8xf32>
// CHECK-NEXT: hir.dealloc %[[S0]] : tensor<8x8xf32>
// CHECK-NEXT: hir.copy %[[S1]], %[[V1]]
// CHECK-NEXT: hir.dealloc %[[S1]] : tensor<8x8xf32>
// CHECK-NEXT: }

// -----

// Pipeline parallel: compute on @stage0, a SendRecv to @stage1, compute
// there. Each stage's work runs only on its ranks.
!s0 = tensor<8x16xf32, #fusion.sharding<@stage0, [-, -]>>
!s1 = tensor<8x16xf32, #fusion.sharding<@stage1, [-, -]>>
fusion.mesh @stage0 shape = [1] devices = [0]
fusion.mesh @stage1 shape = [1] devices = [1]
func.func @pipeline(%x: !s0) -> !s1 {
  %a = fusion.relu %x : (!s0) -> !s0
  %b = fusion.set %a : (!s0) -> !s1
  %c = fusion.tanh %b : (!s1) -> !s1
  func.return %c : !s1
}
// CHECK-LABEL: func.func @pipeline(%x: tensor<8x16xf32> {hir.global = tensor<8x16xf32, #fusion.sharding<@stage0, [-, -]>>})
// CHECK-SAME: -> (tensor<8x16xf32> {hir.global = tensor<8x16xf32, #fusion.sharding<@stage1, [-, -]>>})
// CHECK-NEXT: %a = hir.if_rank [0] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[A:.*]] = hir.alloc "pipeline/0/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.launch ins(%x : tensor<8x16xf32>) outs(%[[A]] : tensor<8x16xf32>) {
// CHECK: fusion.relu
// CHECK: hir.yield %[[A]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %b = hir.if_rank [1] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[B:.*]] = hir.alloc "pipeline/1/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.yield %[[B]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0] {
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[T0:.*]] = hir.send %a to %[[C1]] team = [0, 1] backend = nccl {hir.reshard = "@stage0->@stage1"}
// CHECK-NEXT: hir.wait %[[T0]] : !hir.token
// CHECK-NEXT: hir.dealloc %a : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %c = hir.if_rank [1] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[T1:.*]] = hir.recv %b from %[[C0]] team = [0, 1]
// CHECK-NEXT: hir.wait %[[T1]] : !hir.token
// CHECK-NEXT: %[[C:.*]] = hir.alloc "pipeline/2/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.launch ins(%b : tensor<8x16xf32>) outs(%[[C]] : tensor<8x16xf32>) {
// CHECK: fusion.tanh
// CHECK: hir.dealloc %b : tensor<8x16xf32>
// CHECK-NEXT: hir.yield %[[C]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %c : tensor<8x16xf32>

// -----

// Meshes of different sizes: no single step; the plan gathers on @a, then
// each device of @b gets its quarter (a column chunk, staged to be
// contiguous) from a holder, the holders taking turns.
!a = tensor<8x16xf32, #fusion.sharding<@a, [-, DIDx]>>
!b = tensor<8x16xf32, #fusion.sharding<@b, [-, DIDx]>>
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [4] devices = [0, 1, 2, 3]
func.func @resize(%x: !a) -> !b {
  %y = fusion.set %x : (!a) -> !b
  func.return %y : !b
}
// CHECK-LABEL: func.func @resize(%x: tensor<8x8xf32>
// CHECK: %[[G:.*]] = hir.if_rank [0, 1] -> (tensor<8x16xf32>) {
// CHECK: hir.allgather %x, %{{.*}} team = [0, 1]
// CHECK: %y = hir.if_rank [0, 1, 2, 3] -> (tensor<8x4xf32>) {
// CHECK: hir.if_rank [0] {
// CHECK-NEXT: %[[C0:.*]] = hir.constant 0 : index
// CHECK-NEXT: %[[V0:.*]] = hir.chunk %[[G]] [%[[C0]]] dim = 1 chunks = 4 : (tensor<8x16xf32>, index) -> tensor<8x4xf32>
// CHECK-NEXT: hir.copy %[[V0]], %y {hir.reshard = "@a->@b"}
// CHECK-NEXT: %[[C2:.*]] = hir.constant 2 : index
// CHECK-NEXT: %[[V2:.*]] = hir.chunk %[[G]] [%[[C2]]] dim = 1 chunks = 4
// CHECK-NEXT: %[[S:.*]] = hir.alloc "resize/0/0/send0to2" : tensor<8x4xf32>
// CHECK-NEXT: hir.copy %[[V2]], %[[S]]
// CHECK-NEXT: %[[C1:.*]] = hir.constant 1 : index
// CHECK-NEXT: %[[T:.*]] = hir.send %[[S]] to %[[C1]] team = [0, 2]
// CHECK-NEXT: hir.wait %[[T]] : !hir.token
// CHECK-NEXT: hir.dealloc %[[S]] : tensor<8x4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1] {
// CHECK: hir.send %{{.*}} team = [1, 3]
// CHECK: hir.if_rank [0, 1] {
// CHECK-NEXT: hir.dealloc %[[G]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [2] {
// CHECK: hir.recv %y from %{{.*}} team = [0, 2]
// CHECK: hir.if_rank [3] {
// CHECK: hir.recv %y from %{{.*}} team = [1, 3]

// -----

// A partial sum moved to another mesh as it is: device i's summand goes to
// device i of the other mesh (SendRecv pairs); the sum is taken there.
!x = tensor<8x16xf32, #fusion.sharding<@a, [-, DIDx]>>
!w = tensor<16x12xf32, #fusion.sharding<@a, [DIDx, -]>>
!p = tensor<8x12xf32, #fusion.sharding<@a, [-, -], partial = DIDx>>
!q = tensor<8x12xf32, #fusion.sharding<@b, [-, -], partial = DIDx>>
!r = tensor<8x12xf32, #fusion.sharding<@b, [-, -]>>
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [2] devices = [3, 2]
func.func @summands(%x: !x, %w: !w) -> !r {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %q = fusion.set %p : (!p) -> !q
  %r = fusion.set %q : (!q) -> !r
  func.return %r : !r
}
// CHECK-LABEL: func.func @summands(
// CHECK: %q = hir.if_rank [2, 3] -> (tensor<8x12xf32>) {
// CHECK: hir.if_rank [0] {
// CHECK: hir.send %p to %{{.*}} team = [0, 3] backend = nccl {hir.reshard = "@a->@b"} : (tensor<8x12xf32>, index) -> !hir.token
// CHECK: hir.if_rank [3] {
// CHECK: hir.recv %q from %{{.*}} team = [0, 3]
// CHECK: hir.if_rank [1] {
// CHECK: hir.send %p to %{{.*}} team = [1, 2]
// CHECK: hir.if_rank [2] {
// CHECK: hir.recv %q from %{{.*}} team = [1, 2]
// CHECK: %r = hir.if_rank [2, 3] -> (tensor<8x12xf32>) {
// CHECK: hir.allreduce %q, %{{.*}} op = sum team = [3, 2]

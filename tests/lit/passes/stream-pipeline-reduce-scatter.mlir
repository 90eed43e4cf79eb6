// stream-pipeline on GEMM + ReduceScatter: a partial product with a Stream
// split ([Stream(S), -], partial = DIDx) reduced to [DIDx, -]: the GEMM
// (hir.stream = [0, S]) into %p, then hir.reduce_scatter %p, %y.
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=collective}' --split-input-file %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring}' --split-input-file %s | filecheck %s --check-prefix=RING

// Collective: per chunk c on stream c, the GEMM of rows chunk c into the
// partial buffer, then a Reduce of it to device c.
// COLL-LABEL: func.func @main
// COLL: %main = hir.get_current_stream : !hir.stream
// COLL-NEXT: hir.for %c = 0 to 4 {
// COLL-NEXT: %s = hir.stream_for %c mod 4 : !hir.stream
// COLL-NEXT: hir.set_current_stream %s : !hir.stream
// COLL-NEXT: hir.sync_stream %main : !hir.stream
// COLL-NEXT: %pc = hir.chunk %p [%c] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// COLL-NEXT: %xc = hir.chunk %x [%c] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// COLL-NEXT: hir.matmul %xc, %w, %pc : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// COLL-NEXT: %tok = hir.reduce %pc, %y root %c op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<16x4xf32>, tensor<16x4xf32>, index) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 4 : i64, streams = 4 : i64
// COLL-NEXT: hir.set_current_stream %main : !hir.stream
// COLL-NOT: hir.reduce_scatter

// Ring: step t on stream t computes the partial for device pos + 1 + t into
// slot t of the shared partial buffer, adds the running sum the next device
// made at step t - 1, fences, then pulls the next device's slot t. The last
// step is this device's own block, into the result.
// RING-LABEL: func.func @main
// RING: %pos = hir.team_index team = [0, 1, 2, 3] : index
// RING-NEXT: %c1 = hir.constant 1 : index
// RING-NEXT: %next = hir.add_mod %pos, %c1 mod 4 : index
// RING-NEXT: %h = hir.share %p team = [0, 1, 2, 3] : tensor<64x4xf32> -> !hir.handle
// RING-NEXT: %recv = hir.alloc "main/0/0/ring" : tensor<64x4xf32>
// RING-NEXT: hir.for %c = 0 to 1 {
// RING-NEXT: %s = hir.stream_for %c mod 4 : !hir.stream
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: hir.sync_stream %main : !hir.stream
// RING-NEXT: %dest = hir.add_mod %next, %c mod 4 : index
// RING-NEXT: %pc = hir.chunk %p [%c] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %xc = hir.chunk %x [%dest] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.matmul %xc, %w, %pc : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// RING-NEXT: %fence = hir.barrier team = [0, 1, 2, 3] backend = nccl : !hir.token
// RING-NEXT: hir.wait %fence : !hir.token
// RING-NEXT: %rc = hir.chunk %recv [%c] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %tok = hir.get %h, %next, %rc block %c of 4 backend = cuda_ipc {hir.reshard = "partial->DIDx"} : (!hir.handle, index, tensor<16x4xf32>, index) -> !hir.token
// RING-NEXT: hir.wait %tok : !hir.token
// RING-NEXT: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64
// RING-NEXT: %c3 = hir.constant 3 : index
// RING-NEXT: hir.for %c_1 = 1 to 3 {
// RING: hir.matmul %xc_1, %w, %pc_1 : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// RING-NEXT: %prev = hir.add_mod %c_1, %c3 mod 4 : index
// RING-NEXT: %sprev = hir.stream_for %prev mod 4 : !hir.stream
// RING-NEXT: hir.sync_stream %sprev : !hir.stream
// RING-NEXT: %got = hir.chunk %recv [%prev] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: hir.launch ins(%pc_1, %got : tensor<16x4xf32>, tensor<16x4xf32>) outs(%pc_1 : tensor<16x4xf32>) {
// RING-NEXT: ^bb0(%sum: tensor<16x4xf32>, %part: tensor<16x4xf32>):
// RING-NEXT: %0 = fusion.add %sum, %part : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
// RING-NEXT: hir.yield %0 : tensor<16x4xf32>
// RING-NEXT: }
// RING-NEXT: %fence_1 = hir.barrier team = [0, 1, 2, 3] backend = nccl : !hir.token
// RING-NEXT: hir.wait %fence_1 : !hir.token
// RING-NEXT: %rc_1 = hir.chunk %recv [%c_1] dim = 0 chunks = 4
// RING-NEXT: %tok_1 = hir.get %h, %next, %rc_1 block %c_1 of 4 backend = cuda_ipc
// RING-NEXT: hir.wait %tok_1 : !hir.token
// RING-NEXT: }
// RING-NEXT: hir.for %c_2 = 3 to 4 {
// RING: hir.matmul %xc_2, %w, %y : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// RING: hir.launch ins(%y, %got_1 : tensor<16x4xf32>, tensor<16x4xf32>) outs(%y : tensor<16x4xf32>) {
// RING-NOT: hir.barrier
// RING: }
// RING-NEXT: }
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING: %fence_2 = hir.barrier team = [0, 1, 2, 3] backend = nccl : !hir.token
// RING-NEXT: hir.wait %fence_2 : !hir.token
// RING-NEXT: hir.dealloc %recv : tensor<64x4xf32>
// RING-NEXT: hir.dealloc %p : tensor<64x4xf32>
// RING-NOT: hir.reduce_scatter
func.func @main(%x: tensor<64x8xf32>, %w: tensor<8x4xf32>) -> tensor<16x4xf32> attributes {hir.host} {
  %p = hir.alloc "main/0/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y = hir.alloc "main/1/0" : tensor<16x4xf32>
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  hir.dealloc %p : tensor<64x4xf32>
  func.return %y : tensor<16x4xf32>
}

// -----

// Not a site: a linear with a bias (the bias would be summed once per
// device) and a max-reduction stay as they are.
// COLL-LABEL: func.func @not_sites
// RING-LABEL: func.func @not_sites
// COLL: hir.reduce_scatter %p, %y op = sum
// COLL: hir.reduce_scatter %p2, %y2 op = max
// COLL-NOT: hir.for
func.func @not_sites(%x: tensor<64x8xf32>, %w: tensor<4x8xf32>, %b: tensor<4xf32>) -> (tensor<16x4xf32>, tensor<16x4xf32>) attributes {hir.host} {
  %p = hir.alloc "n/0/0" : tensor<64x4xf32>
  hir.linear %x, %w, %b, %p {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<64x4xf32>
  %y = hir.alloc "n/1/0" : tensor<16x4xf32>
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  %p2 = hir.alloc "n/2/0" : tensor<64x4xf32>
  hir.linear %x, %w, %p2 : tensor<64x8xf32>, tensor<4x8xf32>, tensor<64x4xf32>
  %y2 = hir.alloc "n/3/0" : tensor<16x4xf32>
  %tok2 = hir.reduce_scatter %p2, %y2 op = max team = [0, 1, 2, 3] backend = nccl : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok2 : !hir.token
  func.return %y, %y2 : tensor<16x4xf32>, tensor<16x4xf32>
}

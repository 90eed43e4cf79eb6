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

// Ring: a running sum per rows block passed along the ring, added in the
// GEMMs' epilogues (acc). Step t computes block pos + 1 + t on the compute
// stream (worker 0), plus (t > 0) the sum device pos + 1 put into this
// device's staging buffer, after transfer stream 1 (the put and the fence
// of step t - 1); then on transfer stream 1 it puts the block into slot
// dest of device pos - 1's staging buffer and fences. The last step (block
// pos) writes the result.
// RING-LABEL: func.func @main
// RING: %pos = hir.team_index team = [0, 1, 2, 3] : index
// RING-NEXT: %c1 = hir.constant 1 : index
// RING-NEXT: %next = hir.add_mod %pos, %c1 mod 4 : index
// RING-NEXT: %c3 = hir.constant 3 : index
// RING-NEXT: %prev = hir.add_mod %pos, %c3 mod 4 : index
// RING-NEXT: %stage = hir.alloc "main/0/0/ring" : tensor<64x4xf32>
// RING-NEXT: %h = hir.share %stage team = [0, 1, 2, 3] : tensor<64x4xf32> -> !hir.handle
// RING-NEXT: %c0 = hir.constant 0 : index
// RING-NEXT: %s = hir.stream_for %c0 mod 4 : !hir.stream
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: hir.sync_stream %main : !hir.stream
// RING-NEXT: hir.for %c = 0 to 1 {
// RING-NEXT: %dest = hir.add_mod %next, %c mod 4 : index
// RING-NEXT: %pc = hir.chunk %p [%dest] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %xc = hir.chunk %x [%dest] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.matmul %xc, %w, %pc : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// RING-NEXT: %st = hir.stream_for %c1 mod 4 : !hir.stream
// RING-NEXT: hir.set_current_stream %st : !hir.stream
// RING-NEXT: hir.sync_stream %s : !hir.stream
// RING-NEXT: %tok = hir.put %pc, %h, %prev block %dest of 4 backend = cuda_ipc {hir.reshard = "partial->DIDx"} : (tensor<16x4xf32>, !hir.handle, index, index) -> !hir.token
// RING-NEXT: hir.wait %tok : !hir.token
// RING-NEXT: %fence = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence : !hir.token
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64
// RING-NEXT: hir.for %c_1 = 1 to 3 {
// RING-NEXT: %dest_1 = hir.add_mod %next, %c_1 mod 4 : index
// RING-NEXT: %st_1 = hir.stream_for %c1 mod 4 : !hir.stream
// RING-NEXT: hir.sync_stream %st_1 : !hir.stream
// RING-NEXT: %sum = hir.chunk %stage [%dest_1] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %pc_1 = hir.chunk %p [%dest_1] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %xc_1 = hir.chunk %x [%dest_1] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.matmul %xc_1, %w, %pc_1 acc %sum : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
// RING: %tok_1 = hir.put %pc_1, %h, %prev block %dest_1 of 4 backend = cuda_ipc
// RING-NEXT: hir.wait %tok_1 : !hir.token
// RING-NEXT: %fence_1 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence_1 : !hir.token
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: }
// RING-NEXT: %st_3 = hir.stream_for %c1 mod 4 : !hir.stream
// RING-NEXT: hir.sync_stream %st_3 : !hir.stream
// RING-NEXT: %sum_1 = hir.chunk %stage [%pos] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %xc_2 = hir.chunk %x [%pos] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.matmul %xc_2, %w, %y acc %sum_1 : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING: %fence_2 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence_2 : !hir.token
// RING-NEXT: hir.dealloc %stage : tensor<64x4xf32>
// RING-NEXT: hir.dealloc %p : tensor<64x4xf32>
// RING-NOT: hir.launch
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

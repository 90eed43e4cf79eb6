// stream-pipeline on GEMM + ReduceScatter: a partial product with a Stream
// split ([Stream(S), -], partial = DIDx) reduced to [DIDx, -]: the GEMM
// (hir.stream = [0, S]) into %p, then hir.reduce_scatter %p, %y.
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=collective}' --split-input-file %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring ring-form=sum}' --split-input-file %s | filecheck %s --check-prefix=RING
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring ring-form=pull}' --split-input-file %s | filecheck %s --check-prefix=PULL

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
// GEMMs' epilogues in place (acc = out: the sum is read and written where it
// landed, with no copy). Step t computes block pos + 1 + t on the compute
// stream (worker 0) into that block of the shared partial buffer %p, plus
// (t > 0) the sum device pos + 1 put there, after transfer stream 1 (the put
// and the fence of step t - 1); then on transfer stream 1 it puts the block
// into the same block of device pos - 1's %p and fences. Step d - 2 puts
// straight into the output %y of device pos - 1, whose last step (block
// pos) adds its product to it in place.
// RING-LABEL: func.func @main
// RING: %pos = hir.team_index team = [0, 1, 2, 3] : index
// RING-NEXT: %c1 = hir.constant 1 : index
// RING-NEXT: %next = hir.add_mod %pos, %c1 mod 4 : index
// RING-NEXT: %c3 = hir.constant 3 : index
// RING-NEXT: %prev = hir.add_mod %pos, %c3 mod 4 : index
// RING-NEXT: %h = hir.share %p team = [0, 1, 2, 3] : tensor<64x4xf32> -> !hir.handle
// RING-NEXT: %hy = hir.share %y team = [0, 1, 2, 3] : tensor<16x4xf32> -> !hir.handle
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
// RING-NEXT: hir.for %c_1 = 1 to 2 {
// RING-NEXT: %dest_1 = hir.add_mod %next, %c_1 mod 4 : index
// RING-NEXT: %st_1 = hir.stream_for %c1 mod 4 : !hir.stream
// RING-NEXT: hir.sync_stream %st_1 : !hir.stream
// RING-NEXT: %pc_1 = hir.chunk %p [%dest_1] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %xc_1 = hir.chunk %x [%dest_1] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.matmul %xc_1, %w, %pc_1 acc %pc_1 : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
// RING: %tok_1 = hir.put %pc_1, %h, %prev block %dest_1 of 4 backend = cuda_ipc
// RING-NEXT: hir.wait %tok_1 : !hir.token
// RING-NEXT: %fence_1 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence_1 : !hir.token
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: }
// RING-NEXT: hir.for %c_2 = 2 to 3 {
// RING-NEXT: %dest_2 = hir.add_mod %next, %c_2 mod 4 : index
// RING: hir.matmul %xc_2, %w, %pc_2 acc %pc_2 : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
// RING: %tok_2 = hir.put %pc_2, %hy, %prev backend = cuda_ipc
// RING-NEXT: hir.wait %tok_2 : !hir.token
// RING-NEXT: %fence_2 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence_2 : !hir.token
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: }
// RING-NEXT: %st_5 = hir.stream_for %c1 mod 4 : !hir.stream
// RING-NEXT: hir.sync_stream %st_5 : !hir.stream
// RING-NEXT: %xc_3 = hir.chunk %x [%pos] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.matmul %xc_3, %w, %y acc %y : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING: %fence_3 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence_3 : !hir.token
// RING-NEXT: hir.dealloc %p : tensor<64x4xf32>
// RING-NOT: hir.alloc
// RING-NOT: hir.launch
// RING-NOT: hir.reduce_scatter
// Ring, pull form: the GEMMs run back to back on the compute stream and
// never wait; step t (a loop of one iteration, %c = t) computes block
// pos + 1 + t into the shared %p, then on stream 2 a fence (every device's
// step t is done: it runs beside the previous step's get) and on transfer
// stream 1 after it a get of block pos from device pos - 1 - t (pos + 3 -
// t mod 4) into slot t of %pulled. The own block is computed
// into %y, then one launch adds the three pulled partials to it.
// PULL-LABEL: func.func @main
// PULL: %h = hir.share %p team = [0, 1, 2, 3] : tensor<64x4xf32> -> !hir.handle
// PULL-NEXT: %pulled = hir.alloc "main/0/0/pulled" : tensor<48x4xf32>
// PULL: %sf = hir.stream_for %c2 mod 4 : !hir.stream
// PULL: hir.for %c = 0 to 1 {
// PULL-NEXT: %dest = hir.add_mod %next, %c mod 4 : index
// PULL-NEXT: %from = hir.add_mod %pos, %c3 mod 4 : index
// PULL-NEXT: %xc = hir.chunk %x [%dest] dim = 0 chunks = 4
// PULL-NEXT: %pc = hir.chunk %p [%dest] dim = 0 chunks = 4
// PULL-NEXT: hir.matmul %xc, %w, %pc : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// PULL-NEXT: %st = hir.stream_for %c1 mod 4 : !hir.stream
// PULL-NEXT: hir.set_current_stream %sf : !hir.stream
// PULL-NEXT: hir.sync_stream %s : !hir.stream
// PULL-NEXT: %fence = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// PULL-NEXT: hir.wait %fence : !hir.token
// PULL-NEXT: hir.set_current_stream %st : !hir.stream
// PULL-NEXT: hir.sync_stream %sf : !hir.stream
// PULL-NEXT: %slot = hir.chunk %pulled [%c] dim = 0 chunks = 3 : (tensor<48x4xf32>, index) -> tensor<16x4xf32>
// PULL-NEXT: %tok = hir.get %h, %from, %slot block %pos of 4 backend = cuda_ipc
// PULL-NEXT: hir.wait %tok : !hir.token
// PULL-NEXT: hir.set_current_stream %s : !hir.stream
// PULL-NEXT: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64, form = "pull"
// PULL: hir.for %c_1 = 1 to 2 {
// PULL: %from_1 = hir.add_mod %pos, %c2 mod 4 : index
// PULL: hir.for %c_2 = 2 to 3 {
// PULL: %from_2 = hir.add_mod %pos, %c1 mod 4 : index
// PULL: hir.matmul %xc_3, %w, %y : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// PULL-NEXT: %st_3 = hir.stream_for %c1 mod 4 : !hir.stream
// PULL-NEXT: hir.set_current_stream %st_3 : !hir.stream
// PULL-NEXT: hir.sync_stream %s : !hir.stream
// PULL: hir.launch ins(%y, %slot_3, %slot_4, %slot_5 : {{.*}}) outs(%y : tensor<16x4xf32>) {
// PULL: fusion.add
// PULL-NEXT: fusion.add
// PULL-NEXT: fusion.add
// PULL: %fence_3 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// PULL-NEXT: hir.wait %fence_3 : !hir.token
// PULL-NEXT: hir.dealloc %pulled : tensor<48x4xf32>
// PULL-NOT: hir.put
// PULL-NOT: hir.reduce_scatter
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
// PULL-LABEL: func.func @not_sites
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

// -----

// Two devices: step 0 is also step d - 2, so its put goes into the peer's
// output; a fence first, so that the peer no longer reads its output of an
// earlier run.
// COLL-LABEL: func.func @pair
// PULL-LABEL: func.func @pair
// PULL: %pulled = hir.alloc "pair/0/0/pulled" : tensor<32x4xf32>
// PULL: %tok = hir.get %h, %from, %pulled block %pos of 2 backend = cuda_ipc
// PULL: hir.matmul %xc_1, %w, %y : tensor<32x8xf32>, tensor<8x4xf32>, tensor<32x4xf32>
// PULL: hir.launch ins(%y, %pulled : tensor<32x4xf32>, tensor<32x4xf32>) outs(%y : tensor<32x4xf32>)
// RING-LABEL: func.func @pair
// RING: %hy = hir.share %y team = [0, 1] : tensor<32x4xf32> -> !hir.handle
// RING: hir.matmul %xc, %w, %pc : tensor<32x8xf32>, tensor<8x4xf32>, tensor<32x4xf32>
// RING: hir.sync_stream %s : !hir.stream
// RING-NEXT: %fence = hir.barrier team = [0, 1] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence : !hir.token
// RING-NEXT: %tok = hir.put %pc, %hy, %prev backend = cuda_ipc
// RING: hir.matmul %xc_1, %w, %y acc %y : tensor<32x8xf32>, tensor<8x4xf32>, tensor<32x4xf32>, tensor<32x4xf32>
func.func @pair(%x: tensor<64x8xf32>, %w: tensor<8x4xf32>) -> tensor<32x4xf32> attributes {hir.host} {
  %p = hir.alloc "pair/0/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p {hir.stream = [0, 2]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y = hir.alloc "pair/1/0" : tensor<32x4xf32>
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x4xf32>, tensor<32x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  hir.dealloc %p : tensor<64x4xf32>
  func.return %y : tensor<32x4xf32>
}

// -----

// The pull form's final add folded into the launch reading the result (a
// bias and a residual add, then a row norm): that launch reads the own
// block and the three pulled partials and adds them first, one kernel
// instead of two; the sum launch is gone. Where the reader reduces over
// rows (a norm's backward: a kernel of its own would read the inputs
// again), or the result is read again later, the sum stays.
// PULL-LABEL: func.func @folded
// PULL: hir.matmul %xc_3, %w, %y
// PULL-NOT: outs(%y
// PULL: hir.launch ins(%y, %slot_3, %slot_4, %slot_5, %b, %r : {{.*}}) outs(%z : tensor<16x4xf32>) {
// PULL-NEXT: ^bb0(%sum: tensor<16x4xf32>, %part: tensor<16x4xf32>, %part_1: tensor<16x4xf32>, %part_2: tensor<16x4xf32>, %{{.*}}: tensor<4xf32>, %{{.*}}: tensor<16x4xf32>):
// PULL-NEXT: %[[S1:.*]] = fusion.add %sum, %part
// PULL-NEXT: %[[S2:.*]] = fusion.add %[[S1]], %part_1
// PULL-NEXT: %[[S3:.*]] = fusion.add %[[S2]], %part_2
// PULL-NEXT: fusion.add %[[S3]], %{{.*}} : (tensor<16x4xf32>, tensor<4xf32>)
// PULL: fusion.layer_norm
// PULL: hir.dealloc %y
// PULL: hir.dealloc %pulled
// COLL-LABEL: func.func @folded
// COLL: hir.launch ins(%y, %b, %r
func.func @folded(%x: tensor<64x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>, %r: tensor<16x4xf32>) -> tensor<16x4xf32> attributes {hir.host} {
  %p = hir.alloc "f/0/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y = hir.alloc "f/1/0" : tensor<16x4xf32>
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  hir.dealloc %p : tensor<64x4xf32>
  %z = hir.alloc "f/2/0" : tensor<16x4xf32>
  hir.launch ins(%y, %b, %r : tensor<16x4xf32>, tensor<4xf32>, tensor<16x4xf32>) outs(%z : tensor<16x4xf32>) {
  ^bb0(%a: tensor<16x4xf32>, %bb: tensor<4xf32>, %rr: tensor<16x4xf32>):
    %t = fusion.add %a, %bb : (tensor<16x4xf32>, tensor<4xf32>) -> tensor<16x4xf32>
    %u = fusion.add %rr, %t : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %n = fusion.layer_norm %u, %bb dims = [1] : (tensor<16x4xf32>, tensor<4xf32>) -> tensor<16x4xf32>
    hir.yield %n : tensor<16x4xf32>
  }
  hir.dealloc %y : tensor<16x4xf32>
  func.return %z : tensor<16x4xf32>
}

// -----

// PULL-LABEL: func.func @kept_sums
// PULL: hir.launch ins(%y, %slot_3, %slot_4, %slot_5 : {{.*}}) outs(%y : tensor<16x4xf32>)
// PULL: hir.launch ins(%y : tensor<16x4xf32>) outs(%colsum : tensor<4xf32>)
// PULL: hir.launch ins(%y2, %slot_9, %slot_10, %slot_11 : {{.*}}) outs(%y2 : tensor<16x4xf32>)
// PULL: hir.launch ins(%y2 : tensor<16x4xf32>) outs(%z : tensor<16x4xf32>)
func.func @kept_sums(%x: tensor<64x8xf32>, %w: tensor<8x4xf32>) -> (tensor<4xf32>, tensor<16x4xf32>, tensor<16x4xf32>) attributes {hir.host} {
  %p = hir.alloc "k/0/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y = hir.alloc "k/1/0" : tensor<16x4xf32>
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  hir.dealloc %p : tensor<64x4xf32>
  %colsum = hir.alloc "k/2/0" : tensor<4xf32>
  hir.launch ins(%y : tensor<16x4xf32>) outs(%colsum : tensor<4xf32>) {
  ^bb0(%a: tensor<16x4xf32>):
    %s = fusion.sum %a dims = [0] : (tensor<16x4xf32>) -> tensor<4xf32>
    hir.yield %s : tensor<4xf32>
  }
  hir.dealloc %y : tensor<16x4xf32>
  %p2 = hir.alloc "k/3/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p2 {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y2 = hir.alloc "k/4/0" : tensor<16x4xf32>
  %tok2 = hir.reduce_scatter %p2, %y2 op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok2 : !hir.token
  hir.dealloc %p2 : tensor<64x4xf32>
  %z = hir.alloc "k/5/0" : tensor<16x4xf32>
  hir.launch ins(%y2 : tensor<16x4xf32>) outs(%z : tensor<16x4xf32>) {
  ^bb0(%a: tensor<16x4xf32>):
    %t = fusion.neg %a : (tensor<16x4xf32>) -> tensor<16x4xf32>
    hir.yield %t : tensor<16x4xf32>
  }
  func.return %colsum, %y2, %z : tensor<4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
}

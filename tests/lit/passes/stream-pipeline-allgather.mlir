// stream-pipeline on AllGather + GEMM written as x [DIDx, -] to
// y [Stream(S), -]: the host program lower-to-host-ir makes (allgather,
// wait, then the GEMM, marked hir.stream = [0, S]) becomes a loop over S
// chunks on rotating streams.
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=collective}' --split-input-file %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring num-streams=2}' --split-input-file %s | filecheck %s --check-prefix=RING

// Collective: the own block is copied into place, then per chunk c on
// stream c: Broadcast from device c, then the GEMM of that chunk.
// COLL-LABEL: func.func @main
// COLL: %xg = hir.alloc "main/0/0" : tensor<64x8xf32>
// COLL-NEXT: %y1 = hir.alloc "main/1/0" : tensor<64x4xf32>
// COLL-NEXT: %main = hir.get_current_stream : !hir.stream
// COLL-NEXT: %pos = hir.team_index team = [0, 1, 2, 3] : index
// COLL-NEXT: %mine = hir.chunk %xg [%pos] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// COLL-NEXT: hir.copy %x, %mine : tensor<16x8xf32>, tensor<16x8xf32>
// COLL-NEXT: hir.for %c = 0 to 4 {
// COLL-NEXT: %s = hir.stream_for %c mod 4 : !hir.stream
// COLL-NEXT: hir.set_current_stream %s : !hir.stream
// COLL-NEXT: hir.sync_stream %main : !hir.stream
// COLL-NEXT: %xc = hir.chunk %xg [%c] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// COLL-NEXT: %tok = hir.broadcast %xc root %c team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->Stream"} : (tensor<16x8xf32>, index) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: %yc = hir.chunk %y1 [%c] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// COLL-NEXT: hir.matmul %xc, %w, %yc : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 4 : i64, streams = 4 : i64, reason = "algorithm = collective requested; cost model
// COLL-NEXT: hir.set_current_stream %main : !hir.stream
// COLL-NEXT: hir.for %c_1 = 0 to 4 {
// COLL-NEXT: %s_1 = hir.stream_for %c_1 mod 4 : !hir.stream
// COLL-NEXT: hir.sync_stream %s_1 : !hir.stream
// COLL-NEXT: }
// COLL-NEXT: hir.dealloc %xg : tensor<64x8xf32>
// COLL-NOT: hir.allgather

// Ring: the shard copied into its block of the gathered buffer, which
// peers pull from, on the main stream before the local chunk's GEMM starts
// on the compute stream (worker 0; beside it the copy would be starved),
// a copy-engine fence on main; then per peer chunk (peer pos + c), in the
// order the GEMMs read them: its get (block `peer` of the peer's gathered
// buffer) on the one transfer stream (worker 1), and its GEMM on the
// compute stream after that get (the event is recorded before the next get
// is issued); the main stream joins, a final fence.
// RING-LABEL: func.func @main
// RING: %main = hir.get_current_stream : !hir.stream
// RING-NEXT: %pos = hir.team_index team = [0, 1, 2, 3] : index
// RING-NEXT: %ymine = hir.chunk %y1 [%pos] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: %mine = hir.chunk %xg [%pos] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.copy %x, %mine : tensor<16x8xf32>, tensor<16x8xf32>
// RING-NEXT: %h = hir.share %xg team = [0, 1, 2, 3] : tensor<64x8xf32> -> !hir.handle
// RING-NEXT: %c0 = hir.constant 0 : index
// RING-NEXT: %s = hir.stream_for %c0 mod 2 : !hir.stream
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: hir.sync_stream %main : !hir.stream
// RING-NEXT: hir.for %c = 0 to 1 {
// RING-NEXT: hir.matmul %x, %w, %ymine : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// RING-NEXT: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 2 : i64, reason = "algorithm = ring requested; cost model
// The fence is on the main stream, which every pull waits for.
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING-NEXT: %fence = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence : !hir.token
// RING-NEXT: %c1 = hir.constant 1 : index
// RING-NEXT: %st = hir.stream_for %c1 mod 2 : !hir.stream
// RING-NEXT: hir.for %c_1 = 1 to 4 {
// RING-NEXT: %peer = hir.add_mod %pos, %c_1 mod 4 : index
// RING-NEXT: %blk = hir.chunk %xg [%peer] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.set_current_stream %st : !hir.stream
// RING-NEXT: hir.sync_stream %main : !hir.stream
// RING-NEXT: %tok = hir.get %h, %peer, %blk block %peer of 4 backend = cuda_ipc {hir.reshard = "DIDx->Stream"} : (!hir.handle, index, tensor<16x8xf32>, index) -> !hir.token
// RING-NEXT: hir.wait %tok : !hir.token
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: hir.sync_stream %st : !hir.stream
// RING-NEXT: %yblk = hir.chunk %y1 [%peer] dim = 0 chunks = 4 : (tensor<64x4xf32>, index) -> tensor<16x4xf32>
// RING-NEXT: hir.matmul %blk, %w, %yblk : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
// RING-NEXT: }
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING-NEXT: hir.for %c_2 = 0 to 2 {
// RING-NEXT: %s_1 = hir.stream_for %c_2 mod 2 : !hir.stream
// RING-NEXT: hir.sync_stream %s_1 : !hir.stream
// RING-NEXT: }
// RING-NEXT: hir.dealloc %xg : tensor<64x8xf32>
// No peer pulls from %xg any more after this fence; it is passed at the
// end of the block, not in the way of the work after the pipeline (the
// buffer released above is its allocation site's: nothing else in the
// run writes it).
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING-NEXT: %fence_1 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence_1 : !hir.token
// RING-NEXT: hir.yield %y1 : tensor<64x4xf32>
// RING-NOT: hir.allgather
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<16x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>},
                %w: tensor<8x4xf32> {hir.global = tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>>})
    -> (tensor<64x4xf32> {hir.global = tensor<64x4xf32, #fusion.sharding<@tp, [Stream(4), -]>>}) attributes {hir.host} {
  %y = hir.if_rank [0, 1, 2, 3] -> (tensor<64x4xf32>) {
    %xg = hir.alloc "main/0/0" : tensor<64x8xf32>
    %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.stream = [0, 4], hir.reshard = "DIDx->Stream"} : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
    hir.wait %tok : !hir.token
    %y1 = hir.alloc "main/1/0" : tensor<64x4xf32>
    hir.matmul %xg, %w, %y1 {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
    hir.dealloc %xg : tensor<64x8xf32>
    hir.yield %y1 : tensor<64x4xf32>
  }
  func.return %y : tensor<64x4xf32>
}

// -----

// Linear with bias, Stream(8) on 4 devices: two chunks per device (k = 2).
// Chunk c belongs to device c / 2, sub-chunk c mod 2; the ring gets block
// 2 peer + sub of 8 of the peer's gathered buffer.
// COLL-LABEL: func.func @linear
// COLL: %c0 = hir.constant 0 : index
// COLL-NEXT: hir.for %c = 0 to 8 {
// COLL: %dev = hir.div %c by 2 : index
// COLL-NEXT: %sub = hir.add_mod %c, %c0 mod 2 : index
// COLL-NEXT: %xc = hir.chunk %xg [%c] dim = 0 chunks = 8 : (tensor<64x8xbf16>, index) -> tensor<8x8xbf16>
// COLL-NEXT: %tok = hir.broadcast %xc root %dev team = [0, 1, 2, 3] backend = nccl : (tensor<8x8xbf16>, index) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: %yc = hir.chunk %y [%c] dim = 0 chunks = 8 : (tensor<64x4xbf16>, index) -> tensor<8x4xbf16>
// COLL-NEXT: hir.linear %xc, %w, %b, %yc : tensor<8x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>, tensor<8x4xbf16>
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 8 : i64, streams = 8 : i64
// RING-LABEL: func.func @linear
// RING: hir.for %c = 0 to 2 {
// RING: %xc = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<16x8xbf16>, index) -> tensor<8x8xbf16>
// RING-NEXT: %yc = hir.chunk %ymine [%c] dim = 0 chunks = 2 : (tensor<16x4xbf16>, index) -> tensor<8x4xbf16>
// RING-NEXT: hir.linear %xc, %w, %b, %yc : tensor<8x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>, tensor<8x4xbf16>
// RING-NEXT: } {hir.pipeline = {algorithm = "ring", chunks = 8 : i64, streams = 2 : i64
// RING: hir.for %c_1 = 2 to 8 {
// RING: %dev = hir.div %c_1 by 2 : index
// RING-NEXT: %sub = hir.add_mod %c_1, %c0 mod 2 : index
// RING-NEXT: %peer = hir.add_mod %pos, %dev mod 4 : index
// RING-NEXT: %blk = hir.chunk %xg [%peer] dim = 0 chunks = 4 : (tensor<64x8xbf16>, index) -> tensor<16x8xbf16>
// RING-NEXT: %xc_1 = hir.chunk %blk [%sub] dim = 0 chunks = 2 : (tensor<16x8xbf16>, index) -> tensor<8x8xbf16>
// RING-NEXT: hir.set_current_stream %st : !hir.stream
// RING-NEXT: hir.sync_stream %main : !hir.stream
// RING-NEXT: %qk = hir.add_mod %peer, %peer mod 8 : index
// RING-NEXT: %blk_1 = hir.add_mod %qk, %sub mod 8 : index
// RING-NEXT: %tok = hir.get %h, %peer, %xc_1 block %blk_1 of 8 backend = cuda_ipc : (!hir.handle, index, tensor<8x8xbf16>, index) -> !hir.token
// RING: hir.linear %xc_1, %w, %b, %yc_1 : tensor<8x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>, tensor<8x4xbf16>
fusion.mesh @tp shape = [4]
func.func @linear(%x: tensor<16x8xbf16>, %w: tensor<4x8xbf16>, %b: tensor<4xbf16>) -> tensor<64x4xbf16> attributes {hir.host} {
  %xg = hir.alloc "linear/0/0" : tensor<64x8xbf16>
  %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.stream = [0, 8]} : (tensor<16x8xbf16>, tensor<64x8xbf16>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "linear/1/0" : tensor<64x4xbf16>
  hir.linear %xg, %w, %b, %y {hir.stream = [0, 8]} : tensor<64x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>, tensor<64x4xbf16>
  hir.dealloc %xg : tensor<64x8xbf16>
  func.return %y : tensor<64x4xbf16>
}

// -----

// The gathered buffer is read after the GEMM: it holds this device's own
// block too (copied there before the pulls, which read the peers' blocks
// of it), and nothing is copied after the ring.
// RING-LABEL: func.func @gathered_read_later
// RING: %mine = hir.chunk %xg [%pos] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// RING-NEXT: hir.copy %x, %mine : tensor<16x8xf32>, tensor<16x8xf32>
// RING-NEXT: %h = hir.share %xg team = [0, 1, 2, 3] : tensor<64x8xf32> -> !hir.handle
// RING: hir.matmul %blk, %w, %yblk
// RING-NEXT: }
// RING-NEXT: hir.set_current_stream %main : !hir.stream
// RING-NEXT: hir.for
// RING-NOT: hir.copy
// RING: func.return %y, %xg : tensor<64x4xf32>, tensor<64x8xf32>
// COLL-LABEL: func.func @gathered_read_later
fusion.mesh @tp shape = [4]
func.func @gathered_read_later(%x: tensor<16x8xf32>, %w: tensor<8x4xf32>) -> (tensor<64x4xf32>, tensor<64x8xf32>) attributes {hir.host} {
  %xg = hir.alloc "g/0/0" : tensor<64x8xf32>
  %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "g/1/0" : tensor<64x4xf32>
  hir.matmul %xg, %w, %y {hir.stream = [0, 4]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  func.return %y, %xg : tensor<64x4xf32>, tensor<64x8xf32>
}

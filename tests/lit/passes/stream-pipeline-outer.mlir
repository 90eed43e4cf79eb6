// stream-pipeline on an AllGather per chunk: x [Stream(S)*DIDx, -] to
// y [Stream(S), -]. Each device holds a block of every chunk, so the
// unpipelined host program gathers chunk by chunk (a loop of S allgathers
// on chunk views) before the GEMM (hir.stream = [0, S]).
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=collective}' %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring}' %s | filecheck %s --check-prefix=RING
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=none}' %s | filecheck %s --check-prefix=NONE

// Collective: the GEMM of chunk c joins the loop, on stream c.
// COLL: %main = hir.get_current_stream : !hir.stream
// COLL-NEXT: hir.for %c = 0 to 2 {
// COLL-NEXT: %s = hir.stream_for %c mod 2 : !hir.stream
// COLL-NEXT: hir.set_current_stream %s : !hir.stream
// COLL-NEXT: hir.sync_stream %main : !hir.stream
// COLL-NEXT: %mine = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<32x16xf32>, index) -> tensor<16x16xf32>
// COLL-NEXT: %xc = hir.chunk %xg [%c] dim = 0 chunks = 2 : (tensor<64x16xf32>, index) -> tensor<32x16xf32>
// COLL-NEXT: %tok = hir.allgather %mine, %xc team = [0, 1] backend = nccl {hir.reshard = "DIDx->Stream"} : (tensor<16x16xf32>, tensor<32x16xf32>) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: %0 = hir.chunk %y1 [%c] dim = 0 chunks = 2 : (tensor<64x8xf32>, index) -> tensor<32x8xf32>
// COLL-NEXT: hir.matmul %xc, %w, %0 : tensor<32x16xf32>, tensor<16x8xf32>, tensor<32x8xf32>
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64

// Ring: per chunk c, the own block copied into place and block c of each
// peer's shard pulled, all ahead of the GEMMs.
// RING: %xs = hir.alloc "main/0/0/ring" : tensor<32x16xf32>
// RING-NEXT: hir.copy %x, %xs : tensor<32x16xf32>, tensor<32x16xf32>
// RING-NEXT: %h = hir.share %xs team = [0, 1] : tensor<32x16xf32> -> !hir.handle
// RING-NEXT: %fence = hir.barrier team = [0, 1] backend = cuda_ipc : !hir.token
// RING-NEXT: hir.wait %fence : !hir.token
// RING-NEXT: hir.for %c = 0 to 2 {
// RING-NEXT: %s = hir.stream_for %c mod 2 : !hir.stream
// RING-NEXT: hir.set_current_stream %s : !hir.stream
// RING-NEXT: hir.sync_stream %main : !hir.stream
// RING-NEXT: %mine = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<32x16xf32>, index) -> tensor<16x16xf32>
// RING-NEXT: %xc = hir.chunk %xg [%c] dim = 0 chunks = 2 : (tensor<64x16xf32>, index) -> tensor<32x16xf32>
// RING-NEXT: %own = hir.chunk %xc [%pos] dim = 0 chunks = 2 : (tensor<32x16xf32>, index) -> tensor<16x16xf32>
// RING-NEXT: hir.copy %mine, %own : tensor<16x16xf32>, tensor<16x16xf32>
// RING-NEXT: hir.for %t = 1 to 2 {
// RING-NEXT: %peer = hir.add_mod %pos, %t mod 2 : index
// RING-NEXT: %piece = hir.chunk %xc [%peer] dim = 0 chunks = 2 : (tensor<32x16xf32>, index) -> tensor<16x16xf32>
// RING-NEXT: %tok = hir.get %h, %peer, %piece block %c of 2 backend = cuda_ipc {hir.reshard = "DIDx->Stream"} : (!hir.handle, index, tensor<16x16xf32>, index) -> !hir.token
// RING-NEXT: hir.wait %tok : !hir.token
// RING-NEXT: }
// RING-NEXT: } {hir.pipeline = {algorithm = "ring", chunks = 2 : i64, streams = 2 : i64
// RING-NEXT: hir.for %c_1 = 0 to 2 {
// RING-NEXT: %s_1 = hir.stream_for %c_1 mod 2 : !hir.stream
// RING-NEXT: hir.set_current_stream %s_1 : !hir.stream
// RING-NEXT: %0 = hir.chunk %xg [%c_1] dim = 0 chunks = 2 : (tensor<64x16xf32>, index) -> tensor<32x16xf32>
// RING-NEXT: %1 = hir.chunk %y1 [%c_1] dim = 0 chunks = 2 : (tensor<64x8xf32>, index) -> tensor<32x8xf32>
// RING-NEXT: hir.matmul %0, %w, %1 : tensor<32x16xf32>, tensor<16x8xf32>, tensor<32x8xf32>
// RING-NEXT: }
// RING: %fence_1 = hir.barrier team = [0, 1] backend = cuda_ipc : !hir.token

// With algorithm = none the loop and the GEMM stay, each saying why.
// NONE: hir.for %c = 0 to 2 {
// NONE: hir.allgather %a, %b
// NONE: } {hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "algorithm = none requested"}}
// NONE: hir.matmul %xg, %w, %y1 {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", {{.*}}reason = "algorithm = none requested"}}
fusion.mesh @tp shape = [2]
func.func @main(%x: tensor<32x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>},
                %w: tensor<16x8xf32> {hir.global = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>})
    -> (tensor<64x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2), -]>>}) attributes {hir.host} {
  %y = hir.if_rank [0, 1] -> (tensor<64x8xf32>) {
    %xg = hir.alloc "main/0/0" : tensor<64x16xf32>
    hir.for %c = 0 to 2 {
      %a = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<32x16xf32>, index) -> tensor<16x16xf32>
      %b = hir.chunk %xg [%c] dim = 0 chunks = 2 : (tensor<64x16xf32>, index) -> tensor<32x16xf32>
      %t = hir.allgather %a, %b team = [0, 1] backend = nccl {hir.reshard = "DIDx->Stream", hir.stream = [0, 2]} : (tensor<16x16xf32>, tensor<32x16xf32>) -> !hir.token
      hir.wait %t : !hir.token
    }
    %y1 = hir.alloc "main/1/0" : tensor<64x8xf32>
    hir.matmul %xg, %w, %y1 {hir.stream = [0, 2]} : tensor<64x16xf32>, tensor<16x8xf32>, tensor<64x8xf32>
    hir.dealloc %xg : tensor<64x16xf32>
    hir.yield %y1 : tensor<64x8xf32>
  }
  func.return %y : tensor<64x8xf32>
}

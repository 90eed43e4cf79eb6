// stream-pipeline on collectives run per chunk (a Stream split on another
// dimension than the one they communicate along: nvFuser's
// stream-parallel Allgather, Allreduce, ReduceScatter, matmul + AllReduce and
// its explicit [S, d, M/(S*d), K] AllGather + GEMM), and on the
// DIDx-to-Stream AllGather and the ReduceScatter to DIDx*Stream(k) without
// a GEMM: every op with a Stream split is pipelined or says why not.
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=collective}' %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring}' %s | filecheck %s --check-prefix=RING
// RUN: %fuserc opt -p 'stream-pipeline' %s | filecheck %s --check-prefix=AUTO

// The batched GEMM, the sum over the device dimension and the allreduce of
// chunk c, on stream c (nvFuser's matmul_AR: one loop).
// COLL-LABEL: func.func @matmul_allreduce
// COLL: %main = hir.get_current_stream : !hir.stream
// COLL-NEXT: hir.for %c = 0 to 2 {
// COLL-NEXT: %s = hir.stream_for %c mod 2 : !hir.stream
// COLL-NEXT: hir.set_current_stream %s : !hir.stream
// COLL-NEXT: hir.sync_stream %main : !hir.stream
// COLL-NEXT: %0 = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<2x1x8x4xf32>, index) -> tensor<1x1x8x4xf32>
// COLL-NEXT: %1 = hir.chunk %p [%c] dim = 0 chunks = 2 : (tensor<2x1x8x6xf32>, index) -> tensor<1x1x8x6xf32>
// COLL-NEXT: hir.matmul %0, %w, %1 : tensor<1x1x8x4xf32>, tensor<1x4x6xf32>, tensor<1x1x8x6xf32>
// COLL-NEXT: %2 = hir.chunk %y_local [%c] dim = 0 chunks = 2 : (tensor<2x8x6xf32>, index) -> tensor<1x8x6xf32>
// COLL-NEXT: hir.launch ins(%1 : tensor<1x1x8x6xf32>) outs(%2 : tensor<1x8x6xf32>) {
// COLL-NEXT: ^bb0(%p_1: tensor<1x1x8x6xf32>):
// COLL-NEXT: %y_local_1 = fusion.sum %p_1 dims = [1] : (tensor<1x1x8x6xf32>) -> tensor<1x8x6xf32>
// COLL-NEXT: hir.yield %y_local_1 : tensor<1x8x6xf32>
// COLL-NEXT: }
// COLL-NEXT: %yc = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<2x8x6xf32>, index) -> tensor<1x8x6xf32>
// COLL-NEXT: %tok = hir.allreduce %2, %yc op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->-"} : (tensor<1x8x6xf32>, tensor<1x8x6xf32>) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64
// RING-LABEL: func.func @matmul_allreduce
// RING: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64, reason = "algorithm = ring requested; a hir.allreduce per chunk after its compute has no ring form; cost model
// Small shapes: the per-chunk costs are not hidden, so auto leaves the split
// unpipelined, and each op of it says why.
// AUTO-LABEL: func.func @matmul_allreduce
// AUTO: hir.matmul %x, %w, %p {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "cost model (defaults): none {{.*}} ms < collective(S=2) {{.*}} ms"}}
// AUTO: } {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", {{.*}}reason = "cost model (defaults): none
// AUTO: %tok = hir.allreduce %y_local, %y_1 op = sum {{.*}}hir.pipeline = {algorithm = "none", {{.*}}reason = "cost model (defaults): none

// x [DIDx, -] to [Stream(4), -] without a GEMM (nvFuser's AllgatherP2p):
// chunk c broadcast from device c, or pulled from the peers.
// COLL-LABEL: func.func @allgather_alone
// COLL: %mine = hir.chunk %y_1 [%pos] dim = 0 chunks = 4 : (tensor<4x4xf32>, index) -> tensor<1x4xf32>
// COLL-NEXT: hir.copy %x, %mine : tensor<1x4xf32>, tensor<1x4xf32>
// COLL-NEXT: hir.for %c = 0 to 4 {
// COLL: %xc = hir.chunk %y_1 [%c] dim = 0 chunks = 4 : (tensor<4x4xf32>, index) -> tensor<1x4xf32>
// COLL-NEXT: %tok = hir.broadcast %xc root %c team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->Stream"} : (tensor<1x4xf32>, index) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 4 : i64
// RING-LABEL: func.func @allgather_alone
// RING: %mine = hir.chunk %y_1 [%pos] dim = 0 chunks = 4 : (tensor<4x4xf32>, index) -> tensor<1x4xf32>
// RING-NEXT: hir.copy %x, %mine : tensor<1x4xf32>, tensor<1x4xf32>
// RING-NEXT: %h = hir.share %y_1 team = [0, 1, 2, 3] : tensor<4x4xf32> -> !hir.handle
// RING: hir.for %c = 1 to 4 {
// RING: %tok = hir.get %h, %peer, %blk block %peer of 4 backend = cuda_ipc {hir.reshard = "DIDx->Stream"} : (!hir.handle, index, tensor<1x4xf32>, index) -> !hir.token
// RING: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64
// RING-NOT: hir.copy
// AUTO-LABEL: func.func @allgather_alone
// AUTO: hir.allgather %x, %y_1 {{.*}}hir.pipeline = {algorithm = "none", {{.*}}reason = "cost model (defaults): none

// A partial sum to [DIDx*Stream(2)] without a GEMM: the sum runs in chunks
// (a local site), chunk c of 8 is reduced to device c / 2.
// COLL-LABEL: func.func @reduce_scatter_alone
// COLL: hir.launch ins(%0 : tensor<8x2xf32>) outs(%1 : tensor<8xf32>) {
// COLL: } {hir.pipeline = {algorithm = "local", chunks = 2 : i64
// COLL: %dev = hir.div %c_2 by 2 : index
// COLL: %tok = hir.reduce %pc, %yc root %dev op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"}
// COLL: } {hir.pipeline = {algorithm = "collective", chunks = 8 : i64
// RING-LABEL: func.func @reduce_scatter_alone
// RING: } {hir.pipeline = {algorithm = "collective", chunks = 8 : i64, streams = 8 : i64, reason = "algorithm = ring requested; a hir.reduce_scatter without a GEMM has no ring form;

// The explicit device dimension: per chunk c, the allgather of chunk c of
// the shard, then the GEMM of chunk c (nvFuser's AG_matmul); by the ring,
// block c of each peer's shard pulled.
// COLL-LABEL: func.func @explicit_allgather_gemm
// COLL: hir.for %c = 0 to 2 {
// COLL: %1 = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<2x1x4x16xf32>, index) -> tensor<1x1x4x16xf32>
// COLL-NEXT: %mine = hir.view %1 : tensor<1x1x4x16xf32> -> tensor<1x4x16xf32>
// COLL-NEXT: %2 = hir.chunk %0 [%c] dim = 0 chunks = 2 : (tensor<2x4x4x16xf32>, index) -> tensor<1x4x4x16xf32>
// COLL-NEXT: %xc = hir.view %2 : tensor<1x4x4x16xf32> -> tensor<4x4x16xf32>
// COLL-NEXT: %tok = hir.allgather %mine, %xc team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->-"} : (tensor<1x4x16xf32>, tensor<4x4x16xf32>) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: %3 = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<2x4x4x8xf32>, index) -> tensor<1x4x4x8xf32>
// COLL-NEXT: hir.matmul %2, %w, %3 : tensor<1x4x4x16xf32>, tensor<16x8xf32>, tensor<1x4x4x8xf32>
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64
// RING-LABEL: func.func @explicit_allgather_gemm
// RING: %xs = hir.alloc "explicit_allgather_gemm/0/0/ring" : tensor<2x4x16xf32>
// RING-NEXT: %1 = hir.view %x : tensor<2x1x4x16xf32> -> tensor<2x4x16xf32>
// RING-NEXT: hir.copy %1, %xs : tensor<2x4x16xf32>, tensor<2x4x16xf32>
// RING: %own = hir.chunk %xc [%pos] dim = 0 chunks = 4 : (tensor<4x4x16xf32>, index) -> tensor<1x4x16xf32>
// RING-NEXT: hir.copy %mine, %own : tensor<1x4x16xf32>, tensor<1x4x16xf32>
// RING-NEXT: hir.for %t = 1 to 4 {
// RING-NEXT: %peer = hir.add_mod %pos, %t mod 4 : index
// RING-NEXT: %piece = hir.chunk %xc [%peer] dim = 0 chunks = 4 : (tensor<4x4x16xf32>, index) -> tensor<1x4x16xf32>
// RING-NEXT: %tok = hir.get %h, %peer, %piece block %c of 2 backend = cuda_ipc
// RING: } {hir.pipeline = {algorithm = "ring", chunks = 2 : i64
// RING: hir.matmul %4, %w, %5 : tensor<1x4x4x16xf32>, tensor<16x8xf32>, tensor<1x4x4x8xf32>

// The sum over the device dimension, then its reduce-scatter, chunk by
// chunk (nvFuser's ReduceScatter).
// COLL-LABEL: func.func @sum_reduce_scatter
// COLL: hir.for %c = 0 to 4 {
// COLL: hir.launch ins(%0 : tensor<1x1x4x8xf32>) outs(%1 : tensor<1x4x8xf32>) {
// COLL-NEXT: ^bb0
// COLL-NEXT: fusion.sum
// COLL-NEXT: hir.yield
// COLL-NEXT: }
// COLL-NEXT: %pc = hir.view %1 : tensor<1x4x8xf32> -> tensor<4x8xf32>
// COLL: %yc = hir.view %2 : tensor<1x1x8xf32> -> tensor<1x8xf32>
// COLL-NEXT: %tok = hir.reduce_scatter %pc, %yc op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<4x8xf32>, tensor<1x8xf32>) -> !hir.token
// COLL: } {hir.pipeline = {algorithm = "collective", chunks = 4 : i64
// AUTO-LABEL: func.func @sum_reduce_scatter
// AUTO: } {hir.stream = [0 : i64, 4 : i64], hir.pipeline = {algorithm = "none", {{.*}}reason = "cost model (defaults): none
// AUTO: } {hir.pipeline = {algorithm = "none", {{.*}}reason = "cost model (defaults): none

// What cannot run per chunk says why, whatever the algorithm.
// COLL-LABEL: func.func @explained
// COLL: hir.alltoall %x, %y_1 {{.*}}hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "not pipelined: Stream(2) cuts the dimension the hir.alltoall communicates along, so it runs whole"}}
// COLL: } {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "not pipelined: the launch of fusion.softmax is not computed by chunks of dim 0
fusion.mesh @tp shape = [4]
func.func @matmul_allreduce(%x: tensor<2x1x8x4xf32> {hir.global = tensor<2x4x8x4xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>}, %w: tensor<1x4x6xf32> {hir.global = tensor<4x4x6xf32, #fusion.sharding<@tp, [DIDx, -, -]>>}) -> (tensor<2x8x6xf32> {hir.global = tensor<2x8x6xf32, #fusion.sharding<@tp, [Stream(2), -, -]>>}) attributes {hir.host} {
    %y = hir.if_rank [0, 1, 2, 3] -> (tensor<2x8x6xf32>) {
      %p = hir.alloc "matmul_allreduce/0/0" : tensor<2x1x8x6xf32>
      hir.matmul %x, %w, %p {hir.stream = [0 : i64, 2 : i64]} : tensor<2x1x8x4xf32>, tensor<1x4x6xf32>, tensor<2x1x8x6xf32>
      %y_local = hir.alloc "matmul_allreduce/1/0" : tensor<2x8x6xf32>
      hir.launch ins(%p : tensor<2x1x8x6xf32>) outs(%y_local : tensor<2x8x6xf32>) {
      ^bb0(%p_1: tensor<2x1x8x6xf32>):
        %y_local_1 = fusion.sum %p_1 dims = [1] : (tensor<2x1x8x6xf32>) -> tensor<2x8x6xf32>
        hir.yield %y_local_1 : tensor<2x8x6xf32>
      } {hir.stream = [0 : i64, 2 : i64]}
      hir.dealloc %p : tensor<2x1x8x6xf32>
      %y_1 = hir.alloc "matmul_allreduce/2/0" : tensor<2x8x6xf32>
      %tok = hir.allreduce %y_local, %y_1 op = sum team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "partial->-"} : (tensor<2x8x6xf32>, tensor<2x8x6xf32>) -> !hir.token
      hir.wait %tok : !hir.token
      hir.dealloc %y_local : tensor<2x8x6xf32>
      hir.yield %y_1 : tensor<2x8x6xf32>
    }
    func.return %y : tensor<2x8x6xf32>
  }
func.func @allgather_alone(%x: tensor<1x4xf32> {hir.global = tensor<4x4xf32, #fusion.sharding<@tp, [DIDx, -]>>}) -> (tensor<4x4xf32> {hir.global = tensor<4x4xf32, #fusion.sharding<@tp, [Stream(4), -]>>}) attributes {hir.host} {
    %y = hir.if_rank [0, 1, 2, 3] -> (tensor<4x4xf32>) {
      %y_1 = hir.alloc "allgather_alone/0/0" : tensor<4x4xf32>
      %tok = hir.allgather %x, %y_1 team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 4 : i64], hir.reshard = "DIDx->Stream"} : (tensor<1x4xf32>, tensor<4x4xf32>) -> !hir.token
      hir.wait %tok : !hir.token
      hir.yield %y_1 : tensor<4x4xf32>
    }
    func.return %y : tensor<4x4xf32>
  }
func.func @reduce_scatter_alone(%x: tensor<16x2xf32> {hir.global = tensor<16x8xf32, #fusion.sharding<@tp, [-, DIDx]>>}) -> (tensor<4xf32> {hir.global = tensor<16xf32, #fusion.sharding<@tp, [DIDx*Stream(2)]>>}) attributes {hir.host} {
    %y = hir.if_rank [0, 1, 2, 3] -> (tensor<4xf32>) {
      %y_local = hir.alloc "reduce_scatter_alone/0/0" : tensor<16xf32>
      hir.launch ins(%x : tensor<16x2xf32>) outs(%y_local : tensor<16xf32>) {
      ^bb0(%x_1: tensor<16x2xf32>):
        %y_local_1 = fusion.sum %x_1 dims = [1] : (tensor<16x2xf32>) -> tensor<16xf32>
        hir.yield %y_local_1 : tensor<16xf32>
      } {hir.stream = [0 : i64, 2 : i64]}
      %y_1 = hir.alloc "reduce_scatter_alone/1/0" : tensor<4xf32>
      %tok = hir.reduce_scatter %y_local, %y_1 op = sum team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "partial->DIDx"} : (tensor<16xf32>, tensor<4xf32>) -> !hir.token
      hir.wait %tok : !hir.token
      hir.dealloc %y_local : tensor<16xf32>
      hir.yield %y_1 : tensor<4xf32>
    }
    func.return %y : tensor<4xf32>
  }
func.func @explicit_allgather_gemm(%x: tensor<2x1x4x16xf32> {hir.global = tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>}, %w: tensor<16x8xf32> {hir.global = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>}) -> (tensor<2x4x4x8xf32> {hir.global = tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>}) attributes {hir.host} {
    %y = hir.if_rank [0, 1, 2, 3] -> (tensor<2x4x4x8xf32>) {
      %0 = hir.alloc "explicit_allgather_gemm/0/0" : tensor<2x4x4x16xf32>
      hir.for %c = 0 to 2 {
        %1 = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<2x1x4x16xf32>, index) -> tensor<1x1x4x16xf32>
        %2 = hir.view %1 : tensor<1x1x4x16xf32> -> tensor<1x4x16xf32>
        %3 = hir.chunk %0 [%c] dim = 0 chunks = 2 : (tensor<2x4x4x16xf32>, index) -> tensor<1x4x4x16xf32>
        %4 = hir.view %3 : tensor<1x4x4x16xf32> -> tensor<4x4x16xf32>
        %tok = hir.allgather %2, %4 team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "DIDx->-"} : (tensor<1x4x16xf32>, tensor<4x4x16xf32>) -> !hir.token
        hir.wait %tok : !hir.token
      }
      %y_1 = hir.alloc "explicit_allgather_gemm/1/0" : tensor<2x4x4x8xf32>
      hir.matmul %0, %w, %y_1 {hir.stream = [0 : i64, 2 : i64]} : tensor<2x4x4x16xf32>, tensor<16x8xf32>, tensor<2x4x4x8xf32>
      hir.dealloc %0 : tensor<2x4x4x16xf32>
      hir.yield %y_1 : tensor<2x4x4x8xf32>
    }
    func.return %y : tensor<2x4x4x8xf32>
  }
func.func @sum_reduce_scatter(%x: tensor<4x1x4x8xf32> {hir.global = tensor<4x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>}) -> (tensor<4x1x8xf32> {hir.global = tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), DIDx, -]>>}) attributes {hir.host} {
    %y = hir.if_rank [0, 1, 2, 3] -> (tensor<4x1x8xf32>) {
      %y_local = hir.alloc "sum_reduce_scatter/0/0" : tensor<4x4x8xf32>
      hir.launch ins(%x : tensor<4x1x4x8xf32>) outs(%y_local : tensor<4x4x8xf32>) {
      ^bb0(%x_1: tensor<4x1x4x8xf32>):
        %y_local_1 = fusion.sum %x_1 dims = [1] : (tensor<4x1x4x8xf32>) -> tensor<4x4x8xf32>
        hir.yield %y_local_1 : tensor<4x4x8xf32>
      } {hir.stream = [0 : i64, 4 : i64]}
      %y_1 = hir.alloc "sum_reduce_scatter/1/0" : tensor<4x1x8xf32>
      hir.for %c = 0 to 4 {
        %0 = hir.chunk %y_local [%c] dim = 0 chunks = 4 : (tensor<4x4x8xf32>, index) -> tensor<1x4x8xf32>
        %1 = hir.view %0 : tensor<1x4x8xf32> -> tensor<4x8xf32>
        %2 = hir.chunk %y_1 [%c] dim = 0 chunks = 4 : (tensor<4x1x8xf32>, index) -> tensor<1x1x8xf32>
        %3 = hir.view %2 : tensor<1x1x8xf32> -> tensor<1x8xf32>
        %tok = hir.reduce_scatter %1, %3 op = sum team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 4 : i64], hir.reshard = "partial->DIDx"} : (tensor<4x8xf32>, tensor<1x8xf32>) -> !hir.token
        hir.wait %tok : !hir.token
      }
      hir.dealloc %y_local : tensor<4x4x8xf32>
      hir.yield %y_1 : tensor<4x1x8xf32>
    }
    func.return %y : tensor<4x1x8xf32>
  }
func.func @explained(%x: tensor<8x8xf32> {hir.global = tensor<32x8xf32, #fusion.sharding<@tp, [DIDx, -]>>}) -> (tensor<8x8xf32> {hir.global = tensor<8x32xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>>}, tensor<8x8xf32> {hir.global = tensor<32x8xf32, #fusion.sharding<@tp, [DIDx, -]>>}) attributes {hir.host} {
  %y, %z = hir.if_rank [0, 1, 2, 3] -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %y_1 = hir.alloc "explained/0/0" : tensor<8x8xf32>
    %tok = hir.alltoall %x, %y_1 team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "DIDx->DIDx"} : (tensor<8x8xf32>, tensor<8x8xf32>) -> !hir.token
    hir.wait %tok : !hir.token
    %z_1 = hir.alloc "explained/1/0" : tensor<8x8xf32>
    hir.launch ins(%x : tensor<8x8xf32>) outs(%z_1 : tensor<8x8xf32>) {
    ^bb0(%a: tensor<8x8xf32>):
      %s = fusion.softmax %a dim = 0 : (tensor<8x8xf32>) -> tensor<8x8xf32>
      hir.yield %s : tensor<8x8xf32>
    } {hir.stream = [0 : i64, 2 : i64]}
    hir.yield %y_1, %z_1 : tensor<8x8xf32>, tensor<8x8xf32>
  }
  func.return %y, %z : tensor<8x8xf32>, tensor<8x8xf32>
}

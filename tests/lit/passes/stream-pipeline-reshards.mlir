// The whole pipeline on Stream splits whose collectives run per chunk only
// by the layout make-resharding-contiguous gives them: GEMM +
// ReduceScatter in nvFuser's explicit layout with the split written on the
// partial product, an alltoall with a Stream split on a third dimension;
// one that cannot run per chunk (the split cuts the dimension the
// alltoall gathers), which says why, whatever the algorithm; and the
// alltoall of every team of a 2-D mesh, one op whose team has translates,
// pipelined as a 1-D mesh's is.
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{algorithm=collective}' %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{algorithm=ring}' %s | filecheck %s --check-prefix=RING
// RUN: %fuserc opt -p default %s | filecheck %s --check-prefix=AUTO
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{algorithm=none}' %s | filecheck %s --check-prefix=NONE
fusion.mesh @tp shape = [4]
fusion.mesh @g shape = [2, 2]

// Per chunk c on stream c: the GEMM of chunk c, then its reduce-scatter.
// COLL-LABEL: func.func @explicit_gemm_reduce_scatter
// COLL: hir.for %c = 0 to 2 {
// COLL-NEXT: %s = hir.stream_for %c mod 2 : !hir.stream
// COLL-NEXT: hir.set_current_stream %s : !hir.stream
// COLL-NEXT: hir.sync_stream %main : !hir.stream
// COLL-NEXT: %0 = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<2x4x4x4xf32>, index) -> tensor<1x4x4x4xf32>
// COLL-NEXT: %1 = hir.chunk %p [%c] dim = 0 chunks = 2 : (tensor<2x4x4x8xf32>, index) -> tensor<1x4x4x8xf32>
// COLL-NEXT: hir.matmul %0, %w, %1 : tensor<1x4x4x4xf32>, tensor<4x8xf32>, tensor<1x4x4x8xf32>
// COLL-NEXT: %pc = hir.view %1 : tensor<1x4x4x8xf32> -> tensor<4x4x8xf32>
// COLL-NEXT: %2 = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<2x1x4x8xf32>, index) -> tensor<1x1x4x8xf32>
// COLL-NEXT: %yc = hir.view %2 : tensor<1x1x4x8xf32> -> tensor<1x4x8xf32>
// COLL-NEXT: %tok = hir.reduce_scatter %pc, %yc op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<4x4x8xf32>, tensor<1x4x8xf32>) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64
// RING-LABEL: func.func @explicit_gemm_reduce_scatter
// RING: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64, reason = "algorithm = ring requested; a hir.reduce_scatter per chunk after its compute has no ring form;
// Small shapes: auto leaves it whole and says why, on the GEMM and the loop.
// AUTO-LABEL: func.func @explicit_gemm_reduce_scatter
// AUTO: hir.matmul %x, %w, %p {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "cost model (defaults): none
// AUTO: } {hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "cost model (defaults): none
// NONE-LABEL: func.func @explicit_gemm_reduce_scatter
// NONE: hir.matmul %x, %w, %p {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "algorithm = none requested"}}

func.func @explicit_gemm_reduce_scatter(%x: tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>> {
  %p = fusion.matmul %x, %w : (tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>
  %y = fusion.set %p : (tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>) -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
  func.return %y : tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
}

// Per chunk c on stream c: the alltoall of chunk c.
// COLL-LABEL: func.func @alltoall_chunks
// COLL: hir.for %c = 0 to 2 {
// COLL: %pc = hir.view %{{.*}} : tensor<1x4x2x2xf32> -> tensor<4x2x2xf32>
// COLL: %yc = hir.view %{{.*}} : tensor<1x1x8x2xf32> -> tensor<4x2x2xf32>
// COLL-NEXT: %tok = hir.alltoall %pc, %yc team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->DIDx"} : (tensor<4x2x2xf32>, tensor<4x2x2xf32>) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64
// RING-LABEL: func.func @alltoall_chunks
// RING: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64, streams = 2 : i64, reason = "algorithm = ring requested; a hir.alltoall per chunk has no ring form;
// AUTO-LABEL: func.func @alltoall_chunks
// AUTO: hir.alltoall
// AUTO: } {hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "cost model (defaults): none
// NONE-LABEL: func.func @alltoall_chunks
// NONE: } {hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "algorithm = none requested"}}

func.func @alltoall_chunks(%x: tensor<2x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>> {
  %y = fusion.set %x : (tensor<2x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>>
  func.return %y : tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>>
}

// The split cuts the dimension the alltoall gathers: one alltoall, and why.
// COLL-LABEL: func.func @alltoall_gathered_stream
// COLL-NOT: hir.for
// COLL: %tok = hir.alltoall %{{.*}}, %{{.*}} team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "DIDx->DIDx", hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "not pipelined: Stream(2) cuts the dimension the hir.alltoall communicates along, so it runs whole"}}
// AUTO-LABEL: func.func @alltoall_gathered_stream
// AUTO: hir.alltoall {{.*}}reason = "not pipelined: Stream(2) cuts the dimension the hir.alltoall communicates along, so it runs whole"
// NONE-LABEL: func.func @alltoall_gathered_stream
// NONE: hir.alltoall {{.*}}reason = "algorithm = none requested"

func.func @alltoall_gathered_stream(%x: tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>> {
  %y = fusion.set %x : (tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>>
}

// The Stream split inside the device split of the dimension the alltoall
// scatters (`DIDx*Stream(2)`): chunk c is column c of each device's block,
// one alltoall per chunk.
// COLL-LABEL: func.func @alltoall_scattered_stream
// COLL: hir.for %c = 0 to 2 {
// COLL: %pc = hir.chunk %{{.*}} [%c] dim = 2 chunks = 2 : (tensor<4x2x4xf32>, index) -> tensor<4x2x2xf32>
// COLL-NEXT: %yc = hir.chunk %{{.*}} [%c] dim = 2 chunks = 2 : (tensor<4x2x4xf32>, index) -> tensor<4x2x2xf32>
// COLL-NEXT: %tok = hir.alltoall %pc, %yc team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->DIDx"} : (tensor<4x2x2xf32>, tensor<4x2x2xf32>) -> !hir.token
// COLL: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64
// NONE-LABEL: func.func @alltoall_scattered_stream
// NONE: hir.alltoall {{.*}}hir.stream = [2 : i64, 2 : i64]{{.*}}reason = "algorithm = none requested"
func.func @alltoall_scattered_stream(%x: tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx*Stream(2)]>> {
  %y = fusion.set %x : (tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx*Stream(2)]>>
  func.return %y : tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx*Stream(2)]>>
}

// On a 2-D mesh the alltoall of every column is one op, in the region of
// the whole mesh with its buffers: it runs per chunk when asked, and the
// cost model weighs it as any other.
// COLL-LABEL: func.func @alltoall_mesh2d
// COLL: hir.for %c = 0 to 2 {
// COLL: hir.alltoall %pc, %yc team = [0, 2] translated [2 step 1] backend = nccl {hir.reshard = "DIDy->DIDy"}
// COLL: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64
// AUTO-LABEL: func.func @alltoall_mesh2d
// AUTO: hir.alltoall {{.*}}team = [0, 2] translated [2 step 1] {{.*}}reason = "cost model
func.func @alltoall_mesh2d(%x: tensor<8x8xf32, #fusion.sharding<@g, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>> {
  %y = fusion.relu %x : (tensor<8x8xf32, #fusion.sharding<@g, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>>
}

// GEMM + AllReduce written on the partial product (the result has no Stream
// split): the allreduce runs per chunk of the GEMM, in one loop.
// COLL-LABEL: func.func @gemm_allreduce_partial
// COLL: hir.for %c = 0 to 2 {
// COLL: %0 = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<4x4xf32>
// COLL-NEXT: %1 = hir.chunk %p [%c] dim = 0 chunks = 2 : (tensor<8x8xf32>, index) -> tensor<4x8xf32>
// COLL-NEXT: hir.matmul %0, %w, %1 : tensor<4x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
// COLL-NEXT: %yc = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<8x8xf32>, index) -> tensor<4x8xf32>
// COLL-NEXT: %tok = hir.allreduce %1, %yc op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->-"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> !hir.token
// COLL-NEXT: hir.wait %tok : !hir.token
// COLL-NEXT: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64
// AUTO-LABEL: func.func @gemm_allreduce_partial
// AUTO: hir.allreduce %p, %y_1 {{.*}}hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", {{.*}}reason = "cost model (defaults): none
func.func @gemm_allreduce_partial(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>> {
  %p = fusion.matmul %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), -], partial = DIDx>>
  %y = fusion.set %p : (tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), -], partial = DIDx>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>
}

// A reduce-scatter onto dim 2 of a partial product split Stream(2) on dim
// 0 (chunks of extent 4: not laid out first): the scattered dimension goes
// first, and the reduce-scatter runs per chunk of the split, now dim 1.
// COLL-LABEL: func.func @reduce_scatter_partial_stream
// COLL: hir.for %c = 0 to 2 {
// COLL: %[[P:.*]] = hir.chunk %p [%c] dim = 1 chunks = 2 : (tensor<8x4x8x8xf32>, index) -> tensor<8x2x8x8xf32>
// COLL: hir.launch
// COLL: %yc = hir.chunk %y [%c] dim = 1 chunks = 2 : (tensor<2x4x8x8xf32>, index) -> tensor<2x2x8x8xf32>
// COLL-NEXT: %tok = hir.reduce_scatter %[[P]], %yc op = sum
// COLL: } {hir.pipeline = {algorithm = "collective", chunks = 2 : i64
func.func @reduce_scatter_partial_stream(%x: tensor<4x8x8x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x8x8x8xf32, #fusion.sharding<@tp, [-, -, DIDx, -]>> {
  %p = fusion.matmul %x, %w : (tensor<4x8x8x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<4x8x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>
  %y = fusion.set %p : (tensor<4x8x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>) -> tensor<4x8x8x8xf32, #fusion.sharding<@tp, [-, -, DIDx, -]>>
  func.return %y : tensor<4x8x8x8xf32, #fusion.sharding<@tp, [-, -, DIDx, -]>>
}

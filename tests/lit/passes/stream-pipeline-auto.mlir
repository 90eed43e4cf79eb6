// algorithm=auto: the cost model chooses the algorithm and S, for the
// Stream splits the user wrote and for the AllGather+GEMM and
// GEMM+ReduceScatter sites the user did not split, where a pipeline pays.
// Each run names its links file, so the machine it models is fixed.
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{links="%S/Inputs/links-h200.json"}' --split-input-file %s | filecheck %s --check-prefix=H200
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{links="%S/Inputs/links-slow-copy.json"}' --split-input-file %s | filecheck %s --check-prefix=SLOWCOPY
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{links="%S/Inputs/links-h200.json" algorithm=ring}' --split-input-file %s | filecheck %s --check-prefix=FORCED
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{links="%S/Inputs/links-h200.json" chunks=8}' --split-input-file %s | filecheck %s --check-prefix=CHUNKS

// The headline AllGather + GEMM: the ring pulls with copy engines, so it
// beats the broadcasts; without copy engines worth the name (and with
// NCCL slowing a GEMM beside it by 10%, links-slow-copy.json), collective.
// H200-LABEL: func.func @headline
// H200: hir.for %c = 0 to 1 {
// H200: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64, reason = "cost model ({{.*}}links-h200.json): ring(S=4) {{.*}} ms < collective(S=4) {{.*}} ms"}}
// H200: hir.get
// SLOWCOPY-LABEL: func.func @headline
// SLOWCOPY: hir.broadcast
// SLOWCOPY: } {hir.pipeline = {algorithm = "collective", chunks = 4 : i64, streams = 4 : i64, reason = "cost model ({{.*}}links-slow-copy.json): collective(S=4) {{.*}} ms < ring(S=4)
// FORCED-LABEL: func.func @headline
// FORCED: } {hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64, reason = "algorithm = ring requested; cost model
// The written Stream(4) wins over the chunks option.
// CHUNKS-LABEL: func.func @headline
// CHUNKS: chunks = 4 : i64
fusion.mesh @tp shape = [4]
func.func @headline(%x: tensor<32768x16384xbf16, #fusion.sharding<@tp, [DIDx, -]>>,
                    %w: tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<32768x16384xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, -]>>) -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
}

// -----

// A written Stream split is not pipelined where the model says the
// unpipelined program is faster (small shapes): the GEMM says why. A
// forced algorithm pipelines it.
// H200-LABEL: func.func @small
// H200: hir.allgather
// H200: hir.matmul {{.*}}hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "cost model ({{.*}}links-h200.json): none {{.*}} ms < ring(S=4)
// H200-NOT: hir.for
// FORCED-LABEL: func.func @small
// FORCED: hir.pipeline = {algorithm = "ring", chunks = 4 : i64
// FORCED-NOT: hir.allgather
fusion.mesh @tp shape = [4]
func.func @small(%x: tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                 %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [Stream(4), -]>>
}

// -----

// A sequence-parallel MLP at large shapes, no Stream split written: auto
// adds a ring for the AllGather + GEMM and one for the GEMM +
// ReduceScatter. A forced algorithm runs every site with it.
// H200-LABEL: func.func @sp_mlp
// H200: hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64, reason = "cost model ({{.*}}): ring(S=4)
// H200: hir.get %{{.*}} backend = cuda_ipc {hir.reshard = "DIDx->-"}
// H200: fusion.gelu
// H200: hir.put %{{.*}} block %{{.*}} of 8 backend = cuda_ipc {hir.reshard = "partial->DIDx"}
// H200: hir.pipeline = {algorithm = "ring", chunks = 8 : i64, streams = 8 : i64, form = "sum", reason = "cost model ({{.*}}): ring(S=8, sum) {{.*}} ms < ring(S=4, pull)
// H200-NOT: hir.allgather
// H200-NOT: hir.reduce_scatter
// FORCED-LABEL: func.func @sp_mlp
// FORCED: hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64, reason = "algorithm = ring requested
// FORCED: hir.pipeline = {algorithm = "ring", chunks = 8 : i64, streams = 8 : i64, form = "sum", reason = "algorithm = ring requested
// FORCED-NOT: hir.allgather
// FORCED-NOT: hir.reduce_scatter
// With chunks = 8 the cost model only chooses the algorithm, at S = 8.
// CHUNKS-LABEL: func.func @sp_mlp
// CHUNKS: hir.pipeline = {algorithm = "ring", chunks = 8 : i64
// CHUNKS: hir.pipeline = {algorithm = "ring", chunks = 8 : i64, streams = 8 : i64, form = "sum"
// CHUNKS: hir.matmul {{.*}} acc
// CHUNKS: hir.put %{{.*}} block %{{.*}} of 8 backend = cuda_ipc {hir.reshard = "partial->DIDx"}
fusion.mesh @tp shape = [4]
func.func @sp_mlp(%x: tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>,
                  %w1: tensor<8192x16384xbf16, #fusion.sharding<@tp, [-, DIDx]>>,
                  %w2: tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<8192x16384xbf16, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16384x16384xbf16>
  %g = fusion.gelu %h : (tensor<16384x16384xbf16>) -> tensor<16384x16384xbf16>
  %y = fusion.matmul %g, %w2 : (tensor<16384x16384xbf16>, tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// The small example programs: nothing pays, the program stays as it is
// (a forced algorithm still pipelines them).
// FORCED-LABEL: func.func @sp_mlp_small
// FORCED-COUNT-2: algorithm = "ring"
// H200-LABEL: func.func @sp_mlp_small
// H200-NOT: hir.pipeline
// H200-NOT: hir.for
// H200: hir.allgather
// H200: hir.reduce_scatter
fusion.mesh @tp shape = [4]
func.func @sp_mlp_small(%x: tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                        %w1: tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>,
                        %w2: tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<64x256xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<128x256xf32>
  %g = fusion.gelu %h : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %y = fusion.matmul %g, %w2 : (tensor<128x256xf32>, tensor<256x64xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<128x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

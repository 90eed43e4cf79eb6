// The report of programs lowered by the passes: a ring-pipelined
// AllGather + GEMM and a GEMM + ReduceScatter, written with a Stream split,
// under each algorithm; bytes derived by hand (f32, 4 ranks).
// RUN: %fuserc opt %s -p 'default{algorithm=ring ring-form=pull}' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=RING
// RUN: %fuserc opt %s -p 'default{algorithm=ring ring-form=sum}' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=SUM
// RUN: %fuserc opt %s -p 'default{algorithm=collective}' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt %s -p 'default{algorithm=none}' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=NONE
// A unit that is not a tensor type is bad usage.
// RUN: %exitcode %fuserc opt %s --comm-report-unit 8192xbf 2>&1 | filecheck %s --check-prefix=USAGE

// x [DIDx, -] 64x16 gathered for the GEMM: 3/4 of 64x16 f32 (4096 bytes)
// = 3072 per rank, as 3 gets of a peer's 16x16 (1024 bytes) in the ring,
// each beside the GEMMs of the chunks already there. The partial product
// 64x8 f32 reduce-scattered: 3/4 of 2048 = 1536, as 3 blocks of 16x8 (512
// bytes) pulled from peers (pull form) beside the GEMMs of later blocks,
// or put to the previous rank (sum form): with one chunk per device each
// put goes after the GEMM making it and before the next GEMM, which needs
// it, so nothing overlaps.
// RING:      @main:
// RING-NEXT:   #  kind  dtype  shape  n  team   times  bytes  reshard        overlap
// RING-NEXT:   1  get   f32    16x16  4  [0-3]      3   3072  DIDx->Stream   gemm
// RING-NEXT:   2  get   f32    16x8   4  [0-3]      1    512  partial->DIDx  gemm
// RING-NEXT:   3  get   f32    16x8   4  [0-3]      1    512  partial->DIDx  gemm
// RING-NEXT:   4  get   f32    16x8   4  [0-3]      1    512  partial->DIDx  gemm
// RING-NEXT:   total per rank (4 ranks): 6 communications, {{[0-9]+}} fences, 4608 bytes (0.00 MiB), overlapped 4608 bytes (100.0%)
// SUM:       @main:
// SUM:         put   f32    16x8   4  [0-3]      1    512  partial->DIDx  no
// SUM:         total per rank (4 ranks): 6 communications, {{[0-9]+}} fences, 4608 bytes (0.00 MiB), overlapped 3072 bytes (66.7%)
// Collective: per chunk a broadcast of 16x16 from its device (NCCL counts
// the whole 1024 bytes: 4 x 1024 = 4096) and a reduce of 16x8 to the
// chunk's device (4 x 512 = 2048), on rotating streams beside other
// chunks' GEMMs.
// COLL:      @main:
// COLL-NEXT:   #  kind       dtype  shape  n  team   times  bytes  reshard        overlap
// COLL-NEXT:   1  broadcast  f32    16x16  4  [0-3]      4   4096  DIDx->Stream   gemm
// COLL-NEXT:   2  reduce     f32    16x8   4  [0-3]      4   2048  partial->DIDx  gemm
// COLL-NEXT:   total per rank (4 ranks): 8 communications, 6144 bytes (0.01 MiB), overlapped 6144 bytes (100.0%)
// Unpipelined: one allgather and one reduce-scatter, each waited at once.
// NONE:      @main:
// NONE-NEXT:   #  kind            dtype  shape  n  team   times  bytes  reshard        overlap
// NONE-NEXT:   1  allgather       f32    64x16  4  [0-3]      1   3072  DIDx->Stream   no
// NONE-NEXT:   2  reduce_scatter  f32    64x8   4  [0-3]      1   1536  partial->DIDx  no
// NONE-NEXT:   total per rank (4 ranks): 2 communications, 4608 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
// USAGE: Invalid value for '--comm-report-unit': a unit is a tensor type such as 8192x4096xbf16, got '8192xbf'
// USAGE: exit code: 2
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>,
                %v: tensor<32x8xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), DIDx]>>
  %p = fusion.matmul %h, %v : (tensor<64x32xf32, #fusion.sharding<@tp, [Stream(4), DIDx]>>, tensor<32x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -], partial = DIDx>>
  %y = fusion.set %p : (tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -], partial = DIDx>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

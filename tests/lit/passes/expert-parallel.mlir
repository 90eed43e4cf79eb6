// RUN: %fuserc opt %examples/moe_layer.mlir -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=D4
// RUN: %fuserc opt %examples/moe_layer.mlir --mesh tp=2 -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=D2
// RUN: %python %examples/python/moe_layer.py --print --devices 4 | %fuserc opt - -p 'default{token-chunks=2}' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=CHUNKS
// RUN: %python %examples/python/moe_layer.py --print --devices 4 --dp 2 --tokens 32 --hidden 16 --ffn 24 --experts 8 > %t.fusion
// RUN: %fuserc opt %t.fusion -p 'autodiff,default' | filecheck %s --check-prefix=DP
// RUN: %fuserc opt %t.fusion -p 'autodiff,default' | grep 'hir.alltoall' | grep -v 'hir.reshard' | filecheck %s --check-prefix=DPTEAMS
// RUN: %fuserc opt -p default --split-input-file --verify-diagnostics %s

// Expert parallelism (examples/moe_layer.mlir: 16 tokens, top 2 of 4
// experts, hidden 8, tokens and experts split over one axis): dispatch and
// combine are all-to-alls, forward and backward: the counts per (rank,
// expert) first (alltoall of 4 i64), then the rows (alltoallv, bounded by
// min(T k, E/d T) rows, ~ the mean: T/d k rows), never an allgather or a
// reduce-scatter of the tokens' rows. The backward's dispatch is the
// forward's combine's transpose and the reverse.
// D4-LABEL: @main_fwd:
// D4-NOT:   allgather
// D4-NOT:   reduce_scatter  f32    {{[0-9]+x}}
// D4:       alltoall        i64    4       4  [0-3]      1          24
// D4-NEXT:  alltoallv       f32    16x8    4  [0-3]      1  <=384 ~192
// D4:       alltoall        i64    4
// D4-NEXT:  alltoallv       f32    16x8    4  [0-3]      1  <=384 ~192
// D4-NOT:   allgather
// D4-NOT:   reduce_scatter  f32    {{[0-9]+x}}
// D4:       imbalance (largest over mean rows per rank) (at most 2.00: bound over mean)
// D4-LABEL: @main_bwd:
// D4-NOT:   allgather
// D4-NOT:   reduce_scatter
// D4:       alltoall   i64    4
// D4-NEXT:  alltoallv  f32    16x8
// D4:       alltoall   i64    4
// D4-NEXT:  alltoallv  f32    16x8
// D4-NOT:   allgather
// D4-NOT:   reduce_scatter
// D4:       total per rank (4 ranks)

// D2-LABEL: @main_fwd:
// D2-NOT:   allgather
// D2-NOT:   reduce_scatter  f32    {{[0-9]+x}}
// D2:       alltoall        i64    4      2  [0-1]      1          16
// D2-NEXT:  alltoallv       f32    32x8   2  [0-1]      1  <=512 ~256
// D2:       alltoall        i64    4
// D2-NEXT:  alltoallv       f32    32x8   2  [0-1]      1  <=512 ~256
// D2-NOT:   allgather
// D2-LABEL: @main_bwd:
// D2-NOT:   allgather
// D2-NOT:   reduce_scatter
// D2:       alltoallv  f32    32x8
// D2:       alltoallv  f32    32x8
// D2-NOT:   allgather
// D2-NOT:   reduce_scatter
// D2:       total per rank (2 ranks)

// The layer of the Python builder (64 tokens, 8 experts, hidden 32) cut in
// two token chunks by chunk-experts on 4 ranks: every chunk is dispatched
// first, and the rows an alltoallv received are placed where first used, so each of the
// four alltoallvs runs on the worker stream beside compute (the other
// chunk's grouped GEMMs): overlap `kernel`, none left exposed.
// CHUNKS-LABEL: @main:
// CHUNKS-NOT:   allgather
// CHUNKS-COUNT-4: alltoallv       f32    64x32   4  [0-3]      1  <=6144 ~1536  -              kernel
// CHUNKS-NOT:   {{^ +[0-9]+ +alltoallv}}

// A mesh [dp, ep] = [2, 2] (examples/python/moe_layer.py --dp 2: 32
// tokens split over both axes, [DIDy*DIDx, -], in 2 groups of 16; top 2 of
// 8 experts split over ep, replicated over dp): each group is dispatched
// within its ep team ([0, 1] and [2, 3]: one op, the team and its translate; never across dp) into a buffer
// bounded by the group's pairs (16 tokens x 2 = 32 rows), and the experts'
// weight gradients ([4 experts, 24, 16] a rank) are summed over dp ([0, 2]
// and [1, 3]).
// DP-LABEL: func.func @main_fwd(
// DP:       hir.alltoall {{.*}} team = [0, 1] translated [2 step 2] {{.*}}tensor<8xi64>
// DP:       hir.alltoallv {{.*}} team = [0, 1] translated [2 step 2] {{.*}}(tensor<16x16xf32>, tensor<2xi64>, tensor<32x16xf32>, tensor<2xi64>)
// DP:       hir.alltoallv {{.*}} team = [0, 1] translated [2 step 2] {{.*}}(tensor<32x16xf32>, tensor<2xi64>, tensor<16x16xf32>, tensor<2xi64>)
// DP-LABEL: func.func @main_bwd(
// DP:       hir.alltoallv {{.*}} team = [0, 1] translated [2 step 2] {{.*}}(tensor<16x16xf32>, tensor<2xi64>, tensor<32x16xf32>, tensor<2xi64>)
// DP:       hir.alltoallv {{.*}} team = [0, 1] translated [2 step 2] {{.*}}(tensor<32x16xf32>, tensor<2xi64>, tensor<16x16xf32>, tensor<2xi64>)
// DP-COUNT-2: hir.allreduce {{.*}} team = [0, 2] translated [2 step 1] {{.*}}tensor<4x24x16xf32>
// DP:       hir.allreduce {{.*}} team = [0, 2] translated [2 step 1] {{.*}}tensor<4x16x24xf32>
// No dispatch or combine all-to-all (those that are no reshard) of @main,
// @main_fwd and @main_bwd crosses dp: each stays within an ep team ([0, 1]
// and its translate [2, 3]).
// DPTEAMS-NOT: team = [0, 2]
// DPTEAMS:     hir.alltoallv {{.*}} team = [0, 1] translated [2 step 2] backend
// DPTEAMS-NOT: team = [0, 2]

// Tokens on one axis of a 2-D mesh and experts on the other: refused.
#tok = #fusion.sharding<@g, [DIDy, -]>
#ep = #fusion.sharding<@g, [DIDx, -, -]>
fusion.mesh @g shape = [2, 2]
func.func @two_axes(%x: tensor<8x4xf32, #tok>, %ids: tensor<8x2xi64, #tok>) -> tensor<4x8x4xf32, #ep> {
  // expected-error @+1 {{'fusion.dispatch' (operands #fusion.sharding<@g, [DIDy, -]>, #fusion.sharding<@g, [DIDy, -]>, result #fusion.sharding<@g, [DIDx, -, -]>): expert parallelism splits the tokens and the experts alike, over one mesh axis; on a 2-D mesh the experts' slots would hold the tokens of every slice of the other axis: dispatch the tokens in groups}}
  %xe = fusion.dispatch %x, %ids experts = 4 : (tensor<8x4xf32, #tok>, tensor<8x2xi64, #tok>) -> tensor<4x8x4xf32, #ep>
  func.return %xe : tensor<4x8x4xf32, #ep>
}

// -----

// Token groups left whole (every rank of a team would hold both groups):
// refused, each group needs a team of its own.
#tok = #fusion.sharding<@g, [-, DIDx, -]>
#ep = #fusion.sharding<@g, [DIDx, -, -, -]>
fusion.mesh @g shape = [2, 2]
func.func @groups_whole(%x: tensor<2x8x4xf32, #tok>, %ids: tensor<2x8x2xi64, #tok>) -> tensor<4x2x8x4xf32, #ep> {
  // expected-error @+1 {{'fusion.dispatch': token groups split as #fusion.sharding<@g, [-, DIDx, -]> leave 2 groups on a device: expert parallelism by groups needs one group a device}}
  %xe = fusion.dispatch %x, %ids experts = 4 : (tensor<2x8x4xf32, #tok>, tensor<2x8x2xi64, #tok>) -> tensor<4x2x8x4xf32, #ep>
  func.return %xe : tensor<4x2x8x4xf32, #ep>
}

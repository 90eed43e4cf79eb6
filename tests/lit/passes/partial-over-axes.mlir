// RUN: %fuserc opt %s -p propagate-shardings,make-resharding-contiguous | filecheck %s --check-prefix=PROP
// RUN: %fuserc opt %s -p default | filecheck %s
// RUN: %fuserc opt %s -p default --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=REPORT
// RUN: %python %examples/python/moe_layer.py --print --devices 4 --dp 2 --shared --tokens 32 --hidden 16 --ffn 24 --experts 8 > %t.fusion
// RUN: %fuserc opt %t.fusion -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=MOE

// A contraction over a dimension split over both axes of a mesh [2, 2] is a
// partial sum over both (`partial = [DIDy, DIDx]`): made locally (%q, its
// result undecided, and %p, written), and summed by one collective over
// the team spanning the mesh, [0, 1, 2, 3]: an allreduce to whole, a
// reduce-scatter to rows split DIDy*DIDx (blocks in the team's row-major
// order), and, to a split over one axis, a reduce-scatter over it then an
// allreduce over the other. The two whole results share one allreduce.
// PROP:        fusion.matmul {{.*}} -> tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>>
// PROP:        %q_local = fusion.matmul {{.*}} -> tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>>
// PROP:        fusion.set {{.*}} : (tensor<128xf32, #fusion.sharding<@g, [-], partial = [DIDy, DIDx]>>) -> tensor<128xf32, #fusion.sharding<@g, [-]>>
// CHECK-LABEL: func.func @main(
// CHECK:       hir.reduce_scatter {{.*}} op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDy*DIDx"} : (tensor<8x8xf32>, tensor<2x8xf32>)
// CHECK:       hir.reduce_scatter {{.*}} op = sum team = [0, 1] translated [2 step 2] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<8x8xf32>, tensor<4x8xf32>)
// CHECK:       hir.allreduce {{.*}} op = sum team = [0, 2] translated [2 step 1] backend = nccl {hir.reshard = "partial->-"} : (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK:       hir.allreduce {{.*}} op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->-"} : (tensor<128xf32>, tensor<128xf32>)
// REPORT:       @main:
// REPORT-NEXT:  #  kind            dtype  shape  n  team     times  bytes  reshard             overlap
// REPORT-NEXT:  1  reduce_scatter  f32    8x8    4  [0-3]        1    192  partial->DIDy*DIDx  no
// REPORT-NEXT:  2  reduce_scatter  f32    8x8    2  2 teams      1    128  partial->DIDx       no
// REPORT-NEXT:  3  allreduce       f32    4x8    2  2 teams      1    128  partial->-          no
// REPORT-NEXT:  4  allreduce       f32    128    4  [0-3]        1    768  partial->-          no
// REPORT-NEXT:  total per rank (4 ranks): 4 communications, 1216 bytes
!x = tensor<8x16xf32, #fusion.sharding<@g, [-, DIDy*DIDx]>>
!w = tensor<16x8xf32, #fusion.sharding<@g, [DIDy*DIDx, -]>>
!p = tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>>
!whole = tensor<8x8xf32, #fusion.sharding<@g, [-, -]>>
!rows = tensor<8x8xf32, #fusion.sharding<@g, [DIDy*DIDx, -]>>
!cols = tensor<8x8xf32, #fusion.sharding<@g, [DIDx, -]>>
fusion.mesh @g shape = [2, 2]
func.func @main(%x: !x, %w: !w, %v: !x) -> (!whole, !rows, !cols, tensor<8x8xf32>) {
  %p = fusion.matmul %x, %w : (!x, !w) -> !p
  %a = fusion.set %p : (!p) -> !whole
  %b = fusion.set %p : (!p) -> !rows
  %c = fusion.set %p : (!p) -> !cols
  %q = fusion.matmul %v, %w : (!x, !w) -> tensor<8x8xf32>
  func.return %a, %b, %c, %q : !whole, !rows, !cols, tensor<8x8xf32>
}

// The MoE layer on a mesh [dp, ep] = [2, 2] (examples/python/moe_layer.py
// --dp 2, with a shared expert): the tokens split over both axes
// ([DIDy*DIDx, -]). The weight gradients of the router ([8, 16]) and of the
// shared expert ([24, 16], [16, 24]) contract the tokens: each is a partial
// sum over [DIDy, DIDx] made where the tokens lie and summed by one
// allreduce over all four ranks; no token is gathered. The experts'
// gradients (split over ep) are summed over dp alone.
// MOE-LABEL: @main_bwd:
// MOE-NOT:   allgather
// MOE-COUNT-3: allreduce  f32    {{24x16|16x24}}    4  [0-3]        1         2304  partial->-
// MOE-NOT:   allgather
// MOE:       allreduce  f32    8x16     4  [0-3]        1          768  partial->-
// MOE-NOT:   allgather
// MOE-COUNT-3: allreduce  f32    {{4x24x16|4x16x24}}  2  2 teams      1         6144  partial->-
// MOE-NOT:   allgather
// MOE:       total per rank (4 ranks): 13 communications

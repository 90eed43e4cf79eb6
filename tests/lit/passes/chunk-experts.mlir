// RUN: %fuserc opt %examples/moe_layer.mlir -p 'propagate-shardings,chunk-experts{token-chunks=2}' | filecheck %s --check-prefix=IR
// RUN: %fuserc opt %examples/moe_layer.mlir -p 'default{token-chunks=4}' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=D4S4
// RUN: %fuserc opt %examples/moe_layer.mlir -p 'autodiff{token-chunks=2},default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=D4
// RUN: %fuserc opt %examples/moe_layer.mlir --mesh tp=2 -p 'autodiff{token-chunks=2},default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=D2
// RUN: %fuserc opt %examples/moe_layer.mlir -p propagate-shardings -o %t.whole
// RUN: %fuserc opt %examples/moe_layer.mlir -p 'propagate-shardings,chunk-experts' -o %t.chosen
// RUN: %fuserc opt %examples/moe_layer.mlir -p 'propagate-shardings,chunk-experts{token-chunks=1}' -o %t.one
// RUN: diff %t.whole %t.chosen
// RUN: diff %t.whole %t.one
// RUN: %fuserc opt %examples/moe_layer.mlir --mesh tp=1 -p 'propagate-shardings,chunk-experts{token-chunks=2}' | filecheck %s --check-prefix=D1
// RUN: not %fuserc opt %examples/moe_layer.mlir -p 'default{token-chunks=3}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not %fuserc opt %examples/moe_layer.mlir -p 'default{token-chunks=0}' 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not %fuserc opt %examples/moe_layer.mlir -p 'autodiff{token-chunks=0},default' 2>&1 | filecheck %s --check-prefix=ZEROAD

// chunk-experts on examples/moe_layer.mlir (16 tokens split over 4
// devices, top 2 of 4 experts, one a device): in 2 chunks, chunk c taking
// tokens c, c + 2, ... (a reshape to [8, 2, ...] and a slice, local on
// every device). Both chunks are dispatched first, then each chunk's
// grouped GEMMs and combine; the combined rows go back in token order.
// IR-LABEL: func.func @main(
// IR:      %[[W:.*]] = fusion.reshape %ids : (tensor<16x2xi64, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x2x2xi64, #fusion.sharding<@tp, [DIDx, -, -]>>
// IR-NEXT: %[[S:.*]] = fusion.slice %[[W]] starts = [0, 0, 0] limits = [8, 1, 2]
// IR-NEXT: %ids_c0 = fusion.reshape %[[S]] : (tensor<8x1x2xi64, {{.*}}) -> tensor<8x2xi64, #fusion.sharding<@tp, [DIDx, -]>>
// IR:      %ids_c1 = fusion.reshape
// IR:      %x_c0 = fusion.reshape
// IR-NEXT: %xe_c0, %rows_c0 = fusion.dispatch %x_c0, %ids_c0 experts = 4 {fusion.token_chunks = 2 : i64} : (tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<8x2xi64, #fusion.sharding<@tp, [DIDx, -]>>) -> (tensor<4x8x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>, tensor<4xi64, #fusion.sharding<@tp, [DIDx]>>)
// IR:      %x_c1 = fusion.reshape
// IR-NEXT: %xe_c1, %rows_c1 = fusion.dispatch %x_c1, %ids_c1
// IR:      %h1_c0 = fusion.grouped_matmul %xe_c0, %w1t, %rows_c0
// IR:      %ye_c0 = fusion.grouped_matmul %act_c0, %w2t, %rows_c0
// IR-NEXT: %yp_c0 = fusion.combine %ye_c0, %ids_c0 : {{.*}} -> tensor<8x2x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
// IR-NEXT: %h1_c1 = fusion.grouped_matmul %xe_c1, %w1t, %rows_c1
// IR:      %yp_c1 = fusion.combine %ye_c1, %ids_c1
// IR:      fusion.concat {{.*}} dim = 1 : {{.*}} -> tensor<8x2x2x8xf32, #fusion.sharding<@tp, [DIDx, -, -, -]>>
// IR-NEXT: %yp = fusion.reshape {{.*}} -> tensor<16x2x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
// IR-NOT:  fusion.dispatch
// IR-NOT:  fusion.combine

// Forced to 4 chunks (one token a device each): 8 alltoallvs of 4 rows
// (the chunk's tokens x k on a device), each beside compute (the other
// chunks' grouped GEMMs).
// D4S4-LABEL:     @main:
// D4S4-COUNT-8:   alltoallv       f32    4x8     4  [0-3]      1  <=96 ~48  -              kernel
// D4S4-NOT:       {{^ +[0-9]+ +alltoallv}}

// With autodiff the layer is cut before the derivation: the forward's and
// the backward's dispatches and combines are chunked alike (4 alltoallvs
// each, the backward's dispatching both chunks' cotangents first), and
// every one of them overlaps compute; the whole layer's last alltoallv
// does not (expert-parallel.mlir).
// D4-LABEL: @main_fwd:
// D4-COUNT-4: alltoallv       f32    8x8    4  [0-3]      1  <=192 ~96  -              kernel
// D4-NOT:     {{^ +[0-9]+ +alltoallv}}
// D4-LABEL: @main_bwd:
// D4:         alltoallv  f32    8x8    4  [0-3]      1  <=192 ~96  -           kernel
// D4:         alltoallv  f32    8x8    4  [0-3]      1  <=192 ~96  -           gemm
// D4:         alltoallv  f32    8x8    4  [0-3]      1  <=192 ~96  -           gemm
// D4:         alltoallv  f32    8x8    4  [0-3]      1  <=192 ~96  -           kernel
// D4-NOT:     {{^ +[0-9]+ +alltoallv}}
// D4:         total per rank (4 ranks): 13 communications

// D2-LABEL: @main_fwd:
// D2-COUNT-4: alltoallv       f32    16x8   2  [0-1]      1  <=256 ~128  -              kernel
// D2-NOT:     {{^ +[0-9]+ +alltoallv}}
// D2-LABEL: @main_bwd:
// D2:         alltoallv  f32    16x8   2  [0-1]      1  <=256 ~128  -           kernel
// D2:         alltoallv  f32    16x8   2  [0-1]      1  <=256 ~128  -           gemm
// D2:         alltoallv  f32    16x8   2  [0-1]      1  <=256 ~128  -           gemm
// D2:         alltoallv  f32    16x8   2  [0-1]      1  <=256 ~128  -           kernel
// D2-NOT:     {{^ +[0-9]+ +alltoallv}}

// The cost model's choice for this small layer is one chunk (its
// transfers are all latency), and one chunk is the layer as written: the
// IR is left as propagate-shardings gave it (the diffs above). On one
// device there is nothing to overlap: no chunks whatever the option.
// D1-LABEL: func.func @main(
// D1:       fusion.dispatch %x, %ids experts = 4 :
// D1-NOT:   fusion.dispatch

// A forced count must divide each device's tokens.
// BAD: moe_layer.mlir:36:3: error: chunk-experts: token-chunks = 3 does not divide the 4 tokens each of the 4 devices holds (#fusion.sharding<@tp, [DIDx, -]>)

// ZERO: error: invalid options for pass 'chunk-experts': token-chunks must be positive, got 0
// ZEROAD: error: invalid options for pass 'autodiff': token-chunks must be positive, got 0

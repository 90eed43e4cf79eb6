// Every program in examples/ verifies and round-trips: its printed custom
// form parses to the same text, and so does its generic form.
// RUN: %python %S/Inputs/roundtrip.py %examples/*.mlir | filecheck %s
// The headline AllGather + GEMM of docs/language.md, printed as written there.
// RUN: %fuserc opt %examples/allgather_matmul_large.mlir | filecheck %s --check-prefix=LARGE

// CHECK-DAG: roundtrip ok: allgather_matmul.mlir
// CHECK-DAG: roundtrip ok: allgather_matmul_bf16.mlir
// CHECK-DAG: roundtrip ok: allgather_matmul_large.mlir
// CHECK-DAG: roundtrip ok: alltoall_transpose.mlir
// CHECK-DAG: roundtrip ok: attention.mlir
// CHECK-DAG: roundtrip ok: linear_column_row.mlir
// CHECK-DAG: roundtrip ok: matmul_reduce_scatter.mlir
// CHECK-DAG: roundtrip ok: matmul_reduce_scatter_large.mlir
// CHECK-DAG: roundtrip ok: mesh2d.mlir
// CHECK-DAG: roundtrip ok: mixed_precision_mlp.mlir
// CHECK-DAG: roundtrip ok: moe_layer.mlir
// CHECK-DAG: roundtrip ok: pipeline.mlir
// CHECK-DAG: roundtrip ok: row_softmax.mlir
// CHECK-DAG: roundtrip ok: sp_mlp.mlir

// LARGE:      fusion.mesh @tp shape = [4]
// LARGE-NEXT: func.func @main(%x: tensor<32768x16384xbf16, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, -]>>) -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>> {
// LARGE-NEXT:   %y = fusion.matmul %x, %w : (tensor<32768x16384xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, -]>>) -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
// LARGE-NEXT:   func.return %y : tensor<32768x8192xbf16, #fusion.sharding<@tp, [Stream(4), -]>>
// LARGE-NEXT: }

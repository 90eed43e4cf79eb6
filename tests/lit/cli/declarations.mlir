// Declarations (functions without a body, host programs or not) pass the
// pipelines unchanged; autodiff and `fuserc run` name them as declarations.
// RUN: %fuserc opt -p default %s | filecheck %s
// RUN: %fuserc opt -p 'default{algorithm=ring}' %s | filecheck %s
// RUN: %exitcode %fuserc opt -p 'autodiff{entry=fusion},default' %s 2>&1 | filecheck %s --check-prefix=AD
// RUN: %exitcode %fuserc run --entry host --mesh tp=1 %s 2>&1 | filecheck %s --check-prefix=EXEC

// CHECK: func.func @host(tensor<64x8xf32>) -> tensor<64x8xf32> attributes {hir.host}
// CHECK-NEXT: func.func @fusion(tensor<4xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<4xf32>

// AD-NOT: Traceback
// AD: declarations.mlir:[[# @LINE + 9]]:1: error: autodiff: @fusion is a declaration (no body): nothing to differentiate
// AD: exit code: 1

// EXEC-NOT: Traceback
// EXEC: declarations.mlir:[[# @LINE + 4]]:1: error: @host is a declaration (no body): nothing to run
// EXEC: exit code: 1

fusion.mesh @tp shape = [2]
func.func @host(%x: tensor<64x8xf32>) -> tensor<64x8xf32> attributes {hir.host}
func.func @fusion(%x: tensor<4xf32, #fusion.sharding<@tp, [DIDx]>>) -> tensor<4xf32>

// Group ends that are not non-decreasing within the rows are the program's
// error, said at the grouped GEMM: exit 1, no traceback.
// RUN: %exitcode %fuserc run --seed 0 %s 2>&1 | filecheck %s

// CHECK-NOT: Traceback
// CHECK: grouped_offsets.mlir:[[# @LINE + 3]]:3: error: fusion.grouped_matmul: offsets [{{.*}}] must be non-decreasing within [0, 32]
// CHECK: exit code: 1
func.func @main(%a: tensor<32x8xf32>, %w: tensor<4x8x12xf32>, %ends: tensor<4xi64>) -> tensor<32x12xf32> {
  %h = fusion.grouped_matmul %a, %w, %ends : (tensor<32x8xf32>, tensor<4x8x12xf32>, tensor<4xi64>) -> tensor<32x12xf32>
  func.return %h : tensor<32x12xf32>
}

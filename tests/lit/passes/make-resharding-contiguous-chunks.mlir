// RUN: %fuserc opt -p make-resharding-contiguous %s | filecheck %s
fusion.mesh @tp shape = [4]

// A sum over the device dimension (nvFuser's ReduceScatter): summed
// locally into a partial sum, then one reduce-scatter (not an alltoall of x
// and a local sum: the same bytes, but an alltoall is for a transpose).
// Stream(4) on dim 0 has chunks of extent 1, so the layout stays row-major:
// the reduce-scatter runs per chunk, dim 1 outermost in each.
// CHECK-LABEL: func.func @sum_over_devices
// CHECK-NEXT: %y_local = fusion.sum %x dims = [1] : (tensor<4x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), -, -], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set %y_local : (tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), -, -], partial = DIDx>>) -> tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), DIDx, -]>>
// CHECK-NEXT: func.return
func.func @sum_over_devices(%x: tensor<4x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), DIDx, -]>> {
  %y = fusion.sum %x dims = [1] : (tensor<4x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), DIDx, -]>>
  func.return %y : tensor<4x4x8xf32, #fusion.sharding<@tp, [Stream(4), DIDx, -]>>
}

// The same sum where the result is whole: an allreduce of the partial sum.
// CHECK-LABEL: func.func @sum_allreduce
// CHECK-NEXT: %y_local = fusion.sum %x dims = [1] : {{.*}} -> tensor<4x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set %y_local : {{.*}} -> tensor<4x8xf32, #fusion.sharding<@tp, [-, -]>>
func.func @sum_allreduce(%x: tensor<4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<4x8xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.sum %x dims = [1] : (tensor<4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<4x8xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<4x8xf32, #fusion.sharding<@tp, [-, -]>>
}

// A true transpose of the split stays an alltoall.
// CHECK-LABEL: func.func @transpose
// CHECK: %2 = fusion.set %1 : (tensor<4x8x2xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<4x8x2xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
func.func @transpose(%x: tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %y = fusion.set %x : (tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// nvFuser's explicit device dimension for AllGather + GEMM: x laid out
// [S, d, M/(S*d), K]; the gather of x carries the Stream split (one
// allgather per chunk), then the GEMM in the same chunks.
// CHECK-LABEL: func.func @explicit_allgather_gemm
// CHECK-NEXT: %0 = fusion.set %x : (tensor<2x4x3x16xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<2x4x3x16xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>
// CHECK-NEXT: %y = fusion.matmul %0, %w : {{.*}} -> tensor<2x4x3x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>
func.func @explicit_allgather_gemm(%x: tensor<2x4x3x16xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<2x4x3x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>> {
  %y = fusion.matmul %x, %w : (tensor<2x4x3x16xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>, tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<2x4x3x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>
  func.return %y : tensor<2x4x3x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>
}

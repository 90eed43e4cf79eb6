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

// GEMM + ReduceScatter in the explicit layout, the Stream split written on
// the partial product: its chunks have extent 1, so the partial stays
// row-major ([S, d, m, N], no transpose): the reduce-scatter runs per chunk
// of the GEMM, dim 1 outermost in each.
// CHECK-LABEL: func.func @explicit_gemm_reduce_scatter
// CHECK-NEXT: %p = fusion.matmul %x, %w : {{.*}} -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>
// CHECK-NEXT: %y = fusion.set %p : {{.*}} -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
// CHECK-NEXT: func.return
func.func @explicit_gemm_reduce_scatter(%x: tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>> {
  %p = fusion.matmul %x, %w : (tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>
  %y = fusion.set %p : (tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>) -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
  func.return %y : tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
}

// An alltoall whose result has a Stream split on a third dimension keeps
// it: the Stream dimension (chunks of extent 1) goes first, then the two
// dimensions the alltoall exchanges, so that it runs per chunk.
// CHECK-LABEL: func.func @alltoall_chunks
// CHECK: %{{.*}} = fusion.permute %{{.*}} dims = [0, 2, 1, 3] : {{.*}} -> tensor<2x4x8x2xf32, #fusion.sharding<@tp, [-, -, DIDx, -]>>
// CHECK-NEXT: %[[M:.*]] = fusion.set %{{.*}} : {{.*}} -> tensor<2x4x8x2xf32, #fusion.sharding<@tp, [Stream(2), DIDx, -, -]>>
// CHECK-NEXT: %{{.*}} = fusion.permute %[[M]] dims = [0, 2, 1, 3] {alloc_order = array<i64: 0, 2, 1, 3>} : {{.*}} -> tensor<2x8x4x2xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx, -]>>
func.func @alltoall_chunks(%x: tensor<2x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>> {
  %y = fusion.set %x : (tensor<2x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>>
  func.return %y : tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>>
}

// A Stream split on the dimension the alltoall gathers stays on its result.
// CHECK-LABEL: func.func @alltoall_gathered_stream
// CHECK: fusion.set %{{.*}} : {{.*}} -> tensor<4x8x2xf32, #fusion.sharding<@tp, [DIDx, Stream(2), -]>>
func.func @alltoall_gathered_stream(%x: tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>> {
  %y = fusion.set %x : (tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [Stream(2), DIDx]>>
}

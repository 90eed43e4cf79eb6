// RUN: %fuserc opt -p lower-to-host-ir %s | filecheck %s
// Collectives whose result has a Stream split on a dimension laid out
// before the one they communicate along (chunks of extent 1): the blocks
// are contiguous in each chunk, so the collective runs chunk by chunk.
fusion.mesh @tp shape = [4]
fusion.mesh @g shape = [1, 2]

// An allgather of the columns, Stream(4) on the rows (nvFuser's Allgather).
// CHECK-LABEL: func.func @allgather_rows
// CHECK: %y_1 = hir.alloc "allgather_rows/0/0" : tensor<4x8xf32>
// CHECK-NEXT: hir.for %c = 0 to 4 {
// CHECK-NEXT: %0 = hir.chunk %x [%c] dim = 0 chunks = 4 : (tensor<4x2xf32>, index) -> tensor<1x2xf32>
// CHECK-NEXT: %1 = hir.view %0 : tensor<1x2xf32> -> tensor<2xf32>
// CHECK-NEXT: %2 = hir.chunk %y_1 [%c] dim = 0 chunks = 4 : (tensor<4x8xf32>, index) -> tensor<1x8xf32>
// CHECK-NEXT: %3 = hir.view %2 : tensor<1x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %tok = hir.allgather %1, %3 team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 4 : i64], hir.reshard = "DIDx->-"} : (tensor<2xf32>, tensor<8xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %tok : !hir.token
// CHECK-NEXT: }
func.func @allgather_rows(%x: tensor<4x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<4x8xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.set %x : (tensor<4x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<4x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<4x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
}

// A reduce-scatter onto dim 1, Stream(2) on dim 0 (nvFuser's ReduceScatter).
// CHECK-LABEL: func.func @reduce_scatter
// CHECK: hir.for %c = 0 to 2 {
// CHECK-NEXT: %0 = hir.chunk %p [%c] dim = 0 chunks = 2 : (tensor<2x8x3xf32>, index) -> tensor<1x8x3xf32>
// CHECK-NEXT: %1 = hir.view %0 : tensor<1x8x3xf32> -> tensor<8x3xf32>
// CHECK-NEXT: %2 = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<2x2x3xf32>, index) -> tensor<1x2x3xf32>
// CHECK-NEXT: %3 = hir.view %2 : tensor<1x2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT: %tok = hir.reduce_scatter %1, %3 op = sum team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "partial->DIDx"} : (tensor<8x3xf32>, tensor<2x3xf32>) -> !hir.token
func.func @reduce_scatter(%p: tensor<2x8x3xf32, #fusion.sharding<@tp, [Stream(2), -, -], partial = DIDx>>) -> tensor<2x8x3xf32, #fusion.sharding<@tp, [Stream(2), DIDx, -]>> {
  %y = fusion.set %p : (tensor<2x8x3xf32, #fusion.sharding<@tp, [Stream(2), -, -], partial = DIDx>>) -> tensor<2x8x3xf32, #fusion.sharding<@tp, [Stream(2), DIDx, -]>>
  func.return %y : tensor<2x8x3xf32, #fusion.sharding<@tp, [Stream(2), DIDx, -]>>
}

// nvFuser's explicit device dimension, x [S, d, M/(S*d), K]: per chunk c,
// chunk c of the shard gathered.
// CHECK-LABEL: func.func @explicit
// CHECK: hir.for %c = 0 to 2 {
// CHECK-NEXT: %0 = hir.chunk %x [%c] dim = 0 chunks = 2 : (tensor<2x1x3x5xf32>, index) -> tensor<1x1x3x5xf32>
// CHECK-NEXT: %1 = hir.view %0 : tensor<1x1x3x5xf32> -> tensor<1x3x5xf32>
// CHECK-NEXT: %2 = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<2x4x3x5xf32>, index) -> tensor<1x4x3x5xf32>
// CHECK-NEXT: %3 = hir.view %2 : tensor<1x4x3x5xf32> -> tensor<4x3x5xf32>
// CHECK-NEXT: %tok = hir.allgather %1, %3 team = [0, 1, 2, 3] backend = nccl
func.func @explicit(%x: tensor<2x4x3x5xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<2x4x3x5xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>> {
  %y = fusion.set %x : (tensor<2x4x3x5xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<2x4x3x5xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>
  func.return %y : tensor<2x4x3x5xf32, #fusion.sharding<@tp, [Stream(2), -, -, -]>>
}

// Teams of one device (the DIDy axis of @g has one device): no
// communication, not even a copy: the result is the operand's buffer (an
// argument, returned as it is).
// CHECK-LABEL: func.func @team_of_one
// CHECK-NOT: hir.allgather
// CHECK-NOT: hir.reduce_scatter
// CHECK: hir.launch ins(%x : tensor<8x4xf32>) outs(%b_1 : tensor<8x4xf32>) {
// CHECK-NOT: hir.copy
// CHECK: func.return %{{.*}}, %p :
// CHECK-NOT: hir.allgather
// CHECK-NOT: hir.reduce_scatter
func.func @team_of_one(%x: tensor<8x4xf32, #fusion.sharding<@g, [DIDy, -]>>, %p: tensor<8x4xf32, #fusion.sharding<@g, [-, -], partial = DIDy>>)
    -> (tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>, tensor<8x4xf32, #fusion.sharding<@g, [DIDy, -]>>) {
  %a = fusion.set %x : (tensor<8x4xf32, #fusion.sharding<@g, [DIDy, -]>>) -> tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>
  %b = fusion.relu %a : (tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>) -> tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>
  %c = fusion.set %p : (tensor<8x4xf32, #fusion.sharding<@g, [-, -], partial = DIDy>>) -> tensor<8x4xf32, #fusion.sharding<@g, [DIDy, -]>>
  func.return %b, %c : tensor<8x4xf32, #fusion.sharding<@g, [-, -]>>, tensor<8x4xf32, #fusion.sharding<@g, [DIDy, -]>>
}

// GEMM + ReduceScatter in the explicit layout with the Stream split on the
// partial product (the result has none): the reduce-scatter still runs per
// chunk of the partial, its dim 1 outermost in each.
// CHECK-LABEL: func.func @explicit_gemm_reduce_scatter
// CHECK: hir.matmul %x, %w, %p {hir.stream = [0 : i64, 2 : i64]}
// CHECK: hir.for %c = 0 to 2 {
// CHECK-NEXT: %0 = hir.chunk %p [%c] dim = 0 chunks = 2 : (tensor<2x4x4x8xf32>, index) -> tensor<1x4x4x8xf32>
// CHECK-NEXT: %1 = hir.view %0 : tensor<1x4x4x8xf32> -> tensor<4x4x8xf32>
// CHECK-NEXT: %2 = hir.chunk %y_1 [%c] dim = 0 chunks = 2 : (tensor<2x1x4x8xf32>, index) -> tensor<1x1x4x8xf32>
// CHECK-NEXT: %3 = hir.view %2 : tensor<1x1x4x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT: %tok = hir.reduce_scatter %1, %3 op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<4x4x8xf32>, tensor<1x4x8xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %tok : !hir.token
// CHECK-NEXT: }
func.func @explicit_gemm_reduce_scatter(%x: tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>> {
  %p = fusion.matmul %x, %w : (tensor<2x4x4x16xf32, #fusion.sharding<@tp, [-, -, -, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>
  %y = fusion.set %p : (tensor<2x4x4x8xf32, #fusion.sharding<@tp, [Stream(2), -, -, -], partial = DIDx>>) -> tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
  func.return %y : tensor<2x4x4x8xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
}

// An alltoall with a Stream split on a third dimension, laid out first (as
// make-resharding-contiguous leaves it): one alltoall per chunk, the blocks
// received stacked along dim 0 as those sent.
// CHECK-LABEL: func.func @alltoall_chunks
// CHECK: hir.for %c = 0 to 2 {
// CHECK-NEXT: %[[IN:.*]] = hir.chunk %{{.*}} [%c] dim = 0 chunks = 2 : (tensor<2x4x2x2xf32>, index) -> tensor<1x4x2x2xf32>
// CHECK-NEXT: %[[INV:.*]] = hir.view %[[IN]] : tensor<1x4x2x2xf32> -> tensor<4x2x2xf32>
// CHECK-NEXT: %[[OUT:.*]] = hir.chunk %{{.*}} [%c] dim = 0 chunks = 2 : (tensor<2x1x8x2xf32>, index) -> tensor<1x1x8x2xf32>
// CHECK-NEXT: %[[OUTV:.*]] = hir.view %[[OUT]] : tensor<1x1x8x2xf32> -> tensor<4x2x2xf32>
// CHECK-NEXT: %tok = hir.alltoall %[[INV]], %[[OUTV]] team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 2 : i64], hir.reshard = "DIDx->DIDx"} : (tensor<4x2x2xf32>, tensor<4x2x2xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %tok : !hir.token
// CHECK-NEXT: }
func.func @alltoall_chunks(%x: tensor<2x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>> {
  %0 = fusion.reshape %x : (tensor<2x8x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>) -> tensor<2x8x4x2xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>
  %1 = fusion.permute %0 dims = [0, 2, 1, 3] : (tensor<2x8x4x2xf32, #fusion.sharding<@tp, [-, DIDx, -, -]>>) -> tensor<2x4x8x2xf32, #fusion.sharding<@tp, [-, -, DIDx, -]>>
  %2 = fusion.set %1 : (tensor<2x4x8x2xf32, #fusion.sharding<@tp, [-, -, DIDx, -]>>) -> tensor<2x4x8x2xf32, #fusion.sharding<@tp, [Stream(2), DIDx, -, -]>>
  %3 = fusion.permute %2 dims = [0, 2, 1, 3] {alloc_order = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x2xf32, #fusion.sharding<@tp, [Stream(2), DIDx, -, -]>>) -> tensor<2x8x4x2xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx, -]>>
  %y = fusion.reshape %3 : (tensor<2x8x4x2xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx, -]>>) -> tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>>
  func.return %y : tensor<2x8x8xf32, #fusion.sharding<@tp, [Stream(2), -, DIDx]>>
}

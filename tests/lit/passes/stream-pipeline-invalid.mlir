// RUN: %fuserc opt -p stream-pipeline --split-input-file --verify-diagnostics %s

// DIDx to Stream(S): chunk c comes from device c * d / S, so S must be a
// multiple of the team size.
func.func @not_a_multiple(%x: tensor<12x8xf32>, %w: tensor<8x4xf32>) -> tensor<48x4xf32> attributes {hir.host} {
  %xg = hir.alloc "a/0" : tensor<48x8xf32>
  %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.stream = [0, 6]} : (tensor<12x8xf32>, tensor<48x8xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "a/1" : tensor<48x4xf32>
  // expected-error @+1 {{stream-pipeline: Stream(6) does not fit the rows gathered from the 4 devices of team [0, 1, 2, 3]: S must be a multiple of 4 (chunk c belongs to device c * 4 / S)}}
  hir.matmul %xg, %w, %y {hir.stream = [0, 6]} : tensor<48x8xf32>, tensor<8x4xf32>, tensor<48x4xf32>
  func.return %y : tensor<48x4xf32>
}

// -----

// GEMM + ReduceScatter: the same rule on the partial product.
func.func @rs_not_a_multiple(%x: tensor<12x8xf32>, %w: tensor<8x4xf32>) -> tensor<6x4xf32> attributes {hir.host} {
  %p = hir.alloc "r/0" : tensor<12x4xf32>
  hir.matmul %x, %w, %p {hir.stream = [0, 3]} : tensor<12x8xf32>, tensor<8x4xf32>, tensor<12x4xf32>
  %y = hir.alloc "r/1" : tensor<6x4xf32>
  // expected-error @+1 {{stream-pipeline: Stream(3) does not fit the partial sum scattered over the 2 devices of team [0, 1]: S must be a multiple of 2}}
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1] backend = nccl : (tensor<12x4xf32>, tensor<6x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  func.return %y : tensor<6x4xf32>
}

// -----

// S must cut the rows evenly.
func.func @uneven(%x: tensor<6x8xf32>, %w: tensor<8x4xf32>) -> tensor<12x4xf32> attributes {hir.host} {
  %xg = hir.alloc "u/0" : tensor<12x8xf32>
  %tok = hir.allgather %x, %xg team = [0, 1] backend = nccl : (tensor<6x8xf32>, tensor<12x8xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "u/1" : tensor<12x4xf32>
  // expected-error @+1 {{stream-pipeline: Stream(8) does not split the 12 rows of tensor<12x8xf32> evenly}}
  hir.matmul %xg, %w, %y {hir.stream = [0, 8]} : tensor<12x8xf32>, tensor<8x4xf32>, tensor<12x4xf32>
  func.return %y : tensor<12x4xf32>
}

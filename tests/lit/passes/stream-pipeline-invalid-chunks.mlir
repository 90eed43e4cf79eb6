// The chunks option sets S where the user wrote no Stream split: it must
// be a multiple of the team size, and cut the rows evenly.
// RUN: %fuserc opt -p 'stream-pipeline{chunks=3}' --split-input-file --verify-diagnostics %s
// RUN: %fuserc opt -p 'stream-pipeline{chunks=8 algorithm=collective}' %s | filecheck %s

// CHECK: hir.pipeline = {algorithm = "collective", chunks = 8 : i64
func.func @rs(%x: tensor<64x8xf32>, %w: tensor<8x4xf32>) -> tensor<16x4xf32> attributes {hir.host} {
  %p = hir.alloc "main/0/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y = hir.alloc "main/1/0" : tensor<16x4xf32>
  // expected-error @+1 {{stream-pipeline: chunks = 3 does not fit the partial sum scattered over the 4 devices of team [0, 1, 2, 3]: S must be a multiple of 4 (chunk c belongs to device c * 4 / S)}}
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  func.return %y : tensor<16x4xf32>
}

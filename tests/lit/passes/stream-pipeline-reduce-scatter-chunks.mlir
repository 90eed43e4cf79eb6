// stream-pipeline on GEMM + ReduceScatter in S = k * d chunks (k = 2):
// chunk c is reduced to device c / k, into sub-chunk c mod k of its block.
// The ring needs one chunk per device: see stream-pipeline-invalid.mlir.
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=collective}' %s | filecheck %s --check-prefix=COLL
// RUN: %fuserc opt -p 'stream-pipeline' %s | filecheck %s --check-prefix=AUTO

// A linear without bias, written as the result [DIDx*Stream(2), -] (the
// reduce-scatter marked hir.stream = [0, 2]): S = 2 * 4 chunks; chunk c is
// reduced to device c / 2, into sub-chunk c mod 2 of its block.
// COLL-LABEL: func.func @linear
// COLL: hir.for %c = 0 to 8 {
// COLL: %xc = hir.chunk %x [%c] dim = 0 chunks = 8 : (tensor<64x8xf32>, index) -> tensor<8x8xf32>
// COLL-NEXT: hir.linear %xc, %w, %pc : tensor<8x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>
// COLL-NEXT: %dev = hir.div %c by 2 : index
// COLL-NEXT: %sub = hir.add_mod %c, %c0 mod 2 : index
// COLL-NEXT: %yc = hir.chunk %y [%sub] dim = 0 chunks = 2 : (tensor<16x4xf32>, index) -> tensor<8x4xf32>
// COLL-NEXT: %tok = hir.reduce %pc, %yc root %dev op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<8x4xf32>, tensor<8x4xf32>, index) -> !hir.token
// COLL: } {hir.pipeline = {algorithm = "collective", chunks = 8 : i64
// Shapes this small do not pay for a pipeline: auto leaves the written split
// unpipelined and says why on the reduce-scatter.
// AUTO-LABEL: func.func @linear
// AUTO: hir.reduce_scatter %p, %y {{.*}}hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "cost model (defaults): none
// AUTO-NOT: hir.for
func.func @linear(%x: tensor<64x8xf32>, %w: tensor<4x8xf32>) -> tensor<16x4xf32> attributes {hir.host} {
  %p = hir.alloc "linear/0/0" : tensor<64x4xf32>
  hir.linear %x, %w, %p {hir.stream = [0, 2]} : tensor<64x8xf32>, tensor<4x8xf32>, tensor<64x4xf32>
  %y = hir.alloc "linear/1/0" : tensor<16x4xf32>
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl {hir.stream = [0, 2]} : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  hir.dealloc %p : tensor<64x4xf32>
  func.return %y : tensor<16x4xf32>
}


// Options that do not fit a program, and malformed options.
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=ring}' --split-input-file --verify-diagnostics %s
// RUN: not %fuserc opt -p 'stream-pipeline{algorithm=fast}' %s 2>&1 | filecheck %s --check-prefix=ALGO
// RUN: not %fuserc opt -p 'stream-pipeline{num-streams=-1}' %s 2>&1 | filecheck %s --check-prefix=STREAMS
// RUN: not %fuserc opt -p 'stream-pipeline{chunks=0}' %s 2>&1 | filecheck %s --check-prefix=CHUNKS
// RUN: not %fuserc opt -p 'stream-pipeline{ring-form=push}' %s 2>&1 | filecheck %s --check-prefix=FORM
// RUN: not %fuserc opt -p 'stream-pipeline{links="%S/Inputs/missing.json"}' %s 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-bad-key.json"}' %s 2>&1 | filecheck %s --check-prefix=BADKEY

// ALGO: error: invalid options for pass 'stream-pipeline': algorithm must be one of auto, none, collective, ring, got 'fast'
// STREAMS: error: invalid options for pass 'stream-pipeline': num-streams must be >= 0 (0: one per chunk), got -1
// CHUNKS: error: invalid options for pass 'stream-pipeline': chunks must be positive, got 0
// FORM: error: invalid options for pass 'stream-pipeline': ring-form must be one of auto, sum, pull, got 'push'
// MISSING: {{.*}}missing.json:1:1: error: stream-pipeline: links file: cannot read it: No such file or directory
// BADKEY: {{.*}}links-bad-key.json:1:{{[0-9]+}}: error: stream-pipeline: links file: nvlink_gbps: unknown key (known: gemm_tflops, {{.*}})

// The ring cuts the partial sum into blocks of whole devices.
func.func @ring_needs_whole_devices(%x: tensor<64x8xf32>, %w: tensor<8x4xf32>) -> tensor<16x4xf32> attributes {hir.host} {
  %p = hir.alloc "main/0/0" : tensor<64x4xf32>
  hir.matmul %x, %w, %p {hir.stream = [0, 6]} : tensor<64x8xf32>, tensor<8x4xf32>, tensor<64x4xf32>
  %y = hir.alloc "main/1/0" : tensor<16x4xf32>
  // expected-error @+1 {{stream-pipeline: Stream(6) does not fit the partial sum scattered over the 4 devices of team [0, 1, 2, 3]: S must be a multiple of 4 (chunk c belongs to device c * 4 / S)}}
  %tok = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %tok : !hir.token
  func.return %y : tensor<16x4xf32>
}

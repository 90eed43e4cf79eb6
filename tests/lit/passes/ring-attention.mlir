// RUN: %fuserc opt %s -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D4
// RUN: sed 's/shape = \[4\]/shape = [2]/' %s | %fuserc opt - -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D2
// RUN: %fuserc opt %s -p 'autodiff,default' | filecheck %s --check-prefix=IR

// Causal grouped-query attention over a sequence split on 4 (2) ranks is
// ring attention: k and v (1x2x256x64 bf16, 64 KiB each) pass around the
// ring in blocks, (d - 1)/d of them per rank and forward: 96 KiB on 4
// ranks, 64 KiB on 2. The backward passes k and v the same way and the
// f32 gradient sums of each block once more (d steps).
#s = #fusion.sharding<@cp, [-, -, DIDx, -]>
!q = tensor<1x8x256x64xbf16, #s>
!kv = tensor<1x2x256x64xbf16, #s>
fusion.mesh @cp shape = [4]
func.func @main(%q: !q, %k: !kv, %v: !kv) -> !q {
  %o = fusion.sdpa %q, %k, %v causal = true : (!q, !kv, !kv) -> !q
  func.return %o : !q
}

// CHECK-LABEL: @main_fwd:
// D4:          1  send  bf16   1x2x64x64   4  [0-3]      1  (16384)  ring sdpa k, v  kernel
// D4-NEXT:     2  send  bf16   1x2x64x64   4  [0-3]      1  (16384)  ring sdpa k, v  kernel
// D4-NEXT:     3  recv  bf16   1x2x64x64   4  [0-3]      1    16384  ring sdpa k, v  kernel
// D4-NEXT:     4  recv  bf16   1x2x64x64   4  [0-3]      1    16384  ring sdpa k, v  kernel
// D4:         12  recv
// D4-NEXT:     total on rank 0 (the most of 4 ranks): 12 communications, 98304 bytes
// D2:          1  send  bf16   1x2x128x64  2  [0-1]      1  (32768)  ring sdpa k, v  kernel
// D2:          4  recv
// D2-NEXT:     total per rank (2 ranks): 4 communications, 65536 bytes
// No buffer holds the whole sequence's k or v (64 KiB each): the blocks
// received (4 of 16 KiB), the output and its f32 accumulator, the log-sum-exp.
// D4:          buffers per rank: 10, 397312 bytes
// The plain block layout leaves causal work uneven.
// D4-NEXT:     attention FLOPs per rank: 0: 4.26e+06, 1: 1.265e+07, 2: 2.104e+07, 3: 2.943e+07, the least 14.5% of the most
// CHECK-LABEL: @main_bwd:
// D4:          total on rank 0 (the most of 4 ranks): 28 communications, 360448 bytes
// D2:          total {{.*}}(2 ranks): 12 communications, 327680 bytes
// CHECK:       @main_fwd + @main_bwd:

// IR-NOT:      hir.allgather
// IR-NOT:      tensor<1x2x256x64xbf16>
// IR:          func.func @main_bwd
// IR-NOT:      hir.allgather
// IR-NOT:      hir.alloc {{.*}} : tensor<1x2x256x64xbf16>
// IR:          func.return

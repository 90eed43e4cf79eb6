// RUN: %fuserc opt %s -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D4
// RUN: sed 's/shape = \[4\]/shape = [2]/' %s | %fuserc opt - -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D2
// RUN: sed 's/shape = \[4\]/shape = [8]/' %s | %fuserc opt - -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D8
// RUN: sed 's/causal = true//' %s | %fuserc opt - -p 'autodiff,default' --comm-report -o /dev/null 2>&1 | filecheck %s --check-prefix=BLOCK
// RUN: %fuserc opt %s -p 'autodiff,default' | filecheck %s --check-prefix=IR

// Causal grouped-query attention over a sequence split on d ranks is ring
// attention: k and v (1x2x256x64 bf16, 64 KiB each) pass around the ring
// in blocks, (d - 1)/d of them per rank and forward (96 KiB on 4 ranks,
// 64 KiB on 2, 112 KiB on 8). Causal work is balanced by the zigzag
// layout (rank i holds chunks i and 2d-1-i of 2d): q, k and v are laid
// out so on the way in and the output and its log-sum-exp laid back on
// the way out (`zigzag` lines), and every rank does the same attention
// FLOPs. Without the causal mask the block layout is balanced as it is.
#s = #fusion.sharding<@cp, [-, -, DIDx, -]>
!q = tensor<1x8x256x64xbf16, #s>
!kv = tensor<1x2x256x64xbf16, #s>
fusion.mesh @cp shape = [4]
func.func @main(%q: !q, %k: !kv, %v: !kv) -> !q {
  %o = fusion.sdpa %q, %k, %v causal = true : (!q, !kv, !kv) -> !q
  func.return %o : !q
}

// CHECK-LABEL: @main_fwd:
// CHECK:       zigzag sdpa q
// CHECK:       zigzag sdpa k
// CHECK:       zigzag sdpa v
// D2:          7  send  bf16   2x1x2x64x64  2  [0-1]        1  (32768)  ring sdpa k, v   kernel
// D2-NEXT:     8  send  bf16   2x1x2x64x64  2  [0-1]        1  (32768)  ring sdpa k, v   kernel
// D2-NEXT:     9  recv  bf16   2x1x2x64x64  2  [0-1]        1    32768  ring sdpa k, v   kernel
// D2-NEXT:    10  recv  bf16   2x1x2x64x64  2  [0-1]        1    32768  ring sdpa k, v   kernel
// D2-NEXT:    11  send  bf16   1x8x64x64    2  {{.*}}  (65536)  zigzag sdpa out
// D4:         37  send  bf16   2x1x2x32x64  4  [0-3]             1  (16384)  ring sdpa k, v   kernel
// D4:         48  recv  bf16   2x1x2x32x64  4  [0-3]             1    16384  ring sdpa k, v   kernel
// D4-NEXT:    49  send  bf16   1x8x32x64    4  [0-3] on [0]      1  (32768)  zigzag sdpa out
// D8:         37  send  bf16   2x1x2x16x64  8  [0-7]  {{ +}}1   (8192)  ring sdpa k, v   kernel
// D8:         64  recv  bf16   2x1x2x16x64  8  [0-7]  {{ +}}1     8192  ring sdpa k, v   kernel
// D8-NEXT:    65  send  bf16   1x8x16x64 {{.*}} zigzag sdpa out
// CHECK:       zigzag sdpa lse
// No buffer holds the whole sequence's k or v (64 KiB each; IR below).
// D4:          buffers per rank: 15, 563200 bytes
// D2:          attention FLOPs per rank: 0: 3.369e+07, 1: 3.369e+07 (equal)
// D4:          attention FLOPs per rank: 0: 1.684e+07, 1: 1.684e+07, 2: 1.684e+07, 3: 1.684e+07 (equal)
// D8:          attention FLOPs per rank: 0: 8.421e+06, 1: 8.421e+06, 2: 8.421e+06, 3: 8.421e+06, 4: 8.421e+06, 5: 8.421e+06, 6: 8.421e+06, 7: 8.421e+06 (equal)
// CHECK-LABEL: @main_bwd:
// CHECK:       ring sdpa_grad k, v
// CHECK:       ring sdpa_grad dk, dv
// CHECK:       attention FLOPs per rank: {{.*}} (equal)
// CHECK:       @main_fwd + @main_bwd:

// BLOCK-LABEL: @main_fwd:
// BLOCK-NOT:   zigzag
// BLOCK:       1  send  bf16   1x2x64x64   4  [0-3]      1  (16384)  ring sdpa k, v  kernel
// BLOCK:      12  recv  bf16   1x2x64x64   4  [0-3]      1    16384  ring sdpa k, v  kernel
// BLOCK-NEXT:  total per rank (4 ranks): 12 communications, 98304 bytes (0.09 MiB), overlapped 98304 bytes (100.0%)
// BLOCK:       attention FLOPs per rank: {{.*}} (equal)
// BLOCK-LABEL: @main_bwd:
// BLOCK-NOT:   zigzag
// BLOCK:       total per rank (4 ranks): 28 communications, 360448 bytes

// IR-NOT:      hir.allgather
// IR-NOT:      tensor<1x2x256x64xbf16>
// IR:          func.func @main_bwd
// IR-NOT:      hir.allgather
// IR-NOT:      hir.alloc {{.*}} : tensor<1x2x256x64xbf16>
// IR:          func.return

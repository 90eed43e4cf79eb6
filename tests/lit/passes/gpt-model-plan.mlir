// RUN: %python %examples/python/gpt_model.py --layers 12 --devices 4 | %fuserc opt - -p 'autodiff,default' --comm-report --comm-report-unit 8192x4096xbf16 -o /dev/null 2>&1 | filecheck %s

// The communication plan of the 12-layer GPT of examples/python/train_gpt.py
// (bf16, hidden 4096, tokens 8192, 32 heads, ffn 16384, vocabulary 32768)
// at d = 4 is the 1-layer model's (755392512 bytes per rank) plus 11 times
// one layer's (402702336 bytes: 6.0 units and a layer's share of the
// norms' and biases' allreduce): 5185118208 bytes. Every collective of a
// [tokens, hidden] tensor is bf16, the backward's as the forward's (no
// reduce-scatter, allreduce or get of the residual stream's gradient in
// f32).
// CHECK-LABEL: @main_fwd:
// CHECK-NOT:   f32    8192x4096
// CHECK-NOT:   f32    2048x4096
// CHECK:       total per rank (4 ranks): 151 communications, {{.*}} 2516779008 bytes {{.*}} = 37.50 x 8192x4096xbf16
// CHECK-LABEL: @main_bwd:
// CHECK-NOT:   f32    8192x4096
// CHECK-NOT:   f32    2048x4096
// CHECK:       allgather       bf16   8192x4096
// CHECK:       reduce_scatter  bf16   8192x4096
// CHECK:       total per rank (4 ranks): 108 communications, {{.*}} 2668339200 bytes {{.*}} = 39.76 x 8192x4096xbf16
// CHECK-LABEL: @main_fwd + @main_bwd:
// CHECK-NEXT:  total per rank (4 ranks): 259 communications, {{.*}} 5185118208 bytes {{.*}} = 77.26 x 8192x4096xbf16

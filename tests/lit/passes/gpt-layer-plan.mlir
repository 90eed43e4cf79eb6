// RUN: sed 's/shape = \[4\]/shape = [4]/' %S/Inputs/gpt_layer_bf16.mlir | %fuserc opt - -p 'autodiff,default' --comm-report-unit 256x128xbf16 -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D4
// RUN: sed 's/shape = \[4\]/shape = [2]/' %S/Inputs/gpt_layer_bf16.mlir | %fuserc opt - -p 'autodiff,default' --comm-report-unit 256x128xbf16 -o /dev/null 2>&1 | filecheck %s --check-prefixes=CHECK,D2
// RUN: sed 's/shape = \[4\]/shape = [4]/' %S/Inputs/gpt_layer_bf16.mlir | %fuserc opt - -p 'autodiff{save=inputs},default' --comm-report-unit 256x128xbf16 -o /dev/null 2>&1 | filecheck %s --check-prefixes=INPUTS,I4
// RUN: sed 's/shape = \[4\]/shape = [2]/' %S/Inputs/gpt_layer_bf16.mlir | %fuserc opt - -p 'autodiff{save=inputs},default' --comm-report-unit 256x128xbf16 -o /dev/null 2>&1 | filecheck %s --check-prefixes=INPUTS,I2

// The communication plan of a GPT layer (sequence parallel between the
// blocks, tensor parallel inside), as the compiler finds it, pinned by
// kind, count, element type and total: DTensor's sequence-parallel plan.
// Forward: the normalized input gathered before q, k, v, the output
// projection's partial sum reduce-scattered (its bias added on the
// sharded side), the same around the MLP; every collective bf16.
// CHECK-LABEL: @main_fwd:
// CHECK:       1  allgather       bf16   256x128
// CHECK-NEXT:  2  reduce_scatter  bf16   256x128
// CHECK-NEXT:  3  allgather       bf16   256x128
// CHECK-NEXT:  4  reduce_scatter  bf16   256x128
// D4-NEXT:     total per rank (4 ranks): 4 communications, {{.*}} = 3.00 x 256x128xbf16
// D2-NEXT:     total per rank (2 ranks): 4 communications, {{.*}} = 2.00 x 256x128xbf16
// plan-memory: the forward's temporaries (all but the saved activations,
// the norms' mean and rstd among them, and the buffers peers read) share
// blocks; the backward's too.
// D4-NEXT:     buffers per rank: 21, 559104 bytes (0.53 MiB); in plan-memory's blocks 444416 bytes (0.42 MiB), 2 shared by several
// D2-NEXT:     buffers per rank: 21, 856064 bytes (0.82 MiB); in plan-memory's blocks 692224 bytes (0.66 MiB), 2 shared by several
// Backward (save = activations): the cotangents gathered for the
// row-parallel GEMMs' input gradients, the column-parallel GEMMs' input
// gradients reduce-scattered in bf16 (the transposes of the forward's
// four), the saved gathered inputs read by the weight gradients (nothing
// gathered again), and one allreduce of the norms' and biases' gradients.
// CHECK-LABEL: @main_bwd:
// CHECK:       1  allgather       bf16   256x128
// CHECK-NEXT:  2  reduce_scatter  bf16   256x128
// CHECK-NEXT:  3  allgather       bf16   256x128
// CHECK-NEXT:  4  reduce_scatter  bf16   256x128
// CHECK-NEXT:  5  allreduce       bf16   512
// CHECK-NOT:   f32
// D4:          buffers per rank: 38, 725440 bytes (0.69 MiB); in plan-memory's blocks 381120 bytes (0.36 MiB), 6 shared by several
// D2:          buffers per rank: 38, 1184640 bytes (1.13 MiB); in plan-memory's blocks 692864 bytes (0.66 MiB), 6 shared by several
// The totals: 8 collectives of 3/4 of a [256, 128] tensor each (at d = 2: 1/2), and the allreduce.
// D4:          @main_fwd + @main_bwd:
// D4-NEXT:     total per rank (4 ranks): 9 communications, {{.*}} = 6.0{{[0-9]}} x 256x128xbf16
// D2:          @main_fwd + @main_bwd:
// D2-NEXT:     total per rank (2 ranks): 9 communications, {{.*}} = 4.0{{[0-9]}} x 256x128xbf16

// save = inputs: the backward recomputes the forward it needs (two
// gathers and the attention block's reduce-scatter) before the same four.
// INPUTS-LABEL: @main_bwd:
// INPUTS:       1  allgather       bf16   256x128
// INPUTS-NEXT:  2  reduce_scatter  bf16   256x128
// INPUTS-NEXT:  3  allgather       bf16   256x128
// INPUTS-NEXT:  4  allgather       bf16   256x128
// INPUTS-NEXT:  5  reduce_scatter  bf16   256x128
// INPUTS-NEXT:  6  allgather       bf16   256x128
// INPUTS-NEXT:  7  reduce_scatter  bf16   256x128
// INPUTS-NEXT:  8  allreduce       bf16   512
// INPUTS-NOT:   f32
// I4:           @main_fwd + @main_bwd:
// I4-NEXT:      total per rank (4 ranks): 12 communications, {{.*}} = 8.2{{[5-9]}} x 256x128xbf16
// I2:           @main_fwd + @main_bwd:
// I2-NEXT:      total per rank (2 ranks): 12 communications, {{.*}} = 5.5{{[0-9]}} x 256x128xbf16

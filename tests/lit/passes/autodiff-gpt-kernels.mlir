// RUN: sed 's/fusion.mesh @tp shape = \[4\]/fusion.mesh @tp shape = [1]/' %examples/gpt_layer.mlir | %fuserc opt -p autodiff,default - | filecheck %s
// RUN: sed 's/fusion.mesh @tp shape = \[4\]/fusion.mesh @tp shape = [1]/' %examples/gpt_layer.mlir | %fuserc opt -p autodiff,default - | sed -n '/func.func @main_bwd(/,$p' > %t.bwd
// RUN: not grep -e "hir.copy" -e "dims = \[1, 0\]" -e "fusion.rsqrt" %t.bwd
// RUN: grep -c "hir.launch" %t.bwd | filecheck %s --check-prefix=LAUNCHES
// RUN: %fuserc opt -p autodiff,default %examples/gpt_layer.mlir | filecheck %s --check-prefix=D4
// LAUNCHES: {{^}}8{{$}}
// The local work of the GPT layer's backward (examples/gpt_layer.mlir) on
// one device: attention's backward reads the log-sum-exp the forward's
// sdpa saved (no forward of attention again), and each norm's backward
// the mean and rstd its forward saved (no statistics reduced again,
// no rsqrt); the heads reach sdpa and
// sdpa_grad as views of the projections (the permutes inside their launch
// are views) and their results are written where the output projection's
// GEMMs read them; the weight gradients read x^T through hir.transpose
// views; the input's gradients from q, k and v are summed in the GEMMs
// (each adds the one before as its accumulator); nothing is copied. Eight
// launches: the second MLP GEMM's bias gradient with gelu's derivative,
// the first MLP GEMM's bias gradient (the sum over rows of that
// derivative, read back), the second norm's whole backward, the output
// projection's bias gradient (the sum over rows of the norm's input
// gradient, read back), sdpa_grad, the bias gradients of q and of k, the
// first norm's backward with v's bias gradient. The replicated gradients
// are not put in one buffer (make-resharding-contiguous's bucket, for one
// reduction of them all): on one device there is nothing to reduce, and
// the bucket would only copy.
// CHECK-LABEL: func.func @main_fwd(
// CHECK-NOT: hir.copy %{{.*}}, %{{.*}} : tensor<1x8x64x8xf32>
// CHECK: fusion.sdpa %{{.*}} causal = true : {{.*}} -> (tensor<1x8x64x8xf32>, tensor<1x8x64xf32>)
// CHECK-LABEL: func.func @main_bwd(
// CHECK-SAME: %o_lse: tensor<1x8x64xf32>
// CHECK: hir.transpose
// CHECK: hir.launch
// CHECK: fusion.sum %{{.*}} dims = [0]
// CHECK: fusion.erf
// CHECK: hir.launch
// CHECK-NEXT: ^bb0
// CHECK-NEXT: fusion.sum %{{.*}} dims = [0]
// CHECK: hir.launch ins(%h, %c_mean, %c_rstd,
// CHECK: hir.launch
// CHECK-NEXT: ^bb0
// CHECK-NEXT: fusion.sum %{{.*}} dims = [0]
// CHECK: hir.launch
// CHECK: fusion.sdpa_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %o_lse_1, %{{.*}} causal = true
// CHECK: hir.launch
// CHECK: hir.matmul {{.*}} acc
// CHECK: hir.launch
// CHECK: hir.matmul {{.*}} acc
// CHECK: hir.launch ins(%{{.*}}, %0, %a_mean, %a_rstd,
// CHECK-NOT: hir.launch
// CHECK-NOT: fusion.concat
// CHECK: func.return

// On 4 devices the same backward runs its sdpa_grad on each device's heads,
// with the saved statistic of those heads.
// D4-LABEL: func.func @main_bwd(
// D4-SAME: %o_lse: tensor<1x2x64xf32> {hir.global = tensor<1x8x64xf32, #fusion.sharding<@tp, [-, DIDx, -]>>}
// D4: fusion.sdpa_grad {{.*}} -> (tensor<1x2x64x8xf32>, tensor<1x2x64x8xf32>, tensor<1x2x64x8xf32>)
// On 4 devices the replicated gradients are put in one buffer, reduced once.
// D4: fusion.concat
// D4: hir.allreduce

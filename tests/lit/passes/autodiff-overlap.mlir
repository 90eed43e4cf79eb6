// RUN: %fuserc opt -p autodiff,default %s | filecheck %s
// RUN: %fuserc opt -p 'autodiff{save=inputs},default' %s | filecheck %s --check-prefix=INPUTS
// The backward of a sequence-parallel MLP at a large shape (T = 32768,
// H = 8192, F = 32768, bf16, 4 devices), with the cost model's defaults:
// the forward's GEMM+ReduceScatter becomes an AllGather+GEMM ring and its
// AllGather+GEMM a GEMM+ReduceScatter ring. Nothing is gathered twice: the
// second weight's gradient reads dY as the ring gathered it, the first
// weight's reads the gathered x the forward saved (save = activations), or
// the gathered x of the recomputed forward's ring (save = inputs).
// CHECK-LABEL: func.func @main_bwd
// CHECK-NOT: hir.allgather
// CHECK: } {hir.pipeline = {algorithm = "ring", chunks = 4
// CHECK-NOT: hir.allgather
// CHECK: hir.pipeline = {algorithm = "ring", {{.*}}form = "sum"
// CHECK-NOT: hir.allgather
// CHECK: func.return
// INPUTS-LABEL: func.func @main_bwd
// INPUTS-NOT: hir.allgather
// INPUTS: } {hir.pipeline = {algorithm = "ring", chunks = 4
// INPUTS-NOT: hir.allgather
// INPUTS: } {hir.pipeline = {algorithm = "ring", chunks = 4
// INPUTS-NOT: hir.allgather
// INPUTS: hir.pipeline = {algorithm = "ring", {{.*}}form = "sum"
// INPUTS-NOT: hir.allgather
// INPUTS: func.return
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>,
                %w1: tensor<8192x32768xbf16, #fusion.sharding<@tp, [-, DIDx]>>,
                %w2: tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>> {
  %h = fusion.matmul %x, %w1 : (tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>, tensor<8192x32768xbf16, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<32768x32768xbf16>
  %g = fusion.gelu %h : (tensor<32768x32768xbf16>) -> tensor<32768x32768xbf16>
  %y = fusion.matmul %g, %w2 : (tensor<32768x32768xbf16>, tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<32768x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
}

// RUN: %fuserc opt -p autodiff,default %s | filecheck %s
// The backward of a sequence-parallel MLP at a large shape (T = 32768,
// H = 8192, F = 32768, bf16, 4 devices), with the cost model's defaults:
// the forward's GEMM+ReduceScatter becomes an AllGather+GEMM ring and its
// AllGather+GEMM a GEMM+ReduceScatter ring; the gathers the weight
// gradients need (of dY and of the saved x) start first, on a worker
// stream, and run beside the ring's GEMMs; each waits right before its
// weight-gradient GEMM.
// CHECK-LABEL: func.func @main_bwd
// CHECK: } {hir.pipeline = {algorithm = "ring", chunks = 4
// CHECK: hir.stream_for %{{.*}} mod 1
// CHECK-NEXT: hir.set_current_stream
// CHECK-NEXT: hir.wait_event
// CHECK-NEXT: %[[G1:.*]] = hir.allgather
// CHECK: hir.stream_for %{{.*}} mod 1
// CHECK-NEXT: hir.set_current_stream
// CHECK-NEXT: hir.wait_event
// CHECK-NEXT: %[[G2:.*]] = hir.allgather
// CHECK: hir.matmul
// CHECK: hir.wait %[[G1]] : !hir.token
// CHECK: hir.wait %[[G2]] : !hir.token
// CHECK: hir.pipeline = {algorithm = "ring", {{.*}}form = "sum"
// CHECK: func.return
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

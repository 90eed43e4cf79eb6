// A team spanning nodes (here nodes of 2 GPUs): CUDA IPC does not reach
// across nodes, so auto runs the collective and a forced ring is refused.
// RUN: %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-two-per-node.json"}' %s | filecheck %s
// RUN: %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-two-per-node.json" algorithm=ring}' --verify-diagnostics %s

// CHECK: hir.pipeline = {algorithm = "collective", chunks = 4 : i64
func.func @main(%x: tensor<8192x16384xbf16>, %w: tensor<16384x8192xbf16>) -> tensor<32768x8192xbf16> attributes {hir.host} {
  %xg = hir.alloc "main/0/0" : tensor<32768x16384xbf16>
  %tok = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl : (tensor<8192x16384xbf16>, tensor<32768x16384xbf16>) -> !hir.token
  hir.wait %tok : !hir.token
  %y = hir.alloc "main/1/0" : tensor<32768x8192xbf16>
  // expected-error @+1 {{stream-pipeline: the ring pulls chunks over CUDA IPC within one node, but team [0, 1, 2, 3] spans nodes of 2 GPUs (gpus_per_node, }}
  hir.matmul %xg, %w, %y {hir.stream = [0, 4]} : tensor<32768x16384xbf16>, tensor<16384x8192xbf16>, tensor<32768x8192xbf16>
  func.return %y : tensor<32768x8192xbf16>
}

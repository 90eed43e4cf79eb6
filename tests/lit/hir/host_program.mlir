// Complete host programs (the example of docs/hir.md, and a pipelined
// AllGather + GEMM ring) print as written and survive the generic form.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s > %t.custom
// RUN: %fuserc opt --print-generic %s | %fuserc opt - > %t.generic
// RUN: diff %t.custom %t.generic
// RUN: %fuserc opt %t.custom | diff - %t.custom

// CHECK: fusion.mesh @tp shape = [4]
fusion.mesh @tp shape = [4]

// CHECK-LABEL: func.func @main(%x: tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>}, %w: tensor<16x8xf32> {hir.global = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>}) -> (tensor<64x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>}) attributes {hir.host} {
// CHECK-NEXT: %xg = hir.alloc "main/0/xg" : tensor<64x16xf32>
// CHECK-NEXT: %t = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl : (tensor<16x16xf32>, tensor<64x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %t : !hir.token
// CHECK-NEXT: %y = hir.alloc "main/1/y" : tensor<64x8xf32>
// CHECK-NEXT: hir.matmul %xg, %w, %y : tensor<64x16xf32>, tensor<16x8xf32>, tensor<64x8xf32>
// CHECK-NEXT: hir.dealloc %xg : tensor<64x16xf32>
// CHECK-NEXT: func.return %y : tensor<64x8xf32>
// CHECK-NEXT: }
func.func @main(%x: tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>},
                %w: tensor<16x8xf32> {hir.global = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>})
    -> (tensor<64x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>}) attributes {hir.host} {
  %xg = hir.alloc "main/0/xg" : tensor<64x16xf32>
  %t = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl : (tensor<16x16xf32>, tensor<64x16xf32>) -> !hir.token
  hir.wait %t : !hir.token
  %y = hir.alloc "main/1/y" : tensor<64x8xf32>
  hir.matmul %xg, %w, %y : tensor<64x16xf32>, tensor<16x8xf32>, tensor<64x8xf32>
  hir.dealloc %xg : tensor<64x16xf32>
  func.return %y : tensor<64x8xf32>
}

// Ring AllGather + GEMM with a GELU epilogue, single-buffered: at step i this
// rank multiplies the block it holds (that of team position (p - i) mod 4)
// while putting it into the next position's shared staging buffer over CUDA
// IPC; each step runs on a worker stream.
// CHECK-LABEL: func.func @ring(
// CHECK: %h = hir.share %stage team = [0, 1, 2, 3] : tensor<16x16xf32> -> !hir.handle
// CHECK: hir.for %i = 0 to 4 {
// CHECK-NEXT: %s = hir.stream_for %i mod 2 : !hir.stream
// CHECK: %src = hir.add_mod %p, %back mod 4 : index
// CHECK: %yi = hir.chunk %y [%src] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// CHECK: %tp = hir.put %cur, %h, %next backend = cuda_ipc : (tensor<16x16xf32>, !hir.handle, index) -> !hir.token
// CHECK: hir.launch ins(%yi : tensor<16x8xf32>) outs(%yi : tensor<16x8xf32>) {
// CHECK-NEXT: ^bb0(%a: tensor<16x8xf32>):
// CHECK-NEXT: %g = fusion.gelu %a : (tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: hir.yield %g : tensor<16x8xf32>
// CHECK-NEXT: }
// CHECK: hir.sync_stream %s : !hir.stream
// CHECK-NEXT: }
// CHECK: %out, %ok = hir.if_rank [0] -> (tensor<64x8xf32>, !hir.token) {
func.func @ring(%x: tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>},
                %w: tensor<16x8xf32> {hir.global = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>})
    -> (tensor<64x8xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>}) attributes {hir.host} {
  %main = hir.get_current_stream : !hir.stream
  %cur = hir.alloc "ring/0/cur" : tensor<16x16xf32>
  %stage = hir.alloc "ring/1/stage" : tensor<16x16xf32>
  %h = hir.share %stage team = [0, 1, 2, 3] : tensor<16x16xf32> -> !hir.handle
  %y = hir.alloc "ring/2/y" : tensor<64x8xf32>
  %c1 = hir.constant 1 : index
  %p = hir.team_index team = [0, 1, 2, 3] : index
  %next = hir.add_mod %p, %c1 mod 4 : index
  hir.copy %x, %cur : tensor<16x16xf32>, tensor<16x16xf32>
  hir.for %i = 0 to 4 {
    %s = hir.stream_for %i mod 2 : !hir.stream
    hir.set_current_stream %s : !hir.stream
    hir.sync_stream %main : !hir.stream
    %back = hir.team_rank %i team = [0, 3, 2, 1] : index
    %src = hir.add_mod %p, %back mod 4 : index
    %yi = hir.chunk %y [%src] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
    %tp = hir.put %cur, %h, %next backend = cuda_ipc : (tensor<16x16xf32>, !hir.handle, index) -> !hir.token
    hir.matmul %cur, %w, %yi : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>
    hir.launch ins(%yi : tensor<16x8xf32>) outs(%yi : tensor<16x8xf32>) {
    ^bb0(%a: tensor<16x8xf32>):
      %g = fusion.gelu %a : (tensor<16x8xf32>) -> tensor<16x8xf32>
      hir.yield %g : tensor<16x8xf32>
    }
    hir.wait %tp : !hir.token
    hir.copy %stage, %cur : tensor<16x16xf32>, tensor<16x16xf32>
    %e = hir.record_event : !hir.event
    hir.set_current_stream %main : !hir.stream
    hir.wait_event %e : !hir.event
    hir.sync_stream %s : !hir.stream
  }
  %out, %ok = hir.if_rank [0] -> (tensor<64x8xf32>, !hir.token) {
    %r = hir.alloc "ring/3/r" : tensor<64x8xf32>
    %tr = hir.allreduce %y, %r op = sum team = [0] backend = mpi : (tensor<64x8xf32>, tensor<64x8xf32>) -> !hir.token
    hir.yield %r, %tr : tensor<64x8xf32>, !hir.token
  }
  hir.dealloc %cur : tensor<16x16xf32>
  hir.dealloc %stage : tensor<16x16xf32>
  func.return %y : tensor<64x8xf32>
}

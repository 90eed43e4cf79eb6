// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{algorithm=ring}' --split-input-file %s | filecheck %s

// The shard an AllGather ring gathers, made by the program (a buffer of
// the block written by a launch), is this device's block of the gathered
// buffer: the gathered buffer is allocated first, the launch writes its
// block in place, and peers pull the gathered buffer's blocks (`block
// %peer of 4`). Neither the copy of the shard into a buffer of the ring's
// own nor the one into the gathered buffer remains.
// CHECK-LABEL: func.func @made_here
// CHECK:      %[[G:.*]] = hir.alloc {{.*}} : tensor<32x16xf32>
// CHECK-NEXT: %[[P:.*]] = hir.team_index team = [0, 1, 2, 3]
// CHECK-NEXT: %[[X:.*]] = hir.chunk %[[G]] [%[[P]]] dim = 0 chunks = 4
// CHECK-NEXT: hir.launch {{.*}} outs(%[[X]] : tensor<8x16xf32>)
// CHECK:      %[[H:.*]] = hir.share %[[G]] team = [0, 1, 2, 3]
// CHECK:      hir.get %[[H]], %[[PEER:.*]], %{{.*}} block %[[PEER]] of 4 backend = cuda_ipc
// CHECK-NOT:  hir.copy
// CHECK:      func.return
fusion.mesh @tp shape = [4]
func.func @made_here(%x: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                     %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<32x8xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  %g = fusion.gelu %x : (tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  %y = fusion.matmul %g, %w : (tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<32x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<32x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
}

// -----

// A shard the program takes as an argument is copied into its block of
// the gathered buffer, which peers pull from, before the local GEMM.
// CHECK-LABEL: func.func @argument
// CHECK:      %[[XG:.*]] = hir.alloc "argument/0/0" : tensor<32x16xf32>
// CHECK:      %[[MINE:.*]] = hir.chunk %[[XG]] [%pos] dim = 0 chunks = 4
// CHECK-NEXT: hir.copy %x, %[[MINE]] :
// CHECK-NEXT: %[[H:.*]] = hir.share %[[XG]] team = [0, 1, 2, 3]
// CHECK:      hir.matmul %x,
// CHECK:      hir.get %[[H]], %[[PEER:.*]], %{{.*}} block %[[PEER]] of 4 backend = cuda_ipc
// CHECK-NOT:  hir.copy
// CHECK:      func.return
fusion.mesh @tp shape = [4]
func.func @argument(%x: tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                    %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<32x8xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<32x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %y : tensor<32x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
}

// -----

// A shard written again after the ring: peers pull from the gathered
// buffer, which holds a copy of it.
// CHECK-LABEL: func.func @rewritten
// CHECK:      hir.copy %x, %[[MINE:.*]] :
// CHECK-NEXT: %[[H:.*]] = hir.share %xg team = [0, 1, 2, 3]
// CHECK:      hir.get %[[H]], %[[PEER:.*]], %{{.*}} block %[[PEER]] of 4 backend = cuda_ipc
func.func @rewritten(%a: tensor<8x16xf32>, %w: tensor<16x8xf32>) -> (tensor<32x8xf32>, tensor<8x8xf32>) attributes {hir.host} {
  %x = hir.alloc "rewritten/x" : tensor<8x16xf32>
  hir.copy %a, %x : tensor<8x16xf32>, tensor<8x16xf32>
  %xg = hir.alloc "rewritten/xg" : tensor<32x16xf32>
  %t = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 4 : i64]} : (tensor<8x16xf32>, tensor<32x16xf32>) -> !hir.token
  hir.wait %t : !hir.token
  %y = hir.alloc "rewritten/y" : tensor<32x8xf32>
  hir.matmul %xg, %w, %y {hir.stream = [0 : i64, 4 : i64]} : tensor<32x16xf32>, tensor<16x8xf32>, tensor<32x8xf32>
  hir.dealloc %xg : tensor<32x16xf32>
  hir.copy %a, %x : tensor<8x16xf32>, tensor<8x16xf32>
  %z = hir.alloc "rewritten/z" : tensor<8x8xf32>
  hir.matmul %x, %w, %z : tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x8xf32>
  hir.dealloc %x : tensor<8x16xf32>
  func.return %y, %z : tensor<32x8xf32>, tensor<8x8xf32>
}

// -----

// The gathered buffer written again after the ring: the shard is copied
// into a buffer of its own, which peers pull from until the block's
// closing fence, and into the gathered buffer after the ring.
// CHECK-LABEL: func.func @gathered_rewritten
// CHECK:      %[[XS:.*]] = hir.alloc "gathered_rewritten/xg/ring" : tensor<8x16xf32>
// CHECK-NEXT: hir.copy %x, %[[XS]] :
// CHECK-NEXT: %[[H:.*]] = hir.share %[[XS]] team = [0, 1, 2, 3]
// CHECK:      hir.get %[[H]], %{{.*}}, %{{.*}} backend = cuda_ipc
// CHECK:      hir.copy %x, %mine :
// CHECK:      hir.wait %fence
// CHECK-NEXT: hir.dealloc %[[XS]]
func.func @gathered_rewritten(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>) -> (tensor<32x8xf32>, tensor<32x16xf32>) attributes {hir.host} {
  %xg = hir.alloc "gathered_rewritten/xg" : tensor<32x16xf32>
  %t = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.stream = [0 : i64, 4 : i64]} : (tensor<8x16xf32>, tensor<32x16xf32>) -> !hir.token
  hir.wait %t : !hir.token
  %y = hir.alloc "gathered_rewritten/y" : tensor<32x8xf32>
  hir.matmul %xg, %w, %y {hir.stream = [0 : i64, 4 : i64]} : tensor<32x16xf32>, tensor<16x8xf32>, tensor<32x8xf32>
  hir.launch ins(%xg : tensor<32x16xf32>) outs(%xg : tensor<32x16xf32>) {
  ^bb0(%v: tensor<32x16xf32>):
    %r = fusion.gelu %v : (tensor<32x16xf32>) -> tensor<32x16xf32>
    hir.yield %r : tensor<32x16xf32>
  }
  func.return %y, %xg : tensor<32x8xf32>, tensor<32x16xf32>
}

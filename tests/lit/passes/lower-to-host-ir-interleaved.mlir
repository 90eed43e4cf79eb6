// RUN: %fuserc opt -p lower-to-host-ir %s | filecheck %s

// lower-to-host-ir alone, on sets that change several things: rows split
// plainly to interleaved rows (an allgather, then each device's block of
// every stream chunk), and back (an allgather per chunk, then a slice).
!d = tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!s = tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @both_ways(%x: !d, %y: !s) -> (!s, !d) {
  %a = fusion.set %x : (!d) -> !s
  %b = fusion.set %y : (!s) -> !d
  func.return %a, %b : !s, !d
}
// CHECK-LABEL: func.func @both_ways(
// CHECK: %[[G:.*]] = hir.alloc "both_ways/0/0/s0" : tensor<64x8xf32>
// CHECK-NEXT: hir.allgather %x, %[[G]] team = [0, 1, 2, 3]
// CHECK: hir.team_index
// CHECK-NEXT: hir.view %[[G]] : tensor<64x8xf32> -> tensor<2x32x8xf32>
// CHECK-NEXT: hir.view {{.*}} : tensor<16x8xf32> -> tensor<2x8x8xf32>
// CHECK-NEXT: hir.chunk {{.*}} dim = 1 chunks = 4
// CHECK-NEXT: hir.copy
// CHECK: %[[H:.*]] = hir.alloc "both_ways/1/0/s0" : tensor<64x8xf32>
// CHECK-NEXT: hir.for %[[C:.*]] = 0 to 2 {
// CHECK-NEXT: hir.chunk %y [%[[C]]] dim = 0 chunks = 2
// CHECK-NEXT: hir.chunk %[[H]] [%[[C]]] dim = 0 chunks = 2
// CHECK-NEXT: hir.allgather
// CHECK-NEXT: hir.wait
// CHECK-NEXT: }
// CHECK: hir.chunk %[[H]] [%{{.*}}] dim = 0 chunks = 4

// An empty tensor's reshards move nothing (every block is empty): the result
// is only allocated, whatever the steps (here an interleaved dimension behind
// a dimension of extent 0, gathered, then split across the other dim).
// CHECK-LABEL: func.func @empty
// CHECK-NEXT: %z = hir.if_rank [0, 1, 2, 3] -> (tensor<0x2xf32>) {
// CHECK-NEXT: %z_1 = hir.alloc "empty/0/0" : tensor<0x2xf32>
// CHECK-NEXT: hir.yield %z_1
// CHECK-NEXT: }
// CHECK-NEXT: func.return %z
func.func @empty(%x: tensor<0x8xf32, #fusion.sharding<@tp, [-, Stream(2)*DIDx]>>) -> tensor<0x8xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  %z = fusion.set %x : (tensor<0x8xf32, #fusion.sharding<@tp, [-, Stream(2)*DIDx]>>) -> tensor<0x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %z : tensor<0x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// Type and attribute aliases work as in MLIR: `#name = attribute` and
// `!name = type`, also one alias inside another, used in signatures and op
// types, and defined before the mesh they name. They print expanded.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s

#rows = #fusion.sharding<@tp, [DIDx, -]>
#cols = #fusion.sharding<@tp, [-, DIDx]>
#chunks = #fusion.sharding<@tp, [Stream(2)*DIDx, -]>
#sum = #fusion.sharding<@tp, [-, -], partial = DIDx>
#grid_blocks = #fusion.sharding<@grid, [DIDy, DIDx]>
!x = tensor<64x16xf32, #rows>
!w = tensor<16x8xf32, #cols>
!y = tensor<64x8xf32, #chunks>
fusion.mesh @tp shape = [4]
fusion.mesh @grid shape = [2, 2]

// CHECK-LABEL: func.func @main(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>> {
// CHECK-NEXT:    %y = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
// CHECK-NEXT:    %p = fusion.set %y : (tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
// CHECK-NEXT:    %g = fusion.set %p : (tensor<64x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<64x8xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
// CHECK-NEXT:    func.return %y : tensor<64x8xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
// CHECK-NEXT:  }
func.func @main(%x: !x, %w: !w) -> !y {
  %y = fusion.matmul %x, %w : (!x, !w) -> !y
  %p = fusion.set %y : (!y) -> tensor<64x8xf32, #sum>
  %g = fusion.set %p : (tensor<64x8xf32, #sum>) -> tensor<64x8xf32, #grid_blocks>
  func.return %y : !y
}

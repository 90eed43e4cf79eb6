// Partial sums carried by the ops below (written here, as propagate-shardings
// may choose them), which make-resharding-contiguous must realize (it refused
// them, or broke its contract):
// - a product keeps its one partial operand partial and slices the other;
// - a contraction over a mesh axis of one device with a partial operand;
// - a contraction of nothing (an empty result) into a partial sum is the
//   op's own, never a set of an operand (a set makes no partial sum).
// RUN: %fuserc opt -p propagate-shardings,make-resharding-contiguous --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p default --split-input-file %s > /dev/null

// CHECK-LABEL: func.func @product
// CHECK: %[[S:.*]] = fusion.sum %b dims = [2] keepdim = true {{.*}} -> tensor<6x6x1xf32, #fusion.sharding<@m0, [DIDx, -, -], partial = DIDy>>
// CHECK: %[[E:.*]] = fusion.set {{.*}} -> tensor<6x6x12xf32, #fusion.sharding<@m0, [DIDx, -, -]>>
// CHECK: fusion.mul %[[E]], %[[S]] {{.*}} -> tensor<6x6x12xf32, #fusion.sharding<@m0, [DIDx, -, -], partial = DIDy>>
// CHECK: fusion.set {{.*}} partial = DIDy>>) -> tensor<6x6x12xf32, #fusion.sharding<@m0, [DIDx, -, DIDy]>>
!p = tensor<6x6x12xf32, #fusion.sharding<@m0, [DIDx, -, -], partial = DIDy>>
!s = tensor<6x6x1xf32, #fusion.sharding<@m0, [DIDx, -, -], partial = DIDy>>
!r = tensor<6x6x12xf32, #fusion.sharding<@m0, [-, -, -]>>
!b = tensor<6x6x12xf32, #fusion.sharding<@m0, [DIDx, -, DIDy]>>
fusion.mesh @m0 shape = [2, 2]
func.func @product(%a: !r, %b: !b) -> !b {
  %s = fusion.sum %b dims = [2] keepdim = true : (!b) -> !s
  %e = fusion.exp %a : (!r) -> !r
  %p = fusion.mul %e, %s : (!r, !s) -> !p
  %d = fusion.sub %b, %p : (!b, !p) -> !b
  func.return %d : !b
}

// -----

// CHECK-LABEL: func.func @one_device_axis
// CHECK: fusion.matmul {{.*}} -> tensor<2x12xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>
fusion.mesh @m shape = [1, 3]
func.func @one_device_axis(%x: tensor<2x2x6xf32, #fusion.sharding<@m, [-, -, DIDx]>>, %w: tensor<2x12xf32, #fusion.sharding<@m, [DIDy, -]>>) -> tensor<2x12xf32, #fusion.sharding<@m, [-, -]>> {
  %p = fusion.sum %x dims = [2] : (tensor<2x2x6xf32, #fusion.sharding<@m, [-, -, DIDx]>>) -> tensor<2x2xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>
  %y = fusion.matmul %p, %w : (tensor<2x2xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>, tensor<2x12xf32, #fusion.sharding<@m, [DIDy, -]>>) -> tensor<2x12xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>
  %z = fusion.relu %y : (tensor<2x12xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>) -> tensor<2x12xf32, #fusion.sharding<@m, [-, -]>>
  func.return %z : tensor<2x12xf32, #fusion.sharding<@m, [-, -]>>
}

// -----

// CHECK-LABEL: func.func @empty
// CHECK: %[[X:.*]] = fusion.set %x {{.*}} -> tensor<6x6xf32, #fusion.sharding<@m, [-, DIDx]>>
// CHECK: fusion.matmul %[[X]], %w {{.*}} -> tensor<6x0xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>
fusion.mesh @m shape = [2]
func.func @empty(%x: tensor<6x6xf32, #fusion.sharding<@m, [-, -]>>, %w: tensor<6x0xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<6x0xf32, #fusion.sharding<@m, [-, -], partial = DIDx>> {
  %y = fusion.matmul %x, %w : (tensor<6x6xf32, #fusion.sharding<@m, [-, -]>>, tensor<6x0xf32, #fusion.sharding<@m, [DIDx, -]>>) -> tensor<6x0xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>
  func.return %y : tensor<6x0xf32, #fusion.sharding<@m, [-, -], partial = DIDx>>
}

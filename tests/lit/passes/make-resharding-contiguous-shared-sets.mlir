// RUN: %fuserc opt -p propagate-shardings,make-resharding-contiguous %s | filecheck %s
// RUN: %fuserc opt --mesh tp=2 %s | filecheck %s --check-prefix=MESH

// One reshard per value and sharding: the three column-parallel linears of
// one sequence-sharded input read one gathered copy of it.
// MESH: fusion.mesh @tp shape = [2]
// CHECK-LABEL: func.func @qkv
// CHECK: fusion.set %x
// CHECK-NOT: fusion.set
// CHECK-COUNT-3: fusion.linear %0
// CHECK-NOT: fusion.set
fusion.mesh @tp shape = [4]
!w = tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!o = tensor<16x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
func.func @qkv(%x: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, %wq: !w, %wk: !w, %wv: !w) -> (!o, !o, !o) {
  %q = fusion.linear %x, %wq : (tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, !w) -> !o
  %k = fusion.linear %x, %wk : (tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, !w) -> !o
  %v = fusion.linear %x, %wv : (tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, !w) -> !o
  func.return %q, %k, %v : !o, !o, !o
}

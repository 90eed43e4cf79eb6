// An alltoallv's bytes in the communication report: bounded, as its counts
// are known at run time only: (n-1)/n of its larger data buffer, the bound
// on the rows received (24x8xf32: 768 bytes, 3/4 of it on 4 ranks).
// RUN: %fuserc opt %s --comm-report -o /dev/null 2>&1 | filecheck %s
// CHECK: @main:
// CHECK-NEXT: #  kind       dtype  shape  n  team   times  bytes  reshard  overlap
// CHECK-NEXT: 1  alltoallv  f32    24x8   4  [0-3]      1  <=576  -        no
// CHECK-NEXT: total per rank (4 ranks): 1 communication, 576 bytes
fusion.mesh @m shape = [4]
func.func @main(%x: tensor<12x8xf32>, %sc: tensor<4xi64>) attributes {hir.host} {
  %y = hir.alloc "y" : tensor<24x8xf32>
  %rc = hir.alloc "rc" : tensor<4xi64>
  %t = hir.alltoallv %x, %sc, %y, %rc team = [0, 1, 2, 3] backend = nccl : (tensor<12x8xf32>, tensor<4xi64>, tensor<24x8xf32>, tensor<4xi64>) -> !hir.token
  hir.wait %t : !hir.token
  func.return
}

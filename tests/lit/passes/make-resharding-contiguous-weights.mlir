// A GEMM keeps its weight where the user placed it: this row-parallel
// matmul (x [-, DIDx] @ w [DIDx, -] -> y [DIDx, -]) is a local GEMM into a
// partial sum and a reduce-scatter, although moving x by an all-to-all and
// gathering w would move fewer bytes at this shape.
// RUN: %fuserc opt -p 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir' %s | filecheck %s

// CHECK-LABEL: func.func @main
// CHECK-NOT: hir.alltoall
// CHECK-NOT: hir.allgather
// CHECK: hir.matmul %x, %w, %{{.*}} : tensor<16384x2048xbf16>, tensor<2048x8192xbf16>, tensor<16384x8192xbf16>
// CHECK: hir.reduce_scatter
fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, DIDx]>>,
                %w: tensor<8192x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>)
    -> tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.matmul %x, %w : (tensor<16384x8192xbf16, #fusion.sharding<@tp, [-, DIDx]>>, tensor<8192x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<16384x8192xbf16, #fusion.sharding<@tp, [DIDx, -]>>
}

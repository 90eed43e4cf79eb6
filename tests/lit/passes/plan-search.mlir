// RUN: %fuserc opt -p 'default{algorithm=none}' %s | filecheck %s
// The communication plan is propagate-shardings' search (the fewest bytes
// moved), make-resharding-contiguous' reuse of reshards, and its bucketing
// of returned reductions.

fusion.mesh @tp shape = [4]

// A row-parallel linear's bias add moves to the sharded side: the partial
// sum is reduce-scattered (3/4 of it moves), never all-reduced (6/4) and
// sliced; each device adds the bias to its rows.
// CHECK-LABEL: func.func @bias_on_the_sharded_side
// CHECK-NOT:   hir.allreduce
// CHECK:       hir.linear %o, %w, %{{.*}} : tensor<64x8xf32>, tensor<16x8xf32>, tensor<64x16xf32>
// CHECK:       hir.reduce_scatter {{.*}} : (tensor<64x16xf32>, tensor<16x16xf32>)
// CHECK-NOT:   hir.allreduce
// CHECK:       func.return
func.func @bias_on_the_sharded_side(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>,
    %o: tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>,
    %b: tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %a = fusion.linear %o, %w, %b : (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16xf32, #fusion.sharding<@tp, [-]>>) -> tensor<64x16xf32>
  %h = fusion.add %x, %a : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<64x16xf32>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %h : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// A partial sum headed for f32 arithmetic on sharded rows (a norm's
// backward) is reduce-scattered at the GEMM, in bf16: no collective of f32.
// CHECK-LABEL: func.func @reduce_in_bf16
// CHECK:       hir.reduce_scatter {{.*}} : (tensor<64x16xbf16>, tensor<16x16xbf16>)
// CHECK-NOT:   xf32>) -> !hir.token
// CHECK:       func.return
func.func @reduce_in_bf16(%u: tensor<64x32xbf16, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<32x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>,
    %g: tensor<16xbf16, #fusion.sharding<@tp, [-]>>) -> tensor<64x16xbf16, #fusion.sharding<@tp, [DIDx, -]>> {
  %p = fusion.matmul %u, %w : (tensor<64x32xbf16, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xbf16>
  %f = fusion.cast %p : (tensor<64x16xbf16>) -> tensor<64x16xf32>
  %gf = fusion.cast %g : (tensor<16xbf16, #fusion.sharding<@tp, [-]>>) -> tensor<16xf32>
  %s = fusion.mul %f, %gf : (tensor<64x16xf32>, tensor<16xf32>) -> tensor<64x16xf32>
  %m = fusion.mean %s dims = [1] keepdim = true : (tensor<64x16xf32>) -> tensor<64x1xf32>
  %d = fusion.sub %s, %m : (tensor<64x16xf32>, tensor<64x1xf32>) -> tensor<64x16xf32>
  %y = fusion.cast %d : (tensor<64x16xf32>) -> tensor<64x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>
}

// A weight gradient's transpose of an input gathered for another GEMM is
// taken of that gathered copy: one allgather, not two.
// CHECK-LABEL: func.func @gathered_once
// CHECK-COUNT-1: hir.allgather
// CHECK-NOT:   hir.allgather
// CHECK:       func.return
func.func @gathered_once(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>)
    -> (tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) {
  %y = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %xt = fusion.permute %x dims = [1, 0] : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<16x64xf32>
  %z = fusion.matmul %xt, %y : (tensor<16x64xf32>, tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %y, %z : tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
}

// Returned partial sums of replicated values (a norm's weight and bias
// gradients) are reduced by one allreduce of their concatenation.
// CHECK-LABEL: func.func @bucketed
// CHECK:       hir.allreduce {{.*}} : (tensor<48xf32>, tensor<48xf32>)
// CHECK-NOT:   hir.allreduce
// CHECK:       func.return
func.func @bucketed(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %y: tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>)
    -> (tensor<16xf32, #fusion.sharding<@tp, [-]>>, tensor<32xf32, #fusion.sharding<@tp, [-]>>) {
  %a = fusion.sum %x dims = [0] : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<16xf32, #fusion.sharding<@tp, [-]>>
  %b = fusion.sum %y dims = [0] : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<32xf32, #fusion.sharding<@tp, [-]>>
  func.return %a, %b : tensor<16xf32, #fusion.sharding<@tp, [-]>>, tensor<32xf32, #fusion.sharding<@tp, [-]>>
}

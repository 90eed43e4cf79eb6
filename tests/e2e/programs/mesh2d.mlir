// A 2x2 mesh: a collective over DIDx runs within each row ([0, 1] and
// [2, 3]), over DIDy within each column. X (4x6) is split [DIDy, DIDx]:
// device (r, c) holds the 2x3 block X[2r:2r+2, 3c:3c+3].
fusion.mesh @g shape = [2, 2]
func.func @main(%x: tensor<2x3xf32> {hir.global = tensor<4x6xf32, #fusion.sharding<@g, [DIDy, DIDx]>>})
    -> (tensor<2x3xf32> {hir.global = tensor<4x3xf32, #fusion.sharding<@g, [DIDy, -]>>},
        tensor<4x3xf32> {hir.global = tensor<4x6xf32, #fusion.sharding<@g, [-, DIDx]>>},
        tensor<2x3xf32> {hir.global = tensor<2x6xf32, #fusion.sharding<@g, [-, DIDx], partial = DIDy>>})
    attributes {hir.host} {
  // Row sums of the column blocks: allreduce over DIDx, one op per row team.
  %r = hir.alloc "r" : tensor<2x3xf32>
  %t0 = hir.allreduce %x, %r op = sum team = [0, 1] backend = nccl : (tensor<2x3xf32>, tensor<2x3xf32>) -> !hir.token
  %t1 = hir.allreduce %x, %r op = sum team = [2, 3] backend = nccl : (tensor<2x3xf32>, tensor<2x3xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  hir.wait %t1 : !hir.token
  // Column blocks gathered over DIDy, one op per column team.
  %c = hir.alloc "c" : tensor<4x3xf32>
  %t2 = hir.allgather %x, %c team = [0, 2] backend = nccl : (tensor<2x3xf32>, tensor<4x3xf32>) -> !hir.token
  %t3 = hir.allgather %x, %c team = [1, 3] backend = nccl : (tensor<2x3xf32>, tensor<4x3xf32>) -> !hir.token
  hir.wait %t2 : !hir.token
  hir.wait %t3 : !hir.token
  // x itself read as a partial sum over DIDy: the sum of the two row blocks.
  func.return %r, %c, %x : tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x3xf32>
}

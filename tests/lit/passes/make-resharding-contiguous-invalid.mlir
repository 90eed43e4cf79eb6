// RUN: %fuserc opt -p make-resharding-contiguous --split-input-file --verify-diagnostics %s

fusion.mesh @tp shape = [4]
func.func @not_a_permutation(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  // expected-error @+1 {{'fusion.neg' op alloc_order = [0, 0] is not a permutation of the 2 dimensions of the result}}
  %y = fusion.neg %x {alloc_order = array<i64: 0, 0>} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

fusion.mesh @tp shape = [4]
func.func @wrong_rank(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  // expected-error @+1 {{alloc_order = [2, 1, 0] is not a permutation of the 2 dimensions}}
  %y = fusion.neg %x {alloc_order = array<i64: 2, 1, 0>} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

fusion.mesh @tp shape = [4]
func.func @not_dense(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  // expected-error @+1 {{'fusion.neg' op alloc_order must be an array<i64: ...>, got [1 : i64, 0 : i64]}}
  %y = fusion.neg %x {alloc_order = [1, 0]} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

// expected-error @+1 {{'fusion.mesh' op alloc_order needs an op with a tensor result}}
fusion.mesh @tp shape = [4] {alloc_order = array<i64: 0>}

// -----

fusion.mesh @tp shape = [4]
func.func @unsharded_result(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32> {
  // expected-error @+1 {{'fusion.relu' op: its result has no sharding: make-resharding-contiguous needs every tensor sharded (run propagate-shardings first)}}
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{argument #1 of @unsharded_argument has no sharding: make-resharding-contiguous needs every tensor sharded}}
func.func @unsharded_argument(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %b: tensor<64x16xf32>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  func.return %x : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

fusion.mesh @tp shape = [4]
func.func @partial_from_pointwise(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  // expected-error @+1 {{'fusion.relu' op cannot be split into local compute and reshards: no placement of its operands (#fusion.sharding<@tp, [DIDx, -]>) computes a result that communication turns into #fusion.sharding<@tp, [-, -], partial = DIDx> (a partial sum comes only from a contraction}}
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}

// -----

fusion.mesh @tp shape = [4]
func.func @set_to_partial(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  // expected-error @+1 {{'fusion.set' op cannot reshard #fusion.sharding<@tp, [DIDx, -]> to #fusion.sharding<@tp, [-, -], partial = DIDx>: a partial sum is made only by a contraction (matmul, linear, sum), never by communication}}
  %y = fusion.set %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}

// -----

fusion.mesh @tp shape = [4]
func.func @bad_set_layout(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>> {
  // expected-error @+1 {{'fusion.set' op alloc_order = [1, 0] keeps the dim its allgather communicates along from being outermost in memory; drop it or put that dim first}}
  %y = fusion.set %x {alloc_order = array<i64: 1, 0>} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>
}

// RUN: %fuserc opt -p lower-to-host-ir --split-input-file --verify-diagnostics %s

// The input must be fully annotated: propagate-shardings decides shardings.
fusion.mesh @tp shape = [4]
func.func @unannotated(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  // expected-error @+1 {{'fusion.relu' has a tensor without a sharding: run propagate-shardings first}}
  %a = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
  %y = fusion.exp %a : (tensor<64x16xf32>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{argument #1 of @unannotated_arg has no sharding: run propagate-shardings first}}
func.func @unannotated_arg(%x: tensor<8xf32, #fusion.sharding<@tp, [-]>>, %y: tensor<8xf32>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>> {
  func.return %x : tensor<8xf32, #fusion.sharding<@tp, [-]>>
}

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{result #0 of @unannotated_result has no sharding: run propagate-shardings first}}
func.func @unannotated_result(%x: tensor<8xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8xf32> {
  %y = fusion.relu %x : (tensor<8xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// -----

// Every op other than a set must be local: make-resharding-contiguous
// splits a resharding op into local compute and reshards.
!x = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!w = tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>
!y = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>
fusion.mesh @tp shape = [4]
func.func @resharding_op(%x: !x, %w: !w) -> !y {
  // expected-error @+1 {{'fusion.matmul' is a resharding op (operands #fusion.sharding<@tp, [DIDx, -]>, #fusion.sharding<@tp, [-, -]> and result #fusion.sharding<@tp, [-, -]>): run make-resharding-contiguous first}}
  %y = fusion.matmul %x, %w : (!x, !w) -> !y
  func.return %y : !y
}

// -----

// No communication makes a partial sum.
!r = tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>
!p = tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
fusion.mesh @tp shape = [4]
func.func @to_partial(%x: !r) -> !p {
  // expected-error @+1 {{cannot lower 'fusion.set' from #fusion.sharding<@tp, [-, -]> to #fusion.sharding<@tp, [-, -], partial = DIDx>: no sequence of communications reaches it}}
  %y = fusion.set %x : (!r) -> !p
  func.return %y : !p
}

// -----

!r = tensor<8x8xf32, #fusion.sharding<@a, [-, -]>>
!p = tensor<8x8xf32, #fusion.sharding<@b, [-, -], partial = DIDx>>
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [2] devices = [2, 3]
func.func @to_partial_other_mesh(%x: !r) -> !p {
  // expected-error @+1 {{cannot lower 'fusion.set' from #fusion.sharding<@a, [-, -]> to #fusion.sharding<@b, [-, -], partial = DIDx>}}
  %y = fusion.set %x : (!r) -> !p
  func.return %y : !p
}

// -----

// Host programs have no calls.
!t = tensor<8xf32, #fusion.sharding<@tp, [-]>>
fusion.mesh @tp shape = [4]
func.func private @callee(!t) -> !t
func.func @caller(%x: !t) -> !t {
  // expected-error @+1 {{'func.call' cannot be lowered to host IR (only fusion ops and func.return)}}
  %y = func.call @callee(%x) : (!t) -> !t
  func.return %y : !t
}


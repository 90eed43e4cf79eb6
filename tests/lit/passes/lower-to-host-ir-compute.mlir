// RUN: %fuserc opt -p lower-to-host-ir --split-input-file %s | filecheck %s
// RUN: %fuserc opt -p 'lower-to-host-ir{backend=mpi}' --split-input-file %s | filecheck %s --check-prefix=MPI
// RUN: not %fuserc opt -p 'lower-to-host-ir{backend=gloo}' %s 2>&1 | filecheck %s --check-prefix=BAD
// BAD: error: invalid options for pass 'lower-to-host-ir': backend must be one of nccl, cuda_ipc, mpi, got 'gloo'

// Local compute: every rank computes on its local blocks. Matmul and linear
// are GEMMs on the local blocks; other ops are launches of fusion ops on
// local types.

// Column-parallel linear with a bias, then a row-parallel linear whose
// contraction is split: a local partial sum of the same local shape.
!x = tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>
!w1 = tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!b1 = tensor<32xf32, #fusion.sharding<@tp, [DIDx]>>
!h = tensor<8x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
!w2 = tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>
!p = tensor<8x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
fusion.mesh @tp shape = [4]
func.func @linears(%x: !x, %w1: !w1, %b1: !b1, %w2: !w2) -> !p {
  %h = fusion.linear %x, %w1, %b1 : (!x, !w1, !b1) -> !h
  %p = fusion.linear %h, %w2 : (!h, !w2) -> !p
  func.return %p : !p
}
// CHECK-LABEL: func.func @linears(%x: tensor<8x16xf32> {hir.global = tensor<8x16xf32, #fusion.sharding<@tp, [-, -]>>}, %w1: tensor<8x16xf32> {hir.global = tensor<32x16xf32, #fusion.sharding<@tp, [DIDx, -]>>}, %b1: tensor<8xf32> {hir.global = tensor<32xf32, #fusion.sharding<@tp, [DIDx]>>}, %w2: tensor<16x8xf32> {hir.global = tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>})
// CHECK-SAME: -> (tensor<8x16xf32> {hir.global = tensor<8x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>}) attributes {hir.host} {
// CHECK-NEXT: %p = hir.if_rank [0, 1, 2, 3] -> (tensor<8x16xf32>) {
// CHECK-NEXT: %h = hir.alloc "linears/0/0" : tensor<8x8xf32>
// CHECK-NEXT: hir.linear %x, %w1, %b1, %h : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8xf32>, tensor<8x8xf32>
// CHECK-NEXT: %[[P:.*]] = hir.alloc "linears/1/0" : tensor<8x16xf32>
// CHECK-NEXT: hir.linear %h, %w2, %[[P]] : tensor<8x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>
// CHECK-NEXT: hir.dealloc %h : tensor<8x8xf32>
// CHECK-NEXT: hir.yield %[[P]] : tensor<8x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %p : tensor<8x16xf32>

// -----

// Consecutive elementwise ops are one launch (its inputs: every value the
// chain reads from outside; its outputs: every value used after it). %c,
// used twice but only inside, is never stored.
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @chain(%x: !t, %y: !t) -> (!t, !t) {
  %a = fusion.add %x, %y : (!t, !t) -> !t
  %b = fusion.gelu %a {approximate = "tanh"} : (!t) -> !t
  %c = fusion.mul %b, %x : (!t, !t) -> !t
  %d = fusion.exp %c : (!t) -> !t
  %e = fusion.neg %c : (!t) -> !t
  func.return %d, %e : !t, !t
}
// CHECK-LABEL: func.func @chain(
// CHECK-NEXT: %d, %e = hir.if_rank [0, 1, 2, 3] -> (tensor<16x16xf32>, tensor<16x16xf32>) {
// CHECK-NEXT: %[[D:.*]] = hir.alloc "chain/3/0" : tensor<16x16xf32>
// CHECK-NEXT: %[[E:.*]] = hir.alloc "chain/4/0" : tensor<16x16xf32>
// CHECK-NEXT: hir.launch ins(%x, %y : tensor<16x16xf32>, tensor<16x16xf32>) outs(%[[D]], %[[E]] : tensor<16x16xf32>, tensor<16x16xf32>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<16x16xf32>, %[[Y:.*]]: tensor<16x16xf32>):
// CHECK-NEXT: %a = fusion.add %[[X]], %[[Y]] : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK-NEXT: %b = fusion.gelu %a {approximate = "tanh"} : (tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK-NEXT: %[[C:.*]] = fusion.mul %b, %[[X]] : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK-NEXT: %[[D2:.*]] = fusion.exp %[[C]] : (tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK-NEXT: %[[E2:.*]] = fusion.neg %[[C]] : (tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK-NEXT: hir.yield %[[D2]], %[[E2]] : tensor<16x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.yield %[[D]], %[[E]] : tensor<16x16xf32>, tensor<16x16xf32>

// -----

// Reductions: a sum over the split dimension is a local partial sum; a max
// and a softmax over a whole dimension are local. The sum and the max, each
// used after them, are one launch with two outputs; a softmax over rows is a
// launch of its own (a row kernel on cuda).
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!s = tensor<16xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
!m = tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
fusion.mesh @tp shape = [4]
func.func @reductions(%x: !t) -> (!s, !m, !t) {
  %s = fusion.sum %x dims = [0] : (!t) -> !s
  %m = fusion.max %x dims = [1] : (!t) -> !m
  %y = fusion.softmax %x dim = 1 : (!t) -> !t
  func.return %s, %m, %y : !s, !m, !t
}
// CHECK-LABEL: func.func @reductions(%x: tensor<16x16xf32>
// CHECK-SAME: -> (tensor<16xf32> {hir.global = tensor<16xf32, #fusion.sharding<@tp, [-], partial = DIDx>>}, tensor<16xf32> {hir.global = tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>}, tensor<16x16xf32>
// CHECK: %[[S:.*]] = hir.alloc "reductions/0/0" : tensor<16xf32>
// CHECK-NEXT: %[[M:.*]] = hir.alloc "reductions/1/0" : tensor<16xf32>
// CHECK-NEXT: hir.launch ins(%x : tensor<16x16xf32>) outs(%[[S]], %[[M]] : tensor<16xf32>, tensor<16xf32>) {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<16x16xf32>):
// CHECK-NEXT: fusion.sum %[[A]] dims = [0] : (tensor<16x16xf32>) -> tensor<16xf32>
// CHECK-NEXT: fusion.max %[[A]] dims = [1] : (tensor<16x16xf32>) -> tensor<16xf32>
// CHECK: hir.launch ins(%x : tensor<16x16xf32>) outs(%{{.*}} : tensor<16x16xf32>) {
// CHECK-NEXT: ^bb0(%[[B:.*]]: tensor<16x16xf32>):
// CHECK-NEXT: fusion.softmax %[[B]] dim = 1 : (tensor<16x16xf32>) -> tensor<16x16xf32>

// -----

// A slice keeps its bounds on whole dimensions and spans a split one.
!t = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
!u = tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @slice(%x: !t) -> !u {
  %y = fusion.slice %x starts = [0, 4] limits = [64, 12] : (!t) -> !u
  func.return %y : !u
}
// CHECK-LABEL: func.func @slice(%x: tensor<16x16xf32>
// CHECK: fusion.slice %{{.*}} starts = [0, 4] limits = [16, 12] : (tensor<16x16xf32>) -> tensor<16x8xf32>

// -----

// Buffer layouts (alloc_order): a matmul whose result is laid out
// transposed is the GEMM w^T x^T on hir.transpose views (no copy); the
// reshard works on the
// transposed buffer (its dim 0 is the scattered one); a permute that undoes
// the layout is a relabelling of the same buffer (no op); a result laid out
// transposed is copied to row-major at the return.
!x = tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>
!w = tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!p = tensor<64x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
!c = tensor<64x8xf32, #fusion.sharding<@tp, [-, DIDx]>>
!ct = tensor<8x64xf32, #fusion.sharding<@tp, [DIDx, -]>>
fusion.mesh @tp shape = [4]
func.func @layout(%x: !x, %w: !w) -> (!ct, !c) {
  %p = fusion.matmul %x, %w {alloc_order = array<i64: 1, 0>} : (!x, !w) -> !p
  %c = fusion.set %p {alloc_order = array<i64: 1, 0>} : (!p) -> !c
  %t = fusion.permute %c dims = [1, 0] : (!c) -> !ct
  func.return %t, %c : !ct, !c
}
// CHECK-LABEL: func.func @layout(
// CHECK-SAME: -> (tensor<2x64xf32> {hir.global = tensor<8x64xf32, #fusion.sharding<@tp, [DIDx, -]>>}, tensor<64x2xf32> {hir.global = tensor<64x8xf32, #fusion.sharding<@tp, [-, DIDx]>>})
// CHECK-NEXT: %c, %[[CR:.*]] = hir.if_rank [0, 1, 2, 3] -> (tensor<2x64xf32>, tensor<64x2xf32>) {
// CHECK-NEXT: %p = hir.alloc "layout/0/0" : tensor<8x64xf32>
// CHECK-NEXT: %[[WT:.*]] = hir.transpose %w : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[XT:.*]] = hir.transpose %x : tensor<64x4xf32> -> tensor<4x64xf32>
// CHECK-NEXT: hir.matmul %[[WT]], %[[XT]], %p : tensor<8x4xf32>, tensor<4x64xf32>, tensor<8x64xf32>
// CHECK-NEXT: %[[C:.*]] = hir.alloc "layout/1/0" : tensor<2x64xf32>
// CHECK-NEXT: %[[TOK:.*]] = hir.reduce_scatter %p, %[[C]] op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<8x64xf32>, tensor<2x64xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %[[TOK]] : !hir.token
// CHECK-NEXT: hir.dealloc %p : tensor<8x64xf32>
// CHECK-NEXT: %[[R:.*]] = hir.alloc "layout/return/1" : tensor<64x2xf32>
// CHECK-NEXT: hir.launch ins(%[[C]] : tensor<2x64xf32>) outs(%[[R]] : tensor<64x2xf32>) {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<2x64xf32>):
// CHECK-NEXT: %[[B:.*]] = fusion.permute %[[A]] dims = [1, 0] : (tensor<2x64xf32>) -> tensor<64x2xf32>
// CHECK-NEXT: hir.yield %[[B]] : tensor<64x2xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.yield %[[C]], %[[R]] : tensor<2x64xf32>, tensor<64x2xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %c, %[[CR]] : tensor<2x64xf32>, tensor<64x2xf32>

// The backend option names the backend of every communication.
// MPI-LABEL: func.func @layout(
// MPI: hir.reduce_scatter %p, %{{.*}} op = sum team = [0, 1, 2, 3] backend = mpi

// -----

// Several functions: each is a host program with its own sites.
!t = tensor<8xf32, #fusion.sharding<@tp, [DIDx]>>
fusion.mesh @tp shape = [4]
func.func @f(%x: !t) -> !t {
  %y = fusion.relu %x : (!t) -> !t
  func.return %y : !t
}
func.func @g(%x: !t) -> !t {
  %y = fusion.tanh %x : (!t) -> !t
  func.return %y : !t
}
// CHECK-LABEL: func.func @f(
// CHECK: hir.alloc "f/0/0" : tensor<2xf32>
// CHECK: fusion.relu
// CHECK-LABEL: func.func @g(
// CHECK: hir.alloc "g/0/0" : tensor<2xf32>
// CHECK: fusion.tanh


// -----

// Views, no copy: a reshape of a row-major buffer, and a permute that only
// moves dimensions of local extent 1. A real transpose is a launch. A
// returned view is copied into a buffer of its own.
!x = tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>
!r = tensor<64x4x8xf32, #fusion.sharding<@tp, [DIDx, -, -]>>
!t = tensor<4x64x8xf32, #fusion.sharding<@tp, [-, DIDx, -]>>
!v = tensor<4x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!vt = tensor<8x4xf32, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [4]
func.func @views(%x: !x, %y: !v) -> (!r, !t, !vt) {
  %r = fusion.reshape %x : (!x) -> !r
  %t = fusion.permute %r dims = [1, 0, 2] : (!r) -> !t
  %u = fusion.permute %y dims = [1, 0] : (!v) -> !vt
  %w = fusion.exp %u : (!vt) -> !vt
  func.return %r, %t, %w : !r, !t, !vt
}
// CHECK-LABEL: func.func @views(
// CHECK-NEXT: %t, %w, %[[R:.*]] = hir.if_rank [0, 1, 2, 3] -> (tensor<4x16x8xf32>, tensor<8x1xf32>, tensor<16x4x8xf32>) {
// CHECK-NEXT: %r = hir.view %x : tensor<16x32xf32> -> tensor<16x4x8xf32>
// CHECK-NEXT: %[[T:.*]] = hir.alloc "views/1/0" : tensor<4x16x8xf32>
// CHECK-NEXT: hir.launch ins(%r : tensor<16x4x8xf32>) outs(%[[T]] : tensor<4x16x8xf32>) {
// CHECK: fusion.permute %{{.*}} dims = [1, 0, 2] : (tensor<16x4x8xf32>) -> tensor<4x16x8xf32>
// CHECK: %u = hir.view %y : tensor<1x8xf32> -> tensor<8x1xf32>
// CHECK-NEXT: %[[W:.*]] = hir.alloc "views/3/0" : tensor<8x1xf32>
// CHECK-NEXT: hir.launch ins(%u : tensor<8x1xf32>) outs(%[[W]] : tensor<8x1xf32>) {
// CHECK: %[[C:.*]] = hir.alloc "views/return/0" : tensor<16x4x8xf32>
// CHECK-NEXT: hir.copy %r, %[[C]] : tensor<16x4x8xf32>, tensor<16x4x8xf32>
// CHECK-NEXT: hir.yield %[[T]], %[[W]], %[[C]]
// CHECK-NEXT: }
// CHECK-NEXT: func.return %[[R]], %t, %w

// Every hir op and type in its custom form: printed as written, stable when
// re-read, and the same after a trip through the generic form.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | filecheck %s --check-prefix=GENERIC
// RUN: %fuserc opt %s > %t.custom
// RUN: %fuserc opt --print-generic %s | %fuserc opt - > %t.generic
// RUN: diff %t.custom %t.generic

// CHECK-LABEL: func.func @types(%t: !hir.token, %s: !hir.stream, %e: !hir.event, %h: !hir.handle) -> (!hir.token, !hir.stream, !hir.event, !hir.handle) {
// CHECK-NEXT: func.return %t, %s, %e, %h : !hir.token, !hir.stream, !hir.event, !hir.handle
// CHECK-NEXT: }
func.func @types(%t: !hir.token, %s: !hir.stream, %e: !hir.event, %h: !hir.handle) -> (!hir.token, !hir.stream, !hir.event, !hir.handle) {
  func.return %t, %s, %e, %h : !hir.token, !hir.stream, !hir.event, !hir.handle
}

// Rank lists of many ranks are runs: `A to B` (B exclusive, as hir.for's
// bounds) and `A to B step S`, for teams and hir.if_rank alike; a run of 16
// ranks or more is printed so however it was written, a shorter one rank by
// rank. hir.if_rank stores a set of ranks (printed in increasing order).
// GENERIC-LABEL: "func.func"() <{sym_name = "runs"
// GENERIC: "hir.if_rank"() <{ranks = #hir.ranks<[0 to 4194304]>}> ({
// GENERIC: "hir.team_index"() <{team = array<i64: 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 100, 101>}> : () -> index
// GENERIC: "hir.if_rank"() <{ranks = #hir.ranks<[0, 1, 2, 3, 7 to 23, 30 to 62 step 2]>}> ({
// CHECK-LABEL: func.func @runs() {
// CHECK-NEXT: hir.if_rank [0 to 4194304] {
// CHECK-NEXT: %p = hir.team_index team = [0 to 32 step 2, 100, 101] : index
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [0, 1, 2, 3, 7 to 23, 30 to 62 step 2] {
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [5, 9] {
// CHECK-NEXT: }
func.func @runs() {
  hir.if_rank [0 to 4194304] {
    %p = hir.team_index team = [0 to 31 step 2, 100, 101] : index
  }
  hir.if_rank [30 to 62 step 2, 3, 0 to 3, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22] {
  }
  hir.if_rank [9, 5 to 6] {
  }
  func.return
}

// A team with translates: the team and its copies shifted by multiples of
// each stride, one team per offset (every DIDx row of a [65536, 64] mesh,
// every DIDy column, the DIDy teams of a 3-D mesh).
// GENERIC-LABEL: "func.func"() <{sym_name = "translated"
// GENERIC: "hir.allreduce"(%x, %x) <{op = "sum", team = array<i64: 0, 1, 2, 3>, translates = array<i64: 2, 4>, backend = "nccl"}>
// CHECK-LABEL: func.func @translated(%x: tensor<8xf32>) {
// CHECK-NEXT: %t = hir.allreduce %x, %x op = sum team = [0, 1, 2, 3] translated [2 step 4] backend = nccl : (tensor<8xf32>, tensor<8xf32>) -> !hir.token
// CHECK-NEXT: %p = hir.team_index team = [0 to 4194304 step 64] translated [64 step 1] : index
// CHECK-NEXT: %r = hir.team_rank %p team = [0, 2] translated [2 step 4, 2 step 1] : index
// CHECK-NEXT: %h = hir.share %x team = [0 to 64] translated [65536 step 64] : tensor<8xf32> -> !hir.handle
// CHECK-NEXT: %f = hir.barrier team = [0, 1] translated [2 step 2] backend = nccl : !hir.token
func.func @translated(%x: tensor<8xf32>) {
  %t = hir.allreduce %x, %x op = sum team = [0, 1, 2, 3] translated [2 step 4] backend = nccl : (tensor<8xf32>, tensor<8xf32>) -> !hir.token
  %p = hir.team_index team = [0 to 4194304 step 64] translated [64 step 1] : index
  %r = hir.team_rank %p team = [0, 2] translated [2 step 4, 2 step 1] : index
  %h = hir.share %x team = [0 to 64] translated [65536 step 64] : tensor<8xf32> -> !hir.handle
  %f = hir.barrier team = [0, 1] translated [2 step 2] backend = nccl : !hir.token
  func.return
}

// GENERIC-LABEL: "func.func"() <{sym_name = "allocation"
// GENERIC: %b = "hir.alloc"() <{site = "allocation/0/b"}> : () -> tensor<64x16xbf16>
// GENERIC: "hir.dealloc"(%b) : (tensor<64x16xbf16>) -> ()
// CHECK-LABEL: func.func @allocation() {
// CHECK-NEXT: %b = hir.alloc "allocation/0/b" : tensor<64x16xbf16>
// CHECK-NEXT: %s = hir.alloc "allocation/1/s" {tag = "scalar"} : tensor<f32>
// CHECK-NEXT: hir.dealloc %b : tensor<64x16xbf16>
// CHECK-NEXT: hir.dealloc %s {tag = "last"} : tensor<f32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @allocation() {
  %b = hir.alloc "allocation/0/b" : tensor<64x16xbf16>
  %s = hir.alloc "allocation/1/s" {tag = "scalar"} : tensor<f32>
  hir.dealloc %b : tensor<64x16xbf16>
  hir.dealloc %s {tag = "last"} : tensor<f32>
  func.return
}

// A storage number (plan-memory's): a property, printed after the site.
// GENERIC-LABEL: "func.func"() <{sym_name = "storage"
// GENERIC: %a = "hir.alloc"() <{site = "storage/a", storage = 3 : i64}> : () -> tensor<8xf32>
// CHECK-LABEL: func.func @storage() attributes {hir.host} {
// CHECK-NEXT: %a = hir.alloc "storage/a" storage 3 : tensor<8xf32>
// CHECK-NEXT: %b = hir.alloc "storage/b" storage 3 {tag = "x"} : tensor<2x2xbf16>
func.func @storage() attributes {hir.host} {
  %a = hir.alloc "storage/a" storage 3 : tensor<8xf32>
  %b = hir.alloc "storage/b" storage 3 {tag = "x"} : tensor<2x2xbf16>
  func.return
}

// The loop body's yield and the empty yield of a result-less if_rank are
// implicit in the custom form only.
// GENERIC-LABEL: "func.func"() <{sym_name = "control"
// GENERIC: %c0 = "hir.constant"() <{value = 0 : index}> : () -> index
// GENERIC: %p = "hir.team_index"() <{team = array<i64: 4, 5, 6, 7>}> : () -> index
// GENERIC: %n = "hir.add_mod"(%p, %c0) <{modulus = 4 : i64}> : (index, index) -> index
// GENERIC: "hir.for"() <{lb = 0 : i64, ub = 4 : i64, step = 1 : i64}> ({
// GENERIC-NEXT: ^bb0(%i: index):
// GENERIC-NEXT: %j = "hir.add_mod"(%i, %p) <{modulus = 4 : i64}> : (index, index) -> index
// GENERIC-NEXT: "hir.yield"() : () -> ()
// GENERIC-NEXT: }) : () -> ()
// GENERIC: %a = "hir.if_rank"() <{ranks = #hir.ranks<[0, 2]>}> ({
// GENERIC: "hir.yield"(%z) : (tensor<8xf32>) -> ()
// GENERIC-NEXT: }) : () -> tensor<8xf32>
// GENERIC: "hir.if_rank"() <{ranks = #hir.ranks<[3]>}> ({
// GENERIC-NEXT: "hir.dealloc"(%a) : (tensor<8xf32>) -> ()
// GENERIC-NEXT: "hir.yield"() : () -> ()
// GENERIC-NEXT: }) {why = "cleanup"} : () -> ()
// CHECK-LABEL: func.func @control() {
// CHECK-NEXT: %c0 = hir.constant 0 : index
// CHECK-NEXT: %cm = hir.constant -3 : index
// CHECK-NEXT: %p = hir.team_index team = [4, 5, 6, 7] : index
// CHECK-NEXT: %n = hir.add_mod %p, %c0 mod 4 : index
// CHECK-NEXT: %r = hir.team_rank %n team = [4, 5, 6, 7] : index
// CHECK-NEXT: hir.for %i = 0 to 4 {
// CHECK-NEXT: %j = hir.add_mod %i, %p mod 4 : index
// CHECK-NEXT: }
// CHECK-NEXT: hir.for %k = -2 to 8 step 3 {
// CHECK-NEXT: } {unroll = false}
// CHECK-NEXT: %a = hir.if_rank [0, 2] -> (tensor<8xf32>) {
// CHECK-NEXT: %z = hir.alloc "control/0/z" : tensor<8xf32>
// CHECK-NEXT: hir.yield %z : tensor<8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %q, %tk = hir.if_rank [1] -> (tensor<4xf32>, !hir.token) {
// CHECK-NEXT: %y = hir.alloc "control/1/y" : tensor<4xf32>
// CHECK-NEXT: %t = hir.send %y to %c0 team = [1, 3] backend = nccl : (tensor<4xf32>, index) -> !hir.token
// CHECK-NEXT: hir.yield %y, %t : tensor<4xf32>, !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [3] {
// CHECK-NEXT: hir.dealloc %a : tensor<8xf32>
// CHECK-NEXT: } {why = "cleanup"}
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @control() {
  %c0 = hir.constant 0 : index
  %cm = hir.constant -3 : index
  %p = hir.team_index team = [4, 5, 6, 7] : index
  %n = hir.add_mod %p, %c0 mod 4 : index
  %r = hir.team_rank %n team = [4, 5, 6, 7] : index
  hir.for %i = 0 to 4 {
    %j = hir.add_mod %i, %p mod 4 : index
  }
  hir.for %k = -2 to 8 step 3 {
  } {unroll = false}
  %a = hir.if_rank [0, 2] -> (tensor<8xf32>) {
    %z = hir.alloc "control/0/z" : tensor<8xf32>
    hir.yield %z : tensor<8xf32>
  }
  %q, %tk = hir.if_rank [1] -> (tensor<4xf32>, !hir.token) {
    %y = hir.alloc "control/1/y" : tensor<4xf32>
    %t = hir.send %y to %c0 team = [1, 3] backend = nccl : (tensor<4xf32>, index) -> !hir.token
    hir.yield %y, %t : tensor<4xf32>, !hir.token
  }
  hir.if_rank [3] {
    hir.dealloc %a : tensor<8xf32>
  } {why = "cleanup"}
  func.return
}

// CHECK-LABEL: func.func @streams(%i: index) {
// CHECK-NEXT: %main = hir.get_current_stream : !hir.stream
// CHECK-NEXT: %s = hir.stream_for %i mod 2 : !hir.stream
// CHECK-NEXT: hir.set_current_stream %s : !hir.stream
// CHECK-NEXT: hir.sync_stream %main : !hir.stream
// CHECK-NEXT: %e = hir.record_event : !hir.event
// CHECK-NEXT: hir.set_current_stream %main : !hir.stream
// CHECK-NEXT: hir.wait_event %e : !hir.event
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @streams(%i: index) {
  %main = hir.get_current_stream : !hir.stream
  %s = hir.stream_for %i mod 2 : !hir.stream
  hir.set_current_stream %s : !hir.stream
  hir.sync_stream %main : !hir.stream
  %e = hir.record_event : !hir.event
  hir.set_current_stream %main : !hir.stream
  hir.wait_event %e : !hir.event
  func.return
}

// GENERIC-LABEL: "func.func"() <{sym_name = "communications"
// GENERIC: %t0 = "hir.allgather"(%x, %g) <{team = array<i64: 0, 1, 2, 3>, backend = "nccl"}> : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
// GENERIC: %t4 = "hir.reduce"(%x, %o, %i) <{op = "max", team = array<i64: 0, 1, 2, 3>, backend = "nccl"}> : (tensor<16x8xf32>, tensor<16x8xf32>, index) -> !hir.token
// CHECK-LABEL: func.func @communications(%x: tensor<16x8xf32>, %i: index) {
// CHECK-NEXT: %g = hir.alloc "communications/0/g" : tensor<64x8xf32>
// CHECK-NEXT: %o = hir.alloc "communications/1/o" : tensor<16x8xf32>
// CHECK-NEXT: %t0 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
// CHECK-NEXT: %t1 = hir.broadcast %x root %i team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, index) -> !hir.token
// CHECK-NEXT: %t2 = hir.scatter %g, %o root %i team = [0, 1, 2, 3] backend = mpi : (tensor<64x8xf32>, tensor<16x8xf32>, index) -> !hir.token
// CHECK-NEXT: %t3 = hir.gather %x, %g root %i team = [0, 1, 2, 3] backend = mpi : (tensor<16x8xf32>, tensor<64x8xf32>, index) -> !hir.token
// CHECK-NEXT: %t4 = hir.reduce %x, %o root %i op = max team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<16x8xf32>, index) -> !hir.token
// CHECK-NEXT: %t5 = hir.allreduce %o, %o op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<16x8xf32>) -> !hir.token
// CHECK-NEXT: %t6 = hir.reduce_scatter %g, %o op = prod team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
// CHECK-NEXT: %t7 = hir.allreduce %x, %o op = min team = [0, 2] backend = mpi {tag = 7 : i64} : (tensor<16x8xf32>, tensor<16x8xf32>) -> !hir.token
// CHECK-NEXT: %t8 = hir.alltoall %g, %g team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<64x8xf32>) -> !hir.token
// CHECK-NEXT: %t9 = hir.send %x to %i team = [0, 1] backend = nccl : (tensor<16x8xf32>, index) -> !hir.token
// CHECK-NEXT: %t10 = hir.recv %o from %i team = [0, 1] backend = cuda_ipc : (tensor<16x8xf32>, index) -> !hir.token
// CHECK-NEXT: hir.wait %t0 : !hir.token
// CHECK-NEXT: hir.wait %t10 {tag = "last"} : !hir.token
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @communications(%x: tensor<16x8xf32>, %i: index) {
  %g = hir.alloc "communications/0/g" : tensor<64x8xf32>
  %o = hir.alloc "communications/1/o" : tensor<16x8xf32>
  %t0 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  %t1 = hir.broadcast %x root %i team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, index) -> !hir.token
  %t2 = hir.scatter %g, %o root %i team = [0, 1, 2, 3] backend = mpi : (tensor<64x8xf32>, tensor<16x8xf32>, index) -> !hir.token
  %t3 = hir.gather %x, %g root %i team = [0, 1, 2, 3] backend = mpi : (tensor<16x8xf32>, tensor<64x8xf32>, index) -> !hir.token
  %t4 = hir.reduce %x, %o root %i op = max team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<16x8xf32>, index) -> !hir.token
  %t5 = hir.allreduce %o, %o op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<16x8xf32>) -> !hir.token
  %t6 = hir.reduce_scatter %g, %o op = prod team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
  %t7 = hir.allreduce %x, %o op = min team = [0, 2] backend = mpi {tag = 7 : i64} : (tensor<16x8xf32>, tensor<16x8xf32>) -> !hir.token
  %t8 = hir.alltoall %g, %g team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<64x8xf32>) -> !hir.token
  %t9 = hir.send %x to %i team = [0, 1] backend = nccl : (tensor<16x8xf32>, index) -> !hir.token
  %t10 = hir.recv %o from %i team = [0, 1] backend = cuda_ipc : (tensor<16x8xf32>, index) -> !hir.token
  hir.wait %t0 : !hir.token
  hir.wait %t10 {tag = "last"} : !hir.token
  func.return
}

// GENERIC-LABEL: "func.func"() <{sym_name = "views"
// GENERIC: %c = "hir.chunk"(%b, %i) <{dim = 0 : i64, chunks = 4 : i64}> : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// CHECK-LABEL: func.func @views(%b: tensor<64x8xf32>, %i: index) {
// CHECK-NEXT: %row = hir.select %b [%i] dim = 0 : (tensor<64x8xf32>, index) -> tensor<8xf32>
// CHECK-NEXT: %col = hir.select %b [%i] dim = 1 : (tensor<64x8xf32>, index) -> tensor<64xf32>
// CHECK-NEXT: %c = hir.chunk %b [%i] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
// CHECK-NEXT: %d = hir.chunk %c [%i] dim = 1 chunks = 2 {tag = "d"} : (tensor<16x8xf32>, index) -> tensor<16x4xf32>
// CHECK-NEXT: %v = hir.view %b : tensor<64x8xf32> -> tensor<4x16x8xf32>
// CHECK-NEXT: %t = hir.transpose %b : tensor<64x8xf32> -> tensor<8x64xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @views(%b: tensor<64x8xf32>, %i: index) {
  %row = hir.select %b [%i] dim = 0 : (tensor<64x8xf32>, index) -> tensor<8xf32>
  %col = hir.select %b [%i] dim = 1 : (tensor<64x8xf32>, index) -> tensor<64xf32>
  %c = hir.chunk %b [%i] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
  %d = hir.chunk %c [%i] dim = 1 chunks = 2 {tag = "d"} : (tensor<16x8xf32>, index) -> tensor<16x4xf32>
  %v = hir.view %b : tensor<64x8xf32> -> tensor<4x16x8xf32>
  %t = hir.transpose %b : tensor<64x8xf32> -> tensor<8x64xf32>
  func.return
}

// GENERIC-LABEL: "func.func"() <{sym_name = "compute"
// GENERIC: "hir.linear"(%a, %wt, %bias, %o) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>}> {tag = "b"} : (tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<64x8xbf16>) -> ()
// GENERIC: "hir.launch"(%o, %bias, %o, %o32) <{operandSegmentSizes = array<i32: 2, 2>}> ({
// GENERIC-NEXT: ^bb0(%x: tensor<64x8xbf16>, %y: tensor<8xbf16>):
// CHECK-LABEL: func.func @compute(%a: tensor<64x16xbf16>, %w: tensor<16x8xbf16>, %wt: tensor<8x16xbf16>, %bias: tensor<8xbf16>, %o: tensor<64x8xbf16>, %o32: tensor<64x8xf32>) {
// CHECK-NEXT: hir.matmul %a, %w, %o : tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: hir.linear %a, %wt, %o : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: hir.linear %a, %wt, %bias, %o {tag = "b"} : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: hir.copy %o, %o32 : tensor<64x8xbf16>, tensor<64x8xf32>
// CHECK-NEXT: hir.launch ins(%o, %bias : tensor<64x8xbf16>, tensor<8xbf16>) outs(%o, %o32 : tensor<64x8xbf16>, tensor<64x8xf32>) {
// CHECK-NEXT: ^bb0(%x: tensor<64x8xbf16>, %y: tensor<8xbf16>):
// CHECK-NEXT: %yb = fusion.broadcast_in_dim %y dims = [1] : (tensor<8xbf16>) -> tensor<64x8xbf16>
// CHECK-NEXT: %s = fusion.add %x, %yb : (tensor<64x8xbf16>, tensor<64x8xbf16>) -> tensor<64x8xbf16>
// CHECK-NEXT: %g = fusion.gelu %s {approximate = "tanh"} : (tensor<64x8xbf16>) -> tensor<64x8xbf16>
// CHECK-NEXT: %f = fusion.cast %g : (tensor<64x8xbf16>) -> tensor<64x8xf32>
// CHECK-NEXT: hir.yield %g, %f : tensor<64x8xbf16>, tensor<64x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @compute(%a: tensor<64x16xbf16>, %w: tensor<16x8xbf16>, %wt: tensor<8x16xbf16>, %bias: tensor<8xbf16>, %o: tensor<64x8xbf16>, %o32: tensor<64x8xf32>) {
  hir.matmul %a, %w, %o : tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>
  hir.linear %a, %wt, %o : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<64x8xbf16>
  hir.linear %a, %wt, %bias, %o {tag = "b"} : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<64x8xbf16>
  hir.copy %o, %o32 : tensor<64x8xbf16>, tensor<64x8xf32>
  hir.launch ins(%o, %bias : tensor<64x8xbf16>, tensor<8xbf16>) outs(%o, %o32 : tensor<64x8xbf16>, tensor<64x8xf32>) {
  ^bb0(%x: tensor<64x8xbf16>, %y: tensor<8xbf16>):
    %yb = fusion.broadcast_in_dim %y dims = [1] : (tensor<8xbf16>) -> tensor<64x8xbf16>
    %s = fusion.add %x, %yb : (tensor<64x8xbf16>, tensor<64x8xbf16>) -> tensor<64x8xbf16>
    %g = fusion.gelu %s {approximate = "tanh"} : (tensor<64x8xbf16>) -> tensor<64x8xbf16>
    %f = fusion.cast %g : (tensor<64x8xbf16>) -> tensor<64x8xf32>
    hir.yield %g, %f : tensor<64x8xbf16>, tensor<64x8xf32>
  }
  func.return
}

// GEMMs accumulating into their output (`acc %o`) or from another buffer.
// GENERIC-LABEL: "func.func"() <{sym_name = "accumulate"
// GENERIC: "hir.matmul"(%a, %w, %o, %o) : (tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>) -> ()
// GENERIC: "hir.linear"(%a, %wt, %o, %c) <{operandSegmentSizes = array<i32: 1, 1, 0, 1, 1>}> : (tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>) -> ()
// GENERIC: "hir.linear"(%a, %wt, %bias, %o, %o) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1>}> {tag = "b"} : (tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>) -> ()
// CHECK-LABEL: func.func @accumulate(%a: tensor<64x16xbf16>, %w: tensor<16x8xbf16>, %wt: tensor<8x16xbf16>, %bias: tensor<8xbf16>, %o: tensor<64x8xbf16>, %c: tensor<64x8xbf16>) {
// CHECK-NEXT: hir.matmul %a, %w, %o acc %o : tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: hir.matmul %a, %w, %o acc %c {tag = "m"} : tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: hir.linear %a, %wt, %o acc %c : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: hir.linear %a, %wt, %bias, %o acc %o {tag = "b"} : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @accumulate(%a: tensor<64x16xbf16>, %w: tensor<16x8xbf16>, %wt: tensor<8x16xbf16>, %bias: tensor<8xbf16>, %o: tensor<64x8xbf16>, %c: tensor<64x8xbf16>) {
  hir.matmul %a, %w, %o acc %o : tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
  hir.matmul %a, %w, %o acc %c {tag = "m"} : tensor<64x16xbf16>, tensor<16x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
  hir.linear %a, %wt, %o acc %c : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
  hir.linear %a, %wt, %bias, %o acc %o {tag = "b"} : tensor<64x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>
  func.return
}

// GENERIC-LABEL: "func.func"() <{sym_name = "peer_to_peer"
// GENERIC: %t0 = "hir.put"(%b, %h, %i) <{backend = "cuda_ipc"}> : (tensor<16x8xf32>, !hir.handle, index) -> !hir.token
// CHECK-LABEL: func.func @peer_to_peer(%i: index) {
// CHECK-NEXT: %b = hir.alloc "peer_to_peer/0/b" : tensor<16x8xf32>
// CHECK-NEXT: %h = hir.share %b team = [0, 1, 2, 3] : tensor<16x8xf32> -> !hir.handle
// CHECK-NEXT: %t0 = hir.put %b, %h, %i backend = cuda_ipc : (tensor<16x8xf32>, !hir.handle, index) -> !hir.token
// CHECK-NEXT: %t1 = hir.get %h, %i, %b backend = nccl : (!hir.handle, index, tensor<16x8xf32>) -> !hir.token
// CHECK-NEXT: func.return
// CHECK-NEXT: }
func.func @peer_to_peer(%i: index) {
  %b = hir.alloc "peer_to_peer/0/b" : tensor<16x8xf32>
  %h = hir.share %b team = [0, 1, 2, 3] : tensor<16x8xf32> -> !hir.handle
  %t0 = hir.put %b, %h, %i backend = cuda_ipc : (tensor<16x8xf32>, !hir.handle, index) -> !hir.token
  %t1 = hir.get %h, %i, %b backend = nccl : (!hir.handle, index, tensor<16x8xf32>) -> !hir.token
  func.return
}

// CHECK-LABEL: func.func @alltoallv(%x: tensor<12x8xf32>, %sc: tensor<4xi64>) {
// CHECK-NEXT: %y = hir.alloc "alltoallv/0/y" : tensor<24x8xf32>
// CHECK-NEXT: %rc = hir.alloc "alltoallv/1/rc" : tensor<4xi64>
// CHECK-NEXT: %t = hir.alltoallv %x, %sc, %y, %rc team = [0, 1, 2, 3] backend = nccl : (tensor<12x8xf32>, tensor<4xi64>, tensor<24x8xf32>, tensor<4xi64>) -> !hir.token
// CHECK-NEXT: hir.wait %t : !hir.token
func.func @alltoallv(%x: tensor<12x8xf32>, %sc: tensor<4xi64>) {
  %y = hir.alloc "alltoallv/0/y" : tensor<24x8xf32>
  %rc = hir.alloc "alltoallv/1/rc" : tensor<4xi64>
  %t = hir.alltoallv %x, %sc, %y, %rc team = [0, 1, 2, 3] backend = nccl : (tensor<12x8xf32>, tensor<4xi64>, tensor<24x8xf32>, tensor<4xi64>) -> !hir.token
  hir.wait %t : !hir.token
  func.return
}

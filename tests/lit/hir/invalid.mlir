// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

// Buffers

fusion.mesh @tp shape = [4]
func.func @f() {
  // expected-error @+1 {{is not a local buffer: hir tensors have no encoding}}
  %b = hir.alloc "f/b" : tensor<8xf32, #fusion.sharding<@tp, [DIDx]>>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{is not a local buffer: hir tensors have static shapes}}
  %b = hir.alloc "f/b" : tensor<?xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  // expected-error @+1 {{allocation site "f/a" is already used by another hir.alloc of this program}}
  %b = hir.alloc "f/a" : tensor<4xf32>
  func.return
}

// -----

// Storage numbers (plan-memory's, or written by hand) are checked against
// the device's order: buffers with one number never in use together, and
// none returned, shared with peers or allocated in a loop.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {hir.host} {
  %a = hir.alloc "f/a" storage 0 : tensor<4xf32>
  // expected-error @+1 {{hir.alloc "f/b" storage 0: in use on the device at the same time as "f/a" (storage 0), so they cannot share memory}}
  %b = hir.alloc "f/b" storage 0 : tensor<4xf32>
  hir.copy %x, %a : tensor<4xf32>, tensor<4xf32>
  hir.copy %a, %b : tensor<4xf32>, tensor<4xf32>
  hir.copy %b, %x : tensor<4xf32>, tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// -----

// A worker stream's write is in use until the main stream waits for it.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {hir.host} {
  %main = hir.get_current_stream : !hir.stream
  %c0 = hir.constant 0 : index
  %s = hir.stream_for %c0 mod 2 : !hir.stream
  %a = hir.alloc "f/a" storage 0 : tensor<4xf32>
  hir.set_current_stream %s : !hir.stream
  hir.copy %x, %a : tensor<4xf32>, tensor<4xf32>
  hir.set_current_stream %main : !hir.stream
  // expected-error @+1 {{hir.alloc "f/b" storage 0: in use on the device at the same time as "f/a" (storage 0)}}
  %b = hir.alloc "f/b" storage 0 : tensor<4xf32>
  hir.copy %x, %b : tensor<4xf32>, tensor<4xf32>
  hir.sync_stream %s : !hir.stream
  func.return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {hir.host} {
  // expected-error @+1 {{hir.alloc "f/a" storage 1: its buffer cannot share memory (returned)}}
  %a = hir.alloc "f/a" storage 1 : tensor<4xf32>
  hir.copy %x, %a : tensor<4xf32>, tensor<4xf32>
  func.return %a : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {hir.host} {
  // expected-error @+1 {{hir.alloc "f/a" storage 0: its buffer cannot share memory (shared with peers)}}
  %a = hir.alloc "f/a" storage 0 : tensor<4xf32>
  %h = hir.share %a team = [0, 1] : tensor<4xf32> -> !hir.handle
  hir.copy %x, %a : tensor<4xf32>, tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {hir.host} {
  hir.for %i = 0 to 2 {
    // expected-error @+1 {{hir.alloc "f/l" storage 0: its buffer cannot share memory (allocated in a loop)}}
    %l = hir.alloc "f/l" storage 0 : tensor<4xf32>
    hir.copy %x, %l : tensor<4xf32>, tensor<4xf32>
    hir.dealloc %l : tensor<4xf32>
  }
  func.return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {hir.host} {
  %p = hir.team_index team = [0, 1] : index
  %s = hir.stream_for %p mod 2 : !hir.stream
  hir.set_current_stream %s : !hir.stream
  // expected-error @+1 {{hir.alloc "f/a" storage 0: the program's device order cannot be told (a stream chosen by the rank's position)}}
  %a = hir.alloc "f/a" storage 0 : tensor<4xf32>
  hir.copy %x, %a : tensor<4xf32>, tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'hir.dealloc' op operand must be a buffer made by hir.alloc}}
  hir.dealloc %x : tensor<8xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  %v = hir.chunk %a [%c] dim = 0 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<4x4xf32>
  // expected-error @+1 {{not a view or an argument}}
  hir.dealloc %v : tensor<4x4xf32>
  func.return
}

// -----

// Control

func.func @f() {
  // expected-error @+1 {{'hir.yield' expects parent op to be one of 'hir.for', 'hir.if_rank', 'hir.launch'}}
  hir.yield
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.for' op lower bound 4 is greater than upper bound 2}}
  hir.for %i = 4 to 2 {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.for' op step must be positive, got 0}}
  hir.for %i = 0 to 2 step 0 {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.for' op body must have one index argument (the loop index)}}
  "hir.for"() <{lb = 0 : i64, ub = 2 : i64, step = 1 : i64}> ({
  ^bb0(%i: index, %j: index):
    "hir.yield"() : () -> ()
  }) : () -> ()
  func.return
}

// -----

func.func @f() {
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.for' op the body's hir.yield takes no values}}
  hir.for %i = 0 to 2 {
    hir.yield %c : index
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.if_rank' op ranks must be a non-empty list of distinct non-negative ranks, got []}}
  hir.if_rank [] {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{ranks must be a non-empty list of distinct non-negative ranks, got [0, 1, 0]}}
  hir.if_rank [0, 1, 0] {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{ranks must be a non-empty list of distinct non-negative ranks, got [-1]}}
  hir.if_rank [-1] {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.if_rank' op hir.yield types (tensor<8xf32>) do not match the result types (tensor<4xf32>)}}
  %r = hir.if_rank [0] -> (tensor<4xf32>) {
    %a = hir.alloc "f/a" : tensor<8xf32>
    hir.yield %a : tensor<8xf32>
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.if_rank' terminates with operation hir.alloc instead of hir.yield}}
  %r = hir.if_rank [0] -> (tensor<4xf32>) {
    %a = hir.alloc "f/a" : tensor<4xf32>
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.if_rank' op ranks must be a non-empty list of distinct non-negative ranks, got [0 to 20, 5]}}
  hir.if_rank [0 to 20, 5] {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.if_rank' op ranks must be a non-empty list of distinct non-negative ranks, got [-2 to 20]}}
  hir.if_rank [-2 to 20] {
  }
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'4 to 4 step 1' is not a range of ranks: it needs start < stop and step >= 1}}
  hir.if_rank [4 to 4] {
  }
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'hir.allreduce' op the teams of team = [0, 1, 2] translated [2 step 2] are not disjoint: the translate 2 step 2 overlaps the teams its smaller strides make (each spans 3 ranks)}}
  %t = hir.allreduce %x, %x op = sum team = [0, 1, 2] translated [2 step 2] backend = nccl : (tensor<8xf32>, tensor<8xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{the teams of team = [0, 4] translated [3 step 2, 2 step 1] are not disjoint: the translate 3 step 2 overlaps the teams its smaller strides make (each spans 6 ranks)}}
  %p = hir.team_index team = [0, 4] translated [3 step 2, 2 step 1] : index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{each translate needs a count >= 1 and a stride >= 1}}
  %p = hir.team_index team = [0, 1] translated [2 step 0] : index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{translates must be (count, stride) pairs, got [2]}}
  %p = "hir.team_index"() <{team = array<i64: 0, 1>, translates = array<i64: 2>}> : () -> index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'0 to 64 step 0' is not a range of ranks: it needs start < stop and step >= 1}}
  %p = hir.team_index team = [0 to 64 step 0] : index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{a rank list of more than 4,194,304 ranks (the most devices a mesh has)}}
  %p = hir.team_index team = [0 to 9223372036854775807] : index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.team_index' op team must be a non-empty list of distinct non-negative ranks, got [0 to 32, 3]}}
  %p = hir.team_index team = [0 to 32, 3] : index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.if_rank' op body takes no arguments}}
  "hir.if_rank"() <{ranks = #hir.ranks<[0]>}> ({
  ^bb0(%i: index):
    "hir.yield"() : () -> ()
  }) : () -> ()
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.team_index' op team must be a non-empty list of distinct non-negative ranks, got [1, 1]}}
  %p = hir.team_index team = [1, 1] : index
  func.return
}

// -----

func.func @f() {
  %c = hir.constant 2 : index
  // expected-error @+1 {{'hir.team_rank' op position 2 is out of range for a team of 2 ranks}}
  %r = hir.team_rank %c team = [4, 5] : index
  func.return
}

// -----

func.func @f() {
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.add_mod' op modulus N must be positive, got 0}}
  %r = hir.add_mod %c, %c mod 0 : index
  func.return
}

// -----

// Streams

func.func @f() {
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.stream_for' op stream count N must be positive, got 0}}
  %s = hir.stream_for %c mod 0 : !hir.stream
  func.return
}

// -----

// Communications

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<32xf32>
  // expected-error @+1 {{'hir.allgather' op team must be a non-empty list of distinct non-negative ranks, got []}}
  %t = hir.allgather %a, %b team = [] backend = nccl : (tensor<8xf32>, tensor<32xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<32xf32>
  // expected-error @+1 {{'hir.allgather' op backend must be one of nccl, cuda_ipc, mpi, got 'gloo'}}
  %t = hir.allgather %a, %b team = [0, 1, 2, 3] backend = gloo : (tensor<8xf32>, tensor<32xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  // expected-error @+1 {{'hir.allreduce' op op must be one of sum, max, min, prod, got 'avg'}}
  %t = hir.allreduce %a, %a op = avg team = [0, 1] backend = nccl : (tensor<8xf32>, tensor<8xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<8xbf16>
  // expected-error @+1 {{'hir.allreduce' op operands must have one element type, got f32, bf16}}
  %t = hir.allreduce %a, %b op = sum team = [0, 1] backend = nccl : (tensor<8xf32>, tensor<8xbf16>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<24x4xf32>
  // expected-error @+1 {{'hir.allgather' op output shape [24, 4] must be [32, 4]: input shape [8, 4] with dim 0 times the team size 4}}
  %t = hir.allgather %a, %b team = [0, 1, 2, 3] backend = nccl : (tensor<8x4xf32>, tensor<24x4xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<32x2xf32>
  // expected-error @+1 {{output shape [32, 2] must be [32, 4]}}
  %t = hir.allgather %a, %b team = [0, 1, 2, 3] backend = nccl : (tensor<8x4xf32>, tensor<32x2xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<f32>
  %b = hir.alloc "f/b" : tensor<4xf32>
  // expected-error @+1 {{'hir.allgather' op input must have rank >= 1 (it is split along dim 0)}}
  %t = hir.allgather %a, %b team = [0, 1, 2, 3] backend = nccl : (tensor<f32>, tensor<4xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<16x4xf32>
  %b = hir.alloc "f/b" : tensor<8x4xf32>
  // expected-error @+1 {{'hir.reduce_scatter' op input shape [16, 4] must be [32, 4]: output shape [8, 4] with dim 0 times the team size 4}}
  %t = hir.reduce_scatter %a, %b op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<16x4xf32>, tensor<8x4xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<12x4xf32>
  %b = hir.alloc "f/b" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.scatter' op input shape [12, 4] must be [16, 4]: output shape [8, 4] with dim 0 times the team size 2}}
  %t = hir.scatter %a, %b root %c team = [0, 1] backend = mpi : (tensor<12x4xf32>, tensor<8x4xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.gather' op output shape [8, 4] must be [16, 4]: input shape [8, 4] with dim 0 times the team size 2}}
  %t = hir.gather %a, %b root %c team = [0, 1] backend = mpi : (tensor<8x4xf32>, tensor<8x4xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<8x2xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.reduce' op input shape [8, 4] and output shape [8, 2] must be equal}}
  %t = hir.reduce %a, %b root %c op = sum team = [0, 1] backend = nccl : (tensor<8x4xf32>, tensor<8x2xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 2 : index
  // expected-error @+1 {{'hir.reduce' op root position 2 is out of range for a team of 2 ranks}}
  %t = hir.reduce %a, %a root %c op = sum team = [0, 1] backend = nccl : (tensor<8x4xf32>, tensor<8x4xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<4xf32>
  // expected-error @+1 {{'hir.allreduce' op input shape [8] and output shape [4] must be equal}}
  %t = hir.allreduce %a, %b op = sum team = [0, 1] backend = nccl : (tensor<8xf32>, tensor<4xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<4xf32>
  // expected-error @+1 {{'hir.alltoall' op input shape [8] and output shape [4] must be equal}}
  %t = hir.alltoall %a, %b team = [0, 1] backend = nccl : (tensor<8xf32>, tensor<4xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<6x2xf32>
  // expected-error @+1 {{'hir.alltoall' op dim 0 of input shape [6, 2] must be divisible by the team size 4}}
  %t = hir.alltoall %a, %a team = [0, 1, 2, 3] backend = nccl : (tensor<6x2xf32>, tensor<6x2xf32>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %c = hir.constant 3 : index
  // expected-error @+1 {{'hir.send' op peer position 3 is out of range for a team of 2 ranks}}
  %t = hir.send %a to %c team = [0, 1] backend = nccl : (tensor<8xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %five = hir.constant 5 : index
  // expected-error @+1 {{'hir.broadcast' op root position 5 is out of range for a team of 2 ranks}}
  %t = hir.broadcast %a root %five team = [0, 1] backend = nccl : (tensor<8xf32>, index) -> !hir.token
  func.return
}

// -----

// Markers: `hir.stream = [dim, S]` has dim >= 0 and S >= 1 chunks (stream-pipeline divides by S).

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x4xf32>, %o: tensor<8x4xf32>) attributes {hir.host} {
  // expected-error @+1 {{'hir.matmul' op hir.stream = [0, 0] needs dim >= 0 and S >= 1 chunks}}
  hir.matmul %a, %b, %o {hir.stream = [0, 0]} : tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<32xf32>) attributes {hir.host} {
  // expected-error @+1 {{'hir.allgather' op hir.stream = [-1, 4] needs dim >= 0 and S >= 1 chunks}}
  %t = hir.allgather %a, %o team = [0, 1, 2, 3] backend = nccl {hir.stream = [-1, 4]} : (tensor<8xf32>, tensor<32xf32>) -> !hir.token
  hir.wait %t : !hir.token
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) attributes {hir.host} {
  // expected-error @+1 {{'hir.launch' op hir.stream must be [dim, S], two integers, got [0 : i64]}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    %g = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
    hir.yield %g : tensor<8xf32>
  } {hir.stream = [0]}
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) attributes {hir.host} {
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    // expected-error @+1 {{'fusion.relu' op hir.stream = [0, 0] needs dim >= 0 and S >= 1 chunks}}
    %g = fusion.relu %x {hir.stream = [0, 0]} : (tensor<8xf32>) -> tensor<8xf32>
    hir.yield %g : tensor<8xf32>
  }
  func.return
}

// -----

func.func @f(%x: tensor<6x2xf32>, %sc: tensor<2xi64>) {
  %y = hir.alloc "f/y" : tensor<12x3xf32>
  %rc = hir.alloc "f/rc" : tensor<2xi64>
  // expected-error @+1 {{'hir.alltoallv' op input shape [6, 2] and output shape [12, 3] must agree past dim 0 (rows of one shape)}}
  %t = hir.alltoallv %x, %sc, %y, %rc team = [0, 1] backend = mpi : (tensor<6x2xf32>, tensor<2xi64>, tensor<12x3xf32>, tensor<2xi64>) -> !hir.token
  func.return
}

// -----

func.func @f(%x: tensor<6x2xf32>, %sc: tensor<4xi64>) {
  %y = hir.alloc "f/y" : tensor<12x2xf32>
  %rc = hir.alloc "f/rc" : tensor<2xi64>
  // expected-error @+1 {{'hir.alltoallv' op send_counts must be tensor<2xi64> (rows per team position), got tensor<4xi64>}}
  %t = hir.alltoallv %x, %sc, %y, %rc team = [0, 1] backend = mpi : (tensor<6x2xf32>, tensor<4xi64>, tensor<12x2xf32>, tensor<2xi64>) -> !hir.token
  func.return
}

// The communication report of hand-written host programs: every figure
// derived by hand below (bytes per rank and run; n the team size).
// RUN: %fuserc opt %s --split-input-file --comm-report -o /dev/null 2>&1 | filecheck %s
// RUN: %fuserc opt %s --split-input-file --comm-report-unit 64x16xf32 -o /dev/null 2>&1 | filecheck %s --check-prefix=UNIT
// The report leaves the IR as it is.
// RUN: %fuserc opt %s --split-input-file --comm-report 2>/dev/null | filecheck %s --check-prefix=IR

// Every collective once, waited at once on the main stream, but for the
// broadcasts of a loop of 4 chunks on 2 rotating streams, each beside the
// GEMM of another chunk:
//   allgather of 16x16 into 64x16 f32 (4096 bytes): 3/4 -> 3072
//   reduce_scatter of 64x8 f32 (2048 bytes): 3/4 -> 1536
//   allreduce of 16x8 bf16 (256 bytes): 2 * 3/4 -> 384
//   alltoall of 64x8 f32: 3/4 -> 1536
//   broadcast of 16x16 f32 (1024 bytes), 4 times: 4096 (NCCL counts the whole buffer)
//   scatter of 64x8 f32 from the root: 3/4 -> 1536; gather into 64x8: 1536
//   reduce of 16x8 f32 (512 bytes): 512
//   total 14208 bytes in 11 communications; overlapped 4096 (28.8%)
// CHECK:      // communication report: bytes per rank and run
// CHECK-NEXT: @collectives:
// CHECK-NEXT:   #  kind            dtype  shape  n  team   times  bytes  reshard        overlap
// CHECK-NEXT:   1  allgather       f32    64x16  4  [0-3]      1   3072  DIDx->-        no
// CHECK-NEXT:   2  reduce_scatter  f32    64x8   4  [0-3]      1   1536  partial->DIDx  no
// CHECK-NEXT:   3  allreduce       bf16   16x8   4  [0-3]      1    384  partial->-     no
// CHECK-NEXT:   4  alltoall        f32    64x8   4  [0-3]      1   1536  -              no
// CHECK-NEXT:   5  broadcast       f32    16x16  4  [0-3]      4   4096  -              gemm
// CHECK-NEXT:   6  scatter         f32    64x8   4  [0-3]      1   1536  -              no
// CHECK-NEXT:   7  gather          f32    64x8   4  [0-3]      1   1536  -              no
// CHECK-NEXT:   8  reduce          f32    16x8   4  [0-3]      1    512  -              no
// CHECK-NEXT:   total per rank (4 ranks): 11 communications, 14208 bytes (0.01 MiB), overlapped 4096 bytes (28.8%)
// UNIT:      @collectives:
// UNIT-NEXT:   #  kind            dtype  shape  n  team   times  bytes  units  reshard        overlap
// UNIT-NEXT:   1  allgather       f32    64x16  4  [0-3]      1   3072  0.750  DIDx->-        no
// UNIT:        total per rank (4 ranks): 11 communications, 14208 bytes (0.01 MiB) = 3.47 x 64x16xf32, overlapped 4096 bytes (28.8%)
// IR-LABEL: func.func @collectives
// IR: hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->-"}
fusion.mesh @tp shape = [4]
func.func @collectives(%x: tensor<16x16xf32>, %p: tensor<64x8xf32>, %b: tensor<16x8xbf16>, %a: tensor<64x8xf32>, %w: tensor<16x8xf32>) attributes {hir.host} {
  %c0 = hir.constant 0 : index
  %xg = hir.alloc "c/0" : tensor<64x16xf32>
  %t0 = hir.allgather %x, %xg team = [0, 1, 2, 3] backend = nccl {hir.reshard = "DIDx->-"} : (tensor<16x16xf32>, tensor<64x16xf32>) -> !hir.token
  hir.wait %t0 : !hir.token
  %r = hir.alloc "c/1" : tensor<16x8xf32>
  %t1 = hir.reduce_scatter %p, %r op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
  hir.wait %t1 : !hir.token
  %t2 = hir.allreduce %b, %b op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->-"} : (tensor<16x8xbf16>, tensor<16x8xbf16>) -> !hir.token
  hir.wait %t2 : !hir.token
  %o = hir.alloc "c/2" : tensor<64x8xf32>
  %t3 = hir.alltoall %a, %o team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t3 : !hir.token
  %main = hir.get_current_stream : !hir.stream
  %y = hir.alloc "c/3" : tensor<64x8xf32>
  hir.for %i = 0 to 4 {
    %s = hir.stream_for %i mod 2 : !hir.stream
    hir.set_current_stream %s : !hir.stream
    hir.sync_stream %main : !hir.stream
    %blk = hir.chunk %xg [%i] dim = 0 chunks = 4 : (tensor<64x16xf32>, index) -> tensor<16x16xf32>
    %t4 = hir.broadcast %blk root %i team = [0, 1, 2, 3] backend = nccl : (tensor<16x16xf32>, index) -> !hir.token
    hir.wait %t4 : !hir.token
    %yi = hir.chunk %y [%i] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
    hir.matmul %blk, %w, %yi : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>
  }
  hir.set_current_stream %main : !hir.stream
  hir.for %i = 0 to 2 {
    %s = hir.stream_for %i mod 2 : !hir.stream
    hir.sync_stream %s : !hir.stream
  }
  %sc = hir.alloc "c/4" : tensor<16x8xf32>
  %t5 = hir.scatter %y, %sc root %c0 team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<16x8xf32>, index) -> !hir.token
  hir.wait %t5 : !hir.token
  %ga = hir.alloc "c/5" : tensor<64x8xf32>
  %t6 = hir.gather %sc, %ga root %c0 team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>, index) -> !hir.token
  hir.wait %t6 : !hir.token
  %t7 = hir.reduce %sc, %r root %c0 op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<16x8xf32>, index) -> !hir.token
  hir.wait %t7 : !hir.token
  func.return
}

// -----

// What may run beside a communication on another stream, neither ordered
// before the other:
//   the allgather (16x8 into 64x8 f32: 3/4 of 2048 -> 1536) started on a
//     side stream after an event of main, beside the GEMM main issues next;
//   the allreduce (8x8 f32: 2 * 3/4 of 256 -> 384) started after the GEMM
//     (an event recorded after it), beside a copy only: kernel;
//   the reduce_scatters of a loop of 2 (64x8 f32 -> 1536 each, 3072), each
//     on its own stream; main waits for the first one's stream only, so the
//     GEMM after the loop runs beside the second one alone: 1 of 2;
//   the last allgather waits for everything before it and nothing follows.
// Overlapped: 1536 + 384 + 1536 = 3456 of 1536 + 384 + 3072 + 1536 = 6528.
// CHECK:      @beside:
// CHECK-NEXT:   #  kind            dtype  shape  n  team   times  bytes  reshard  overlap
// CHECK-NEXT:   1  allgather       f32    64x8   4  [0-3]      1   1536  -        gemm
// CHECK-NEXT:   2  allreduce       f32    8x8    4  [0-3]      1    384  -        kernel
// CHECK-NEXT:   3  reduce_scatter  f32    64x8   4  [0-3]      2   3072  -        gemm (1 of 2)
// CHECK-NEXT:   4  allgather       f32    64x8   4  [0-3]      1   1536  -        no
// CHECK-NEXT:   total per rank (4 ranks): 5 communications, 6528 bytes (0.01 MiB), overlapped 3456 bytes (52.9%)
func.func @beside(%x: tensor<16x8xf32>, %a: tensor<64x32xf32>, %w: tensor<32x64xf32>, %p: tensor<8x8xf32>, %q: tensor<8x8xf32>, %part: tensor<64x8xf32>) attributes {hir.host} {
  %o = hir.alloc "b/0" : tensor<64x64xf32>
  %g = hir.alloc "b/1" : tensor<64x8xf32>
  %main = hir.get_current_stream : !hir.stream
  %c0 = hir.constant 0 : index
  %side = hir.stream_for %c0 mod 1 : !hir.stream
  %ready = hir.record_event : !hir.event
  hir.set_current_stream %side : !hir.stream
  hir.wait_event %ready : !hir.event
  %t0 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.set_current_stream %main : !hir.stream
  hir.matmul %a, %w, %o : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %done = hir.record_event : !hir.event
  hir.set_current_stream %side : !hir.stream
  hir.wait_event %done : !hir.event
  %t1 = hir.allreduce %p, %p op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<8x8xf32>, tensor<8x8xf32>) -> !hir.token
  hir.set_current_stream %main : !hir.stream
  hir.copy %q, %q : tensor<8x8xf32>, tensor<8x8xf32>
  hir.wait %t0 : !hir.token
  hir.wait %t1 : !hir.token
  %rs = hir.alloc "b/2" : tensor<16x8xf32>
  hir.for %i = 0 to 2 {
    %s = hir.stream_for %i mod 2 : !hir.stream
    hir.set_current_stream %s : !hir.stream
    hir.sync_stream %main : !hir.stream
    %t2 = hir.reduce_scatter %part, %rs op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<64x8xf32>, tensor<16x8xf32>) -> !hir.token
    hir.wait %t2 : !hir.token
  }
  hir.set_current_stream %main : !hir.stream
  %first = hir.stream_for %c0 mod 2 : !hir.stream
  hir.sync_stream %first : !hir.stream
  hir.matmul %a, %w, %o : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x64xf32>
  %c1 = hir.constant 1 : index
  %second = hir.stream_for %c1 mod 2 : !hir.stream
  hir.sync_stream %second : !hir.stream
  %t3 = hir.allgather %x, %g team = [0, 1, 2, 3] backend = nccl : (tensor<16x8xf32>, tensor<64x8xf32>) -> !hir.token
  hir.wait %t3 : !hir.token
  func.return
}

// -----

// Peer-copy rings through shared buffers (hir.share is set-up, not
// counted): 3 gets of a peer's 16x16 f32 shard (1024 bytes each: 3072, the
// allgather's 3/4 of 64x16), each on a transfer stream while the compute
// stream multiplies the chunks already there; then 3 puts of a 16x8 f32
// block (512 bytes: 1536, the reduce-scatter's 3/4 of 64x8), each after the
// GEMM making it and before the next GEMM (no overlap with k = 1).
// The fences (hir.barrier) are counted, without bytes.
// CHECK:      @ring:
// CHECK-NEXT:   #  kind  dtype  shape  n  team   times  bytes  reshard  overlap
// CHECK-NEXT:   1  get   f32    16x16  4  [0-3]      3   3072  DIDx->-  gemm
// CHECK-NEXT:   2  put   f32    16x8   4  [0-3]      3   1536  -        no
// CHECK-NEXT:   total per rank (4 ranks): 6 communications, 2 fences, 4608 bytes (0.00 MiB), overlapped 3072 bytes (66.7%)
func.func @ring(%x: tensor<16x16xf32>, %w: tensor<16x8xf32>) attributes {hir.host} {
  %main = hir.get_current_stream : !hir.stream
  %c0 = hir.constant 0 : index
  %xs = hir.alloc "r/0" : tensor<16x16xf32>
  hir.copy %x, %xs : tensor<16x16xf32>, tensor<16x16xf32>
  %h = hir.share %xs team = [0, 1, 2, 3] : tensor<16x16xf32> -> !hir.handle
  %f0 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f0 : !hir.token
  %pos = hir.team_index team = [0, 1, 2, 3] : index
  %xg = hir.alloc "r/1" : tensor<64x16xf32>
  %y = hir.alloc "r/2" : tensor<64x8xf32>
  %compute = hir.stream_for %c0 mod 4 : !hir.stream
  hir.set_current_stream %compute : !hir.stream
  hir.sync_stream %main : !hir.stream
  %mine = hir.chunk %y [%pos] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
  hir.matmul %x, %w, %mine : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>
  hir.for %i = 1 to 4 {
    %st = hir.stream_for %i mod 4 : !hir.stream
    hir.set_current_stream %st : !hir.stream
    hir.sync_stream %main : !hir.stream
    %peer = hir.add_mod %pos, %i mod 4 : index
    %slot = hir.chunk %xg [%peer] dim = 0 chunks = 4 : (tensor<64x16xf32>, index) -> tensor<16x16xf32>
    %t = hir.get %h, %peer, %slot backend = cuda_ipc {hir.reshard = "DIDx->-"} : (!hir.handle, index, tensor<16x16xf32>) -> !hir.token
    hir.wait %t : !hir.token
  }
  hir.set_current_stream %compute : !hir.stream
  hir.for %i = 1 to 4 {
    %st = hir.stream_for %i mod 4 : !hir.stream
    hir.sync_stream %st : !hir.stream
    %peer = hir.add_mod %pos, %i mod 4 : index
    %slot = hir.chunk %xg [%peer] dim = 0 chunks = 4 : (tensor<64x16xf32>, index) -> tensor<16x16xf32>
    %yi = hir.chunk %y [%peer] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
    hir.matmul %slot, %w, %yi : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>
  }
  %ps = hir.alloc "r/3" : tensor<64x8xf32>
  %h2 = hir.share %ps team = [0, 1, 2, 3] : tensor<64x8xf32> -> !hir.handle
  %c3 = hir.constant 3 : index
  %prev = hir.add_mod %pos, %c3 mod 4 : index
  %tr = hir.stream_for %c3 mod 4 : !hir.stream
  hir.for %i = 1 to 4 {
    hir.set_current_stream %compute : !hir.stream
    hir.sync_stream %tr : !hir.stream
    %blk = hir.add_mod %pos, %i mod 4 : index
    %part = hir.chunk %ps [%blk] dim = 0 chunks = 4 : (tensor<64x8xf32>, index) -> tensor<16x8xf32>
    hir.matmul %x, %w, %part : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>
    hir.set_current_stream %tr : !hir.stream
    hir.sync_stream %compute : !hir.stream
    %t = hir.put %part, %h2, %prev block %blk of 4 backend = cuda_ipc : (tensor<16x8xf32>, !hir.handle, index, index) -> !hir.token
    hir.wait %t : !hir.token
  }
  hir.set_current_stream %main : !hir.stream
  hir.sync_stream %compute : !hir.stream
  hir.sync_stream %tr : !hir.stream
  %f1 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f1 : !hir.token
  func.return
}

// -----

// A 2x2 mesh: an allgather over each team of 2 (8x4 into 16x4 f32, 256
// bytes: 1/2 -> 128), each rank in one team: the regions of the two teams
// are one line; then rank 0 sends 8x4 f32 (128 bytes) to rank 2, counted
// once, at the receive: rank 2 moves the most.
// CHECK:      @mesh2d:
// CHECK-NEXT:   #  kind       dtype  shape  n  team          times  bytes  reshard  overlap
// CHECK-NEXT:   1  allgather  f32    16x4   2  2 teams           1    128  DIDy->-  no
// CHECK-NEXT:   2  send       f32    8x4    2  [0,2] on [0]      1  (128)  @a->@b   no
// CHECK-NEXT:   3  recv       f32    8x4    2  [0,2] on [2]      1    128  @a->@b   no
// CHECK-NEXT:   total on rank 2 (the most of 4 ranks): 2 communications, 256 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
// CHECK-NEXT:   total on rank 3 (the least): 1 communication, 128 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
fusion.mesh @grid shape = [2, 2]
func.func @mesh2d(%x: tensor<8x4xf32>) attributes {hir.host} {
  hir.if_rank [0, 2] {
    %g = hir.alloc "m/0" : tensor<16x4xf32>
    %t = hir.allgather %x, %g team = [0, 2] backend = nccl {hir.reshard = "DIDy->-"} : (tensor<8x4xf32>, tensor<16x4xf32>) -> !hir.token
    hir.wait %t : !hir.token
  }
  hir.if_rank [1, 3] {
    %g = hir.alloc "m/1" : tensor<16x4xf32>
    %t = hir.allgather %x, %g team = [1, 3] backend = nccl {hir.reshard = "DIDy->-"} : (tensor<8x4xf32>, tensor<16x4xf32>) -> !hir.token
    hir.wait %t : !hir.token
  }
  %c0 = hir.constant 0 : index
  %c1 = hir.constant 1 : index
  hir.if_rank [0] {
    %t = hir.send %x to %c1 team = [0, 2] backend = nccl {hir.reshard = "@a->@b"} : (tensor<8x4xf32>, index) -> !hir.token
    hir.wait %t : !hir.token
  }
  hir.if_rank [2] {
    %b = hir.alloc "m/2" : tensor<8x4xf32>
    %t = hir.recv %b from %c0 team = [0, 2] backend = nccl {hir.reshard = "@a->@b"} : (tensor<8x4xf32>, index) -> !hir.token
    hir.wait %t : !hir.token
  }
  func.return
}

// -----

// A module of several programs: each one's totals, the module's, and those
// of a forward and backward pair; a program without communication says so.
// @g's allreduce of 8x4 f32 over 2 ranks: 2 * 1/2 of 128 bytes -> 128.
// A program's buffers are given after its totals (none: no line).
// CHECK:      @f_fwd:
// CHECK:        total per rank (2 ranks): 1 communication, 128 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
// CHECK-NEXT:   buffers per rank: 1, 256 bytes (0.00 MiB); in plan-memory's blocks 256 bytes (0.00 MiB)
// CHECK-NEXT: @f_bwd:
// CHECK-NEXT:   no communication
// CHECK-NEXT: @g:
// CHECK:        total per rank (2 ranks): 1 communication, 128 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
// CHECK-NEXT: module:
// CHECK-NEXT:   total per rank (2 ranks): 2 communications, 256 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
// CHECK-NEXT: @f_fwd + @f_bwd:
// CHECK-NEXT:   total per rank (2 ranks): 1 communication, 128 bytes (0.00 MiB), overlapped 0 bytes (0.0%)
func.func @f_fwd(%x: tensor<8x4xf32>) attributes {hir.host} {
  %g = hir.alloc "f/0" : tensor<16x4xf32>
  %t = hir.allgather %x, %g team = [0, 1] backend = nccl : (tensor<8x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %t : !hir.token
  func.return
}
func.func @f_bwd(%x: tensor<8x4xf32>) attributes {hir.host} {
  func.return
}
func.func @g(%x: tensor<8x4xf32>) attributes {hir.host} {
  %t = hir.allreduce %x, %x op = sum team = [0, 1] backend = nccl : (tensor<8x4xf32>, tensor<8x4xf32>) -> !hir.token
  hir.wait %t : !hir.token
  func.return
}

// RUN: %fuserc opt -p stream-pipeline %s | filecheck %s
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=none}' %s | filecheck %s --check-prefix=NONE

// Fences that follow one another on the same stream over the same team,
// with only deallocations and switches back to that stream between (the
// closing fences of a block's pipelines, one per shared buffer), become
// one: the first passes once every member's earlier work on the stream is
// done, which is all that the others wait for.
// CHECK-LABEL: func.func @closings
// CHECK:      %f0 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc
// CHECK-NEXT: hir.wait %f0
// CHECK-NEXT: hir.dealloc %a
// CHECK-NEXT: hir.set_current_stream %m1
// CHECK-NEXT: hir.dealloc %b
// CHECK-NEXT: hir.set_current_stream %m2
// CHECK-NEXT: hir.dealloc %c
// CHECK-NEXT: func.return
// NONE-LABEL: func.func @closings
// NONE-COUNT-3: hir.barrier
func.func @closings(%x: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {hir.host} {
  %m0 = hir.get_current_stream : !hir.stream
  %a = hir.alloc "closings/0" : tensor<8x8xf32>
  %b = hir.alloc "closings/1" : tensor<8x8xf32>
  %c = hir.alloc "closings/2" : tensor<8x8xf32>
  %m1 = hir.get_current_stream : !hir.stream
  %m2 = hir.get_current_stream : !hir.stream
  hir.set_current_stream %m0 : !hir.stream
  %f0 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f0 : !hir.token
  hir.dealloc %a : tensor<8x8xf32>
  hir.set_current_stream %m1 : !hir.stream
  %f1 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f1 : !hir.token
  hir.dealloc %b : tensor<8x8xf32>
  hir.set_current_stream %m2 : !hir.stream
  %f2 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f2 : !hir.token
  hir.dealloc %c : tensor<8x8xf32>
  func.return %x : tensor<8x8xf32>
}

// Kept: a fence on another stream (its earlier work is not the first
// fence's), one over another team, and one after compute.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: hir.barrier
// CHECK: func.return
func.func @kept(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {hir.host} {
  %m = hir.get_current_stream : !hir.stream
  %f0 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f0 : !hir.token
  %c0 = hir.constant 0 : index
  %s = hir.stream_for %c0 mod 1 : !hir.stream
  hir.set_current_stream %s : !hir.stream
  %f1 = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc : !hir.token
  hir.wait %f1 : !hir.token
  hir.set_current_stream %m : !hir.stream
  %f2 = hir.barrier team = [0, 1] backend = cuda_ipc : !hir.token
  hir.wait %f2 : !hir.token
  hir.copy %x, %y : tensor<8x8xf32>, tensor<8x8xf32>
  %f3 = hir.barrier team = [0, 1] backend = cuda_ipc : !hir.token
  hir.wait %f3 : !hir.token
  func.return %y : tensor<8x8xf32>
}

// RUN: %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-h200.json"}' --split-input-file %s | filecheck %s
// RUN: env FUSERC_GPUS_PER_NODE=2 %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-h200.json"}' --split-input-file %s | filecheck %s --check-prefix=NODES
// RUN: env FUSERC_GPUS_PER_NODE=6 %fuserc opt -p 'stream-pipeline{links="%S/Inputs/links-h200.json"}' --split-input-file %s | filecheck %s --check-prefix=NODES6

// A reduce-scatter that the schedule runs beside GEMMs (a backward's input
// gradient, the sum of two GEMMs, beside its weight gradients), over ranks
// of one node, is made of copy-engine pulls: on its worker stream a fence,
// three gets of this device's block of each peer's partial sum, one add;
// the main stream waits for the worker stream where it waited for the
// collective, and a fence at the end keeps the partial sum until every
// peer has pulled from it. Across nodes it stays a NCCL collective.
// CHECK-LABEL: func.func @beside_weight_gradients
// CHECK:      %[[SIDE:.*]] = hir.stream_for %{{.*}} mod 1
// CHECK-NEXT: hir.set_current_stream %[[SIDE]]
// CHECK-NEXT: hir.wait_event
// CHECK-NEXT: %[[H:.*]] = hir.share %p team = [0, 1, 2, 3]
// CHECK-NEXT: %[[F:.*]] = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc
// CHECK-NEXT: hir.wait %[[F]]
// CHECK-NEXT: %[[POS:.*]] = hir.team_index team = [0, 1, 2, 3]
// CHECK-NEXT: %[[PULLED:.*]] = hir.alloc "bwd/p/pulled" : tensor<6144x4096xbf16>
// CHECK-COUNT-3: hir.get %[[H]], %{{.*}}, %{{.*}} block %[[POS]] of 4 backend = cuda_ipc {hir.reshard = "partial->DIDx"}
// CHECK:      %[[MINE:.*]] = hir.chunk %p [%[[POS]]] dim = 0 chunks = 4
// CHECK-NEXT: hir.launch ins(%[[MINE]], %{{.*}}, %{{.*}}, %{{.*}} : {{.*}}) outs(%y : tensor<2048x4096xbf16>)
// CHECK-COUNT-3: fusion.add
// CHECK:      hir.set_current_stream %[[MAIN:.*]] : !hir.stream
// CHECK:      hir.matmul %x, %g, %dw1
// CHECK:      hir.matmul %x, %g, %dw2
// CHECK-NEXT: hir.sync_stream %[[SIDE]]
// CHECK-NEXT: hir.dealloc %p
// CHECK-NEXT: hir.set_current_stream %[[MAIN]]
// CHECK-NEXT: %[[CLOSE:.*]] = hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc
// CHECK-NEXT: hir.wait %[[CLOSE]]
// CHECK-NEXT: hir.dealloc %[[PULLED]]
// CHECK-NEXT: func.return
// NODES-LABEL: func.func @beside_weight_gradients
// NODES:       hir.reduce_scatter %p, %y
// NODES-NOT:   hir.get
func.func @beside_weight_gradients(%a: tensor<8192x1024xbf16>, %wa: tensor<1024x4096xbf16>, %b: tensor<8192x1024xbf16>, %wb: tensor<1024x4096xbf16>, %x: tensor<4096x8192xbf16>, %g: tensor<8192x2048xbf16>) -> (tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>) attributes {hir.host} {
  %p = hir.alloc "bwd/p" : tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>
  hir.matmul %b, %wb, %p acc %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>, tensor<8192x4096xbf16>
  %y = hir.alloc "bwd/y" : tensor<2048x4096xbf16>
  %t = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<8192x4096xbf16>, tensor<2048x4096xbf16>) -> !hir.token
  hir.wait %t : !hir.token
  %dw1 = hir.alloc "bwd/dw1" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw1 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  %dw2 = hir.alloc "bwd/dw2" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw2 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  hir.dealloc %p : tensor<8192x4096xbf16>
  func.return %y, %dw1, %dw2 : tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>
}

// -----

// The reduce-scatter of both rows of a [2, 4] mesh (its team translated):
// pulls within each row, its share, fences and positions translated too;
// across nodes of 2 ranks (each row spans two) it stays a collective.
// CHECK-LABEL: func.func @translated
// CHECK:      %[[H:.*]] = hir.share %p team = [0, 1, 2, 3] translated [2 step 4]
// CHECK-NEXT: %[[F:.*]] = hir.barrier team = [0, 1, 2, 3] translated [2 step 4] backend = cuda_ipc
// CHECK-NEXT: hir.wait %[[F]]
// CHECK-NEXT: %[[POS:.*]] = hir.team_index team = [0, 1, 2, 3] translated [2 step 4]
// CHECK-COUNT-3: hir.get %[[H]], %{{.*}}, %{{.*}} block %[[POS]] of 4 backend = cuda_ipc
// CHECK:      hir.barrier team = [0, 1, 2, 3] translated [2 step 4] backend = cuda_ipc
// NODES-LABEL: func.func @translated
// NODES:       hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] translated [2 step 4]
// NODES-NOT:   hir.get
// With nodes of 6 ranks the first row lies on one node, the second does
// not: every row is weighed, so it stays a collective too.
// NODES6-LABEL: func.func @translated
// NODES6:       hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] translated [2 step 4]
// NODES6-NOT:   hir.get %
func.func @translated(%a: tensor<8192x1024xbf16>, %wa: tensor<1024x4096xbf16>, %b: tensor<8192x1024xbf16>, %wb: tensor<1024x4096xbf16>, %x: tensor<4096x8192xbf16>, %g: tensor<8192x2048xbf16>) -> (tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>) attributes {hir.host} {
  %p = hir.alloc "tr/p" : tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>
  hir.matmul %b, %wb, %p acc %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>, tensor<8192x4096xbf16>
  %y = hir.alloc "tr/y" : tensor<2048x4096xbf16>
  %t = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] translated [2 step 4] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<8192x4096xbf16>, tensor<2048x4096xbf16>) -> !hir.token
  hir.wait %t : !hir.token
  %dw1 = hir.alloc "tr/dw1" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw1 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  %dw2 = hir.alloc "tr/dw2" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw2 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  hir.dealloc %p : tensor<8192x4096xbf16>
  func.return %y, %dw1, %dw2 : tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>
}

// -----

// Kept as NCCL collectives: one whose GEMMs beside it would not cover the
// pulls (fence, gets and add: 0.18 ms by the model, against a GEMM of
// 0.01 ms), and one mostly latency (32 KiB).
// CHECK-LABEL: func.func @kept
// CHECK:       hir.reduce_scatter %p, %y
// CHECK:       hir.reduce_scatter %q, %z
// CHECK-NOT:   hir.get
// NODES-LABEL: func.func @kept
// NODES6-LABEL: func.func @kept
func.func @kept(%a: tensor<8192x1024xbf16>, %wa: tensor<1024x4096xbf16>, %s: tensor<256x1024xbf16>, %ws: tensor<1024x64xbf16>, %x: tensor<1024x1024xbf16>) -> (tensor<2048x4096xbf16>, tensor<64x64xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) attributes {hir.host} {
  %p = hir.alloc "kept/p" : tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p acc %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>, tensor<8192x4096xbf16>
  %y = hir.alloc "kept/y" : tensor<2048x4096xbf16>
  %t = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<8192x4096xbf16>, tensor<2048x4096xbf16>) -> !hir.token
  hir.wait %t : !hir.token
  %w1 = hir.alloc "kept/w1" : tensor<1024x1024xbf16>
  hir.matmul %x, %x, %w1 : tensor<1024x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>
  hir.dealloc %p : tensor<8192x4096xbf16>
  %q = hir.alloc "kept/q" : tensor<256x64xbf16>
  hir.matmul %s, %ws, %q : tensor<256x1024xbf16>, tensor<1024x64xbf16>, tensor<256x64xbf16>
  hir.matmul %s, %ws, %q acc %q : tensor<256x1024xbf16>, tensor<1024x64xbf16>, tensor<256x64xbf16>, tensor<256x64xbf16>
  %z = hir.alloc "kept/z" : tensor<64x64xbf16>
  %u = hir.reduce_scatter %q, %z op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<256x64xbf16>, tensor<64x64xbf16>) -> !hir.token
  hir.wait %u : !hir.token
  %w2 = hir.alloc "kept/w2" : tensor<1024x1024xbf16>
  hir.matmul %x, %x, %w2 : tensor<1024x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>
  hir.dealloc %q : tensor<256x64xbf16>
  func.return %y, %z, %w1, %w2 : tensor<2048x4096xbf16>, tensor<64x64xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>
}

// -----

// Kept: a partial sum written again after its reduce-scatter in the same
// run (peers could still be pulling from it).
// CHECK-LABEL: func.func @rewritten
// CHECK:       hir.reduce_scatter %p, %y
// CHECK-NOT:   hir.get
func.func @rewritten(%a: tensor<8192x1024xbf16>, %wa: tensor<1024x4096xbf16>, %x: tensor<4096x8192xbf16>, %g: tensor<8192x2048xbf16>) -> (tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>, tensor<8192x4096xbf16>) attributes {hir.host} {
  %p = hir.alloc "rw/p" : tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p acc %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>, tensor<8192x4096xbf16>
  %y = hir.alloc "rw/y" : tensor<2048x4096xbf16>
  %t = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl : (tensor<8192x4096xbf16>, tensor<2048x4096xbf16>) -> !hir.token
  hir.wait %t : !hir.token
  %dw1 = hir.alloc "rw/dw1" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw1 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  %dw2 = hir.alloc "rw/dw2" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw2 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  hir.matmul %a, %wa, %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>
  func.return %y, %dw1, %dw2, %p : tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>, tensor<8192x4096xbf16>
}

// -----

// The pulls' add stays a launch of its own on the worker stream even where
// a launch reads the result next: it runs beside the weight gradients'
// GEMMs there, where it costs the main stream nothing (the reader adding
// the blocks itself would).
// CHECK-LABEL: func.func @kept_beside
// CHECK:       %[[MINE:.*]] = hir.chunk %p [%{{.*}}] dim = 0 chunks = 4
// CHECK-NEXT:  hir.launch ins(%[[MINE]], %{{.*}}, %{{.*}}, %{{.*}} : {{.*}}) outs(%y : tensor<2048x4096xbf16>)
// CHECK:       hir.matmul %x, %g, %dw2
// CHECK:       hir.launch ins(%y, %r : {{.*}}) outs(%z : tensor<2048x4096xbf16>)
func.func @kept_beside(%a: tensor<8192x1024xbf16>, %wa: tensor<1024x4096xbf16>, %x: tensor<4096x8192xbf16>, %g: tensor<8192x2048xbf16>, %r: tensor<2048x4096xbf16>) -> (tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>) attributes {hir.host} {
  %p = hir.alloc "fold/p" : tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>
  hir.matmul %a, %wa, %p acc %p : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>, tensor<8192x4096xbf16>, tensor<8192x4096xbf16>
  %y = hir.alloc "fold/y" : tensor<2048x4096xbf16>
  %t = hir.reduce_scatter %p, %y op = sum team = [0, 1, 2, 3] backend = nccl {hir.reshard = "partial->DIDx"} : (tensor<8192x4096xbf16>, tensor<2048x4096xbf16>) -> !hir.token
  hir.wait %t : !hir.token
  %dw1 = hir.alloc "fold/dw1" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw1 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  %dw2 = hir.alloc "fold/dw2" : tensor<4096x2048xbf16>
  hir.matmul %x, %g, %dw2 : tensor<4096x8192xbf16>, tensor<8192x2048xbf16>, tensor<4096x2048xbf16>
  hir.dealloc %p : tensor<8192x4096xbf16>
  %z = hir.alloc "fold/z" : tensor<2048x4096xbf16>
  hir.launch ins(%y, %r : tensor<2048x4096xbf16>, tensor<2048x4096xbf16>) outs(%z : tensor<2048x4096xbf16>) {
  ^bb0(%yy: tensor<2048x4096xbf16>, %rr: tensor<2048x4096xbf16>):
    %s = fusion.add %yy, %rr : (tensor<2048x4096xbf16>, tensor<2048x4096xbf16>) -> tensor<2048x4096xbf16>
    hir.yield %s : tensor<2048x4096xbf16>
  }
  hir.dealloc %y : tensor<2048x4096xbf16>
  func.return %z, %dw1, %dw2 : tensor<2048x4096xbf16>, tensor<4096x2048xbf16>, tensor<4096x2048xbf16>
}

// A function holding host IR without the `hir.host` mark is neither a
// fusion function nor a host program: every fusion pass refuses it at its
// first hir op (with or without a mesh), never a traceback.
// RUN: %fuserc opt --split-input-file --verify-diagnostics -p propagate-shardings %s
// RUN: %fuserc opt --split-input-file --verify-diagnostics -p make-resharding-contiguous %s
// RUN: %fuserc opt --split-input-file --verify-diagnostics -p lower-to-host-ir %s
// RUN: %fuserc opt --split-input-file --verify-diagnostics -p autodiff %s
// RUN: %fuserc opt --split-input-file --verify-diagnostics -p default %s

fusion.mesh @tp shape = [4]
func.func @main(%o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op is host IR in @main, which is not a host program (a function marked `attributes {hir.host}`): the fusion passes transform functions of fusion ops only}}
  hir.launch ins(%o : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    %g = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
    hir.yield %g : tensor<8xf32>
  }
  func.return
}

// -----

func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  // expected-error @+1 {{'hir.alloc' op is host IR in @main, which is not a host program}}
  %b = hir.alloc "main/b" : tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// RUN: %fuserc opt -p default --split-input-file %s | filecheck %s
// A device split over a mesh axis of one device places nothing: `[DIDy*Stream(2), -, -]` on a mesh [1, 1, 1] is `[Stream(2), -, -]`, so the sub computes locally (make-resharding-contiguous used to call it resharding and break its contract).
// CHECK-LABEL: func.func @main
// CHECK: func.return
fusion.mesh @m0 shape = [1, 1, 1] devices = [1]
func.func @main(%a0: tensor<2x6x2xbf16, #fusion.sharding<@m0, [-, -, DIDz]>>, %a1: tensor<bf16, #fusion.sharding<@m0, []>>) -> (tensor<2x6x2xbf16>, tensor<2x6x2xbf16, #fusion.sharding<@m0, [DIDy*Stream(2), DIDx, DIDz]>>) {
  %v0 = fusion.gelu %a0 : (tensor<2x6x2xbf16, #fusion.sharding<@m0, [-, -, DIDz]>>) -> tensor<2x6x2xbf16>
  %v1 = fusion.sub %a1, %a0 : (tensor<bf16, #fusion.sharding<@m0, []>>, tensor<2x6x2xbf16, #fusion.sharding<@m0, [-, -, DIDz]>>) -> tensor<2x6x2xbf16, #fusion.sharding<@m0, [DIDy*Stream(2), DIDx, DIDz]>>
  func.return %v0, %v1 : tensor<2x6x2xbf16>, tensor<2x6x2xbf16, #fusion.sharding<@m0, [DIDy*Stream(2), DIDx, DIDz]>>
}

// -----

// The same on an operand: q's gather pipelined along the result's
// `DIDz*Stream(2)` (DIDz of one device) keeps its DIDz, which places nothing,
// so the sdpa computes locally (the contract check called it resharding).
// CHECK-LABEL: func.func @main
// CHECK: func.return
fusion.mesh @m0 shape = [1, 1, 2]
func.func @main(%q: tensor<2x2x1x8xf32, #fusion.sharding<@m0, [DIDz, -, -, -]>>, %k: tensor<2x1x4x8xf32, #fusion.sharding<@m0, [DIDz, -, -, -]>>, %v: tensor<2x1x4x4xf32, #fusion.sharding<@m0, [-, -, DIDx, DIDy]>>) -> (tensor<2x2x1x4xf32, #fusion.sharding<@m0, [-, DIDz*Stream(2), -, -]>>) {
  %o = fusion.sdpa %q, %k, %v causal = true : (tensor<2x2x1x8xf32, #fusion.sharding<@m0, [DIDz, -, -, -]>>, tensor<2x1x4x8xf32, #fusion.sharding<@m0, [DIDz, -, -, -]>>, tensor<2x1x4x4xf32, #fusion.sharding<@m0, [-, -, DIDx, DIDy]>>) -> tensor<2x2x1x4xf32, #fusion.sharding<@m0, [-, DIDz*Stream(2), -, -]>>
  func.return %o : tensor<2x2x1x4xf32, #fusion.sharding<@m0, [-, DIDz*Stream(2), -, -]>>
}

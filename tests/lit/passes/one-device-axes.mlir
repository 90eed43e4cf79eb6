// RUN: %fuserc opt -p default %s | filecheck %s
// A device split over a mesh axis of one device places nothing: `[DIDy*Stream(2), -, -]` on a mesh [1, 1, 1] is `[Stream(2), -, -]`, so the sub computes locally (make-resharding-contiguous used to call it resharding and break its contract).
// CHECK-LABEL: func.func @main
// CHECK: func.return
fusion.mesh @m0 shape = [1, 1, 1] devices = [1]
func.func @main(%a0: tensor<2x6x2xbf16, #fusion.sharding<@m0, [-, -, DIDz]>>, %a1: tensor<bf16, #fusion.sharding<@m0, []>>) -> (tensor<2x6x2xbf16>, tensor<2x6x2xbf16, #fusion.sharding<@m0, [DIDy*Stream(2), DIDx, DIDz]>>) {
  %v0 = fusion.gelu %a0 : (tensor<2x6x2xbf16, #fusion.sharding<@m0, [-, -, DIDz]>>) -> tensor<2x6x2xbf16>
  %v1 = fusion.sub %a1, %a0 : (tensor<bf16, #fusion.sharding<@m0, []>>, tensor<2x6x2xbf16, #fusion.sharding<@m0, [-, -, DIDz]>>) -> tensor<2x6x2xbf16, #fusion.sharding<@m0, [DIDy*Stream(2), DIDx, DIDz]>>
  func.return %v0, %v1 : tensor<2x6x2xbf16>, tensor<2x6x2xbf16, #fusion.sharding<@m0, [DIDy*Stream(2), DIDx, DIDz]>>
}

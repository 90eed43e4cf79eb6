// Stream splits that do not change placement: a result `[DIDx*Stream(4)]`
// of a pointwise op on a replicated and a split operand (computed locally,
// the replicated one sliced, nothing gathered), and a set from `[DIDx]` on
// one mesh to `[Stream(2)]` on another whose chunks do not line up with the
// blocks moved (3 rows a device, chunks of 3N/2 rows).
// ranks: 2 4
!rep = tensor<${8*N}x${T}, #fusion.sharding<@tp, [-]>>
!split = tensor<${8*N}x${T}, #fusion.sharding<@tp, [DIDx]>>
!inner = tensor<${8*N}x${T}, #fusion.sharding<@tp, [DIDx*Stream(4)]>>
!src = tensor<${3*N}x${T}, #fusion.sharding<@tp, [DIDx]>>
!dst = tensor<${3*N}x${T}, #fusion.sharding<@back, [Stream(2)]>>
fusion.mesh @tp shape = [${N}]
fusion.mesh @back shape = [${N}] devices = ${list(reversed(range(N)))}
func.func @main(%x: !rep, %y: !split, %z: !src) -> (!inner, !dst) {
  %p = fusion.mul %x, %y : (!rep, !split) -> !inner
  %q = fusion.set %z : (!src) -> !dst
  func.return %p, %q : !inner, !dst
}

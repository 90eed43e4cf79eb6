// Two meshes, pipeline stages: stage 0 holds the first ceil(N/2) ranks,
// stage 1 the others (the same rank when N = 1). Stage 0 computes a
// layer on rows split over its devices, a fusion.set moves the activations
// to stage 1 (blocks regrouped when the stages differ in size), where the
// second layer runs; a second output is replicated on stage 1.
!act0 = tensor<24x16x${T}, #fusion.sharding<@stage0, [DIDx, -]>>
!act1 = tensor<24x16x${T}, #fusion.sharding<@stage1, [DIDx, -]>>
!rep1 = tensor<24x16x${T}, #fusion.sharding<@stage1, [-, -]>>
!w0 = tensor<16x16x${T}, #fusion.sharding<@stage0, [-, -]>>
!w1 = tensor<16x16x${T}, #fusion.sharding<@stage1, [-, -]>>
fusion.mesh @stage0 shape = [${(N + 1) // 2}] devices = ${list(range(N))[:(N + 1) // 2]}
fusion.mesh @stage1 shape = [${max(1, N // 2)}] devices = ${list(range(N))[(N + 1) // 2:] or [0]}
func.func @main(%x: !act0, %w0: !w0, %w1: !w1) -> (!act1, !rep1) {
  %h0 = fusion.linear %x, %w0 : (!act0, !w0) -> !act0
  %a0 = fusion.relu %h0 : (!act0) -> !act0
  %a1 = fusion.set %a0 : (!act0) -> !act1
  %h1 = fusion.linear %a1, %w1 : (!act1, !w1) -> !act1
  %y = fusion.relu %h1 : (!act1) -> !act1
  %g = fusion.set %a0 : (!act0) -> !rep1
  func.return %y, %g : !act1, !rep1
}

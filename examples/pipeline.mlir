// Pipeline parallelism over two stages of two devices each: stage 0 runs
// the first layer on devices 0 and 1 (the rows of the activations split
// between them), a fusion.set moves the activations to devices 2 and 3 (row
// block c of @stage0 goes to device c of @stage1), where stage 1 runs the
// second layer.
//   mpiexec -n 4 fuserc run examples/pipeline.mlir --check
fusion.mesh @stage0 shape = [2] devices = [0, 1]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
!act0 = tensor<64x32xf32, #fusion.sharding<@stage0, [DIDx, -]>>
!act1 = tensor<64x32xf32, #fusion.sharding<@stage1, [DIDx, -]>>
!w0 = tensor<32x32xf32, #fusion.sharding<@stage0, [-, -]>>
!w1 = tensor<32x32xf32, #fusion.sharding<@stage1, [-, -]>>
func.func @main(%x: !act0, %w0: !w0, %w1: !w1) -> !act1 {
  %h0 = fusion.linear %x, %w0 : (!act0, !w0) -> !act0
  %a0 = fusion.relu %h0 : (!act0) -> !act0
  %a1 = fusion.set %a0 : (!act0) -> !act1
  %h1 = fusion.linear %a1, %w1 : (!act1, !w1) -> !act1
  %y = fusion.relu %h1 : (!act1) -> !act1
  func.return %y : !act1
}

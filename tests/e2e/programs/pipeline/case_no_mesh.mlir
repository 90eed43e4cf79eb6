// A program with no mesh at all (no fusion.mesh, no sharding anywhere): it
// runs on one device, the implicit mesh propagate-shardings declares. On a
// job of N ranks, rank 0 computes it and the others have nothing to do.
func.func @main(%x: tensor<8x12x${T}>, %w: tensor<12x16x${T}>, %b: tensor<16x${T}>) -> (tensor<8x16x${T}>, tensor<8x${T}>, tensor<16x8x${T}>) {
  %y = fusion.matmul %x, %w : (tensor<8x12x${T}>, tensor<12x16x${T}>) -> tensor<8x16x${T}>
  %bb = fusion.broadcast_in_dim %b dims = [1] : (tensor<16x${T}>) -> tensor<8x16x${T}>
  %z = fusion.add %y, %bb : (tensor<8x16x${T}>, tensor<8x16x${T}>) -> tensor<8x16x${T}>
  %g = fusion.gelu %z : (tensor<8x16x${T}>) -> tensor<8x16x${T}>
  %s = fusion.sum %g dims = [1] : (tensor<8x16x${T}>) -> tensor<8x${T}>
  %t = fusion.permute %g dims = [1, 0] : (tensor<8x16x${T}>) -> tensor<16x8x${T}>
  func.return %g, %s, %t : tensor<8x16x${T}>, tensor<8x${T}>, tensor<16x8x${T}>
}

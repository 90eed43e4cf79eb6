// RUN: %fuserc opt -p default --split-input-file --verify-diagnostics %s

// Causal ring attention needs q and k of one sequence length (PyTorch's
// top-left mask does not cut into blocks of one size otherwise).
#s = #fusion.sharding<@cp, [-, -, DIDx, -]>
fusion.mesh @cp shape = [4]
func.func @causal_lengths(%q: tensor<1x2x16x8xf32, #s>, %k: tensor<1x2x32x8xf32, #s>) -> tensor<1x2x16x8xf32, #s> {
  // expected-error @+1 {{'fusion.sdpa': causal ring attention needs q and k of one sequence length, got 16 and 32}}
  %o = fusion.sdpa %q, %k, %k causal = true : (tensor<1x2x16x8xf32, #s>, tensor<1x2x32x8xf32, #s>, tensor<1x2x32x8xf32, #s>) -> tensor<1x2x16x8xf32, #s>
  func.return %o : tensor<1x2x16x8xf32, #s>
}

// -----

// The sequence split over two mesh axes: ring attention runs over one.
#s = #fusion.sharding<@cp, [-, -, DIDy*DIDx, -]>
fusion.mesh @cp shape = [2, 2]
func.func @two_axes(%q: tensor<1x2x16x8xf32, #s>) -> tensor<1x2x16x8xf32, #s> {
  // expected-error @+1 {{'fusion.sdpa': a sequence split #fusion.sharding<@cp, [-, -, DIDy*DIDx, -]> is not one mesh axis: ring attention needs one}}
  %o = fusion.sdpa %q, %q, %q : (tensor<1x2x16x8xf32, #s>, tensor<1x2x16x8xf32, #s>, tensor<1x2x16x8xf32, #s>) -> tensor<1x2x16x8xf32, #s>
  func.return %o : tensor<1x2x16x8xf32, #s>
}

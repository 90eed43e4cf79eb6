// RUN: %fuserc opt -p autodiff --split-input-file --verify-diagnostics %s
// RUN: not %fuserc opt -p 'autodiff{entry=nope}' --split-input-file %s 2>&1 | filecheck %s --check-prefix=ENTRY
// RUN: not %fuserc opt -p 'autodiff{save=all}' %s 2>&1 | filecheck %s --check-prefix=SAVE
// ENTRY: autodiff: no function @nope to differentiate (entry = nope; functions: @main)
// SAVE: save must be one of activations, inputs, got 'all'

// A rule that cannot apply is a diagnostic at the op it differentiates:
// sdpa's log-sum-exp (its second result) is a statistic, with no derivative.
func.func @main(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x8x8xf32>) -> (tensor<1x2x16x8xf32>, tensor<1x2x16xf32>) {
  // expected-error @+1 {{autodiff: 'fusion.sdpa' has no derivative through its result #1}}
  %o, %lse = fusion.sdpa %q, %k, %k : (tensor<1x2x16x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x16x8xf32>, tensor<1x2x16xf32>)
  func.return %o, %lse : tensor<1x2x16x8xf32>, tensor<1x2x16xf32>
}

// -----

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
// expected-error @+1 {{autodiff: @main_fwd exists already}}
func.func @main_fwd(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// -----

// A declaration has nothing to differentiate.
// expected-error @+1 {{autodiff: @main is a declaration (no body): nothing to differentiate}}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32>

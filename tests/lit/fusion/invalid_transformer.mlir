// Every verifier message of the transformer ops, each at its op: dropout's p
// and seed, where's condition, cross_entropy's labels, embedding's ids and
// table, norm dims and weights, sdpa's shapes and GQA heads, concat, and
// broadcasting.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op dropout probability p = 1.0 must be in [0, 1)}}
  %y = fusion.dropout %x, %seed p = 1.0 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op dropout probability p = -0.1 must be in [0, 1)}}
  %y = fusion.dropout %x, %seed p = -0.1 : (tensor<8x16xf32>, tensor<i64>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op the dropout seed must be a rank-0 i64 tensor, got shape [2, 8]}}
  %y = fusion.dropout %x, %ids p = 0.1 : (tensor<8x16xf32>, tensor<2x8xi64>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op operand #1 has element type f32; it must be i64}}
  %y = fusion.dropout %x, %x p = 0.1 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.where' op operand #0 has element type f32; it must be i1}}
  %y = fusion.where %x, %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.where' op operands must have one element type, got f32, bf16}}
  %y = fusion.where %m, %x, %xb : (tensor<8x16xi1>, tensor<8x16xf32>, tensor<4x8x16xbf16>) -> tensor<4x8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op operand #1 has element type f32; it must be i64}}
  %y = fusion.cross_entropy %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op cross_entropy labels must be [8] (one per row), got [4]}}
  %y = fusion.cross_entropy %x, %lab4 : (tensor<8x16xf32>, tensor<4xi64>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op cross_entropy logits must be [rows, classes], got [4, 8, 16]}}
  %y = fusion.cross_entropy %xb, %labels : (tensor<4x8x16xbf16>, tensor<8xi64>) -> tensor<bf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.embedding' op operand #0 has element type f32; it must be i64}}
  %y = fusion.embedding %x, %table : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x16x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.embedding' op embedding table must be [vocab, dim], got [16]}}
  %y = fusion.embedding %ids, %w : (tensor<2x8xi64>, tensor<16xbf16>) -> tensor<2x8xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.layer_norm' op fusion.layer_norm normalizes trailing dimensions: dims = [1] must be the last 1 of rank 3 (e.g. [2])}}
  %y = fusion.layer_norm %xb, %w dims = [1] : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.layer_norm' op fusion.layer_norm: weight has shape [8], expected [16] (the normalized dimensions' extents)}}
  %y = fusion.layer_norm %xb, %w8 dims = [2] : (tensor<4x8x16xbf16>, tensor<8xbf16>) -> tensor<4x8x16xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.rms_norm' op eps = -1.0 must be >= 0}}
  %y = fusion.rms_norm %xb, %w dims = [2] eps = -1.0 : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.layer_norm' op dims = [] is ambiguous: list the dimensions}}
  %y = fusion.layer_norm %xb, %w dims = [] : (tensor<4x8x16xbf16>, tensor<16xbf16>) -> tensor<4x8x16xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: the heads of k and v (3) must divide the heads of q (8) (grouped-query attention)}}
  %y = fusion.sdpa %q, %k3, %k3 : (tensor<2x8x16x8xbf16>, tensor<2x3x16x8xbf16>, tensor<2x3x16x8xbf16>) -> tensor<2x8x16x8xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: q must be [batch, heads, seq, head_dim], got [8, 16]}}
  %y = fusion.sdpa %x, %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: k [2, 2, 16, 8] and v [2, 8, 16, 8] must agree in batch, heads and seq}}
  %y = fusion.sdpa %q, %k, %q : (tensor<2x8x16x8xbf16>, tensor<2x2x16x8xbf16>, tensor<2x8x16x8xbf16>) -> tensor<2x8x16x8xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: head_dim of q (8) and k (4) differ}}
  %y = fusion.sdpa %q, %kd, %kd : (tensor<2x8x16x8xbf16>, tensor<2x2x16x4xbf16>, tensor<2x2x16x4xbf16>) -> tensor<2x8x16x8xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.concat' op operands must have one element type, got f32, bf16}}
  %y = fusion.concat %x, %xb dim = 0 : (tensor<8x16xf32>, tensor<4x8x16xbf16>) -> tensor<12x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.concat' op result shape [40, 8] does not match the expected [40, 16]}}
  %y = fusion.concat %x, %table dim = 0 : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<40x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.concat' op dimension 2 out of range for rank 2}}
  %y = fusion.concat %x, %x dim = 2 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x32xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.add' op operand shapes [8, 16] and [8] do not broadcast (dimension -1 differs)}}
  %y = fusion.add %x, %w8f : (tensor<8x16xf32>, tensor<8xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.pow' op operands must have one element type, got f32, bf16}}
  %y = fusion.pow %x, %xb : (tensor<8x16xf32>, tensor<4x8x16xbf16>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.rsqrt' op operand #0 has element type i64; it must be a float}}
  %y = fusion.rsqrt %ids : (tensor<2x8xi64>) -> tensor<2x8xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.lt' op result element type f32 does not match i1}}
  %y = fusion.lt %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.constant' op fusion.constant makes a rank-0 tensor (broadcasting expands it)}}
  %y = fusion.constant 0.5 : () -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.constant' op i64 constant 0.5 is not an integer}}
  %y = fusion.constant 0.5 : () -> tensor<i64>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.iota' op dimension 2 out of range for rank 2}}
  %y = fusion.iota dim = 2 : () -> tensor<8x16xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.iota' op fusion.iota makes i64 or a float type, not i1}}
  %y = fusion.iota dim = 0 : () -> tensor<8x16xi1>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.mean' op operand #0 has element type i64; it must be a float}}
  %y = fusion.mean %ids dims = [1] : (tensor<2x8xi64>) -> tensor<2xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.var' op dimension 3 out of range for rank 2}}
  %y = fusion.var %x dims = [3] : (tensor<8x16xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.min' op repeated dimension in dims = [1, 1]}}
  %y = fusion.min %x dims = [1, 1] : (tensor<8x16xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.log_softmax' op result shape [8, 8] does not match the expected [8, 16]}}
  %y = fusion.log_softmax %x dim = 1 : (tensor<8x16xf32>) -> tensor<8x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %m: tensor<8x16xi1>, %xb: tensor<4x8x16xbf16>, %w: tensor<16xbf16>, %w8: tensor<8xbf16>, %w8f: tensor<8xf32>, %q: tensor<2x8x16x8xbf16>, %k: tensor<2x2x16x8xbf16>, %k3: tensor<2x3x16x8xbf16>, %kd: tensor<2x2x16x4xbf16>, %ids: tensor<2x8xi64>, %table: tensor<32x16xf32>, %labels: tensor<8xi64>, %lab4: tensor<4xi64>, %seed: tensor<i64>) {
  // expected-error @+1 {{'fusion.concat' op concat operands [8, 16] and [32, 16] must agree except in dimension 1}}
  %y = fusion.concat %x, %table dim = 1 : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
  func.return
}

// Every diagnostic the verifiers of the transformer ops give (broadcasting,
// element types, comparisons, where's condition, constants, iota, mean/min/
// var, layer_norm/rms_norm, log_softmax, sdpa, embedding, cross_entropy,
// dropout, concat), each at the line of the op.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

// Broadcasting.
func.func @f(%x: tensor<8x16xf32>, %v: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.minimum' op operand shapes [8, 16] and [8] do not broadcast (dimension -1 differs)}}
  %y = fusion.minimum %x, %v : (tensor<8x16xf32>, tensor<8xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%c: tensor<8x1xi1>, %x: tensor<8x16xf32>, %z: tensor<4x16xf32>) {
  // expected-error @+1 {{'fusion.where' op operand shapes [8, 1] and [8, 16] and [4, 16] do not broadcast (dimension -2 differs)}}
  %y = fusion.where %c, %x, %z : (tensor<8x1xi1>, tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<16xf32>, %s: tensor<8x1xf32>) {
  // expected-error @+1 {{'fusion.add' op result shape [16] does not match the expected [8, 16]}}
  %y = fusion.add %x, %s : (tensor<16xf32>, tensor<8x1xf32>) -> tensor<16xf32>
  func.return
}

// -----

// Element types.
func.func @f(%i: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.sqrt' op operand #0 has element type i64; it must be a float}}
  %y = fusion.sqrt %i : (tensor<8xi64>) -> tensor<8xi64>
  func.return
}

// -----

func.func @f(%m: tensor<8xi1>) {
  // expected-error @+1 {{'fusion.erf' op operand #0 has element type i1; it must be a float}}
  %y = fusion.erf %m : (tensor<8xi1>) -> tensor<8xi1>
  func.return
}

// -----

func.func @f(%m: tensor<8xi1>) {
  // expected-error @+1 {{'fusion.abs' op operand #0 has element type i1; it must be a float or i64}}
  %y = fusion.abs %m : (tensor<8xi1>) -> tensor<8xi1>
  func.return
}

// -----

func.func @f(%i: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.pow' op operand #0 has element type i64; it must be a float}}
  %y = fusion.pow %i, %i : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %s: tensor<bf16>) {
  // expected-error @+1 {{'fusion.pow' op operands must have one element type, got f32, bf16}}
  %y = fusion.pow %x, %s : (tensor<8xf32>, tensor<bf16>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.log' op result element type bf16 does not match f32}}
  %y = fusion.log %x : (tensor<8xf32>) -> tensor<8xbf16>
  func.return
}

// -----

// Comparisons give i1.
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.lt' op result element type f32 does not match i1}}
  %y = fusion.lt %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %i: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.eq' op operands must have one element type, got f32, i64}}
  %y = fusion.eq %x, %i : (tensor<8xf32>, tensor<8xi64>) -> tensor<8xi1>
  func.return
}

// -----

func.func @f(%m: tensor<8xi1>) {
  // expected-error @+1 {{'fusion.ge' op operand #0 has element type i1; it must be a float or i64}}
  %y = fusion.ge %m, %m : (tensor<8xi1>, tensor<8xi1>) -> tensor<8xi1>
  func.return
}

// -----

// A non-i1 condition.
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.where' op operand #0 has element type f32; it must be i1}}
  %y = fusion.where %x, %x, %x : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%m: tensor<8xi1>, %x: tensor<8xf32>, %b: tensor<8xbf16>) {
  // expected-error @+1 {{'fusion.where' op operands must have one element type, got f32, bf16}}
  %y = fusion.where %m, %x, %b : (tensor<8xi1>, tensor<8xf32>, tensor<8xbf16>) -> tensor<8xf32>
  func.return
}

// -----

// Constants.
func.func @f() {
  // expected-error @+1 {{'fusion.constant' op fusion.constant makes a rank-0 tensor (broadcasting expands it)}}
  %y = fusion.constant 1.0 : () -> tensor<4xf32>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.constant' op fusion.constant cannot make element type i32}}
  %y = fusion.constant 1.0 : () -> tensor<i32>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.constant' op i64 constant 1.5 is not an integer}}
  %y = fusion.constant 1.5 : () -> tensor<i64>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.constant' op i64 constant inf is not an integer}}
  %y = fusion.constant inf : () -> tensor<i64>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a number, inf or nan for 'value', got 'pi'}}
  %y = fusion.constant pi : () -> tensor<f32>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{fusion.constant has 0 operands but its type lists 1}}
  %y = fusion.constant 1.0 : (tensor<f32>) -> tensor<f32>
  func.return
}

// -----

// Iota.
func.func @f() {
  // expected-error @+1 {{'fusion.iota' op fusion.iota needs a result of rank >= 1}}
  %y = fusion.iota dim = 0 : () -> tensor<i64>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.iota' op dimension 2 out of range for rank 2}}
  %y = fusion.iota dim = 2 : () -> tensor<4x8xi64>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.iota' op fusion.iota makes i64 or a float type, not i1}}
  %y = fusion.iota dim = 0 : () -> tensor<4xi1>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{property 'dim' expected}}
  %y = fusion.iota : () -> tensor<4xi64>
  func.return
}

// -----

// Reductions.
func.func @f(%i: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.mean' op operand #0 has element type i64; it must be a float}}
  %y = fusion.mean %i dims = [0] : (tensor<8xi64>) -> tensor<i64>
  func.return
}

// -----

func.func @f(%i: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.var' op operand #0 has element type i64; it must be a float}}
  %y = fusion.var %i dims = [0] : (tensor<8xi64>) -> tensor<i64>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.mean' op dimension 2 out of range for rank 2}}
  %y = fusion.mean %x dims = [2] : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.var' op repeated dimension in dims = [0, -2]}}
  %y = fusion.var %x dims = [0, -2] : (tensor<8x4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x0xf32>) {
  // expected-error @+1 {{'fusion.min' op dimension 1 of extent 0 is reduced: fusion.min of no elements is undefined}}
  %y = fusion.min %x dims = [1] : (tensor<8x0xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.mean' op result shape [8] does not match the expected [8, 1]}}
  %y = fusion.mean %x dims = [1] keepdim = true : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{unknown keyword 'correction' for fusion.mean (keywords: dims, keepdim)}}
  %y = fusion.mean %x dims = [1] correction = 0 : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{dims = [] is ambiguous: list the dimensions}}
  %y = fusion.var %x dims = [] : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

// Norms: trailing dims, weight and bias shapes, eps.
func.func @f(%x: tensor<4x8x16xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.layer_norm' op normalizes trailing dimensions: dims = [1] must be the last 1 of rank 3 (e.g. [2])}}
  %y = fusion.layer_norm %x, %w dims = [1] : (tensor<4x8x16xf32>, tensor<8xf32>) -> tensor<4x8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x8x16xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{'fusion.rms_norm' op normalizes trailing dimensions: dims = [0, 2] must be the last 2 of rank 3 (e.g. [1, 2])}}
  %y = fusion.rms_norm %x, %w dims = [0, 2] : (tensor<4x8x16xf32>, tensor<4x16xf32>) -> tensor<4x8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x8x16xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.layer_norm' op weight has shape [8], expected [16] (the normalized dimensions' extents)}}
  %y = fusion.layer_norm %x, %w dims = [2] : (tensor<4x8x16xf32>, tensor<8xf32>) -> tensor<4x8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x8x16xf32>, %w: tensor<16xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'fusion.layer_norm' op bias has shape [8, 16], expected [16] (the normalized dimensions' extents)}}
  %y = fusion.layer_norm %x, %w, %b dims = [2] : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x8x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'fusion.rms_norm' op weight has shape [16], expected [8, 16] (the normalized dimensions' extents)}}
  %y = fusion.rms_norm %x, %w dims = [1, 2] : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'fusion.layer_norm' op eps = -1.0 must be >= 0}}
  %y = fusion.layer_norm %x, %w dims = [1] eps = -1.0 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'fusion.rms_norm' op eps = nan must be >= 0}}
  %y = fusion.rms_norm %x, %w dims = [1] eps = nan : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<16xi64>) {
  // expected-error @+1 {{'fusion.layer_norm' op operand #0 has element type i64; it must be a float}}
  %y = fusion.layer_norm %x, %x dims = [0] : (tensor<16xi64>, tensor<16xi64>) -> tensor<16xi64>
  func.return
}

// -----

func.func @f(%x: tensor<4x16xbf16>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'fusion.layer_norm' op operands must have one element type, got bf16, f32}}
  %y = fusion.layer_norm %x, %w dims = [1] : (tensor<4x16xbf16>, tensor<16xf32>) -> tensor<4x16xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<4x16xf32>) {
  // expected-error @+1 {{fusion.layer_norm takes 2 or 3 operands (input, weight, bias?), got 1}}
  %y = fusion.layer_norm %x dims = [1] : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{fusion.rms_norm takes 2 operands (input, weight), got 3}}
  %y = fusion.rms_norm %x, %w, %w dims = [1] : (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

// Softmaxes.
func.func @f(%x: tensor<4x16xf32>) {
  // expected-error @+1 {{'fusion.log_softmax' op dimension -3 out of range for rank 2}}
  %y = fusion.log_softmax %x dim = -3 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4xi64>) {
  // expected-error @+1 {{'fusion.log_softmax' op operand #0 has element type i64; it must be a float}}
  %y = fusion.log_softmax %x dim = 0 : (tensor<4xi64>) -> tensor<4xi64>
  func.return
}

// -----

// Sdpa: ranks, extents, grouped-query heads.
func.func @f(%q: tensor<2x8x16xf32>, %k: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: q must be [batch, heads, seq, head_dim], got [2, 8, 16]}}
  %y = fusion.sdpa %q, %k, %k : (tensor<2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x8x16xf32>
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x6x16xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: k [2, 2, 8, 16] and v [2, 2, 6, 16] must agree in batch, heads and seq}}
  %y = fusion.sdpa %q, %k, %v : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x6x16xf32>) -> tensor<2x4x8x16xf32>
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: batch of q (2) and k (1) differ}}
  %y = fusion.sdpa %q, %k, %k : (tensor<2x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x8xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: head_dim of q (16) and k (8) differ}}
  %y = fusion.sdpa %q, %k, %k : (tensor<2x4x8x16xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  func.return
}

// -----

func.func @f(%q: tensor<2x8x8x16xf32>, %k: tensor<2x3x8x16xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: the heads of k and v (3) must divide the heads of q (8) (grouped-query attention)}}
  %y = fusion.sdpa %q, %k, %k : (tensor<2x8x8x16xf32>, tensor<2x3x8x16xf32>, tensor<2x3x8x16xf32>) -> tensor<2x8x8x16xf32>
  func.return
}

// -----

func.func @f(%q: tensor<2x8x8x16xf32>, %k: tensor<2x0x8x16xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op sdpa: the heads of k and v (0) must divide the heads of q (8) (grouped-query attention)}}
  %y = fusion.sdpa %q, %k, %k : (tensor<2x8x8x16xf32>, tensor<2x0x8x16xf32>, tensor<2x0x8x16xf32>) -> tensor<2x8x8x16xf32>
  func.return
}

// -----

// Sdpa's log-sum-exp: [batch, heads, seq_q] in f32 for 16-bit and f32 inputs.
func.func @f(%q: tensor<2x4x8x16xbf16>) {
  // expected-error @+1 {{'fusion.sdpa' op result #1 (lse) has type tensor<2x4x8xbf16>, expected tensor<2x4x8xf32>}}
  %y, %l = fusion.sdpa %q, %q, %q : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xbf16>)
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>) {
  // expected-error @+1 {{fusion.sdpa has 1 to 2 results but its type lists 3}}
  %y:3 = fusion.sdpa %q, %q, %q : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  func.return
}

// -----

#r = #fusion.sharding<@tp, [-, DIDx, -, -]>
fusion.mesh @tp shape = [2]
func.func @f(%q: tensor<2x4x8x16xf32, #r>) {
  // expected-error @+1 {{'fusion.sdpa' op result #1 (lse) has sharding #fusion.sharding<@tp, [-, -, -]>; with the first result's #fusion.sharding<@tp, [-, DIDx, -, -]> it must be #fusion.sharding<@tp, [-, DIDx, -]>}}
  %y, %l = fusion.sdpa %q, %q, %q : (tensor<2x4x8x16xf32, #r>, tensor<2x4x8x16xf32, #r>, tensor<2x4x8x16xf32, #r>) -> (tensor<2x4x8x16xf32, #r>, tensor<2x4x8xf32, #fusion.sharding<@tp, [-, -, -]>>)
  func.return
}

// -----

// Sdpa_grad: the saved output, its log-sum-exp and the cotangent.
func.func @f(%q: tensor<2x4x8x16xbf16>, %l: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{'fusion.sdpa_grad' op lse has element type bf16; it must be f32}}
  %a, %b, %c = fusion.sdpa_grad %q, %q, %q, %q, %l, %q : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>)
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>, %l: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'fusion.sdpa_grad' op sdpa_grad: lse [2, 4, 6] must have shape [2, 4, 8]}}
  %a, %b, %c = fusion.sdpa_grad %q, %q, %q, %q, %l, %q : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x6xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %l: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'fusion.sdpa_grad' op result #1 (grad_key) has type tensor<2x4x8x16xf32>, expected tensor<2x2x8x16xf32>}}
  %a, %b, %c = fusion.sdpa_grad %q, %k, %k, %q, %l, %q : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>)
  func.return
}

// -----

func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x8xf32>) {
  // expected-error @+1 {{'fusion.sdpa' op result shape [2, 4, 8, 16] does not match the expected [2, 4, 8, 8]}}
  %y = fusion.sdpa %q, %k, %v : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x16xf32>
  func.return
}

// -----

func.func @f(%q: tensor<1x1x2x2xi64>) {
  // expected-error @+1 {{'fusion.sdpa' op operand #0 has element type i64; it must be a float}}
  %y = fusion.sdpa %q, %q, %q : (tensor<1x1x2x2xi64>, tensor<1x1x2x2xi64>, tensor<1x1x2x2xi64>) -> tensor<1x1x2x2xi64>
  func.return
}

// -----

func.func @f(%q: tensor<1x1x2x2xf32>) {
  // expected-error @+1 {{Expected boolean literal}}
  %y = fusion.sdpa %q, %q, %q causal = 1 : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// Embedding: i64 ids, a [vocab, dim] table.
func.func @f(%x: tensor<4xf32>, %t: tensor<16x8xf32>) {
  // expected-error @+1 {{'fusion.embedding' op operand #0 has element type f32; it must be i64}}
  %y = fusion.embedding %x, %t : (tensor<4xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @f(%i: tensor<4xi64>, %t: tensor<16x8xi64>) {
  // expected-error @+1 {{'fusion.embedding' op operand #1 has element type i64; it must be a float}}
  %y = fusion.embedding %i, %t : (tensor<4xi64>, tensor<16x8xi64>) -> tensor<4x8xi64>
  func.return
}

// -----

func.func @f(%i: tensor<4xi64>, %t: tensor<16xf32>) {
  // expected-error @+1 {{'fusion.embedding' op embedding table must be [vocab, dim], got [16]}}
  %y = fusion.embedding %i, %t : (tensor<4xi64>, tensor<16xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%i: tensor<4xi64>, %t: tensor<16x8xf32>) {
  // expected-error @+1 {{'fusion.embedding' op result shape [4, 16] does not match the expected [4, 8]}}
  %y = fusion.embedding %i, %t : (tensor<4xi64>, tensor<16x8xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

// Embedding's gradient: a row of grad per id, a positive vocabulary.
func.func @f(%g: tensor<4x8xf32>, %i: tensor<5xi64>) {
  // expected-error @+1 {{'fusion.embedding_grad' op embedding_grad: grad [4, 8] must be the ids' shape [5] and one more (the row) dimension}}
  %y = fusion.embedding_grad %g, %i vocab = 16 : (tensor<4x8xf32>, tensor<5xi64>) -> tensor<16x8xf32>
  func.return
}

// -----

func.func @f(%g: tensor<4x8xf32>, %i: tensor<4xi64>) {
  // expected-error @+1 {{'fusion.embedding_grad' op embedding_grad: vocab must be positive, got 0}}
  %y = fusion.embedding_grad %g, %i vocab = 0 : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<0x8xf32>
  func.return
}

// -----

func.func @f(%g: tensor<4x8xf32>, %i: tensor<4xf32>) {
  // expected-error @+1 {{'fusion.embedding_grad' op operand #1 has element type f32; it must be i64}}
  %y = fusion.embedding_grad %g, %i vocab = 16 : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<16x8xf32>
  func.return
}

// -----

// Cross_entropy: float logits, i64 labels, one per row.
func.func @f(%l: tensor<8x32xf32>, %y0: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.cross_entropy' op operand #1 has element type f32; it must be i64}}
  %y = fusion.cross_entropy %l, %y0 : (tensor<8x32xf32>, tensor<8xf32>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%l: tensor<8x32xi64>, %y0: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op operand #0 has element type i64; it must be a float}}
  %y = fusion.cross_entropy %l, %y0 : (tensor<8x32xi64>, tensor<8xi64>) -> tensor<i64>
  func.return
}

// -----

func.func @f(%l: tensor<2x8x32xf32>, %y0: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op cross_entropy logits must be [rows, classes], got [2, 8, 32]}}
  %y = fusion.cross_entropy %l, %y0 : (tensor<2x8x32xf32>, tensor<8xi64>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%l: tensor<8x32xf32>, %y0: tensor<4xi64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op cross_entropy labels must be [8] (one per row), got [4]}}
  %y = fusion.cross_entropy %l, %y0 : (tensor<8x32xf32>, tensor<4xi64>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%l: tensor<8x32xf32>, %y0: tensor<8xi64>) {
  // expected-error @+1 {{'fusion.cross_entropy' op result shape [8] does not match the expected []}}
  %y = fusion.cross_entropy %l, %y0 : (tensor<8x32xf32>, tensor<8xi64>) -> tensor<8xf32>
  func.return
}

// -----

// Dropout: p in [0, 1), a rank-0 i64 seed.
func.func @f(%x: tensor<8xf32>, %s: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op dropout probability p = 1.0 must be in [0, 1)}}
  %y = fusion.dropout %x, %s p = 1.0 : (tensor<8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %s: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op dropout probability p = -0.1 must be in [0, 1)}}
  %y = fusion.dropout %x, %s p = -0.1 : (tensor<8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %s: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op dropout probability p = nan must be in [0, 1)}}
  %y = fusion.dropout %x, %s p = nan : (tensor<8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %s: tensor<2xi64>) {
  // expected-error @+1 {{'fusion.dropout' op the dropout seed must be a rank-0 i64 tensor, got shape [2]}}
  %y = fusion.dropout %x, %s p = 0.5 : (tensor<8xf32>, tensor<2xi64>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'fusion.dropout' op operand #1 has element type f32; it must be i64}}
  %y = fusion.dropout %x, %s p = 0.5 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xi64>, %s: tensor<i64>) {
  // expected-error @+1 {{'fusion.dropout' op operand #0 has element type i64; it must be a float}}
  %y = fusion.dropout %x, %s p = 0.5 : (tensor<8xi64>, tensor<i64>) -> tensor<8xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>, %s: tensor<i64>) {
  // expected-error @+1 {{property 'p' expected}}
  %y = fusion.dropout %x, %s : (tensor<8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return
}

// -----

// Concat: equal extents but along dim.
func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{'fusion.concat' op concat operands [8, 4] and [4, 8] must agree except in dimension 0}}
  %y = fusion.concat %a, %b dim = 0 : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<12x4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.concat' op concat operands [8, 4] and [8] must agree except in dimension 1}}
  %y = fusion.concat %a, %b dim = 1 : (tensor<8x4xf32>, tensor<8xf32>) -> tensor<8x5xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.concat' op dimension 2 out of range for rank 2}}
  %y = fusion.concat %a, %a dim = 2 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
  func.return
}

// -----

func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'fusion.concat' op concat operands must have rank >= 1}}
  %y = fusion.concat %s, %s dim = 0 : (tensor<f32>, tensor<f32>) -> tensor<2xf32>
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.concat' op concat needs at least one operand}}
  %y = fusion.concat dim = 0 : () -> tensor<2xf32>
  func.return
}

// -----

func.func @f(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error @+1 {{'fusion.concat' op operands must have one element type, got f32, bf16}}
  %y = fusion.concat %a, %b dim = 0 : (tensor<4xf32>, tensor<4xbf16>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.concat' op result shape [8, 8] does not match the expected [16, 4]}}
  %y = fusion.concat %a, %a dim = 0 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
  func.return
}

// Every diagnostic of the fusion ops' syntax and types (shape rules are in
// invalid_shapes.mlir): keywords, operand and result counts, element types,
// static shapes, the result type, op attributes, and the generic form.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{unknown keyword 'dim' for fusion.sum (keywords: dims, keepdim)}}
  %y = fusion.sum %x dim = [1] : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{unknown keyword 'dims' for fusion.relu (keywords: none)}}
  %y = fusion.relu %x dims = [1] : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{keyword 'dims' is given twice}}
  %y = fusion.sum %x dims = [1] dims = [0] : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{Expected '=' after 'dims'}}
  %y = fusion.sum %x dims [1] : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{Expected boolean literal}}
  %y = fusion.sum %x dims = [1] keepdim = 1 : (tensor<8x4xf32>) -> tensor<8x1xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{expected ': (operand types) -> result type' after fusion.relu's operands}}
  %y = fusion.relu %x (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

// Keywords can come in any order; a keyword the op requires cannot be left out.
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{property 'dims' expected}}
  %y = fusion.sum %x keepdim = true : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{fusion.add has 1 operands but its type lists 2}}
  %y = fusion.add %x : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{fusion.relu has one result but its type lists 2}}
  %y, %z = fusion.relu %x : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{fusion.relu has one result but its type lists 0}}
  fusion.relu %x : (tensor<8x4xf32>) -> ()
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{fusion.linear takes 2 or 3 operands (input, weight, bias?)}}
  %y = fusion.linear %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{fusion.linear takes 2 or 3 operands (input, weight, bias?)}}
  %y = fusion.linear %x, %x, %x, %x : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{Expected 2 or 3 operands, but got 4}}
  %y = "fusion.linear"(%x, %x, %x, %x) : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{Expected 1 result, but got 2}}
  %y:2 = "fusion.relu"(%x) : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  func.return
}

// -----

func.func @f(%x: f32) {
  // expected-error @+1 {{'fusion.relu' op operand 'input' at position 0 does not verify}}
  %y = fusion.relu %x : (f32) -> f32
  func.return
}

// -----

func.func @f(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'fusion.relu' op operands and results must have static shapes, got tensor<?x4xf32>}}
  %y = fusion.relu %x : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xi32>) {
  // expected-error @+1 {{'fusion.add' op operand #0 has element type i32; it must be a float or i64}}
  %y = fusion.add %x, %x : (tensor<8x4xi32>, tensor<8x4xi32>) -> tensor<8x4xi32>
  func.return
}

// -----

// Arithmetic takes i64 but not i1.
func.func @f(%x: tensor<8x4xi1>) {
  // expected-error @+1 {{'fusion.mul' op operand #0 has element type i1; it must be a float or i64}}
  %y = fusion.mul %x, %x : (tensor<8x4xi1>, tensor<8x4xi1>) -> tensor<8x4xi1>
  func.return
}

// -----

// Transcendental ops, division, softmax and contractions are float-only.
func.func @f(%x: tensor<8x4xi64>) {
  // expected-error @+1 {{'fusion.exp' op operand #0 has element type i64; it must be a float}}
  %y = fusion.exp %x : (tensor<8x4xi64>) -> tensor<8x4xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xi64>) {
  // expected-error @+1 {{'fusion.div' op operand #0 has element type i64; it must be a float}}
  %y = fusion.div %x, %x : (tensor<8x4xi64>, tensor<8x4xi64>) -> tensor<8x4xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xi64>) {
  // expected-error @+1 {{'fusion.softmax' op operand #0 has element type i64; it must be a float}}
  %y = fusion.softmax %x dim = 1 : (tensor<8x4xi64>) -> tensor<8x4xi64>
  func.return
}

// -----

func.func @f(%x: tensor<4x4xi64>) {
  // expected-error @+1 {{'fusion.matmul' op operand #0 has element type i64; it must be a float}}
  %y = fusion.matmul %x, %x : (tensor<4x4xi64>, tensor<4x4xi64>) -> tensor<4x4xi64>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %h: tensor<8x4xf16>) {
  // expected-error @+1 {{'fusion.add' op operands must have one element type, got f32, f16}}
  %y = fusion.add %x, %h : (tensor<8x4xf32>, tensor<8x4xf16>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x4xbf16>) {
  // expected-error @+1 {{'fusion.linear' op operands must have one element type, got f32, bf16}}
  %y = fusion.linear %x, %w : (tensor<8x4xf32>, tensor<2x4xbf16>) -> tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.relu' op result shape [8, 5] does not match the expected [8, 4]}}
  %y = fusion.relu %x : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<4x6xf32>) {
  // expected-error @+1 {{'fusion.matmul' op result shape [8, 4] does not match the expected [8, 6]}}
  %y = fusion.matmul %x, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.relu' op result element type f16 does not match f32}}
  %y = fusion.relu %x : (tensor<8x4xf32>) -> tensor<8x4xf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xbf16>) {
  // expected-error @+1 {{'fusion.sum' op result element type f32 does not match bf16}}
  %y = fusion.sum %x dims = [1] : (tensor<8x4xbf16>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.set' op result element type bf16 does not match f32}}
  %y = fusion.set %x : (tensor<8x4xf32>) -> tensor<8x4xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.gelu' op approximate must be "none" or "tanh", got "fast"}}
  %y = fusion.gelu %x {approximate = "fast"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.cast' op cannot cast to element type i32}}
  %y = fusion.cast %x : (tensor<8x4xf32>) -> tensor<8x4xi32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xi32>) {
  // expected-error @+1 {{'fusion.cast' op operand #0 has element type i32; it must be a float, i64 or i1}}
  %y = fusion.cast %x : (tensor<8x4xi32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{Expected attribute i64 but got i32}}
  %y = "fusion.sum"(%x) <{dims = [1 : i32]}> : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.sum' op}}
  %y = "fusion.sum"(%x) <{dims = [1], keepdim = 1 : i64}> : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{unknown op 'fusion.frobnicate'; the fusion ops are abs, add, }}
  %y = fusion.frobnicate %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  %y = fusion.relu %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // expected-error @-1 {{fusion.relu gives %y the type tensor<8x4xf32>, but 292:20 uses it as tensor<8x4xf16>: one of the two types is wrong}}
  %z = fusion.relu %y : (tensor<8x4xf16>) -> tensor<8x4xf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf16> {
  // expected-error @+1 {{'func.return' op Expected arguments to have the same types as the function output types}}
  func.return %x : tensor<8x4xf32>
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{use of undefined value %nope}}
  %y = fusion.relu %nope : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{Expected integer literal}}
  %y = fusion.softmax %x dim = last : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'[' expected}}
  %y = fusion.sum %x dims = 1 : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32, "rows">) {
  // expected-error @+1 {{'fusion.relu' op a tensor's encoding must be a #fusion.sharding, got "rows"}}
  %y = fusion.relu %x : (tensor<8x4xf32, "rows">) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.relu' op operand #0 (%z) is used before its definition}}
  %y = fusion.relu %z : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %z = fusion.relu %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.add' op operand #1 (%y) is used before its definition}}
  %y = fusion.add %x, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @bad_alloc_order(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{alloc_order = [0, 0] is not a permutation of the 2 dimensions of the result}}
  %y = fusion.relu %x {alloc_order = array<i64: 0, 0>} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return
}

// -----

func.func @bad_alloc_order_type(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{alloc_order must be an array<i64: ...>}}
  %y = fusion.relu %x {alloc_order = [1, 0]} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return
}

// -----

// A function is one block (there are no branches): the second block is
// reported where it begins, before any pass reads the function.
func.func @blocks(%x: tensor<8xf32>) -> tensor<8xf32> {
  func.return %x : tensor<8xf32>
^bb1:
  // expected-error @+1 {{'func.func' op @blocks has 2 blocks; a function is one block (there are no branches), and its second block begins here}}
  %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

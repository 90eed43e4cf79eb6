// Every shape rule of fuserc/shapes.py (PyTorch semantics), each reported
// by the op that breaks it.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{'fusion.add' op operand shapes [8, 4] and [4, 8] do not broadcast (dimension -2 differs)}}
  %y = fusion.add %a, %b : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

// Elementwise ops broadcast (extent 1 expands): the result has the
// broadcast shape.
func.func @f(%a: tensor<8x4xf32>, %b: tensor<1x4xf32>) {
  // expected-error @+1 {{'fusion.maximum' op result shape [1, 4] does not match the expected [8, 4]}}
  %y = fusion.maximum %a, %b : (tensor<8x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<2x8x4xf32>, %b: tensor<3x4x5xf32>) {
  // expected-error @+1 {{'fusion.matmul' op batch dimensions [2] and [3] do not broadcast}}
  %y = fusion.matmul %a, %b : (tensor<2x8x4xf32>, tensor<3x4x5xf32>) -> tensor<2x8x5xf32>
  func.return
}

// -----

func.func @f(%a: tensor<f32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'fusion.matmul' op matmul operands must have rank >= 1}}
  %y = fusion.matmul %a, %b : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<4xf32>, %b: tensor<5xf32>) {
  // expected-error @+1 {{'fusion.matmul' op contracted extents 4 and 5 differ}}
  %y = fusion.matmul %a, %b : (tensor<4xf32>, tensor<5xf32>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<5x6xf32>) {
  // expected-error @+1 {{'fusion.matmul' op contracted extents differ: [8, 4] @ [5, 6] (4 vs 5)}}
  %y = fusion.matmul %a, %b : (tensor<8x4xf32>, tensor<5x6xf32>) -> tensor<8x6xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<5xf32>) {
  // expected-error @+1 {{'fusion.matmul' op contracted extents differ: [8, 4] @ [5] (4 vs 5)}}
  %y = fusion.matmul %a, %b : (tensor<8x4xf32>, tensor<5xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<f32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'fusion.linear' op linear input must have rank >= 1}}
  %y = fusion.linear %x, %w : (tensor<f32>, tensor<4xf32>) -> tensor<f32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'fusion.linear' op linear weight must have rank 1 or 2, got [2, 3, 4]}}
  %y = fusion.linear %x, %w : (tensor<8x4xf32>, tensor<2x3x4xf32>) -> tensor<8x3xf32>
  func.return
}

// -----

// The weight is [out, in], as torch.nn.functional.linear: not [in, out].
func.func @f(%x: tensor<8x16xf32>, %w: tensor<16x24xf32>) {
  // expected-error @+1 {{'fusion.linear' op input features 16 do not match weight [16, 24]}}
  %y = fusion.linear %x, %w : (tensor<8x16xf32>, tensor<16x24xf32>) -> tensor<8x24xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %w: tensor<24x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'fusion.linear' op bias shape [16] must be [24]}}
  %y = fusion.linear %x, %w, %b : (tensor<8x16xf32>, tensor<24x16xf32>, tensor<16xf32>) -> tensor<8x24xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x16xf32>, %w: tensor<16xf32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{'fusion.linear' op bias shape [1] must be []}}
  %y = fusion.linear %x, %w, %b : (tensor<8x16xf32>, tensor<16xf32>, tensor<1xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.softmax' op dimension 2 out of range for rank 2}}
  %y = fusion.softmax %x dim = 2 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.sum' op dimension -3 out of range for rank 2}}
  %y = fusion.sum %x dims = [-3] : (tensor<8x4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.max' op repeated dimension in dims = [1, -1]}}
  %y = fusion.max %x dims = [1, -1] : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.sum' op result shape [8] does not match the expected [8, 1]}}
  %y = fusion.sum %x dims = [1] keepdim = true : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.permute' op dims = [0, 0] is not a permutation of 2 dimensions}}
  %y = fusion.permute %x dims = [0, 0] : (tensor<8x4xf32>) -> tensor<8x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.permute' op dims = [1, 0, 2] is not a permutation of 2 dimensions}}
  %y = fusion.permute %x dims = [1, 0, 2] : (tensor<8x4xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.permute' op dimension 2 out of range for rank 2}}
  %y = fusion.permute %x dims = [2, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.permute' op result shape [8, 4] does not match the expected [4, 8]}}
  %y = fusion.permute %x dims = [1, 0] : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.reshape' op cannot reshape [8, 4] (32 elements) to [30] (30 elements)}}
  %y = fusion.reshape %x : (tensor<8x4xf32>) -> tensor<30xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.broadcast_in_dim' op dims = [0, 1] must have one entry per operand dimension (1)}}
  %y = fusion.broadcast_in_dim %x dims = [0, 1] : (tensor<8xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'fusion.broadcast_in_dim' op dims = [2] must be increasing result dimensions < 2}}
  %y = fusion.broadcast_in_dim %x dims = [2] : (tensor<8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

// broadcast_in_dim does not transpose: dims must increase.
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'fusion.broadcast_in_dim' op dims = [1, 0] must be increasing result dimensions < 2}}
  %y = fusion.broadcast_in_dim %x dims = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<3xf32>) {
  // expected-error @+1 {{'fusion.broadcast_in_dim' op operand dimension 0 of extent 3 cannot broadcast to result dimension 1 of extent 8}}
  %y = fusion.broadcast_in_dim %x dims = [1] : (tensor<3xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.slice' op starts and limits must have 2 entries}}
  %y = fusion.slice %x starts = [0] limits = [4, 4] : (tensor<8x4xf32>) -> tensor<4x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.slice' op slice [2, 1) of dimension 0 is out of bounds for extent 8}}
  %y = fusion.slice %x starts = [2, 0] limits = [1, 4] : (tensor<8x4xf32>) -> tensor<1x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.slice' op slice [0, 5) of dimension 1 is out of bounds for extent 4}}
  %y = fusion.slice %x starts = [0, 0] limits = [8, 5] : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.slice' op slice [-1, 2) of dimension 0 is out of bounds for extent 8}}
  %y = fusion.slice %x starts = [-1, 0] limits = [2, 4] : (tensor<8x4xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'fusion.slice' op result shape [4, 4] does not match the expected [2, 4]}}
  %y = fusion.slice %x starts = [2, 0] limits = [4, 4] : (tensor<8x4xf32>) -> tensor<4x4xf32>
  func.return
}

// -----

func.func @sum_empty_dims(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{dims = [] is ambiguous}}
  %y = fusion.sum %x dims = [] : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return
}

// -----

// Zero extents are tensors like any other, but a max of no elements has no
// value (torch.amax refuses it); a sum of none is 0.
func.func @max_over_an_empty_dim(%x: tensor<0x4xf32>) {
  %s = fusion.sum %x dims = [0] : (tensor<0x4xf32>) -> tensor<4xf32>
  %m = fusion.max %x dims = [1] : (tensor<0x4xf32>) -> tensor<0xf32>
  // expected-error @+1 {{'fusion.max' op dimension 0 of extent 0 is reduced: fusion.max of no elements is undefined}}
  %y = fusion.max %x dims = [-2] : (tensor<0x4xf32>) -> tensor<4xf32>
  func.return
}

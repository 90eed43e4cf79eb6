// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

// Views

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.select' op dim 2 is out of range for a tensor of rank 2}}
  %v = hir.select %a [%c] dim = 2 : (tensor<8x4xf32>, index) -> tensor<8xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.select' op result shape [8] does not match the expected [4]}}
  %v = hir.select %a [%c] dim = 0 : (tensor<8x4xf32>, index) -> tensor<8xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.select' op result element type f16 does not match f32}}
  %v = hir.select %a [%c] dim = 1 : (tensor<8x4xf32>, index) -> tensor<8xf16>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 4 : index
  // expected-error @+1 {{'hir.select' op index 4 is out of range for dim 1 of extent 4}}
  %v = hir.select %a [%c] dim = 1 : (tensor<8x4xf32>, index) -> tensor<8xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.chunk' op extent 4 of dim 1 is not divisible by chunks = 3}}
  %v = hir.chunk %a [%c] dim = 1 chunks = 3 : (tensor<8x4xf32>, index) -> tensor<8x1xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.chunk' op result shape [8, 4] does not match the expected [4, 4]}}
  %v = hir.chunk %a [%c] dim = 0 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.chunk' op chunks must be positive, got 0}}
  %v = hir.chunk %a [%c] dim = 0 chunks = 0 : (tensor<8x4xf32>, index) -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 0 : index
  // expected-error @+1 {{'hir.chunk' op dim -1 is out of range for a tensor of rank 2}}
  %v = hir.chunk %a [%c] dim = -1 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<8x2xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %c = hir.constant 2 : index
  // expected-error @+1 {{'hir.chunk' op chunk index 2 is out of range for chunks = 2}}
  %v = hir.chunk %a [%c] dim = 0 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<4x4xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  // expected-error @+1 {{'hir.view' op cannot view [8, 4] (32 elements) as [8, 8] (64 elements)}}
  %v = hir.view %a : tensor<8x4xf32> -> tensor<8x8xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  // expected-error @+1 {{'hir.view' op result element type bf16 does not match f32}}
  %v = hir.view %a : tensor<8x4xf32> -> tensor<32xbf16>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  // expected-error @+1 {{'hir.transpose' op result shape [8, 4] does not match the expected [4, 8]}}
  %t = hir.transpose %a : tensor<8x4xf32> -> tensor<8x4xf32>
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<2x8x4xf32>
  // expected-error @+1 {{'hir.transpose' op hir.transpose takes a 2-D buffer, got [2, 8, 4]}}
  %t = hir.transpose %a : tensor<2x8x4xf32> -> tensor<4x8x2xf32>
  func.return
}

// -----

// Compute

func.func @f(%a: tensor<8x4xf32>, %b: tensor<5x2xf32>, %o: tensor<8x2xf32>) {
  // expected-error @+1 {{'hir.matmul' op contracted extents differ: [8, 4] @ [5, 2] (4 vs 5)}}
  hir.matmul %a, %b, %o : tensor<8x4xf32>, tensor<5x2xf32>, tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x2xf32>, %o: tensor<8x3xf32>) {
  // expected-error @+1 {{'hir.matmul' op output shape [8, 3] does not match the expected [8, 2]}}
  hir.matmul %a, %b, %o : tensor<8x4xf32>, tensor<4x2xf32>, tensor<8x3xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x2xbf16>, %o: tensor<8x2xf32>) {
  // expected-error @+1 {{'hir.matmul' op operands must have one element type, got f32, bf16, f32}}
  hir.matmul %a, %b, %o : tensor<8x4xf32>, tensor<4x2xbf16>, tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x4xf32>, %o: tensor<8x4xf32>) {
  // expected-error @+1 {{'hir.linear' op output shape [8, 4] does not match the expected [8, 2]}}
  hir.linear %x, %w, %o : tensor<8x4xf32>, tensor<2x4xf32>, tensor<8x4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x4xf32>, %b: tensor<4xf32>, %o: tensor<8x2xf32>) {
  // expected-error @+1 {{'hir.linear' op bias shape [4] must be [2]}}
  hir.linear %x, %w, %b, %o : tensor<8x4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x4xf32>) {
  // expected-error @+1 {{hir.linear takes 3 or 4 operands (input, weight, bias?, out) with one type each, got 2 operands and 2 types}}
  hir.linear %x, %w : tensor<8x4xf32>, tensor<2x4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x2xf32>, %o: tensor<8x2xf32>, %c: tensor<2x8xf32>) {
  // expected-error @+1 {{'hir.matmul' op acc shape [2, 8] does not match the output shape [8, 2]}}
  hir.matmul %a, %b, %o acc %c : tensor<8x4xf32>, tensor<4x2xf32>, tensor<8x2xf32>, tensor<2x8xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x2xf32>, %o: tensor<8x2xf32>, %c: tensor<8x2xbf16>) {
  // expected-error @+1 {{'hir.matmul' op acc element type bf16 does not match the output element type f32}}
  hir.matmul %a, %b, %o acc %c : tensor<8x4xf32>, tensor<4x2xf32>, tensor<8x2xf32>, tensor<8x2xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x4xf32>, %o: tensor<8x2xf32>, %c: tensor<8x1xf32>) {
  // expected-error @+1 {{'hir.linear' op acc shape [8, 1] does not match the output shape [8, 2]}}
  hir.linear %x, %w, %o acc %c : tensor<8x4xf32>, tensor<2x4xf32>, tensor<8x2xf32>, tensor<8x1xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xbf16>, %w: tensor<2x4xbf16>, %b: tensor<2xbf16>, %o: tensor<8x2xbf16>, %c: tensor<8x2xf32>) {
  // expected-error @+1 {{'hir.linear' op acc element type f32 does not match the output element type bf16}}
  hir.linear %x, %w, %b, %o acc %c : tensor<8x4xbf16>, tensor<2x4xbf16>, tensor<2xbf16>, tensor<8x2xbf16>, tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %w: tensor<2x4xf32>, %o: tensor<8x2xf32>, %c: tensor<8x2xf32>) {
  // expected-error @+1 {{hir.linear takes 3 or 4 operands (input, weight, bias?, out) with one type each, got 4 operands and 3 types}}
  hir.linear %x, %w, %o acc %c : tensor<8x4xf32>, tensor<2x4xf32>, tensor<8x2xf32>
  func.return
}

// -----

func.func @f(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{'hir.copy' op source shape [8, 4] and destination shape [4, 8] must be equal}}
  hir.copy %a, %b : tensor<8x4xf32>, tensor<4x8xf32>
  func.return
}

// -----

// Launch

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op region argument types (tensor<4xf32>) do not match the ins types (tensor<8xf32>)}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<4xf32>):
    hir.yield %a : tensor<8xf32>
  }
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op hir.yield types (tensor<8xf32>, tensor<8xf32>) do not match the outs types (tensor<8xf32>)}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    hir.yield %x, %x : tensor<8xf32>, tensor<8xf32>
  }
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op region must end with hir.yield}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  }
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op region may contain only fusion tensor ops, got 'hir.alloc'}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    %y = hir.alloc "f/y" : tensor<8xf32>
    hir.yield %y : tensor<8xf32>
  }
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op 'fusion.add' in the region uses a value defined outside it; pass it through ins(...)}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    %y = fusion.add %x, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    hir.yield %y : tensor<8xf32>
  }
  func.return
}

// -----

func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op 'hir.yield' in the region uses a value defined outside it; pass it through ins(...)}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    hir.yield %a : tensor<8xf32>
  }
  func.return
}

// -----

fusion.mesh @tp shape = [2]
func.func @f(%a: tensor<8xf32>, %o: tensor<8xf32>) {
  // expected-error @+1 {{'hir.launch' op tensor<8xf32, #fusion.sharding<@tp, [-]>> is not a local buffer: hir tensors have no encoding}}
  hir.launch ins(%a : tensor<8xf32>) outs(%o : tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>):
    %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32, #fusion.sharding<@tp, [-]>>
    %z = fusion.relu %y : (tensor<8xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8xf32>
    hir.yield %z : tensor<8xf32>
  }
  func.return
}

// -----

// Peer-to-peer

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  // expected-error @+1 {{'hir.share' op team must be a non-empty list of distinct non-negative ranks, got []}}
  %h = hir.share %a team = [] : tensor<8xf32> -> !hir.handle
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %h = hir.share %a team = [0, 1] : tensor<8xf32> -> !hir.handle
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.put' op backend must be one of nccl, cuda_ipc, mpi, got 'cuda-ipc'}}
  %t = "hir.put"(%a, %h, %c) <{backend = "cuda-ipc"}> : (tensor<8xf32>, !hir.handle, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<4xf32>
  %h = hir.share %a team = [0, 1] : tensor<8xf32> -> !hir.handle
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.put' op local buffer shape [4] and shared buffer shape [8] must be equal}}
  %t = hir.put %b, %h, %c backend = cuda_ipc : (tensor<4xf32>, !hir.handle, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %b = hir.alloc "f/b" : tensor<8xf16>
  %h = hir.share %a team = [0, 1] : tensor<8xf32> -> !hir.handle
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.get' op operands must have one element type, got f16, f32}}
  %t = hir.get %h, %c, %b backend = cuda_ipc : (!hir.handle, index, tensor<8xf16>) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8xf32>
  %h = hir.share %a team = [0, 1] : tensor<8xf32> -> !hir.handle
  %c = hir.constant 2 : index
  // expected-error @+1 {{'hir.get' op peer position 2 is out of range for a team of 2 ranks}}
  %t = hir.get %h, %c, %a backend = nccl : (!hir.handle, index, tensor<8xf32>) -> !hir.token
  func.return
}

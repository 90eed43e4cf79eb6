// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

func.func @f() {
  %c = hir.constant 3 : index
  // expected-error @+1 {{'hir.div' op divisor N must be positive, got 0}}
  %q = hir.div %c by 0 : index
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.barrier' op team must be a non-empty list of distinct non-negative ranks, got [0, 0]}}
  %t = hir.barrier team = [0, 0] backend = nccl : !hir.token
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'hir.barrier' op backend must be one of nccl, cuda_ipc, mpi, got 'gloo'}}
  %t = hir.barrier team = [0, 1] backend = gloo : !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<4x4xf32>
  %h = hir.share %a team = [0, 1] : tensor<8x4xf32> -> !hir.handle
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.get' op local buffer shape [4, 4] must be [2, 4]: one of 4 blocks of the shared buffer [8, 4] along dim 0}}
  %t = hir.get %h, %c, %b block %c of 4 backend = cuda_ipc : (!hir.handle, index, tensor<4x4xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<3x4xf32>
  %h = hir.share %a team = [0, 1] : tensor<8x4xf32> -> !hir.handle
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.put' op the shared buffer [8, 4] cannot be cut into 3 blocks along dim 0}}
  %t = hir.put %b, %h, %c block %c of 3 backend = cuda_ipc : (tensor<3x4xf32>, !hir.handle, index, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %b = hir.alloc "f/b" : tensor<2x4xf32>
  %h = hir.share %a team = [0, 1] : tensor<8x4xf32> -> !hir.handle
  %c = hir.constant 1 : index
  %c4 = hir.constant 4 : index
  // expected-error @+1 {{'hir.get' op block index 4 is out of range for 4 blocks}}
  %t = hir.get %h, %c, %b block %c4 of 4 backend = cuda_ipc : (!hir.handle, index, tensor<2x4xf32>, index) -> !hir.token
  func.return
}

// -----

func.func @f() {
  %a = hir.alloc "f/a" : tensor<8x4xf32>
  %h = hir.share %a team = [0, 1] : tensor<8x4xf32> -> !hir.handle
  %c = hir.constant 1 : index
  // expected-error @+1 {{'hir.get' op `block %i` and `of N` go together}}
  %t = "hir.get"(%h, %c, %a) <{backend = "cuda_ipc", chunks = 4 : i64}> : (!hir.handle, index, tensor<8x4xf32>) -> !hir.token
  func.return
}

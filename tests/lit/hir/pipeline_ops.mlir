// The ops stream-pipeline adds to hir: hir.barrier, hir.div, and the
// `block %i of N` form of hir.put / hir.get. Custom form printed as written,
// stable through the generic form.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @ops(%a: tensor<8x4xf32>, %b: tensor<2x4xf32>) attributes {hir.host} {
// CHECK-NEXT: %c1 = hir.constant 1 : index
// CHECK-NEXT: %c5 = hir.constant 5 : index
// CHECK-NEXT: %q = hir.div %c5 by 2 : index
// CHECK-NEXT: %h = hir.share %a team = [0, 1] : tensor<8x4xf32> -> !hir.handle
// CHECK-NEXT: %f = hir.barrier team = [0, 1] backend = nccl : !hir.token
// CHECK-NEXT: hir.wait %f : !hir.token
// CHECK-NEXT: %t0 = hir.get %h, %c1, %b block %q of 4 backend = cuda_ipc : (!hir.handle, index, tensor<2x4xf32>, index) -> !hir.token
// CHECK-NEXT: %t1 = hir.put %b, %h, %c1 block %c1 of 4 backend = cuda_ipc : (tensor<2x4xf32>, !hir.handle, index, index) -> !hir.token
// CHECK-NEXT: %t2 = hir.get %h, %c1, %a backend = cuda_ipc : (!hir.handle, index, tensor<8x4xf32>) -> !hir.token
// CHECK-NEXT: %f2 = hir.barrier team = [1, 0] backend = mpi {note = "x"} : !hir.token
// GENERIC: %q = "hir.div"(%c5) <{divisor = 2 : i64}> : (index) -> index
// GENERIC: %f = "hir.barrier"() <{team = array<i64: 0, 1>, backend = "nccl"}> : () -> !hir.token
// GENERIC: %t0 = "hir.get"(%h, %c1, %b, %q) <{chunks = 4 : i64, backend = "cuda_ipc"}> : (!hir.handle, index, tensor<2x4xf32>, index) -> !hir.token
// GENERIC: %t2 = "hir.get"(%h, %c1, %a) <{backend = "cuda_ipc"}> : (!hir.handle, index, tensor<8x4xf32>) -> !hir.token
func.func @ops(%a: tensor<8x4xf32>, %b: tensor<2x4xf32>) attributes {hir.host} {
  %c1 = hir.constant 1 : index
  %c5 = hir.constant 5 : index
  %q = hir.div %c5 by 2 : index
  %h = hir.share %a team = [0, 1] : tensor<8x4xf32> -> !hir.handle
  %f = hir.barrier team = [0, 1] backend = nccl : !hir.token
  hir.wait %f : !hir.token
  %t0 = hir.get %h, %c1, %b block %q of 4 backend = cuda_ipc : (!hir.handle, index, tensor<2x4xf32>, index) -> !hir.token
  %t1 = hir.put %b, %h, %c1 block %c1 of 4 backend = cuda_ipc : (tensor<2x4xf32>, !hir.handle, index, index) -> !hir.token
  %t2 = hir.get %h, %c1, %a backend = cuda_ipc : (!hir.handle, index, tensor<8x4xf32>) -> !hir.token
  %f2 = hir.barrier team = [1, 0] backend = mpi {note = "x"} : !hir.token
  func.return
}

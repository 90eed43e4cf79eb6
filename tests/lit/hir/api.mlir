// The Python API of the hir dialect: host-program helpers, op properties and
// builders (Inputs/api.py reads host_program.mlir, then builds a program).
// RUN: python %S/Inputs/api.py %S/host_program.mlir | filecheck %s

// CHECK: func main host=True
// CHECK-NEXT: arg 0 global tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CHECK-NEXT: arg 1 global tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: result 0 global tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>
// CHECK-NEXT: arg 9 global None
// CHECK-NEXT: hir.alloc site=main/0/xg
// CHECK-NEXT: hir.allgather team=(0, 1, 2, 3) backend=nccl
// CHECK: func ring host=True
// CHECK: hir.share team=(0, 1, 2, 3)
// CHECK: hir.for lb=0 ub=4 step=1 indices=[0, 1, 2, 3]
// CHECK-NEXT: hir.stream_for n=2
// CHECK-NEXT: hir.add_mod n=4
// CHECK-NEXT: hir.chunk dim=0 chunks=4
// CHECK-NEXT: hir.put backend=cuda_ipc
// CHECK-NEXT: hir.if_rank ranks=[0] runs=((0, 1, 1),) results=2
// CHECK-NEXT: hir.alloc site=ring/3/r
// CHECK-NEXT: hir.allreduce team=(0,) backend=mpi op=sum

// CHECK: func.func @built(%0: tensor<16x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>}) -> (tensor<64x16xf32> {hir.global = tensor<64x16xf32, #fusion.sharding<@tp, [-, -]>>}) attributes {hir.host} {
// CHECK-NEXT: %1 = hir.alloc "built/0/g" : tensor<64x16xf32>
// CHECK-NEXT: %2 = hir.allgather %0, %1 team = [0, 1, 2, 3] backend = nccl : (tensor<16x16xf32>, tensor<64x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %2 : !hir.token
// CHECK-NEXT: hir.for %3 = 0 to 4 {
// CHECK-NEXT: %4 = hir.stream_for %3 mod 2 : !hir.stream
// CHECK-NEXT: hir.set_current_stream %4 : !hir.stream
// CHECK-NEXT: %5 = hir.chunk %1 [%3] dim = 0 chunks = 4 : (tensor<64x16xf32>, index) -> tensor<16x16xf32>
// CHECK-NEXT: %6 = hir.allreduce %5, %5 op = sum team = [0, 1, 2, 3] backend = mpi : (tensor<16x16xf32>, tensor<16x16xf32>) -> !hir.token
// CHECK-NEXT: hir.wait %6 : !hir.token
// CHECK-NEXT: }
// CHECK-NEXT: hir.launch ins(%1 : tensor<64x16xf32>) outs(%1 : tensor<64x16xf32>) {
// CHECK-NEXT: ^bb0(%7: tensor<64x16xf32>):
// CHECK-NEXT: %8 = fusion.relu %7 : (tensor<64x16xf32>) -> tensor<64x16xf32>
// CHECK-NEXT: hir.yield %8 : tensor<64x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %9 = hir.if_rank [0] -> (tensor<64x16xf32>) {
// CHECK-NEXT: %10 = hir.alloc "built/1/y" : tensor<64x16xf32>
// CHECK-NEXT: hir.yield %10 : tensor<64x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: hir.if_rank [1, 2] {
// CHECK-NEXT: }
// CHECK-NEXT: hir.dealloc %9 : tensor<64x16xf32>
// CHECK-NEXT: %11 = hir.view %1 : tensor<64x16xf32> -> tensor<4x16x16xf32>
// CHECK-NEXT: %12 = hir.constant 3 : index
// CHECK-NEXT: %13 = hir.select %11 [%12] dim = 0 : (tensor<4x16x16xf32>, index) -> tensor<16x16xf32>
// CHECK-NEXT: func.return %1 : tensor<64x16xf32>
// CHECK: select shape tensor<16x16xf32> view shape tensor<4x16x16xf32>
// CHECK-NEXT: host=True global arg 0 tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>

// Every fusion op in its custom form: printed back as written, parsed again
// from its own output and from the generic form to the same text.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt %s -o %t.custom
// RUN: %fuserc opt %t.custom -o %t.again
// RUN: diff %t.custom %t.again
// RUN: %fuserc opt --print-generic %s -o %t.generic
// RUN: %fuserc opt %t.generic -o %t.from-generic
// RUN: diff %t.custom %t.from-generic
// RUN: %fuserc opt --print-generic %t.generic -o %t.generic-again
// RUN: diff %t.generic %t.generic-again

// CHECK: builtin.module {
// CHECK-NEXT: fusion.mesh @tp shape = [4]
fusion.mesh @tp shape = [4]
// CHECK-LABEL: func.func @contractions(%a: tensor<64x16xf32>, %b: tensor<16x24xf32>, %w: tensor<24x16xf32>, %bias: tensor<24xf32>, %v: tensor<16xf32>, %ba: tensor<2x64x16xf32>, %bb: tensor<16x24xf32>) -> tensor<64x24xf32> {
func.func @contractions(%a: tensor<64x16xf32>, %b: tensor<16x24xf32>, %w: tensor<24x16xf32>, %bias: tensor<24xf32>, %v: tensor<16xf32>, %ba: tensor<2x64x16xf32>, %bb: tensor<16x24xf32>) -> tensor<64x24xf32> {
  // CHECK-NEXT: %0 = fusion.matmul %a, %b : (tensor<64x16xf32>, tensor<16x24xf32>) -> tensor<64x24xf32>
  %0 = fusion.matmul %a, %b : (tensor<64x16xf32>, tensor<16x24xf32>) -> tensor<64x24xf32>
  // CHECK-NEXT: %1 = fusion.matmul %a, %v : (tensor<64x16xf32>, tensor<16xf32>) -> tensor<64xf32>
  %1 = fusion.matmul %a, %v : (tensor<64x16xf32>, tensor<16xf32>) -> tensor<64xf32>
  // CHECK-NEXT: %2 = fusion.matmul %v, %b : (tensor<16xf32>, tensor<16x24xf32>) -> tensor<24xf32>
  %2 = fusion.matmul %v, %b : (tensor<16xf32>, tensor<16x24xf32>) -> tensor<24xf32>
  // CHECK-NEXT: %3 = fusion.matmul %v, %v : (tensor<16xf32>, tensor<16xf32>) -> tensor<f32>
  %3 = fusion.matmul %v, %v : (tensor<16xf32>, tensor<16xf32>) -> tensor<f32>
  // CHECK-NEXT: %4 = fusion.matmul %ba, %bb : (tensor<2x64x16xf32>, tensor<16x24xf32>) -> tensor<2x64x24xf32>
  %4 = fusion.matmul %ba, %bb : (tensor<2x64x16xf32>, tensor<16x24xf32>) -> tensor<2x64x24xf32>
  // CHECK-NEXT: %5 = fusion.linear %a, %w, %bias : (tensor<64x16xf32>, tensor<24x16xf32>, tensor<24xf32>) -> tensor<64x24xf32>
  %5 = fusion.linear %a, %w, %bias : (tensor<64x16xf32>, tensor<24x16xf32>, tensor<24xf32>) -> tensor<64x24xf32>
  // CHECK-NEXT: %6 = fusion.linear %a, %w : (tensor<64x16xf32>, tensor<24x16xf32>) -> tensor<64x24xf32>
  %6 = fusion.linear %a, %w : (tensor<64x16xf32>, tensor<24x16xf32>) -> tensor<64x24xf32>
  // CHECK-NEXT: %7 = fusion.linear %a, %v : (tensor<64x16xf32>, tensor<16xf32>) -> tensor<64xf32>
  %7 = fusion.linear %a, %v : (tensor<64x16xf32>, tensor<16xf32>) -> tensor<64xf32>
  // CHECK-NEXT: func.return %5 : tensor<64x24xf32>
  func.return %5 : tensor<64x24xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @elementwise(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>, %i: tensor<8x4xi64>, %h: tensor<8x4xbf16>, %f: tensor<8x4xf16>, %p: tensor<8x4xi1>) -> tensor<8x4xf32> {
func.func @elementwise(%x: tensor<8x4xf32>, %y: tensor<8x4xf32>, %i: tensor<8x4xi64>, %h: tensor<8x4xbf16>, %f: tensor<8x4xf16>, %p: tensor<8x4xi1>) -> tensor<8x4xf32> {
  // CHECK-NEXT: %0 = fusion.add %x, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %0 = fusion.add %x, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %1 = fusion.sub %0, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %1 = fusion.sub %0, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %2 = fusion.mul %1, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = fusion.mul %1, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %3 = fusion.div %2, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %3 = fusion.div %2, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %4 = fusion.maximum %3, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %4 = fusion.maximum %3, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %5 = fusion.add %i, %i : (tensor<8x4xi64>, tensor<8x4xi64>) -> tensor<8x4xi64>
  %5 = fusion.add %i, %i : (tensor<8x4xi64>, tensor<8x4xi64>) -> tensor<8x4xi64>
  // CHECK-NEXT: %6 = fusion.relu %4 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %6 = fusion.relu %4 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %7 = fusion.neg %6 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %7 = fusion.neg %6 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %8 = fusion.exp %7 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %8 = fusion.exp %7 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %9 = fusion.tanh %8 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %9 = fusion.tanh %8 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %10 = fusion.sigmoid %9 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %10 = fusion.sigmoid %9 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %11 = fusion.silu %10 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %11 = fusion.silu %10 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %12 = fusion.gelu %11 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %12 = fusion.gelu %11 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %13 = fusion.gelu %12 {approximate = "tanh"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %13 = fusion.gelu %12 {approximate = "tanh"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %14 = fusion.gelu %13 {approximate = "none"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %14 = fusion.gelu %13 {approximate = "none"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %15 = fusion.relu %h : (tensor<8x4xbf16>) -> tensor<8x4xbf16>
  %15 = fusion.relu %h : (tensor<8x4xbf16>) -> tensor<8x4xbf16>
  // CHECK-NEXT: %16 = fusion.neg %i : (tensor<8x4xi64>) -> tensor<8x4xi64>
  %16 = fusion.neg %i : (tensor<8x4xi64>) -> tensor<8x4xi64>
  // CHECK-NEXT: %17 = fusion.cast %h : (tensor<8x4xbf16>) -> tensor<8x4xf32>
  %17 = fusion.cast %h : (tensor<8x4xbf16>) -> tensor<8x4xf32>
  // CHECK-NEXT: %18 = fusion.cast %x : (tensor<8x4xf32>) -> tensor<8x4xf16>
  %18 = fusion.cast %x : (tensor<8x4xf32>) -> tensor<8x4xf16>
  // CHECK-NEXT: %19 = fusion.cast %p : (tensor<8x4xi1>) -> tensor<8x4xf32>
  %19 = fusion.cast %p : (tensor<8x4xi1>) -> tensor<8x4xf32>
  // CHECK-NEXT: %20 = fusion.cast %i : (tensor<8x4xi64>) -> tensor<8x4xbf16>
  %20 = fusion.cast %i : (tensor<8x4xi64>) -> tensor<8x4xbf16>
  // CHECK-NEXT: %21 = fusion.exp %f : (tensor<8x4xf16>) -> tensor<8x4xf16>
  %21 = fusion.exp %f : (tensor<8x4xf16>) -> tensor<8x4xf16>
  // CHECK-NEXT: func.return %14 : tensor<8x4xf32>
  func.return %14 : tensor<8x4xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @reductions(%x: tensor<8x4x6xf32>, %i: tensor<8x4xi64>) -> tensor<8xf32> {
func.func @reductions(%x: tensor<8x4x6xf32>, %i: tensor<8x4xi64>) -> tensor<8xf32> {
  // CHECK-NEXT: %0 = fusion.sum %x dims = [2] : (tensor<8x4x6xf32>) -> tensor<8x4xf32>
  %0 = fusion.sum %x dims = [2] : (tensor<8x4x6xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: %1 = fusion.sum %x dims = [0, 2] : (tensor<8x4x6xf32>) -> tensor<4xf32>
  %1 = fusion.sum %x dims = [0, 2] : (tensor<8x4x6xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %2 = fusion.sum %x dims = [-1] keepdim = true : (tensor<8x4x6xf32>) -> tensor<8x4x1xf32>
  %2 = fusion.sum %x dims = [-1] keepdim = true : (tensor<8x4x6xf32>) -> tensor<8x4x1xf32>
  // CHECK-NEXT: %3 = fusion.sum %x dims = [1] keepdim = false : (tensor<8x4x6xf32>) -> tensor<8x6xf32>
  %3 = fusion.sum %x dims = [1] keepdim = false : (tensor<8x4x6xf32>) -> tensor<8x6xf32>
  // CHECK-NEXT: %4 = fusion.max %x dims = [1, 2] : (tensor<8x4x6xf32>) -> tensor<8xf32>
  %4 = fusion.max %x dims = [1, 2] : (tensor<8x4x6xf32>) -> tensor<8xf32>
  // CHECK-NEXT: %5 = fusion.max %x dims = [0, 1, 2] : (tensor<8x4x6xf32>) -> tensor<f32>
  %5 = fusion.max %x dims = [0, 1, 2] : (tensor<8x4x6xf32>) -> tensor<f32>
  // CHECK-NEXT: %6 = fusion.sum %i dims = [1] : (tensor<8x4xi64>) -> tensor<8xi64>
  %6 = fusion.sum %i dims = [1] : (tensor<8x4xi64>) -> tensor<8xi64>
  // CHECK-NEXT: %7 = fusion.softmax %x dim = 2 : (tensor<8x4x6xf32>) -> tensor<8x4x6xf32>
  %7 = fusion.softmax %x dim = 2 : (tensor<8x4x6xf32>) -> tensor<8x4x6xf32>
  // CHECK-NEXT: %8 = fusion.softmax %x dim = -3 : (tensor<8x4x6xf32>) -> tensor<8x4x6xf32>
  %8 = fusion.softmax %x dim = -3 : (tensor<8x4x6xf32>) -> tensor<8x4x6xf32>
  // CHECK-NEXT: func.return %4 : tensor<8xf32>
  func.return %4 : tensor<8xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @layout(%x: tensor<8x4x6xf32>, %v: tensor<6xf32>, %o: tensor<1x6xf32>, %p: tensor<8x4xi1>) -> tensor<6x8x4xf32> {
func.func @layout(%x: tensor<8x4x6xf32>, %v: tensor<6xf32>, %o: tensor<1x6xf32>, %p: tensor<8x4xi1>) -> tensor<6x8x4xf32> {
  // CHECK-NEXT: %0 = fusion.permute %x dims = [2, 0, 1] : (tensor<8x4x6xf32>) -> tensor<6x8x4xf32>
  %0 = fusion.permute %x dims = [2, 0, 1] : (tensor<8x4x6xf32>) -> tensor<6x8x4xf32>
  // CHECK-NEXT: %1 = fusion.permute %x dims = [-1, 1, 0] : (tensor<8x4x6xf32>) -> tensor<6x4x8xf32>
  %1 = fusion.permute %x dims = [-1, 1, 0] : (tensor<8x4x6xf32>) -> tensor<6x4x8xf32>
  // CHECK-NEXT: %2 = fusion.reshape %x : (tensor<8x4x6xf32>) -> tensor<32x6xf32>
  %2 = fusion.reshape %x : (tensor<8x4x6xf32>) -> tensor<32x6xf32>
  // CHECK-NEXT: %3 = fusion.reshape %x : (tensor<8x4x6xf32>) -> tensor<192xf32>
  %3 = fusion.reshape %x : (tensor<8x4x6xf32>) -> tensor<192xf32>
  // CHECK-NEXT: %4 = fusion.broadcast_in_dim %v dims = [1] : (tensor<6xf32>) -> tensor<4x6xf32>
  %4 = fusion.broadcast_in_dim %v dims = [1] : (tensor<6xf32>) -> tensor<4x6xf32>
  // CHECK-NEXT: %5 = fusion.broadcast_in_dim %o dims = [1, 2] : (tensor<1x6xf32>) -> tensor<8x4x6xf32>
  %5 = fusion.broadcast_in_dim %o dims = [1, 2] : (tensor<1x6xf32>) -> tensor<8x4x6xf32>
  // CHECK-NEXT: %6 = fusion.slice %x starts = [0, 1, 2] limits = [8, 3, 6] : (tensor<8x4x6xf32>) -> tensor<8x2x4xf32>
  %6 = fusion.slice %x starts = [0, 1, 2] limits = [8, 3, 6] : (tensor<8x4x6xf32>) -> tensor<8x2x4xf32>
  // CHECK-NEXT: %7 = fusion.slice %x starts = [2, 0, 0] limits = [2, 4, 6] : (tensor<8x4x6xf32>) -> tensor<0x4x6xf32>
  %7 = fusion.slice %x starts = [2, 0, 0] limits = [2, 4, 6] : (tensor<8x4x6xf32>) -> tensor<0x4x6xf32>
  // CHECK-NEXT: %8 = fusion.set %x : (tensor<8x4x6xf32>) -> tensor<8x4x6xf32>
  %8 = fusion.set %x : (tensor<8x4x6xf32>) -> tensor<8x4x6xf32>
  // CHECK-NEXT: %9 = fusion.set %p : (tensor<8x4xi1>) -> tensor<8x4xi1>
  %9 = fusion.set %p : (tensor<8x4xi1>) -> tensor<8x4xi1>
  // CHECK-NEXT: %10 = fusion.permute %p dims = [1, 0] : (tensor<8x4xi1>) -> tensor<4x8xi1>
  %10 = fusion.permute %p dims = [1, 0] : (tensor<8x4xi1>) -> tensor<4x8xi1>
  // CHECK-NEXT: func.return %0 : tensor<6x8x4xf32>
  func.return %0 : tensor<6x8x4xf32>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @sharded(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
func.func @sharded(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  // CHECK-NEXT: %0 = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  %0 = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<16x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  // CHECK-NEXT: %1 = fusion.set %0 {note = "attributes follow the keywords"} : (tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  %1 = fusion.set %0 {note = "attributes follow the keywords"} : (tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>) -> tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  // CHECK-NEXT: %2 = fusion.sum %x dims = [1] {note = "after dims"} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
  %2 = fusion.sum %x dims = [1] {note = "after dims"} : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64xf32, #fusion.sharding<@tp, [DIDx]>>
  // CHECK-NEXT: func.return %1 : tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %1 : tensor<64x8xf32, #fusion.sharding<@tp, [Stream(4), -]>>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func private @declared(tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
func.func private @declared(tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32>
// CHECK-NEXT: }

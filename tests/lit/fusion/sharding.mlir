// Every sharding form: 1-D, 2-D with DIDy, 3-D with DIDz, a mesh with
// explicit device ids, Stream(S), products (Stream(2)*DIDx, DIDy*DIDx, ...),
// partial (over one mesh axis or several), a rank-0 tensor, and free spacing (printed canonically). Each
// prints back as written and round-trips through both forms.
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt %s -o %t.custom
// RUN: %fuserc opt %t.custom -o %t.again
// RUN: diff %t.custom %t.again
// RUN: %fuserc opt --print-generic %s -o %t.generic
// RUN: %fuserc opt %t.generic -o %t.from-generic
// RUN: diff %t.custom %t.from-generic
// RUN: %fuserc opt --print-generic %s | filecheck %s --check-prefix=GENERIC
// GENERIC: "fusion.mesh"() <{sym_name = "stage1", shape = [2 : i64], devices = [2 : i64, 3 : i64]}> : () -> ()
// GENERIC: "fusion.set"(%x) : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@cube, [-, -], partial = [DIDz, DIDy, DIDx]>>
// GENERIC: "fusion.set"(%x) : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>
// GENERIC: "fusion.set"(%0) : (tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [-, -], partial = DIDx>>

// CHECK: builtin.module {
// CHECK-NEXT: fusion.mesh @tp shape = [4]
fusion.mesh @tp shape = [4]
// CHECK-NEXT: fusion.mesh @grid shape = [2, 4]
fusion.mesh @grid shape = [2, 4]
// CHECK-NEXT: fusion.mesh @cube shape = [2, 2, 2]
fusion.mesh @cube shape = [2, 2, 2]
// CHECK-NEXT: fusion.mesh @stage1 shape = [2] devices = [2, 3]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
// CHECK-LABEL: func.func @one_d(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>, %s: tensor<f32, #fusion.sharding<@tp, []>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>> {
func.func @one_d(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>, %s: tensor<f32, #fusion.sharding<@tp, []>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>>
  %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, -]>>
  %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, -]>>
  // CHECK-NEXT: %2 = fusion.reshape %1 : (tensor<64x48xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<3072xf32, #fusion.sharding<@tp, [DIDx]>>
  %2 = fusion.reshape %1 : (tensor<64x48xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<3072xf32, #fusion.sharding<@tp, [DIDx]>>
  // CHECK-NEXT: %3 = fusion.set %s : (tensor<f32, #fusion.sharding<@tp, []>>) -> tensor<f32, #fusion.sharding<@tp, [], partial = DIDx>>
  %3 = fusion.set %s : (tensor<f32, #fusion.sharding<@tp, []>>) -> tensor<f32, #fusion.sharding<@tp, [], partial = DIDx>>
  // CHECK-NEXT: func.return %0 : tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return %0 : tensor<64x48xf32, #fusion.sharding<@tp, [-, DIDx]>>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @two_d(%x: tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>> {
func.func @two_d(%x: tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDx, DIDy]>>
  %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDx, DIDy]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDx, DIDy]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -]>>
  %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDx, DIDy]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -]>>
  // CHECK-NEXT: %2 = fusion.set %1 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>
  %2 = fusion.set %1 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>
  // CHECK-NEXT: %3 = fusion.set %2 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx*DIDy]>>
  %3 = fusion.set %2 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx*DIDy]>>
  // CHECK-NEXT: %4 = fusion.set %3 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx*DIDy]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -], partial = DIDx>>
  %4 = fusion.set %3 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx*DIDy]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -], partial = DIDx>>
  // CHECK-NEXT: %5 = fusion.set %4 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -], partial = DIDx>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDy>>
  %5 = fusion.set %4 : (tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, -], partial = DIDx>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDy>>
  // CHECK-NEXT: %6 = fusion.set %5 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDy>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>>
  %6 = fusion.set %5 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDy>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>>
  // CHECK-NEXT: func.return %x : tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
  func.return %x : tensor<64x48xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>
// CHECK-NEXT: }
}
// A partial sum over several mesh axes is a list, printed in mesh-axis
// order (outermost first), whatever order it was written in; a list of
// one is the type itself.
// CHECK-LABEL: func.func @partial_over_axes(%x: tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>> {
func.func @partial_over_axes(%x: tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>
  %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDx, DIDy]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [ DIDy ,DIDx ]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDx, -], partial = DIDy>>
  %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [DIDx, -], partial = [DIDy]>>
  // CHECK-NEXT: %2 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>>
  %2 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>>
  // CHECK-NEXT: %3 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@cube, [-, -], partial = [DIDz, DIDy, DIDx]>>
  %3 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@grid, [-, -], partial = [DIDy, DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@cube, [-, -], partial = [DIDx, DIDz, DIDy]>>
  // CHECK-NEXT: func.return %2 : tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>>
  func.return %2 : tensor<64x48xf32, #fusion.sharding<@grid, [-, -]>>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @three_d(%x: tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>> {
func.func @three_d(%x: tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz*DIDy*DIDx, -, -]>>
  %0 = fusion.set %x : (tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz*DIDy*DIDx, -, -]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz*DIDy*DIDx, -, -]>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [-, DIDz, -], partial = DIDy>>
  %1 = fusion.set %0 : (tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz*DIDy*DIDx, -, -]>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [-, DIDz, -], partial = DIDy>>
  // CHECK-NEXT: %2 = fusion.set %1 : (tensor<16x8x4xf32, #fusion.sharding<@cube, [-, DIDz, -], partial = DIDy>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDx, DIDy, -], partial = DIDz>>
  %2 = fusion.set %1 : (tensor<16x8x4xf32, #fusion.sharding<@cube, [-, DIDz, -], partial = DIDy>>) -> tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDx, DIDy, -], partial = DIDz>>
  // CHECK-NEXT: func.return %x : tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>
  func.return %x : tensor<16x8x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @devices(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>> {
func.func @devices(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [-, -], partial = DIDx>>
  %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@stage1, [-, -], partial = DIDx>>
  // CHECK-NEXT: func.return %0 : tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  func.return %0 : tensor<64x48xf32, #fusion.sharding<@stage1, [DIDx, -]>>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @streams(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
func.func @streams(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, Stream(3)]>>
  %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, Stream(3)]>>
  // CHECK-NEXT: %2 = fusion.set %1 : (tensor<64x48xf32, #fusion.sharding<@tp, [-, Stream(3)]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
  %2 = fusion.set %1 : (tensor<64x48xf32, #fusion.sharding<@tp, [-, Stream(3)]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
  // CHECK-NEXT: %3 = fusion.set %2 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
  %3 = fusion.set %2 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>
  // CHECK-NEXT: %4 = fusion.set %3 : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(64), DIDx]>>
  %4 = fusion.set %3 : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(64), DIDx]>>
  // CHECK-NEXT: %5 = fusion.set %4 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(64), DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2), -], partial = DIDx>>
  %5 = fusion.set %4 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(64), DIDx]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2), -], partial = DIDx>>
  // CHECK-NEXT: %6 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [Stream(2)*DIDy*DIDx, -]>>
  %6 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@grid, [Stream(2)*DIDy*DIDx, -]>>
  // CHECK-NEXT: %7 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(1), -]>>
  %7 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(1), -]>>
  // CHECK-NEXT: func.return %0 : tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>>
  func.return %0 : tensor<64x48xf32, #fusion.sharding<@tp, [Stream(4), -]>>
// CHECK-NEXT: }
}
// CHECK-LABEL: func.func @spelling(%x: tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>> {
func.func @spelling(%x: tensor<64x48xf32, #fusion.sharding<@tp,[DIDx,-]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [ Stream( 2 ) * DIDx , - ]>> {
  // CHECK-NEXT: %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
  %0 = fusion.set %x : (tensor<64x48xf32, #fusion.sharding<@tp,[DIDx,-]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [ Stream( 2 ) * DIDx , - ]>>
  // CHECK-NEXT: %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>) -> tensor<64x48xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  %1 = fusion.set %0 : (tensor<64x48xf32, #fusion.sharding<@tp, [ Stream( 2 ) * DIDx , - ]>>) -> tensor<64x48xf32, #fusion.sharding<@tp , [-,-] , partial=DIDx>>
  // CHECK-NEXT: func.return %0 : tensor<64x48xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>
  func.return %0 : tensor<64x48xf32, #fusion.sharding<@tp, [ Stream( 2 ) * DIDx , - ]>>
// CHECK-NEXT: }
}
// CHECK-NEXT: }

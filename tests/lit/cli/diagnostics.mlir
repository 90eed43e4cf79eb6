// Bad programs: each is one diagnostic `FILE:LINE:COL: error: ...` (a parse
// error also shows the line and a caret), exit code 1, never a traceback.
// RUN: %exitcode %fuserc opt --split-input-file %s 2>&1 | filecheck %s
// RUN: %exitcode %fuserc opt %S/Inputs/bad_shape.mlir 2>&1 | filecheck %s --check-prefix=SINGLE
// RUN: %exitcode %fuserc opt - < %S/Inputs/bad_shape.mlir 2>&1 | filecheck %s --check-prefix=STDIN

// CHECK-NOT: Traceback

// A malformed file.
// CHECK: diagnostics.mlir:[[# @LINE + 4]]:27: error: Expected '=' after 'dims'
// CHECK-NEXT: %y = fusion.sum %x dims [1] : (tensor<8x4xf32>) -> tensor<8xf32>
// CHECK-NEXT: ^
func.func @malformed(%x: tensor<8x4xf32>) {
  %y = fusion.sum %x dims [1] : (tensor<8x4xf32>) -> tensor<8xf32>
  func.return
}

// -----

// An unknown op: at its name, with the ops of its dialect.
// CHECK: diagnostics.mlir:[[# @LINE + 4]]:8: error: unknown op 'fusion.transpose'; the fusion ops are abs, add, {{.*}}, where (docs/language.md)
// CHECK-NEXT: %y = fusion.transpose %x
// CHECK-NEXT: ^^^^^^^^^^^^^^^^
func.func @unknown_op(%x: tensor<8x4xf32>) {
  %y = fusion.transpose %x : (tensor<8x4xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

// A misspelt op: the closest name too.
// CHECK: diagnostics.mlir:[[# @LINE + 2]]:8: error: unknown op 'fusion.relux' (did you mean 'fusion.relu'?); the fusion ops are
func.func @misspelt_op(%x: tensor<8x4xf32>) {
  %y = fusion.relux %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

// An unknown mesh, in a signature: at the argument.
// CHECK: diagnostics.mlir:[[# @LINE + 1]]:25: error: 'func.func' op argument #0 %x: invalid sharding #fusion.sharding<@nope, [DIDx, -]> on tensor<64x16xf32>: unknown mesh @nope
func.func @unknown_mesh(%x: tensor<64x16xf32, #fusion.sharding<@nope, [DIDx, -]>>) {
  func.return
}

// -----

// An unknown mesh, on an op result.
fusion.mesh @tp shape = [4]
func.func @unknown_mesh_result(%x: tensor<64x16xf32>) {
  // CHECK: diagnostics.mlir:[[# @LINE + 1]]:3: error: 'fusion.set' op invalid sharding #fusion.sharding<@pt, [DIDx, -]> on tensor<64x16xf32>: unknown mesh @pt
  %y = fusion.set %x : (tensor<64x16xf32>) -> tensor<64x16xf32, #fusion.sharding<@pt, [DIDx, -]>>
  func.return
}

// -----

// A split that does not divide its extent.
fusion.mesh @tp shape = [4]
// CHECK: diagnostics.mlir:[[# @LINE + 2]]:26: error: 'func.func' op argument #1 %w: invalid sharding #fusion.sharding<@tp, [DIDx, -]> on tensor<66x16xf32>: dimension 0 of extent 66 is not divisible by 4 (DIDx on @tp of shape [4])
func.func @not_divisible(%x: tensor<64x16xf32>,
                         %w: tensor<66x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) {
  func.return
}

// -----

// A result's sharding: at the function.
fusion.mesh @tp shape = [4]
// CHECK: diagnostics.mlir:[[# @LINE + 1]]:1: error: 'func.func' op invalid sharding #fusion.sharding<@tp, [DIDx]> on tensor<6xf32>: dimension 0 of extent 6 is not divisible by 4
func.func private @bad_result(tensor<8xf32>) -> tensor<6xf32, #fusion.sharding<@tp, [DIDx]>>

// -----

// A shape mismatch.
func.func @shape_mismatch(%x: tensor<8x4xf32>, %w: tensor<5x6xf32>) {
  // CHECK: diagnostics.mlir:[[# @LINE + 1]]:3: error: 'fusion.matmul' op contracted extents differ: [8, 4] @ [5, 6] (4 vs 5)
  %y = fusion.matmul %x, %w : (tensor<8x4xf32>, tensor<5x6xf32>) -> tensor<8x6xf32>
  func.return
}

// -----

// A result used with another type than its own.
func.func @wrong_type(%x: tensor<8x4xf32>) {
  %y = fusion.relu %x : (tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK: diagnostics.mlir:[[# @LINE - 1]]:3: error: fusion.relu gives %y the type tensor<8x4xf32>, but [[# @LINE + 1]]:19 uses it as tensor<4x8xf32>: one of the two types is wrong
  %z = fusion.exp %y : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

// A mesh declared twice.
fusion.mesh @tp shape = [4]
// CHECK: diagnostics.mlir:[[# @LINE + 1]]:1: error: 'fusion.mesh' op redefinition of symbol named 'tp' (first defined at {{.*}}diagnostics.mlir:[[# @LINE - 1]]:1)
fusion.mesh @tp shape = [2]

// -----

// A value that is never defined: at its use, with the line.
func.func @undefined(%x: tensor<8x4xf32>) {
  // CHECK: diagnostics.mlir:[[# @LINE + 3]]:23: error: use of undefined value %w
  // CHECK-NEXT: %y = fusion.add %x, %w : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: ^^
  %y = fusion.add %x, %w : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

// A function body of braces alone: no func.return (its results would be
// lost), at the function.
// CHECK: diagnostics.mlir:[[# @LINE + 1]]:1: error: 'func.func' op @empty_body has an empty body, without func.return (a declaration has no braces)
func.func @empty_body(%x: tensor<4xf32>) -> tensor<4xf32> {
}

// -----

// An integer type wider than MLIR's limit: at the type, never out of memory.
// CHECK: diagnostics.mlir:[[# @LINE + 1]]:48: error: integer type i9223372036854775807 is wider than 16777215 bits
"fusion.mesh"() <{sym_name = "a", shape = [4 : i9223372036854775807]}> : () -> ()

// -----

// A dense array whose element type xDSL cannot store: at the array.
func.func @wide_array(%x: tensor<4x6xf32>) {
  // CHECK: diagnostics.mlir:[[# @LINE + 2]]:43: error: dense array: its element type cannot be stored (Format not implemented for i128)
  // CHECK-NEXT: %y = fusion.relu %x {alloc_order = array<i128: 0, 1>} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %y = fusion.relu %x {alloc_order = array<i128: 0, 1>} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return
}

// CHECK: exit code: 1

// Without --split-input-file the first diagnostic ends the run; nothing is printed.
// SINGLE-NOT: builtin.module
// SINGLE: bad_shape.mlir:2:3: error: 'fusion.add' op operand shapes [8, 4] and [4, 8] do not broadcast (dimension -2 differs)
// SINGLE-NOT: builtin.module
// SINGLE-NOT: Traceback
// SINGLE: exit code: 1

// STDIN: <stdin>:2:3: error: 'fusion.add' op operand shapes [8, 4] and [4, 8] do not broadcast
// STDIN: exit code: 1

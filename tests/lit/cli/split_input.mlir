// --split-input-file: each `// -----` chunk is its own module, printed in
// order with `// -----` between them; a chunk that fails reports its
// diagnostic (at its line in the whole file) and the others still print;
// the run then exits 1. Without the flag the marker is only a comment.

// RUN: %exitcode %fuserc opt --split-input-file %s 2>%t.err | filecheck %s
// RUN: filecheck %s --input-file %t.err --check-prefix=ERR
// RUN: not %fuserc opt %s 2>&1 | filecheck %s --check-prefix=WHOLE

// CHECK:      builtin.module {
// CHECK-NEXT:   fusion.mesh @first shape = [4]
// CHECK-NEXT: }
// CHECK-NEXT: // -----
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   fusion.mesh @third shape = [2]
// CHECK-NEXT: }
// CHECK-NEXT: // -----
// CHECK-NEXT: builtin.module {
// CHECK-NEXT: }
// CHECK-NEXT: exit code: 1

// ERR: split_input.mlir:[[# @LINE + 7]]:1: error: 'fusion.mesh' op mesh @second shape [0] must be positive
// ERR-NOT: error

// WHOLE: error: 'fusion.mesh' op mesh @second shape [0] must be positive

fusion.mesh @first shape = [4]
// -----
fusion.mesh @second shape = [0]
// -----
// The same symbol in another chunk is no redefinition.
fusion.mesh @third shape = [2]
    // -----
// An empty last chunk is an empty module.

// Reading the input: a file, standard input (`-`, or no FILE), an empty
// input (an empty module, as mlir-opt), and the failures: a missing file, a
// folder, bytes that are not UTF-8 (located at the first bad byte). Failures
// exit 1 with one line and no traceback.

// RUN: %fuserc opt %S/Inputs/relu.mlir | filecheck %s --check-prefix=FILE
// RUN: %fuserc opt - < %S/Inputs/relu.mlir | filecheck %s --check-prefix=FILE
// RUN: %fuserc opt < %S/Inputs/relu.mlir | filecheck %s --check-prefix=FILE
// FILE:      builtin.module {
// FILE-NEXT:   fusion.mesh @tp shape = [4]
// FILE-NEXT:   func.func @main(

// RUN: %exitcode %fuserc opt %S/Inputs/empty.mlir 2>&1 | filecheck %s --check-prefix=EMPTY
// RUN: %exitcode %fuserc opt - < %S/Inputs/empty.mlir 2>&1 | filecheck %s --check-prefix=EMPTY
// EMPTY:      builtin.module {
// EMPTY-NEXT: }
// EMPTY-NEXT: exit code: 0

// Only comments and aliases: still an empty module.
// RUN: echo "// nothing but a comment" | %fuserc opt - | filecheck %s --check-prefix=EMPTY-MODULE
// RUN: echo "#unused = #fusion.sharding<@tp, [DIDx]>" | %fuserc opt - | filecheck %s --check-prefix=EMPTY-MODULE
// RUN: %fuserc opt --print-generic %S/Inputs/empty.mlir | %fuserc opt - | filecheck %s --check-prefix=EMPTY-MODULE
// EMPTY-MODULE:      builtin.module {
// EMPTY-MODULE-NEXT: }

// RUN: %exitcode %fuserc opt %t.does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING-NOT: Traceback
// MISSING: error: cannot read {{.*}}does-not-exist.mlir: No such file or directory
// MISSING-NEXT: exit code: 1

// RUN: %exitcode %fuserc opt %S/Inputs 2>&1 | filecheck %s --check-prefix=FOLDER
// FOLDER-NOT: Traceback
// FOLDER: error: cannot read {{.*}}Inputs: Is a directory
// FOLDER-NEXT: exit code: 1

// RUN: %exitcode %fuserc opt %S/Inputs/not_utf8.mlir 2>&1 | filecheck %s --check-prefix=LATIN1
// LATIN1-NOT: Traceback
// LATIN1: not_utf8.mlir:2:7: error: input is not UTF-8 text (byte 0xe9 cannot be decoded)
// LATIN1-NEXT: exit code: 1

// RUN: %exitcode %fuserc opt - < %S/Inputs/not_utf8.mlir 2>&1 | filecheck %s --check-prefix=LATIN1-STDIN
// LATIN1-STDIN: <stdin>:2:7: error: input is not UTF-8 text (byte 0xe9 cannot be decoded)
// LATIN1-STDIN-NEXT: exit code: 1

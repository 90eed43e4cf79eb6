// Bad usage exits with code 2 and says what is wrong, without a traceback:
// unknown options, commands and passes, a malformed pipeline, pass options
// the pass does not have, an extra argument, an output into a missing folder.

// RUN: %exitcode %fuserc opt --bogus %s 2>&1 | filecheck %s --check-prefix=OPTION
// OPTION: Usage: fuserc opt [OPTIONS] [FILE]
// OPTION: Error: No such option '--bogus'.
// OPTION-NEXT: exit code: 2

// RUN: %exitcode %fuserc frobnicate %s 2>&1 | filecheck %s --check-prefix=COMMAND
// COMMAND: Error: No such command 'frobnicate'.
// COMMAND-NEXT: exit code: 2

// RUN: %exitcode %fuserc opt %s %s 2>&1 | filecheck %s --check-prefix=EXTRA
// EXTRA: Error: Got unexpected extra argument
// EXTRA-NEXT: exit code: 2

// RUN: %exitcode %fuserc opt -p no-such-pass %s 2>&1 | filecheck %s --check-prefix=PASS
// PASS-NOT: Traceback
// PASS: error: unknown pass 'no-such-pass'; available: propagate-shardings, chunk-experts, make-resharding-contiguous, lower-to-host-ir, stream-pipeline, plan-memory, autodiff, default (--list-passes)
// PASS-NEXT: exit code: 2

// RUN: %exitcode %fuserc opt -p 'propagate-shardings{' %s 2>&1 | filecheck %s --check-prefix=PIPELINE
// PIPELINE-NOT: Traceback
// PIPELINE: error: invalid pass pipeline 'propagate-shardings{':
// PIPELINE: exit code: 2

// RUN: %exitcode %fuserc opt -p 'a,,{' %s 2>&1 | filecheck %s --check-prefix=PIPELINE2
// PIPELINE2-NOT: Traceback
// PIPELINE2: error: invalid pass pipeline
// PIPELINE2: exit code: 2

// RUN: %exitcode %testopt opt -p 'test-tag{colour=red}' %s 2>&1 | filecheck %s --check-prefix=PASS-OPTION
// PASS-OPTION-NOT: Traceback
// PASS-OPTION: error: pass 'test-tag' has no option 'colour' (its options: label; --list-passes)
// PASS-OPTION-NEXT: exit code: 2

// RUN: %exitcode %testopt opt -p 'test-tag{label}' %s 2>&1 | filecheck %s --check-prefix=PASS-VALUE
// PASS-VALUE-NOT: Traceback
// PASS-VALUE: error: invalid options for pass 'test-tag':
// PASS-VALUE-NEXT: exit code: 2

// RUN: %exitcode %fuserc opt %s -o %t.no-such-folder/out.mlir 2>&1 | filecheck %s --check-prefix=OUT-FOLDER
// OUT-FOLDER: Error: Invalid value for '-o' / '--output': folder '{{.*}}no-such-folder' does not exist
// OUT-FOLDER-NEXT: exit code: 2

// RUN: %exitcode %fuserc opt %s -o %S 2>&1 | filecheck %s --check-prefix=OUT-DIR
// OUT-DIR: Error: Invalid value for '-o' / '--output': File '{{.*}}cli' is a directory.
// OUT-DIR-NEXT: exit code: 2

// Usage errors are found before the input is read: a bad input does not hide them.
// RUN: %exitcode %fuserc opt -p no-such-pass %S/Inputs/bad_shape.mlir 2>&1 | filecheck %s --check-prefix=FIRST
// FIRST-NOT: bad_shape.mlir
// FIRST: error: unknown pass 'no-such-pass'
// FIRST-NEXT: exit code: 2

fusion.mesh @tp shape = [4]

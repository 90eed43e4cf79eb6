// `fuserc opt --help` lists every flag of `fuserc opt` and exits 0, with
// examples of both pipeline forms and a pointer to --list-passes.
// RUN: %exitcode %fuserc opt --help | filecheck %s
// RUN: %fuserc --help | filecheck %s --check-prefix=MAIN
// CHECK: Usage: fuserc opt [OPTIONS] [FILE]
// CHECK: fuserc opt prog.mlir -p 'default{algorithm=ring}' -o -
// CHECK: --pass-pipeline 'builtin.module(propagate-shardings,stream-pipeline{num-streams=2})'
// CHECK: --list-passes prints every pass and its options
// CHECK-DAG: -p, --pipeline, --pass-pipeline TEXT
// CHECK-DAG: -o, --output FILE
// CHECK-DAG: --print-generic
// CHECK-DAG: --split-input-file
// CHECK-DAG: --verify-diagnostics
// CHECK-DAG: --print-ir-after-all
// CHECK-DAG: --time-passes
// CHECK-DAG: --list-passes
// CHECK-DAG: -h, --help
// CHECK: exit code: 0
// MAIN: Usage: fuserc [OPTIONS] COMMAND [ARGS]...
// MAIN: opt

// `fuserc run --help` names both launchers.
// RUN: %fuserc run --help | filecheck %s --check-prefix=RUNHELP
// RUNHELP: Usage: fuserc run [OPTIONS] FILE
// RUNHELP: mpiexec -n N fuserc run FILE
// RUNHELP: torchrun --nproc-per-node N -m fuserc run FILE
// RUNHELP: --check

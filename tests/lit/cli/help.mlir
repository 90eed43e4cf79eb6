// `fuserc opt --help` lists every flag of DESIGN.md section 6 and exits 0.
// RUN: %exitcode %fuserc opt --help | filecheck %s
// RUN: %fuserc --help | filecheck %s --check-prefix=MAIN
// CHECK: Usage: fuserc opt [OPTIONS] [FILE]
// CHECK-DAG: -p, --pipeline TEXT
// CHECK-DAG: -o, --output FILE
// CHECK-DAG: --print-generic
// CHECK-DAG: --split-input-file
// CHECK-DAG: --verify-diagnostics
// CHECK-DAG: --print-ir-after-all
// CHECK-DAG: --time-passes
// CHECK-DAG: -h, --help
// CHECK: exit code: 0
// MAIN: Usage: fuserc [OPTIONS] COMMAND [ARGS]...
// MAIN: opt

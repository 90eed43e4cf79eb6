// What `fuserc opt` does around passes, with the test passes of
// Inputs/test_passes.py (%testopt is fuserc with them registered): pass
// options in xDSL's `name{opt=value}` syntax, several passes in order,
// --print-ir-after-all and --time-passes (also with an empty pipeline),
// verification after each pass, a pass's own diagnostics (fuserc's and
// xDSL's), and a registered pass whose module does not exist yet.

// RUN: %testopt opt -p 'test-tag{label=hello}' %s | filecheck %s --check-prefix=OPTION
// OPTION: builtin.module attributes {test.tag = "hello"} {
// OPTION-NEXT: fusion.mesh @tp shape = [4]

// RUN: %testopt opt -p test-tag %s | filecheck %s --check-prefix=DEFAULT-OPTION
// DEFAULT-OPTION: builtin.module attributes {test.tag = "none"} {

// RUN: %testopt opt -p 'test-tag{label=one},test-tag{label=two}' --print-ir-after-all %s 2>%t.after-all | filecheck %s --check-prefix=LAST
// RUN: filecheck %s --input-file %t.after-all --check-prefix=AFTER-ALL
// LAST: builtin.module attributes {test.tag = "two"} {
// AFTER-ALL:      // -----// IR Dump After test-tag //----- //
// AFTER-ALL-NEXT: builtin.module attributes {test.tag = "one"} {
// AFTER-ALL-NEXT:   fusion.mesh @tp shape = [4]
// AFTER-ALL:      // -----// IR Dump After test-tag //----- //
// AFTER-ALL-NEXT: builtin.module attributes {test.tag = "two"} {
// AFTER-ALL-NOT:  IR Dump

// RUN: %testopt opt -p 'test-tag{label=one},test-tag{label=two}' --time-passes %s 2>%t.time | filecheck %s --check-prefix=LAST
// RUN: filecheck %s --input-file %t.time --check-prefix=TIME
// TIME:      ... Pass execution timing report ...
// TIME:      Total Execution Time: {{[0-9]+\.[0-9]+}} seconds
// TIME:      ----Wall Time----  ----Name----
// TIME-NEXT: {{[0-9]+\.[0-9]+}} ({{ *[0-9]+\.[0-9]}}%)  test-tag
// TIME-NEXT: {{[0-9]+\.[0-9]+}} ({{ *[0-9]+\.[0-9]}}%)  test-tag
// TIME-NEXT: {{[0-9]+\.[0-9]+}} (100.0%)  Total

// With --split-input-file, a pass's times over the chunks are summed.
// RUN: %testopt opt -p test-tag --split-input-file --time-passes %S/Inputs/chunks.mlir 2>&1 >/dev/null | filecheck %s --check-prefix=TIME-SPLIT
// TIME-SPLIT:      ----Wall Time----  ----Name----
// TIME-SPLIT-NEXT: {{[0-9]+\.[0-9]+}} (100.0%)  test-tag
// TIME-SPLIT-NEXT: {{[0-9]+\.[0-9]+}} (100.0%)  Total

// An empty pipeline: no dumps, and a report with nothing but the total.
// RUN: %fuserc opt -p '' --print-ir-after-all --time-passes %s 2>%t.empty | filecheck %s --check-prefix=UNCHANGED
// RUN: filecheck %s --input-file %t.empty --check-prefix=EMPTY
// RUN: %fuserc opt --print-ir-after-all --time-passes %s 2>%t.none | filecheck %s --check-prefix=UNCHANGED
// RUN: filecheck %s --input-file %t.none --check-prefix=EMPTY
// UNCHANGED: builtin.module {
// EMPTY-NOT:  IR Dump
// EMPTY:      Total Execution Time: 0.0000 seconds
// EMPTY:      ----Wall Time----  ----Name----
// EMPTY-NEXT: 0.0000 (100.0%)  Total

// A pass that leaves invalid IR is caught by the verifier, at the op.
// RUN: %exitcode %testopt opt -p test-break %s 2>&1 | filecheck %s --check-prefix=BREAK
// BREAK-NOT: Traceback
// BREAK: passes.mlir:[[# @LINE + 29]]:3: error: IR is invalid after pass 'test-break': 'fusion.relu' op result shape [64] does not match the expected [64, 16]
// BREAK-NEXT: {{^}}  %y = fusion.relu %x :
// BREAK-NEXT: {{^}}  ^{{$}}
// BREAK-NEXT: exit code: 1

// A pass's diagnostic is located at its op, with its source line.
// RUN: %exitcode %testopt opt -p test-error %s 2>&1 | filecheck %s --check-prefix=PASS-ERROR
// PASS-ERROR: passes.mlir:[[# @LINE + 22]]:3: error: test-error at 'fusion.relu'
// PASS-ERROR-NEXT: {{^}}  %y = fusion.relu %x :
// PASS-ERROR-NEXT: {{^}}  ^{{$}}
// PASS-ERROR-NEXT: exit code: 1

// xDSL's way of failing a pass is a diagnostic too.
// RUN: %exitcode %testopt opt -p test-xdsl-failure %s 2>&1 | filecheck %s --check-prefix=XDSL
// XDSL-NOT: Traceback
// XDSL: error: test-xdsl-failure could not apply
// XDSL-NEXT: exit code: 1

// A pass of the registry whose module is not written yet: a clean error naming it.
// RUN: %exitcode %testopt opt -p 'test-tag,test-missing' %s 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING-NOT: Traceback
// MISSING: error: pass 'test-missing' is not available in this version of fuserc
// MISSING-NEXT: exit code: 1

// With --verify-diagnostics, a pass's diagnostic can be expected.
// RUN: %testopt opt -p test-error --verify-diagnostics %S/Inputs/pass_error.mlir

fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.relu %x : (tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

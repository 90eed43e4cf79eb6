// --verify-diagnostics checks the diagnostics against `expected-error`
// comments (same line, @+N, @-N, @above, @below): it succeeds when they
// match, printing the chunks without errors; it fails (exit 1) on an
// expectation not met, a diagnostic not expected, a diagnostic on another
// line, or one with other text.

// RUN: %exitcode %fuserc opt --split-input-file --verify-diagnostics %s 2>&1 | filecheck %s
// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @fine
// CHECK:      exit code: 0
// CHECK-NOT:  error

func.func @same_line(%a: tensor<8x4xf32>) {
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32> // expected-error {{does not match the expected}}
  func.return
}

// -----

func.func @below(%a: tensor<8x4xf32>) {
  // expected-error @below {{does not match the expected}}
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
}

// -----

func.func @above(%a: tensor<8x4xf32>) {
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32>
  // expected-error @above {{does not match the expected}}
  func.return
}

// -----

func.func @minus(%a: tensor<8x4xf32>) {
  %y = fusion.relu %a : (tensor<8x4xf32>) -> tensor<8x5xf32>
  func.return
  // expected-error @-2 {{'fusion.relu' op result shape [8, 5] does not match the expected [8, 4]}}
}

// -----

// A parse error is a diagnostic like any other.
func.func @parse(%a: tensor<8x4xf32>) {
  // expected-error@+1 {{expected ': (operand types) -> result type' after fusion.relu's operands}}
  %y = fusion.relu %a -> tensor<8x5xf32>
  func.return
}

// -----

func.func @fine(%a: tensor<8x4xf32>) {
  func.return
}

// RUN: %exitcode %fuserc opt --split-input-file --verify-diagnostics %S/Inputs/verify_fail.mlir 2>&1 | filecheck %s --check-prefix=FAIL
// FAIL-NOT: Traceback
// FAIL-DAG: verify_fail.mlir:4: error: expected error "this error is never produced" was not produced
// FAIL-DAG: unexpected {{.*}}verify_fail.mlir:11:3: error: 'fusion.relu' op result shape [8, 5] does not match the expected [8, 4]
// FAIL-DAG: unexpected {{.*}}verify_fail.mlir:19:3: error: 'fusion.relu' op result shape [8, 5]
// FAIL-DAG: verify_fail.mlir:20: error: expected error "does not match the expected" was not produced
// FAIL-DAG: unexpected {{.*}}verify_fail.mlir:27:3: error: 'fusion.relu' op result shape [8, 5]
// FAIL-DAG: verify_fail.mlir:27: error: expected error "some other message" was not produced
// FAIL: exit code: 1

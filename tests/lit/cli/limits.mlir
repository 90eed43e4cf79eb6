// Inputs at the edge: nesting deeper than the limit is one located
// diagnostic (never a RecursionError), also where brackets are unclosed;
// brackets in strings and comments, and the `>` of `->`, do not count; a
// tensor type with 100,000 dimensions on one line is read and printed back (a
// run of `4x4x...` is read in linear time).

// RUN: %python -c "print('func.func @f(%%a: ' + 'tensor<' * 65 + 'f32' + '>' * 65 + ')')" > %t.deep.mlir
// RUN: %exitcode %fuserc opt %t.deep.mlir -p default 2>&1 | filecheck %s --check-prefix=DEEP
// DEEP-NOT: Traceback
// DEEP: deep.mlir:1:465: error: input nested more than 64 levels deep (brackets (), [], {}, <>): fuserc's limit
// DEEP-NEXT: exit code: 1

// RUN: %python -c "print('fusion.mesh @tp shape = [4] {a = ' + '[' * 100000)" > %t.open.mlir
// RUN: %exitcode %fuserc opt %t.open.mlir 2>&1 | filecheck %s --check-prefix=OPEN
// OPEN: open.mlir:1:97: error: input nested more than 64 levels deep
// OPEN-NEXT: exit code: 1

// 64 levels are fine; so are brackets in strings and comments.
// RUN: %python -c "print('fusion.mesh @tp shape = [4] {a = ' + '[' * 63 + ']' * 63 + ', s = \"' + '(' * 100 + '\"} // ' + '{' * 100)" > %t.ok.mlir
// RUN: %fuserc opt %t.ok.mlir | filecheck %s --check-prefix=OK
// OK: fusion.mesh @tp shape = [4] {a = {{\[+\]+}}, s = "((((

// RUN: %python -c "print('func.func @f(%%a: tensor<' + '4x' * 100000 + 'f32>) {\n  func.return\n}')" > %t.wide.mlir
// RUN: %exitcode %fuserc opt %t.wide.mlir 2>&1 | filecheck %s --check-prefix=WIDE
// WIDE: func.func @f(%a: tensor<4x4x4x4x4x
// WIDE: exit code: 0

// An unterminated string (or one with a bad escape) on a long line is a
// diagnostic in linear time (a pattern that backtracks took minutes at 30
// characters).
// RUN: %python -c "print('fusion.mesh @tp shape = [4] {s = \"' + 'ab ' * 20000)" > %t.string.mlir
// RUN: %exitcode %fuserc opt %t.string.mlir 2>&1 | filecheck %s --check-prefix=STRING
// STRING: string.mlir:1:34: error: End of file reached before closing string literal.
// STRING: exit code: 1
// RUN: %python -c "print('fusion.mesh @tp shape = [4] {s = \"' + 'ab ' * 20000 + '\\\\q\"}')" > %t.escape.mlir
// RUN: %exitcode %fuserc opt %t.escape.mlir 2>&1 | filecheck %s --check-prefix=ESCAPE
// ESCAPE: escape.mlir:1:34: error: End of file reached before closing string literal.
// ESCAPE: exit code: 1

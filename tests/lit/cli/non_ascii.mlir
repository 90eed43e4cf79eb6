// Integers in the IR are ASCII digits: a Unicode digit or other "numeric"
// character where one is expected is a located diagnostic (never read as
// its value, never a traceback), and so is any character outside ASCII
// that is not in a string or a comment: ² ٣ ４ here are fine.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s
// RUN: %exitcode %fuserc opt --mesh m=٣ %s 2>&1 | filecheck %s --check-prefix=MESH
// MESH: Invalid value for '--mesh': expected NAME=SHAPE (tp=2, grid=2x4), got 'm=٣'
// MESH: exit code: 2

// expected-error @+1 {{unexpected '²' (U+00B2): a digit that is not 0-9}}
fusion.mesh @m shape = [²]

// -----

// expected-error @+1 {{unexpected '٣' (U+0663): a digit that is not 0-9}}
fusion.mesh @m shape = [٣]

// -----

// expected-error @+1 {{unexpected '４' (U+FF14): a digit that is not 0-9}}
fusion.mesh @m shape = [2, ４]

// -----

// expected-error @+1 {{unexpected '①' (U+2460)}}
fusion.mesh @m shape = [①]

// -----

// expected-error @+1 {{unexpected 'Ⅰ' (U+2160)}}
fusion.mesh @m shape = [Ⅰ]

// -----

fusion.mesh @m shape = [4]
// expected-error @+1 {{unexpected '٤' (U+0664): a digit that is not 0-9}}
func.func @f(%x: tensor<٤xf32>) {
  func.return
}

// -----

// After an ASCII digit too: `4٣` is not 43.
// expected-error @+1 {{unexpected '٣' (U+0663): a digit that is not 0-9}}
func.func @f(%x: tensor<4٣xf32>) {
  func.return
}

// -----

// expected-error @+1 {{unexpected 'é' (U+00E9): a character that is not ASCII}}
fusion.mesh @é shape = [4]

// -----

// Strings and comments hold any character: ①.
fusion.mesh @m shape = [4] {note = "shape ４, ①"}

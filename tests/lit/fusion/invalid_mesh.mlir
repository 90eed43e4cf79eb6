// Every diagnostic of fusion.mesh, each located at the mesh.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

// expected-error @+1 {{'fusion.mesh' op mesh @a of shape [4] needs 4 devices, got 3}}
fusion.mesh @a shape = [4] devices = [0, 1, 2]

// -----

// expected-error @+1 {{mesh @a of shape [2, 2] needs 4 devices, got 5}}
fusion.mesh @a shape = [2, 2] devices = [0, 1, 2, 3, 4]

// -----

// expected-error @+1 {{mesh @a shape [0] must be positive}}
fusion.mesh @a shape = [0]

// -----

// expected-error @+1 {{mesh @a shape [2, -2] must be positive}}
fusion.mesh @a shape = [2, -2]

// -----

// expected-error @+1 {{mesh @a has 4 axes; meshes have 1 to 3 (DIDx, DIDy, DIDz)}}
fusion.mesh @a shape = [2, 2, 2, 2]

// -----

// expected-error @+1 {{mesh @a has 0 axes; meshes have 1 to 3}}
fusion.mesh @a shape = []

// -----

// expected-error @+1 {{mesh @a devices [0, 0, 1, 2] must be distinct non-negative ranks}}
fusion.mesh @a shape = [4] devices = [0, 0, 1, 2]

// -----

// expected-error @+1 {{mesh @a devices [-1, 2] must be distinct non-negative ranks}}
fusion.mesh @a shape = [2] devices = [-1, 2]

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{'fusion.mesh' op redefinition of symbol named 'tp' (first defined at}}
fusion.mesh @tp shape = [2]

// -----

fusion.mesh @main shape = [4]
// expected-error @+1 {{'func.func' op redefinition of symbol named 'main'}}
func.func @main() {
  func.return
}

// -----

func.func @f() {
  // expected-error @+1 {{'fusion.mesh' expects parent op 'builtin.module'}}
  fusion.mesh @inner shape = [4]
  func.return
}

// -----

// A symbol that is not a mesh does not name one.
// expected-error @+1 {{unknown mesh @f}}
func.func @f(%x: tensor<8xf32, #fusion.sharding<@f, [DIDx]>>) {
  func.return
}

// -----

// expected-error @+1 {{Expected 'shape' in fusion.mesh}}
fusion.mesh @a devices = [0, 1]

// -----

// expected-error @+1 {{expect symbol name}}
fusion.mesh a shape = [4]

// -----

// expected-error @+1 {{Expected attribute i64 but got i32}}
"fusion.mesh"() <{sym_name = "a", shape = [4 : i32]}> : () -> ()

// -----

// expected-error @+1 {{shape}}
"fusion.mesh"() <{sym_name = "a"}> : () -> ()

// -----

// expected-error @+1 {{Expected '='}}
fusion.mesh @a shape [4]

// -----

// expected-error @+1 {{Expected '='}}
fusion.mesh @a shape = [2] devices [0, 1]

// -----

// expected-error @+1 {{Expected integer literal}}
fusion.mesh @a shape = [two]

// -----

// The size is checked arithmetically: no list of 10^22 devices is made.
// expected-error @+1 {{'fusion.mesh' op mesh @a of shape [99999999999, 99999999999] has 9999999999800000000001 devices; a mesh has at most 4194304}}
fusion.mesh @a shape = [99999999999, 99999999999]

// -----

// expected-error @+1 {{mesh @a of shape [2048, 4096] has 8388608 devices; a mesh has at most 4194304}}
fusion.mesh @a shape = [2048, 4096]

// -----

// An attribute xDSL cannot verify (a dense array of a zero-width integer) is a diagnostic, not a crash.
// expected-error @+1 {{invalid attribute in this op (ZeroDivisionError: integer modulo by zero)}}
fusion.mesh @tp shape = [4] {alloc_order = array<i0: 0>}

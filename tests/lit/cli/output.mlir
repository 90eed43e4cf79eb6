// -o FILE writes the IR there (custom or generic form) and nothing to
// standard output; a failing input writes no file; a failed write is a
// diagnostic.

// RUN: %fuserc opt %s -o %t.custom.mlir | filecheck %s --allow-empty --check-prefix=NO-STDOUT
// RUN: filecheck %s --input-file %t.custom.mlir --check-prefix=CUSTOM
// NO-STDOUT-NOT: {{.}}
// CUSTOM:      builtin.module {
// CUSTOM-NEXT:   fusion.mesh @tp shape = [4]
// CUSTOM-NEXT:   func.func @main(%x: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>> {
// CUSTOM-NEXT:     %y = fusion.neg %x : (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CUSTOM-NEXT:     func.return %y : tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
// CUSTOM-NEXT:   }
// CUSTOM-NEXT: }

// The long form, into a file that exists already (it is replaced), generic.
// RUN: %fuserc opt %s --output %t.custom.mlir --print-generic
// RUN: filecheck %s --input-file %t.custom.mlir --check-prefix=GENERIC
// GENERIC:      "builtin.module"() ({
// GENERIC-NEXT:   "fusion.mesh"() <{sym_name = "tp", shape = [4 : i64]}> : () -> ()
// GENERIC-NOT:  fusion.neg %x
// GENERIC:        %y = "fusion.neg"(%x)

// The file written reads back to the same IR.
// RUN: %fuserc opt %t.custom.mlir | filecheck %s --check-prefix=CUSTOM

// A failure to write is a diagnostic (exit 1), not a traceback.
// RUN: %exitcode %fuserc opt %s -o /dev/full 2>&1 | filecheck %s --check-prefix=FULL
// FULL-NOT: Traceback
// FULL: error: cannot write /dev/full: No space left on device
// FULL-NEXT: exit code: 1

// RUN: not %fuserc opt %S/Inputs/bad_shape.mlir -o %t.never.mlir
// RUN: %python -c "import os, sys; sys.exit(os.path.exists(sys.argv[1]))" %t.never.mlir

fusion.mesh @tp shape = [4]
func.func @main(%x: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>> {
  %y = fusion.neg %x : (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
  func.return %y : tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>
}

// fusion.mesh: 1-D, 2-D and 3-D meshes, explicit device ids (also on an
// N-D mesh), an attribute dictionary, and a mesh used before the line that
// declares it (symbols are order-free, as in MLIR).
// RUN: %fuserc opt %s | filecheck %s
// RUN: %fuserc opt %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | %fuserc opt - | filecheck %s
// RUN: %fuserc opt --print-generic %s | filecheck %s --check-prefix=GENERIC

// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @uses_later_mesh(%x: tensor<8xf32, #fusion.sharding<@late, [DIDx]>>) {
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT:   fusion.mesh @tp shape = [4]
// CHECK-NEXT:   fusion.mesh @grid shape = [2, 4]
// CHECK-NEXT:   fusion.mesh @cube shape = [2, 2, 2]
// CHECK-NEXT:   fusion.mesh @stage1 shape = [2] devices = [2, 3]
// CHECK-NEXT:   fusion.mesh @swapped shape = [2, 2] devices = [3, 2, 1, 0]
// CHECK-NEXT:   fusion.mesh @one shape = [1] devices = [7]
// CHECK-NEXT:   fusion.mesh @tagged shape = [4] {note = "kept"}
// CHECK-NEXT:   fusion.mesh @late shape = [8]
// CHECK-NEXT: }

// GENERIC: "fusion.mesh"() <{sym_name = "tp", shape = [4 : i64]}> : () -> ()
// GENERIC: "fusion.mesh"() <{sym_name = "grid", shape = [2 : i64, 4 : i64]}> : () -> ()
// GENERIC: "fusion.mesh"() <{sym_name = "cube", shape = [2 : i64, 2 : i64, 2 : i64]}> : () -> ()
// GENERIC: "fusion.mesh"() <{sym_name = "stage1", shape = [2 : i64], devices = [2 : i64, 3 : i64]}> : () -> ()
// GENERIC: "fusion.mesh"() <{sym_name = "swapped", shape = [2 : i64, 2 : i64], devices = [3 : i64, 2 : i64, 1 : i64, 0 : i64]}> : () -> ()
// GENERIC: "fusion.mesh"() <{sym_name = "one", shape = [1 : i64], devices = [7 : i64]}> : () -> ()
// GENERIC: "fusion.mesh"() <{sym_name = "tagged", shape = [4 : i64]}> {note = "kept"} : () -> ()

func.func @uses_later_mesh(%x: tensor<8xf32, #fusion.sharding<@late, [DIDx]>>) {
  func.return
}
fusion.mesh @tp shape = [4]
fusion.mesh @grid shape = [2, 4]
fusion.mesh @cube shape = [2, 2, 2]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
fusion.mesh @swapped shape = [2, 2] devices = [3, 2, 1, 0]
fusion.mesh @one shape = [1] devices = [7]
fusion.mesh @tagged shape = [4] {note = "kept"}
fusion.mesh @late shape = [8]

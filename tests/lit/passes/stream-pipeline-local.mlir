// stream-pipeline on ops whose Stream split needs no communication: the op
// runs in S chunks of its output, each on its own stream, reading the
// matching chunks of its operands (a launch's region on chunk types).
// RUN: %fuserc opt -p stream-pipeline %s | filecheck %s
// RUN: %fuserc opt -p 'stream-pipeline{num-streams=3}' %s | filecheck %s --check-prefix=POOL
// RUN: %fuserc opt -p 'stream-pipeline{algorithm=none}' %s | filecheck %s --check-prefix=NONE

// CHECK-LABEL: func.func @local
// CHECK: %main = hir.get_current_stream : !hir.stream
// CHECK-NEXT: hir.for %c = 0 to 2 {
// CHECK-NEXT: %s = hir.stream_for %c mod 2 : !hir.stream
// CHECK-NEXT: hir.set_current_stream %s : !hir.stream
// CHECK-NEXT: hir.sync_stream %main : !hir.stream
// CHECK-NEXT: %0 = hir.chunk %w [%c] dim = 1 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<8x2xf32>
// CHECK-NEXT: %1 = hir.chunk %y [%c] dim = 1 chunks = 2 : (tensor<16x4xf32>, index) -> tensor<16x2xf32>
// CHECK-NEXT: hir.matmul %x, %0, %1 : tensor<16x8xf32>, tensor<8x2xf32>, tensor<16x2xf32>
// CHECK-NEXT: } {hir.pipeline = {algorithm = "local", chunks = 2 : i64, streams = 2 : i64, reason = "Stream split of a local op"}}
// CHECK-NEXT: hir.set_current_stream %main : !hir.stream
// CHECK-NEXT: hir.for %c_1 = 0 to 2 {
// CHECK-NEXT: %s_1 = hir.stream_for %c_1 mod 2 : !hir.stream
// CHECK-NEXT: hir.sync_stream %s_1 : !hir.stream
// CHECK-NEXT: }
// Rows of a linear: the input's rows.
// CHECK: hir.for %c_2 = 0 to 4 {
// CHECK: %2 = hir.chunk %x [%c_2] dim = 0 chunks = 4 : (tensor<16x8xf32>, index) -> tensor<4x8xf32>
// CHECK-NEXT: %3 = hir.chunk %l [%c_2] dim = 0 chunks = 4 : (tensor<16x4xf32>, index) -> tensor<4x4xf32>
// CHECK-NEXT: hir.linear %2, %wl, %b, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x4xf32>
// Features of a linear: the weight's rows and the bias.
// CHECK: hir.for %c_4 = 0 to 2 {
// CHECK: %4 = hir.chunk %wl [%c_4] dim = 0 chunks = 2 : (tensor<4x8xf32>, index) -> tensor<2x8xf32>
// CHECK-NEXT: %5 = hir.chunk %b [%c_4] dim = 0 chunks = 2 : (tensor<4xf32>, index) -> tensor<2xf32>
// CHECK-NEXT: %6 = hir.chunk %m [%c_4] dim = 1 chunks = 2 : (tensor<16x4xf32>, index) -> tensor<16x2xf32>
// CHECK-NEXT: hir.linear %x, %4, %5, %6 : tensor<16x8xf32>, tensor<2x8xf32>, tensor<2xf32>, tensor<16x2xf32>
// A copy.
// CHECK: hir.for %c_6 = 0 to 2 {
// CHECK: %7 = hir.chunk %x [%c_6] dim = 0 chunks = 2 : (tensor<16x8xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: %8 = hir.chunk %k [%c_6] dim = 0 chunks = 2 : (tensor<16x8xbf16>, index) -> tensor<8x8xbf16>
// CHECK-NEXT: hir.copy %7, %8 : tensor<8x8xf32>, tensor<8x8xbf16>
// A launch of elementwise ops: its region on chunks of its operands.
// CHECK: hir.for %c_8 = 0 to 2 {
// CHECK: %9 = hir.chunk %x [%c_8] dim = 0 chunks = 2 : (tensor<16x8xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: %10 = hir.chunk %g [%c_8] dim = 0 chunks = 2 : (tensor<16x8xf32>, index) -> tensor<8x8xf32>
// CHECK-NEXT: hir.launch ins(%9, %b8 : tensor<8x8xf32>, tensor<8xf32>) outs(%10 : tensor<8x8xf32>) {
// CHECK-NEXT: ^bb0(%a: tensor<8x8xf32>, %bias: tensor<8xf32>):
// CHECK-NEXT: %bb = fusion.broadcast_in_dim %bias dims = [1] : (tensor<8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %r = fusion.add %a, %bb : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %q = fusion.relu %r : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: hir.yield %q : tensor<8x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: } {hir.pipeline = {algorithm = "local", chunks = 2 : i64
// A launch whose region reduces the chunked dimension runs whole, and says why.
// CHECK: hir.launch ins(%x : tensor<16x8xf32>) outs(%o : tensor<16x8xf32>) {
// CHECK: } {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "not pipelined: the launch of fusion.softmax is not computed by chunks of dim 0
// CHECK-NEXT: func.return

// POOL: hir.for %c_2 = 0 to 4 {
// POOL-NEXT: %s_2 = hir.stream_for %c_2 mod 3 : !hir.stream
// POOL: hir.for %c_3 = 0 to 3 {
// POOL-NEXT: %s_3 = hir.stream_for %c_3 mod 3 : !hir.stream
// POOL-NEXT: hir.sync_stream %s_3 : !hir.stream

// NONE-NOT: hir.for
func.func @local(%x: tensor<16x8xf32>, %w: tensor<8x4xf32>, %wl: tensor<4x8xf32>, %b: tensor<4xf32>, %b8: tensor<8xf32>)
    -> (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x8xbf16>, tensor<16x8xf32>, tensor<16x8xf32>) attributes {hir.host} {
  %y = hir.alloc "local/0" : tensor<16x4xf32>
  hir.matmul %x, %w, %y {hir.stream = [1, 2]} : tensor<16x8xf32>, tensor<8x4xf32>, tensor<16x4xf32>
  %l = hir.alloc "local/1" : tensor<16x4xf32>
  hir.linear %x, %wl, %b, %l {hir.stream = [0, 4]} : tensor<16x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<16x4xf32>
  %m = hir.alloc "local/2" : tensor<16x4xf32>
  hir.linear %x, %wl, %b, %m {hir.stream = [1, 2]} : tensor<16x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<16x4xf32>
  %k = hir.alloc "local/3" : tensor<16x8xbf16>
  hir.copy %x, %k {hir.stream = [0, 2]} : tensor<16x8xf32>, tensor<16x8xbf16>
  %g = hir.alloc "local/4" : tensor<16x8xf32>
  hir.launch ins(%x, %b8 : tensor<16x8xf32>, tensor<8xf32>) outs(%g : tensor<16x8xf32>) {
  ^bb0(%a: tensor<16x8xf32>, %bias: tensor<8xf32>):
    %bb = fusion.broadcast_in_dim %bias dims = [1] : (tensor<8xf32>) -> tensor<16x8xf32>
    %r = fusion.add %a, %bb : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
    %q = fusion.relu %r : (tensor<16x8xf32>) -> tensor<16x8xf32>
    hir.yield %q : tensor<16x8xf32>
  } {hir.stream = [0, 2]}
  %o = hir.alloc "local/5" : tensor<16x8xf32>
  hir.launch ins(%x : tensor<16x8xf32>) outs(%o : tensor<16x8xf32>) {
  ^bb0(%a: tensor<16x8xf32>):
    %p = fusion.softmax %a dim = 0 : (tensor<16x8xf32>) -> tensor<16x8xf32>
    hir.yield %p : tensor<16x8xf32>
  } {hir.stream = [0, 2]}
  func.return %y, %l, %m, %k, %g, %o : tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x8xbf16>, tensor<16x8xf32>, tensor<16x8xf32>
}

// A marked copy whose buffers do not cut into S equal chunks is left whole
// (the block of `[DIDx]` on one mesh copied into a chunk of a `[Stream(2)]`
// value on another: 3 rows, not divisible by 2), and says why.
// CHECK-LABEL: func.func @uneven
// CHECK-NOT: hir.for
// CHECK: hir.copy %x, %0 {hir.stream = [0 : i64, 2 : i64], hir.pipeline = {algorithm = "none", chunks = 1 : i64, streams = 0 : i64, reason = "not pipelined: Stream(2) on dim 0 of [3] does not cut its operands into chunks, so it runs whole"}} : tensor<3xf32>, tensor<3xf32>
// CHECK-NEXT: func.return
func.func @uneven(%x: tensor<3xf32>) -> tensor<6xf32> attributes {hir.host} {
  %z = hir.alloc "uneven/0" : tensor<6xf32>
  %c0 = hir.constant 0 : index
  %0 = hir.chunk %z [%c0] dim = 0 chunks = 2 : (tensor<6xf32>, index) -> tensor<3xf32>
  hir.copy %x, %0 {hir.stream = [0, 2]} : tensor<3xf32>, tensor<3xf32>
  func.return %z : tensor<6xf32>
}

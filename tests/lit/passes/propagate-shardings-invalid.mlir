// RUN: %fuserc opt -p propagate-shardings --split-input-file --verify-diagnostics %s

fusion.mesh @tp shape = [4]
// expected-error @+1 {{function argument #1 of @partial_input has sharding #fusion.sharding<@tp, [-, -], partial = DIDx>: a function input cannot be a partial sum}}
func.func @partial_input(%x: tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>, %p: tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<8x8xf32> {
  %y = fusion.add %x, %p : (tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>, tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>) -> tensor<8x8xf32>
  func.return %y : tensor<8x8xf32>
}

// -----

// A pointwise op cannot make a partial sum.
fusion.mesh @tp shape = [4]
func.func @partial_relu(%x: tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  // expected-error @+1 {{'fusion.relu' op result has sharding #fusion.sharding<@tp, [-, -], partial = DIDx>, but no lowering makes this partial sum}}
  %y = fusion.relu %x : (tensor<8x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}

// -----

// A set cannot turn a whole tensor into a partial sum.
fusion.mesh @tp shape = [4]
func.func @partial_set(%x: tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  // expected-error @+1 {{'fusion.set' op result has sharding #fusion.sharding<@tp, [-, -], partial = DIDx>, but no lowering makes this partial sum: only fusion.matmul, fusion.linear without bias and fusion.sum contract a dimension the mesh divides into one, and only linear ops carry one from operands partial over DIDx (operands: #fusion.sharding<@tp, [-, -]>)}}
  %y = fusion.set %x : (tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}

// -----

// Nor a partial sum over several axes from one over one of them.
fusion.mesh @g shape = [2, 2]
func.func @partial_axes_set(%x: tensor<8x8xf32, #fusion.sharding<@g, [-, DIDx]>>, %w: tensor<8x8xf32, #fusion.sharding<@g, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>> {
  %p = fusion.matmul %x, %w : (tensor<8x8xf32, #fusion.sharding<@g, [-, DIDx]>>, tensor<8x8xf32, #fusion.sharding<@g, [DIDx, -]>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = DIDx>>
  // expected-error @+1 {{'fusion.set' op result has sharding #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>, but no lowering makes this partial sum: only fusion.matmul, fusion.linear without bias and fusion.sum contract a dimension the mesh divides into one, and only linear ops carry one from operands partial over [DIDy, DIDx] (operands: #fusion.sharding<@g, [-, -], partial = DIDx>)}}
  %y = fusion.set %p : (tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = DIDx>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>>
}

// -----

// Max is not a sum.
fusion.mesh @tp shape = [4]
func.func @partial_max(%x: tensor<8x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>> {
  // expected-error @+1 {{'fusion.max' op result has sharding #fusion.sharding<@tp, [-], partial = DIDx>, but no lowering makes this partial sum}}
  %y = fusion.max %x dims = [1] : (tensor<8x8xf32, #fusion.sharding<@tp, [-, DIDx]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
  func.return %y : tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
}

// -----

// A partial linear with a bias would add the bias once per device.
fusion.mesh @tp shape = [4]
func.func @partial_bias(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b: tensor<32xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  // expected-error @+1 {{'fusion.linear' op result has sharding #fusion.sharding<@tp, [-, -], partial = DIDx>, but no lowering makes this partial sum}}
  %y = fusion.linear %x, %w, %b : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<32xf32, #fusion.sharding<@tp, [-]>>) -> tensor<8x32xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<8x32xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}

// -----

// Adding a whole tensor to a partial sum is not a partial sum.
fusion.mesh @tp shape = [4]
func.func @partial_add_whole(%x: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>, %v: tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {
  %p = fusion.matmul %x, %w : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x8xf32>
  // expected-error @+1 {{'fusion.add' op result has sharding #fusion.sharding<@tp, [-, -], partial = DIDx>, but no lowering makes this partial sum: only fusion.matmul, fusion.linear without bias and fusion.sum contract a dimension the mesh divides into one, and only linear ops carry one from operands partial over DIDx (operands: #fusion.sharding<@tp, [-, -], partial = DIDx>, #fusion.sharding<@tp, [-, -]>)}}
  %y = fusion.add %p, %v : (tensor<8x8xf32>, tensor<8x8xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
}

// -----

// A sum can only make a partial sum over a reduced extent the mesh divides.
fusion.mesh @tp shape = [4]
func.func @partial_indivisible(%x: tensor<8x6xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>> {
  // expected-error @+1 {{'fusion.sum' op result has sharding #fusion.sharding<@tp, [-], partial = DIDx>, but no lowering makes this partial sum}}
  %y = fusion.sum %x dims = [1] : (tensor<8x6xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
  func.return %y : tensor<8xf32, #fusion.sharding<@tp, [-], partial = DIDx>>
}

// -----

// Operands on two meshes with no set between them.
fusion.mesh @stage0 shape = [2]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
func.func @two_meshes(%x: tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>, %y: tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<8x16xf32> {
  // expected-error @+1 {{'fusion.add' op operands lie on different meshes: operand #0 is #fusion.sharding<@stage0, [DIDx, -]> and operand #1 is #fusion.sharding<@stage1, [DIDx, -]>; only fusion.set moves a tensor between meshes}}
  %z = fusion.add %x, %y : (tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>, tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>) -> tensor<8x16xf32>
  func.return %z : tensor<8x16xf32>
}

// -----

// The same through propagated intermediates.
fusion.mesh @stage0 shape = [2]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
func.func @two_meshes_propagated(%x: tensor<8x16xf32, #fusion.sharding<@stage0, [-, -]>>, %w: tensor<16x16xf32, #fusion.sharding<@stage1, [-, -]>>) -> tensor<8x16xf32> {
  %a = fusion.relu %x : (tensor<8x16xf32, #fusion.sharding<@stage0, [-, -]>>) -> tensor<8x16xf32>
  // expected-error @+1 {{'fusion.matmul' op operands lie on different meshes: operand #0 is #fusion.sharding<@stage0, [-, -]> and operand #1 is #fusion.sharding<@stage1, [-, -]>}}
  %y = fusion.matmul %a, %w : (tensor<8x16xf32>, tensor<16x16xf32, #fusion.sharding<@stage1, [-, -]>>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}

// -----

// A compute op's result on another mesh than its operands.
fusion.mesh @stage0 shape = [2]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
func.func @result_mesh(%x: tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>> {
  // expected-error @+1 {{'fusion.relu' op result #fusion.sharding<@stage1, [DIDx, -]> is on another mesh than its operands (#fusion.sharding<@stage0, [DIDx, -]>); only fusion.set moves a tensor between meshes}}
  %y = fusion.relu %x : (tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  func.return %y : tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>
}

// -----

// Nothing decides the mesh of an input connected to no sharded tensor when
// the function uses two meshes.
fusion.mesh @stage0 shape = [2]
fusion.mesh @stage1 shape = [2] devices = [2, 3]
// expected-error @+1 {{cannot decide the mesh of function argument #1 of @undecided: it is connected to no sharded tensor and the function uses meshes @stage0, @stage1; annotate it}}
func.func @undecided(%x: tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>, %u: tensor<4xf32>) -> (tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>, tensor<4xf32>) {
  %y = fusion.set %x : (tensor<8x16xf32, #fusion.sharding<@stage0, [DIDx, -]>>) -> tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>
  %v = fusion.exp %u : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y, %v : tensor<8x16xf32, #fusion.sharding<@stage1, [DIDx, -]>>, tensor<4xf32>
}

// -----

// A function without annotations in a module with two meshes.
fusion.mesh @a shape = [2]
fusion.mesh @b shape = [4]
// expected-error @+1 {{cannot decide the mesh of function argument #0 of @no_annotation: it is connected to no sharded tensor and the function uses meshes @a, @b}}
func.func @no_annotation(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = fusion.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

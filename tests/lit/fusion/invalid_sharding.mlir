// Every diagnostic of #fusion.sharding: its syntax, and its validity against
// the mesh and the tensor (known mesh symbol, one axis per dimension, each
// parallel type at most once and present on the mesh, splits dividing their
// extents), checked in signatures (also of declarations) and on op results.
// RUN: %fuserc opt --split-input-file --verify-diagnostics %s

fusion.mesh @tp shape = [4]
// expected-error @+1 {{unknown parallel type 'DIDw': expected DIDx, DIDy, DIDz or Stream(S)}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [DIDw]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{unknown parallel type 'Stream2'}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [Stream2]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{partial must be DIDx, DIDy or DIDz, got 'DIDw'}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [-], partial = DIDw>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{(DIDx, DIDy or DIDz) after 'partial ='}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [-], partial = 2>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{partial must be DIDx, DIDy or DIDz, got 'DIDw'}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@grid, [-], partial = [DIDy, DIDw]>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{partial = [] names no device type: leave partial out}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@grid, [-], partial = []>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{']' expected}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@grid, [-], partial = [DIDy DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Expected 'partial' in a sharding}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [-], sum = DIDx>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Expected ',' after the mesh of a sharding}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp [DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{expected the mesh's symbol name: mesh names start with @ (@tp, not tp)}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<tp, [DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{'[' expected}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, DIDx>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Expected '(' after Stream}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [Stream]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Expected ')' after Stream(S}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [Stream(2]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Expected integer literal}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [Stream(S)]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{a sharding axis: -, DIDx, DIDy, DIDz or Stream(S)}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [DIDx*]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{'func.func' op argument #0 %x: invalid sharding #fusion.sharding<@nope, [DIDx, -]> on tensor<64x16xf32>: unknown mesh @nope}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@nope, [DIDx, -]>>) {
  func.return
}

// -----

// A declaration's signature is checked too, results included.
fusion.mesh @tp shape = [4]
// expected-error @+1 {{invalid sharding #fusion.sharding<@nope, [-]> on tensor<64xf32>: unknown mesh @nope}}
func.func private @f(tensor<64xf32>) -> tensor<64xf32, #fusion.sharding<@nope, [-]>>

// -----

// On an op result, the op reports it.
fusion.mesh @tp shape = [4]
func.func @f(%x: tensor<64xf32>) {
  // expected-error @+1 {{'fusion.set' op invalid sharding #fusion.sharding<@nope, [DIDx]> on tensor<64xf32>: unknown mesh @nope}}
  %y = fusion.set %x : (tensor<64xf32>) -> tensor<64xf32, #fusion.sharding<@nope, [DIDx]>>
  func.return
}

// -----

// Through an alias, the same.
#s = #fusion.sharding<@nope, [DIDx]>
fusion.mesh @tp shape = [4]
// expected-error @+1 {{unknown mesh @nope}}
func.func @f(%x: tensor<64xf32, #s>) {
  func.return
}

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{sharding has 1 axes but the tensor has rank 2}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{sharding has 1 axes but the tensor has rank 0}}
func.func @f(%x: tensor<f32, #fusion.sharding<@tp, [-]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{parallel type DIDx appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{parallel type DIDx appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx*DIDx, -]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{parallel type DIDx appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDx, -], partial = DIDx>>)

// -----

// A partial over several axes: each axis once, not also a split's.
fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{parallel type DIDx appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@grid, [-, -], partial = [DIDx, DIDx]>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{parallel type DIDy appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@grid, [DIDy, -], partial = [DIDy, DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{parallel type Stream appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2), Stream(2)]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{parallel type Stream appears more than once}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2)*Stream(2), -]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{DIDy needs a mesh with at least 2 axes, @tp has 1}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [DIDy, -]>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{DIDz needs a mesh with at least 3 axes, @grid has 2}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@grid, [DIDz, DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{DIDy needs a mesh with at least 2 axes, @tp has 1}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [-, -], partial = DIDy>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{DIDz needs a mesh with at least 3 axes, @grid has 2}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@grid, [-, DIDx], partial = DIDz>>)

// -----

fusion.mesh @grid shape = [2, 2]
// expected-error @+1 {{DIDz needs a mesh with at least 3 axes, @grid has 2}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@grid, [-, -], partial = [DIDz, DIDx]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Stream(0) on dimension 0: S must be positive}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [Stream(0), -]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Stream(-2) on dimension 1: S must be positive}}
func.func @f(%x: tensor<64x16xf32, #fusion.sharding<@tp, [-, Stream(-2)]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{dimension 0 of extent 6 is not divisible by 4 (DIDx on @tp of shape [4])}}
func.func @f(%x: tensor<6x16xf32, #fusion.sharding<@tp, [DIDx, -]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{dimension 1 of extent 6 is not divisible by 4 (Stream(4) on @tp of shape [4])}}
func.func @f(%x: tensor<8x6xf32, #fusion.sharding<@tp, [-, Stream(4)]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{dimension 0 of extent 12 is not divisible by 8 (Stream(2)*DIDx on @tp of shape [4])}}
func.func @f(%x: tensor<12x16xf32, #fusion.sharding<@tp, [Stream(2)*DIDx, -]>>)

// -----

fusion.mesh @grid shape = [2, 4]
// expected-error @+1 {{dimension 0 of extent 4 is not divisible by 8 (DIDy*DIDx on @grid of shape [2, 4])}}
func.func @f(%x: tensor<4x16xf32, #fusion.sharding<@grid, [DIDy*DIDx, -]>>)

// -----

fusion.mesh @grid shape = [2, 4]
// expected-error @+1 {{dimension 1 of extent 6 is not divisible by 4 (DIDx on @grid of shape [2, 4])}}
func.func @f(%x: tensor<4x6xf32, #fusion.sharding<@grid, [DIDy, DIDx]>>)

// -----

fusion.mesh @cube shape = [3, 2, 2]
// expected-error @+1 {{dimension 0 of extent 4 is not divisible by 3 (DIDz on @cube of shape [3, 2, 2])}}
func.func @f(%x: tensor<4x4x4xf32, #fusion.sharding<@cube, [DIDz, DIDy, DIDx]>>)

// -----

fusion.mesh @stage1 shape = [3] devices = [1, 2, 3]
// expected-error @+1 {{dimension 0 of extent 16 is not divisible by 3 (DIDx on @stage1 of shape [3])}}
func.func @f(%x: tensor<16xf32, #fusion.sharding<@stage1, [DIDx]>>)

// -----

// A split that divides the operand but not the result is the op's error.
fusion.mesh @tp shape = [4]
func.func @f(%x: tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) {
  // expected-error @+1 {{'fusion.sum' op invalid sharding #fusion.sharding<@tp, [-, DIDx]> on tensor<8x1xf32>: dimension 1 of extent 1 is not divisible by 4}}
  %y = fusion.sum %x dims = [1] keepdim = true : (tensor<8x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x1xf32, #fusion.sharding<@tp, [-, DIDx]>>
  func.return
}

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{invalid sharding #fusion.sharding<@tp, [DIDx, -]> on tensor<?x16xf32>: a sharded tensor must have a static shape}}
func.func @f(%x: tensor<?x16xf32, #fusion.sharding<@tp, [DIDx, -]>>)

// -----

fusion.mesh @tp shape = [4]
// expected-error @+1 {{Expected '='}}
func.func @f(%x: tensor<64xf32, #fusion.sharding<@tp, [-], partial DIDx>>)

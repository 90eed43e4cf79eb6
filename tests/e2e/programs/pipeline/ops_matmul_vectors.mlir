// Matmuls with 1-D operands (vector-matrix, matrix-vector, dot): the
// contraction split makes partial sums, reduced before the return.
!v = tensor<24x${T}, #fusion.sharding<@tp, [DIDx]>>
!m = tensor<24x8x${T}, #fusion.sharding<@tp, [DIDx, -]>>
!m2 = tensor<8x24x${T}, #fusion.sharding<@tp, [-, DIDx]>>
fusion.mesh @tp shape = [${N}]
func.func @main(%v: !v, %m: !m, %m2: !m2) -> (tensor<8x${T}, #fusion.sharding<@tp, [-]>>, tensor<8x${T}>, tensor<${T}>) {
  %y = fusion.matmul %v, %m : (!v, !m) -> tensor<8x${T}, #fusion.sharding<@tp, [-]>>
  %z = fusion.matmul %m2, %v : (!m2, !v) -> tensor<8x${T}>
  %d = fusion.matmul %v, %v : (!v, !v) -> tensor<${T}>
  func.return %y, %z, %d : tensor<8x${T}, #fusion.sharding<@tp, [-]>>, tensor<8x${T}>, tensor<${T}>
}

// RUN: %fuserc opt -p autodiff %s | filecheck %s --check-prefix=ALL
// RUN: %fuserc opt -p 'autodiff{budget=3}' %s | filecheck %s --check-prefix=B3
// RUN: %fuserc opt -p 'autodiff{budget=0}' %s | filecheck %s --check-prefix=B0
// RUN: not %fuserc opt -p 'autodiff{budget=-2}' %s 2>&1 | filecheck %s --check-prefix=BAD

// Two residual MLP blocks. Saved without a budget: n, h, g, x2, n2, h2, g2
// (4.75 MiB) and each layer_norm's mean and rstd (1 KiB each), which its
// derivative reads instead of reducing its input again. budget = 3: the
// gelu outputs (1 MiB each, redone from h in one pass over memory) are
// recomputed, each just before the weight gradient that reads it.
// budget = 0: only the residual x2 stays (the block's input x is an
// argument): each block's layer_norm, GEMM and gelu are redone in the
// backward, the second block's before the first's, and the forward's
// layer_norms no longer make the statistics nothing reads.
func.func @main(%x: tensor<256x256xf32>, %w1: tensor<256x1024xf32>, %w2: tensor<1024x256xf32>, %w3: tensor<256x1024xf32>, %w4: tensor<1024x256xf32>, %s: tensor<256xf32>) -> tensor<256x256xf32> {
  %n = fusion.layer_norm %x, %s dims = [1] : (tensor<256x256xf32>, tensor<256xf32>) -> tensor<256x256xf32>
  %h = fusion.matmul %n, %w1 : (tensor<256x256xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %g = fusion.gelu %h : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %m = fusion.matmul %g, %w2 : (tensor<256x1024xf32>, tensor<1024x256xf32>) -> tensor<256x256xf32>
  %x2 = fusion.add %x, %m : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  %n2 = fusion.layer_norm %x2, %s dims = [1] : (tensor<256x256xf32>, tensor<256xf32>) -> tensor<256x256xf32>
  %h2 = fusion.matmul %n2, %w3 : (tensor<256x256xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %g2 = fusion.gelu %h2 : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %m2 = fusion.matmul %g2, %w4 : (tensor<256x1024xf32>, tensor<1024x256xf32>) -> tensor<256x256xf32>
  %y = fusion.add %x2, %m2 : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  func.return %y : tensor<256x256xf32>
}

// ALL-LABEL: func.func @main_fwd(
// ALL:         func.return %y, %0, %1, %2, %3, %4, %5, %n, %n_mean, %n_rstd, %h, %g, %x2, %n2, %n2_mean, %n2_rstd, %h2, %g2 :
// ALL-LABEL: func.func @main_bwd(
// ALL-NOT:     fusion.gelu %
// ALL-NOT:     fusion.layer_norm

// B3-LABEL: func.func @main_fwd(
// B3:         func.return %y, %0, %1, %2, %3, %4, %5, %n, %n_mean, %n_rstd, %h, %x2, %n2, %n2_mean, %n2_rstd, %h2 :
// B3-LABEL: func.func @main_bwd(
// B3-SAME:    %h: tensor<256x1024xf32>, %x2: tensor<256x256xf32>, %n2: tensor<256x256xf32>, %n2_mean: tensor<256x1xf32>, %n2_rstd: tensor<256x1xf32>, %h2: tensor<256x1024xf32>, %{{.*}}: tensor<256x256xf32>)
// B3:         %g2 = fusion.gelu %h2
// B3-NEXT:    fusion.permute %g2
// B3:         %g = fusion.gelu %h
// B3-NEXT:    fusion.permute %g
// B3-NOT:     fusion.layer_norm

// B0-LABEL: func.func @main_fwd(
// B0:         %n = fusion.layer_norm %0, %5 dims = [1] : (tensor<256x256xf32>, tensor<256xf32>) -> tensor<256x256xf32>
// B0:         %n2 = fusion.layer_norm %x2, %5 dims = [1] : (tensor<256x256xf32>, tensor<256xf32>) -> tensor<256x256xf32>
// B0:         func.return %y, %0, %1, %2, %3, %4, %5, %x2 :
// B0-LABEL: func.func @main_bwd(
// B0-SAME:    %5: tensor<256xf32>, %x2: tensor<256x256xf32>, %{{.*}}: tensor<256x256xf32>)
// B0:         %n2, %n2_mean, %n2_rstd = fusion.layer_norm %x2, %5
// B0-NEXT:    %h2 = fusion.matmul %n2, %3
// B0-NEXT:    %g2 = fusion.gelu %h2
// B0:         %n, %n_mean, %n_rstd = fusion.layer_norm %0, %5
// B0-NEXT:    %h = fusion.matmul %n, %1
// B0-NEXT:    %g = fusion.gelu %h
// B0:         func.return

// BAD: error: invalid options for pass 'autodiff': budget must be -1 (no limit) or a size in MiB, got -2

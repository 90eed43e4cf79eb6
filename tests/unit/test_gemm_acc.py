"""GEMMs with an accumulator (`hir.matmul ... acc %c`, `hir.linear ... acc
%c`): host programs on the cpu backend through the evaluator against torch
(acc the output itself, another buffer, a view partly overlapping the
output, a running sum over a loop; f32 and bf16), the flops counted as
without acc, and the cuda backend's GEMM-with-epilogue helpers on CPU
tensors for every aliasing case (they only call torch)."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects.builtin import bf16, f32

from fuserc.ir import parse
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.kernels.cuda_gemm import gemm_acc, linear_acc
from fuserc.runtime.evaluator.evaluator import Program
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.dialects.interfaces import torch_dtype

M, K, N = 6, 5, 4

PROGRAM = """
func.func @main(%a: tensor<{m}x{k}x{t}>, %b: tensor<{k}x{n}x{t}>, %w: tensor<{n}x{k}x{t}>, %bias: tensor<{n}x{t}>,
                %c: tensor<{m}x{n}x{t}>, %v: tensor<{k}x{t}>, %sq: tensor<{n}x{n}x{t}>)
    -> (tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>,
        tensor<{n}x{n}x{t}>) attributes {{hir.host}} {{
  %y = hir.alloc "y" : tensor<{m}x{n}x{t}>
  hir.copy %c, %y : tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  hir.matmul %a, %b, %y acc %y : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  %z = hir.alloc "z" : tensor<{m}x{n}x{t}>
  hir.matmul %a, %b, %z acc %c : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  %l = hir.alloc "l" : tensor<{m}x{n}x{t}>
  hir.copy %c, %l : tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  hir.linear %a, %w, %l acc %l : tensor<{m}x{k}x{t}>, tensor<{n}x{k}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  %lb = hir.alloc "lb" : tensor<{m}x{n}x{t}>
  hir.linear %a, %w, %bias, %lb acc %c : tensor<{m}x{k}x{t}>, tensor<{n}x{k}x{t}>, tensor<{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  %r = hir.alloc "r" : tensor<{m}x{n}x{t}>
  hir.copy %c, %r : tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  hir.for %i = 0 to 3 {{
    hir.matmul %a, %b, %r acc %r : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>
  }}
  %s = hir.alloc "s" : tensor<{n}x{n}x{t}>
  hir.copy %sq, %s : tensor<{n}x{n}x{t}>, tensor<{n}x{n}x{t}>
  %c0 = hir.constant 0 : index
  %row = hir.select %s [%c0] dim = 0 : (tensor<{n}x{n}x{t}>, index) -> tensor<{n}x{t}>
  %col = hir.select %s [%c0] dim = 1 : (tensor<{n}x{n}x{t}>, index) -> tensor<{n}x{t}>
  hir.linear %v, %w, %row acc %col : tensor<{k}x{t}>, tensor<{n}x{k}x{t}>, tensor<{n}x{t}>, tensor<{n}x{t}>
  func.return %y, %z, %l, %lb, %r, %s : tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>,
      tensor<{m}x{n}x{t}>, tensor<{m}x{n}x{t}>, tensor<{n}x{n}x{t}>
}}
"""

TOL = {"f32": 1e-5, "bf16": 2e-2}


def _inputs(dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(M, K), (K, N), (N, K), (N,), (M, N), (K,), (N, N)]
    return [torch.randn(s, generator=gen).to(dtype) for s in shapes]


def expected(a, b, w, bias, c, v, sq) -> list[torch.Tensor]:
    """What the program computes, in float64 from the same inputs."""
    a, b, w, bias, c, v, sq = (t.double() for t in (a, b, w, bias, c, v, sq))
    s = sq.clone()
    s[0] = v @ w.T + sq[:, 0]  # the output row is written after the whole column is read
    return [c + a @ b, c + a @ b, c + a @ w.T, c + a @ w.T + bias, c + 3 * (a @ b), s]


def _close(got: torch.Tensor, want: torch.Tensor, t: str, what: str) -> None:
    err = float((got.double() - want).abs().max() / want.abs().max())
    assert err < TOL[t], (what, t, err)


@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_programs_with_acc_on_cpu_match_torch(t: str) -> None:
    dtype = torch_dtype({"f32": f32, "bf16": bf16}[t])
    prog = Program.load(parse(PROGRAM.format(m=M, k=K, n=N, t=t), "acc.mlir"), "main", CpuBackend(mpi_env()))
    try:
        inputs = _inputs(dtype)
        for _ in range(2):  # cached buffers: the second run starts from stale outputs
            got = prog.run(inputs)
            names = ["matmul acc out", "matmul acc c", "linear acc out", "linear bias acc c", "loop", "overlap"]
            for name, g, w in zip(names, got, expected(*inputs), strict=True):
                assert g.dtype == dtype
                _close(g, w, t, name)
        gemm = 2 * M * N * K
        assert prog.last_flops == 2 * gemm + 2 * gemm + 3 * gemm + 2 * N * K  # acc adds no GEMM flops
    finally:
        prog.close()


# ---- the cuda backend's helpers, on CPU tensors ------------------------------------


def _gemm_cases() -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return [
        ("2-D", (M, K), (K, N)),
        ("batched 3-D", (3, M, K), (3, K, N)),
        ("batched lhs", (2, 3, M, K), (K, N)),
        ("broadcast batch", (1, M, K), (3, K, N)),
        ("vector lhs", (K,), (K, N)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", _gemm_cases(), ids=lambda c: c[0])
@pytest.mark.parametrize("alias", ["same", "same view", "disjoint", "strided"])
def test_gemm_acc_matches_matmul_plus_acc(case, dtype: torch.dtype, alias: str) -> None:
    _, sa, sb = case
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(sa, generator=gen).to(dtype), torch.randn(sb, generator=gen).to(dtype)
    ref = torch.matmul(a.double(), b.double())
    out = torch.randn(ref.shape, generator=gen).to(dtype)
    if alias == "same":
        acc = out
    elif alias == "same view":
        acc = out.view(out.shape)  # another tensor object on the same elements
    elif alias == "disjoint":
        acc = torch.randn(ref.shape, generator=gen).to(dtype)
    else:
        acc = torch.randn(tuple(reversed(ref.shape)), generator=gen).to(dtype).permute(*reversed(range(ref.dim())))
    want = ref + acc.double()
    keep = acc.clone()
    gemm_acc(a, b, out, acc)
    _close(out, want, "f32" if dtype == torch.float32 else "bf16", case[0])
    if alias in ("disjoint", "strided"):
        assert torch.equal(acc, keep)  # acc is only read


def test_gemm_acc_partial_overlaps() -> None:
    """acc or an input partly overlapping out: every input is read before
    out is written."""
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(N, K, generator=gen), torch.randn(K, N, generator=gen)
    ab = a.double() @ b.double()
    s = torch.randn(N, N, generator=gen)
    orig = s.clone().double()
    gemm_acc(a, b, s, s.t())  # acc is the transposed output: its elements but the diagonal move
    torch.testing.assert_close(s.double(), ab + orig.t(), rtol=1e-5, atol=1e-5)
    x = torch.randn(2 * N, N, generator=gen)
    x0 = x.clone().double()
    acc = torch.randn(N, N, generator=gen)
    gemm_acc(x[N:], x[:N], x[:N], acc)  # out is the rhs itself
    torch.testing.assert_close(x[:N].double(), x0[N:] @ x0[:N] + acc.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("alias", ["same", "disjoint"])
def test_linear_acc_matches_linear_plus_acc(bias: bool, alias: str) -> None:
    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(2, M, K, generator=gen), torch.randn(N, K, generator=gen)
    bv = torch.randn(N, generator=gen) if bias else None
    out = torch.randn(2, M, N, generator=gen)
    acc = out if alias == "same" else torch.randn(2, M, N, generator=gen)
    want = torch.nn.functional.linear(x.double(), w.double(), bv.double() if bv is not None else None) + acc.double()
    linear_acc(x, w, bv, out, acc)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_linear_acc_bias_overlapping_out() -> None:
    """A bias that is a row of the output is read before the output is written."""
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(N, K, generator=gen), torch.randn(N, K, generator=gen)
    out = torch.randn(N, N, generator=gen)
    orig = out.clone().double()
    acc = torch.randn(N, N, generator=gen)
    linear_acc(x, w, out[0], out, acc)
    torch.testing.assert_close(out.double(), x.double() @ w.double().T + orig[0] + acc.double(), rtol=1e-5, atol=1e-5)


EPILOGUES = """
func.func @main(%x: tensor<12x16x{t}>, %w: tensor<24x16x{t}>, %b: tensor<24x{t}>, %w2: tensor<16x24x{t}>,
                %r: tensor<12x16x{t}>) -> tensor<12x16x{t}> {{
  %u = fusion.linear %x, %w, %b : (tensor<12x16x{t}>, tensor<24x16x{t}>, tensor<24x{t}>) -> tensor<12x24x{t}>
  %g = fusion.gelu %u {{approximate = "tanh"}} : (tensor<12x24x{t}>) -> tensor<12x24x{t}>
  %m = fusion.linear %g, %w2 : (tensor<12x24x{t}>, tensor<16x24x{t}>) -> tensor<12x16x{t}>
  %y = fusion.add %r, %m : (tensor<12x16x{t}>, tensor<12x16x{t}>) -> tensor<12x16x{t}>
  func.return %y : tensor<12x16x{t}>
}}
"""


@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_gemm_epilogues_against_torch(t: str) -> None:
    """The MLP's linear+bias+tanh-GELU and the residual add after its second
    linear run in the GEMMs' epilogues (hir.linear's activation and acc),
    against PyTorch; cuda where there is a GPU (cuBLASLt's epilogue)."""
    from fuserc.runtime.evaluator.program import compile_text

    prog = compile_text(EPILOGUES.format(t=t), backend="auto")
    host = prog.host_ir()
    assert 'activation = "gelu_tanh"' in host and " acc %r" in host and "hir.launch" not in host
    x, w, b, w2, r = prog.random_inputs(2)
    (got,) = prog.execute([x, w, b, w2, r])
    f = lambda v: v.double()  # noqa: E731
    want = torch.nn.functional.linear(
        torch.nn.functional.gelu(torch.nn.functional.linear(f(x), f(w), f(b)), approximate="tanh"), f(w2)
    ) + f(r)
    tol = 1e-5 if t == "f32" else 3e-2
    torch.testing.assert_close(torch.as_tensor(got).cpu().double(), want, rtol=tol, atol=tol)
    prog.close()

"""Attention with its saved log-sum-exp: `fusion.sdpa`'s second result and
`fusion.sdpa_grad` (runtime/kernels/attention.py), against PyTorch's sdpa and its
autograd in float64: the reference evaluator, the formulas of the math
path, and on a GPU every fused backend PyTorch has (flash, memory-efficient,
cuDNN), each forced in turn."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fuserc.ir import parse
from fuserc.runtime.kernels import attention
from fuserc.runtime.evaluator.reference import evaluate

# (q, k, v shapes, causal, scale): grouped heads, a scale, q and k of other
# lengths, v of another head_dim.
SHAPES = [
    (((2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)), True, None),
    (((1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 4)), True, 0.5),
    (((1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3)), False, 0.5),
]


def _t(shape: tuple[int, ...], elem: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{elem}>"


def _program(shapes: tuple, causal: bool, scale: float | None, elem: str) -> str:
    (b, h, sq, _), (_, hk, sk, _), (_, _, _, dv) = shapes
    q, k, v = (_t(s, elem) for s in shapes)
    o, lse = _t((b, h, sq, dv), elem), _t((b, h, sq), "f64" if elem == "f64" else "f32")
    kw = (f" scale = {scale}" if scale is not None else "") + (" causal = true" if causal else "")
    return f"""func.func @main(%q: {q}, %k: {k}, %v: {v}, %g: {o}) -> ({o}, {lse}, {q}, {k}, {v}) {{
  %o, %lse = fusion.sdpa %q, %k, %v{kw} : ({q}, {k}, {v}) -> ({o}, {lse})
  %dq, %dk, %dv = fusion.sdpa_grad %q, %k, %v, %o, %lse, %g{kw} : ({q}, {k}, {v}, {o}, {lse}, {o}) -> ({q}, {k}, {v})
  func.return %o, %lse, %dq, %dk, %dv : {o}, {lse}, {q}, {k}, {v}
}}
"""


def _torch(args: list[torch.Tensor], causal: bool, scale: float | None) -> list[torch.Tensor]:
    """out, lse, dq, dk, dv by PyTorch's sdpa and autograd in float64."""
    q, k, v, g = (a.double().detach().requires_grad_(True) for a in args)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    groups = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(groups, 1).transpose(-2, -1) * (scale or q.shape[-1] ** -0.5)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return [out.detach(), torch.logsumexp(s, -1).detach(), dq, dk, dv]


def _inputs(shapes: tuple, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    (b, h, sq, _), _, (_, _, _, dv) = shapes
    return [torch.randn(s, generator=gen).to(dtype) for s in (*shapes, (b, h, sq, dv))]


@pytest.mark.parametrize("shapes, causal, scale", SHAPES)
def test_reference_in_float64_is_pytorchs_attention_and_autograd(shapes: tuple, causal: bool, scale: float | None) -> None:
    args = _inputs(shapes, torch.float32)
    got = evaluate(parse(_program(shapes, causal, scale, "f32")), args)
    for g, w, name in zip(got, _torch(args, causal, scale), ("out", "lse", "dq", "dk", "dv")):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("elem, dtype, tol", [("f32", torch.float32, 1e-5), ("bf16", torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("shapes, causal, scale", SHAPES)
def test_declared_dtypes_on_the_cpu(shapes: tuple, causal: bool, scale: float | None, elem: str, dtype: torch.dtype, tol: float) -> None:
    """The CPU backend's kernels (PyTorch's flash attention for CPU, or its
    math path): the output is PyTorch's sdpa bit for bit, the log-sum-exp
    in f32, the gradients within the element type's rounding."""
    args = _inputs(shapes, dtype)
    out, lse, *grads = evaluate(parse(_program(shapes, causal, scale, elem)), args, accumulate=None)
    want = _torch([a.double() for a in args], causal, scale)
    q, k, v = args[:3]
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]),
        rtol=0, atol=0,
    )
    assert lse.dtype == torch.float32 and out.dtype == dtype
    torch.testing.assert_close(lse.double(), want[1], rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want[2:]):
        assert g.dtype == dtype
        assert (g.double() - w).abs().max() <= tol * max(1.0, w.abs().max().item())


@pytest.mark.parametrize("shapes, causal, scale", SHAPES)
def test_math_path_formulas(shapes: tuple, causal: bool, scale: float | None) -> None:
    """`math_forward`/`math_backward` (where no fused kernel applies) in
    float64 against autograd."""
    args = [a.double() for a in _inputs(shapes, torch.float32)]
    q, k, v, g = args
    out, lse = attention.math_forward(q, k, v, causal, scale)
    grads = attention.math_backward(g, q, k, v, out, lse, causal, scale)
    for got, w in zip([out, lse, *grads], _torch(args, causal, scale)):
        torch.testing.assert_close(got, w, rtol=1e-12, atol=1e-12)


def test_backward_reads_the_saved_statistics() -> None:
    """The backward takes the log-sum-exp it is given (no forward computed
    again): a statistic off by log 2 halves every attention weight."""
    shapes = SHAPES[0][0]
    q, k, v, g = (a.double() for a in _inputs(shapes, torch.float32))
    out, lse = attention.forward(q, k, v, True, None)
    right = attention.backward(g, q, k, v, out, lse, True, None)
    off = attention.backward(g, q, k, v, out, lse + torch.log(torch.tensor(2.0, dtype=torch.float64)), True, None)
    assert not torch.allclose(right[2], off[2])
    torch.testing.assert_close(off[2], right[2] / 2)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@CUDA
@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"])
@pytest.mark.parametrize("shapes, causal, scale", [
    (((2, 4, 256, 64), (2, 2, 256, 64), (2, 2, 256, 64)), True, None),
    (((1, 8, 200, 128), (1, 8, 200, 128), (1, 8, 200, 128)), True, 0.1),
    (((1, 4, 100, 64), (1, 4, 300, 64), (1, 4, 300, 64)), False, None),
    (((1, 4, 64, 12), (1, 4, 64, 12), (1, 4, 64, 12)), True, None),  # head dims flash takes only padded
    (((2, 2, 40, 4), (2, 2, 40, 4), (2, 2, 40, 4)), False, 0.3),
])  # fmt: skip
def test_cuda_backends(backend: str, shapes: tuple, causal: bool, scale: float | None) -> None:
    """Each fused backend PyTorch has, forced in turn, on q, k, v, the
    output and its cotangent strided as the lowering hands them over (the
    heads of [B, S, H, D] buffers): forward, statistic and backward against
    float64 autograd. Where PyTorch's sdpa would take the backend for
    these tensors, so does fuserc's (a head dim of no multiple of 8
    padded for flash, as sdpa pads it)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    args = _inputs(shapes, torch.bfloat16)
    want = _torch([a.double() for a in args], causal, scale)
    strided = [a.cuda().transpose(1, 2).contiguous().transpose(1, 2) for a in args]
    q, k, v, g = strided
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        try:
            chosen = attention.choice(q, k, v, causal, scale)
        except RuntimeError as e:  # no backend of those asked for takes these shapes
            pytest.skip(f"{backend}: {str(e).splitlines()[0]}")
        if chosen != getattr(attention, backend.removesuffix("_ATTENTION")):
            pytest.skip(f"PyTorch's sdpa does not take {backend} for these shapes here")
        out, lse = attention.forward(q, k, v, causal, scale)
        grads = attention.backward(g, q, k, v, out, lse, causal, scale)
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    torch.testing.assert_close(lse.cpu().double(), want[1], rtol=2e-2, atol=2e-2)
    for got, w in zip([out, *grads], [want[0], *want[2:]]):
        assert got.dtype == torch.bfloat16
        assert (got.cpu().double() - w).abs().max() <= 3e-2 * max(1.0, w.abs().max().item())


def test_a_gpt_step_lets_attention_results_and_the_embedding_gradient_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a GPT model's step, a result that PyTorch's kernel makes stands
    for its output buffer (`Backend.launch_made`) where the backend says so
    (`makes_results`): attention's output in the forward (a result the
    caller keeps for the backward), dq, dk and dv in the backward, and the
    embedding table's gradient (`embedding_grad`). No buffer is taken for
    them (`stand_ins.Later`): the allocation cache holds none for their
    sites, and the forward's go to the caller uncopied. The loss and every gradient stay PyTorch's (float64)."""
    import argparse
    import sys
    from pathlib import Path

    import fuserc.torch as ft
    from fuserc.dialects import hir
    from fuserc.runtime.evaluator import evaluator
    from fuserc.runtime.kernels.attention import runs_region

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "python"))
    from train_gpt import build, initial_weights, reference_loss

    made: list[tuple[int, ...]] = []
    stand = evaluator.Program.made_for
    monkeypatch.setattr(evaluator.Program, "made_for", lambda self, b, m: (made.append(tuple(m.shape)), stand(self, b, m))[1])
    a = argparse.Namespace(layers=2, hidden=64, tokens=32, heads=4, ffn=256, vocab=128, dtype="f32", dropout=0.0, seed=0)
    fd, _ = build(a, 1)
    w = initial_weights(a)
    g = torch.Generator().manual_seed(3)
    ids, labels = torch.randint(0, 128, (32,), generator=g), torch.randint(0, 128, (32,), generator=g)
    ps = [t.clone().requires_grad_(True) for t in w]
    f = ft.function(fd)
    heads = (1, 32, 4, 16)  # [batch, tokens, heads, head dim]: attention's output, dq, dk, dv
    clone = torch.Tensor.clone
    cloned: list[tuple[int, ...]] = []
    monkeypatch.setattr(torch.Tensor, "clone", lambda self, *a, **k: (cloned.append(tuple(self.shape)), clone(self, *a, **k))[1])
    try:
        loss = f(ids, labels, *ps)
        assert made == [heads] * 2
        assert cloned == []  # the saved outputs go to the caller as the kernel made them
        made.clear()
        loss.backward()
        assert made == [heads] * 6 + [(128, 64)]  # dq, dk, dv of each layer; the embedding table's gradient
        bwd = next(iter(f._loaded.values())).programs["main_bwd"]
        launches = [o for o in bwd.func.walk() if isinstance(o, hir.LaunchOp) and runs_region(o.body.block)]
        sites = {v.owner.site for o in launches for v in o.outs if isinstance(v.owner, hir.AllocOp)}
        assert len(sites) == 6 and not sites & {e.key[0] for e in bwd.cache}
    finally:
        f.close()
    rs = [t.double().requires_grad_(True) for t in w]
    want = reference_loss(ids, labels, rs, a)
    want.backward()
    torch.testing.assert_close(loss.detach().double(), want.detach(), rtol=1e-5, atol=1e-6)
    for p, r in zip(ps, rs, strict=True):
        torch.testing.assert_close(p.grad.double(), r.grad, rtol=1e-4, atol=1e-6)

"""The ops a transformer layer needs, end to end against PyTorch.

Each program below applies a family of ops (math functions, comparisons and
`where`, broadcasting, reductions, norms, softmaxes, attention, the
vocabulary-parallel embedding, its gradient and loss, dropout, concat) to sharded and
unsharded operands, plus transformer blocks written as nvFuser's tests write
them (MLP, attention, forward). Each runs on 1, 2 and 4 ranks in f32 and
bf16 through the default pipeline, all programs of one job size in ONE
mpiexec launch (tests/e2e/batch.py). The batch saves each run's global
inputs and results (as `fuserc run --save-outputs`); the expected results
are computed here by PyTorch in float64 on those inputs, not by fuserc's
own reference evaluator.

A template's `${N}` is the job size (the mesh of every program is all
ranks) and `${T}` the element type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from batch import Outcome, launch_batches
from fuserc.dialects.interfaces import keep_threshold, uniform_bits
from harness import BACKEND, MPIEXEC, expand, too_few_gpus

RANKS = (1, 2, 4)
DTYPES = ("f32", "bf16")
PIPELINE = {"default": "default"}
TOLERANCE = {"f32": 1e-4, "bf16": 4e-2}
"""max|out - expected| <= tol * max|expected| per result (bf16: its rounding
of results and intermediates)."""

Tensors = list[torch.Tensor]


def _s(*axes: str) -> str:
    return f"#fusion.sharding<@m, [{', '.join(axes)}]>"


@dataclass(frozen=True)
class Program:
    """A template and the PyTorch computation of its results from the
    float64 global inputs (integer and boolean inputs as they are) and the
    element type."""

    name: str
    text: str
    expected: Callable[[Tensors, str], Tensors]
    check: Callable[[Tensors, Tensors, str], None] | None = None
    """Extra checks on (inputs, results, dtype)."""


MESH = "fusion.mesh @m shape = [${N}]\n"

# ---- math functions -----------------------------------------------------------------

UNARY = MESH + f"""
!xs = tensor<8x12x${{T}}, {_s("DIDx", "-")}>
!ps = tensor<8x12x${{T}}, {_s("-", "DIDx")}>
!t = tensor<8x12x${{T}}>
!c = tensor<${{T}}>
func.func @main(%x: !xs, %p: !ps) -> (!t, !t, !t, !t, !t, !t, !t, !t, !t, !xs, !ps) {{
  %0 = fusion.rsqrt %p : (!ps) -> !t
  %1 = fusion.sqrt %p : (!ps) -> !t
  %2 = fusion.log %p : (!ps) -> !t
  %3 = fusion.reciprocal %p : (!ps) -> !t
  %4 = fusion.abs %x : (!xs) -> !t
  %5 = fusion.erf %x : (!xs) -> !t
  %6 = fusion.sin %x : (!xs) -> !t
  %7 = fusion.cos %x : (!xs) -> !t
  %e = fusion.constant 1.5 : () -> !c
  %8 = fusion.pow %p, %e : (!ps, !c) -> !t
  %one = fusion.constant 1.0 : () -> !c
  %a = fusion.abs %x : (!xs) -> !xs
  %a1 = fusion.add %a, %one : (!xs, !c) -> !xs
  %l = fusion.log %a1 : (!xs) -> !xs
  %s = fusion.sqrt %a1 : (!xs) -> !xs
  %r = fusion.rsqrt %a1 : (!xs) -> !xs
  %q = fusion.reciprocal %r : (!xs) -> !xs
  %er = fusion.erf %l : (!xs) -> !xs
  %si = fusion.sin %s : (!xs) -> !xs
  %co = fusion.cos %q : (!xs) -> !xs
  %pw = fusion.pow %a1, %er : (!xs, !xs) -> !xs
  %m1 = fusion.mul %si, %co : (!xs, !xs) -> !xs
  %9 = fusion.add %m1, %pw : (!xs, !xs) -> !xs
  %pl = fusion.sqrt %p : (!ps) -> !ps
  %10 = fusion.pow %pl, %e : (!ps, !c) -> !ps
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10 : !t, !t, !t, !t, !t, !t, !t, !t, !t, !xs, !ps
}}
"""


def unary(a: Tensors, dtype: str) -> Tensors:
    x, p = a
    a1 = x.abs() + 1
    chain = torch.sin(a1.sqrt()) * torch.cos(torch.reciprocal(torch.rsqrt(a1))) + torch.pow(a1, torch.erf(a1.log()))
    return [p.rsqrt(), p.sqrt(), p.log(), p.reciprocal(), x.abs(), torch.erf(x), x.sin(), x.cos(),
            torch.pow(p, 1.5), chain, torch.pow(p.sqrt(), 1.5)]  # fmt: skip


# ---- comparisons, where, constants, iota, broadcasting -------------------------------

BINARY = MESH + f"""
!as = tensor<8x12x${{T}}, {_s("DIDx", "-")}>
!b = tensor<12x${{T}}>
!c = tensor<${{T}}>
!d = tensor<8x1x${{T}}, {_s("DIDx", "-")}>
!t = tensor<8x12x${{T}}>
!m = tensor<8x12xi1>
!ms = tensor<8x12xi1, {_s("-", "DIDx")}>
!ir = tensor<8x12xi64, {_s("DIDx", "-")}>
!ic = tensor<8x12xi64, {_s("-", "DIDx")}>
func.func @main(%a: !as, %b: !b, %s: !c, %d: !d)
    -> (!t, !m, !m, !ms, !m, !m, !m, !t, !t, !ir, !ic, !m, !t, !t, !c, tensor<8x12x${{T}}, {_s("-", "DIDx")}>, !t) {{
  %0 = fusion.minimum %a, %b : (!as, !b) -> !t
  %1 = fusion.lt %a, %b : (!as, !b) -> !m
  %2 = fusion.le %a, %d : (!as, !d) -> !m
  %3 = fusion.gt %a, %s : (!as, !c) -> !ms
  %4 = fusion.ge %b, %a : (!b, !as) -> !m
  %mx = fusion.maximum %a, %b : (!as, !b) -> !t
  %5 = fusion.eq %a, %mx : (!as, !t) -> !m
  %6 = fusion.ne %a, %mx : (!as, !t) -> !m
  %7 = fusion.where %1, %a, %d : (!m, !as, !d) -> !t
  %k = fusion.constant -2.5 : () -> !c
  %8 = fusion.where %3, %k, %b : (!ms, !c, !b) -> !t
  %9 = fusion.iota dim = 1 : () -> !ir
  %10 = fusion.iota dim = 0 : () -> !ic
  %11 = fusion.eq %9, %10 : (!ir, !ic) -> !m
  %12 = fusion.sub %d, %b : (!d, !b) -> !t
  %13 = fusion.add %a, %s : (!as, !c) -> !t
  %14 = fusion.mul %s, %s : (!c, !c) -> !c
  %f = fusion.iota dim = 0 : () -> tensor<8x12x${{T}}, {_s("-", "DIDx")}>
  %15 = fusion.mul %f, %k : (tensor<8x12x${{T}}, {_s("-", "DIDx")}>, !c) -> tensor<8x12x${{T}}, {_s("-", "DIDx")}>
  %c1 = fusion.cast %1 : (!m) -> !t
  %c3 = fusion.cast %3 : (!ms) -> !t
  %16 = fusion.add %c1, %c3 : (!t, !t) -> !t
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16
      : !t, !m, !m, !ms, !m, !m, !m, !t, !t, !ir, !ic, !m, !t, !t, !c, tensor<8x12x${{T}}, {_s("-", "DIDx")}>, !t
}}
"""


def binary(t: Tensors, dtype: str) -> Tensors:
    a, b, s, d = t
    mx = torch.maximum(a, b)
    k = torch.tensor(-2.5, dtype=a.dtype)
    cols = torch.arange(12).expand(8, 12)
    rows = torch.arange(8)[:, None].expand(8, 12)
    return [torch.minimum(a, b), a < b, a <= d, a > s, b >= a, a == mx, a != mx, torch.where(a < b, a, d),
            torch.where(a > s, k, b), cols, rows, cols == rows, d - b, a + s, s * s, rows.double() * k,
            (a < b).double() + (a > s).double()]  # fmt: skip


# ---- reductions ---------------------------------------------------------------------------

REDUCE = MESH + f"""
!x = tensor<4x8x12x${{T}}, {_s("-", "DIDx", "-")}>
!y = tensor<4x8x12x${{T}}, {_s("-", "-", "DIDx")}>
func.func @main(%x: !x, %y: !y) -> (tensor<4x12x${{T}}>, tensor<4x1x12x${{T}}>, tensor<8x${{T}}>, tensor<4x12x${{T}}>,
    tensor<4x1x1x${{T}}>, tensor<4x12x${{T}}>, tensor<4x1x1x${{T}}>, tensor<4x8x${{T}}>, tensor<4x8x${{T}}>, tensor<4x8x${{T}}>) {{
  %0 = fusion.mean %x dims = [1] : (!x) -> tensor<4x12x${{T}}>
  %1 = fusion.mean %x dims = [1] keepdim = true : (!x) -> tensor<4x1x12x${{T}}>
  %2 = fusion.mean %x dims = [0, 2] : (!x) -> tensor<8x${{T}}>
  %3 = fusion.min %x dims = [1] : (!x) -> tensor<4x12x${{T}}>
  %4 = fusion.min %x dims = [1, 2] keepdim = true : (!x) -> tensor<4x1x1x${{T}}>
  %5 = fusion.var %x dims = [1] : (!x) -> tensor<4x12x${{T}}>
  %6 = fusion.var %x dims = [-2, 2] correction = 0 keepdim = true : (!x) -> tensor<4x1x1x${{T}}>
  %7 = fusion.var %y dims = [2] correction = 0 : (!y) -> tensor<4x8x${{T}}>
  %8 = fusion.mean %y dims = [-1] : (!y) -> tensor<4x8x${{T}}>
  %9 = fusion.min %y dims = [2] : (!y) -> tensor<4x8x${{T}}>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9 : tensor<4x12x${{T}}>, tensor<4x1x12x${{T}}>, tensor<8x${{T}}>,
      tensor<4x12x${{T}}>, tensor<4x1x1x${{T}}>, tensor<4x12x${{T}}>, tensor<4x1x1x${{T}}>, tensor<4x8x${{T}}>,
      tensor<4x8x${{T}}>, tensor<4x8x${{T}}>
}}
"""


def reduce(t: Tensors, dtype: str) -> Tensors:
    x, y = t
    return [x.mean(1), x.mean(1, keepdim=True), x.mean((0, 2)), x.amin(1), x.amin((1, 2), keepdim=True), x.var(1),
            x.var((1, 2), correction=0, keepdim=True), y.var(2, correction=0), y.mean(-1), y.amin(2)]  # fmt: skip


# ---- norms ---------------------------------------------------------------------------------

NORMS = MESH + f"""
!x1 = tensor<4x8x16x${{T}}, {_s("-", "-", "DIDx")}>
!x2 = tensor<4x8x16x${{T}}, {_s("-", "DIDx", "-")}>
!x3 = tensor<4x8x16x${{T}}, {_s("DIDx", "-", "-")}>
!w1 = tensor<16x${{T}}, {_s("DIDx")}>
!b1 = tensor<16x${{T}}>
!w2 = tensor<8x16x${{T}}, {_s("DIDx", "-")}>
!t = tensor<4x8x16x${{T}}>
!s1 = tensor<4x8x1xf32, {_s("-", "-", "-")}>
!s2 = tensor<4x1x1xf32>
!s3 = tensor<4x8x1xf32, {_s("DIDx", "-", "-")}>
func.func @main(%x1: !x1, %w1: !w1, %b1: !b1, %x2: !x2, %w2: !w2, %x3: !x3) -> (!x1, !x1, !t, !t, !x3, !x3, !s1, !s1, !s1, !s2, !s2, !s3, !s3) {{
  %0, %m1, %r1 = fusion.layer_norm %x1, %w1, %b1 dims = [2] : (!x1, !w1, !b1) -> (!x1, !s1, !s1)
  %1, %q1 = fusion.rms_norm %x1, %w1 dims = [-1] eps = 1.0e-06 : (!x1, !w1) -> (!x1, !s1)
  %2, %m2, %r2 = fusion.layer_norm %x2, %w2 dims = [1, 2] eps = 1.0e-03 : (!x2, !w2) -> (!t, !s2, !s2)
  %3 = fusion.rms_norm %x2, %w2 dims = [1, 2] : (!x2, !w2) -> !t
  %4, %m3 = fusion.layer_norm %x3, %b1, %b1 dims = [2] : (!x3, !b1, !b1) -> (!x3, !s3)
  %5, %q3 = fusion.rms_norm %x3, %b1 dims = [2] eps = 1.0e-05 : (!x3, !b1) -> (!x3, !s3)
  func.return %0, %1, %2, %3, %4, %5, %m1, %r1, %q1, %m2, %r2, %m3, %q3 : !x1, !x1, !t, !t, !x3, !x3, !s1, !s1, !s1, !s2, !s2, !s3, !s3
}}
"""


def _stats(x: torch.Tensor, dims: list[int], eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A norm's statistics as torch.native_layer_norm gives them: mean and
    rstd of layer_norm, and rms_norm's rstd."""
    var, mean = torch.var_mean(x, dim=dims, correction=0, keepdim=True)
    return mean, torch.rsqrt(var + eps), torch.rsqrt(x.square().mean(dim=dims, keepdim=True) + eps)


def norms(t: Tensors, dtype: str) -> Tensors:
    """The norms and the statistics they return when asked (the mean and
    rstd autodiff saves): over a split hidden dim (reduced across ranks),
    over two dims one split, and rows split (local)."""
    x1, w1, b1, x2, w2, x3 = t
    eps = torch.finfo(torch.bfloat16 if dtype == "bf16" else torch.float32).eps  # rms_norm's default
    m1, r1, _ = _stats(x1, [2], 1e-5)
    q1 = _stats(x1, [2], 1e-6)[2]
    m2, r2, _ = _stats(x2, [1, 2], 1e-3)
    m3, _, q3 = _stats(x3, [2], 1e-5)
    return [F.layer_norm(x1, [16], w1, b1, 1e-5), F.rms_norm(x1, [16], w1, 1e-6), F.layer_norm(x2, [8, 16], w2, None, 1e-3),
            F.rms_norm(x2, [8, 16], w2, eps), F.layer_norm(x3, [16], b1, b1, 1e-5), F.rms_norm(x3, [16], b1, 1e-5),
            m1, r1, q1, m2, r2, m3, q3]  # fmt: skip


# ---- softmax, log_softmax -----------------------------------------------------------------

SOFTMAX = MESH + f"""
!x = tensor<8x16x${{T}}, {_s("-", "DIDx")}>
!y = tensor<8x16x${{T}}, {_s("DIDx", "-")}>
func.func @main(%x: !x, %y: !y) -> (!x, !x, !y, !y, !y) {{
  %0 = fusion.softmax %x dim = 1 : (!x) -> !x
  %1 = fusion.log_softmax %x dim = 1 : (!x) -> !x
  %2 = fusion.log_softmax %x dim = -1 : (!x) -> !y
  %3 = fusion.log_softmax %y dim = 0 : (!y) -> !y
  %4 = fusion.log_softmax %y dim = 1 : (!y) -> !y
  func.return %0, %1, %2, %3, %4 : !x, !x, !y, !y, !y
}}
"""


def softmax(t: Tensors, dtype: str) -> Tensors:
    x, y = t
    return [x.softmax(1), x.log_softmax(1), x.log_softmax(-1), y.log_softmax(0), y.log_softmax(1)]


# ---- attention -------------------------------------------------------------------------------

SDPA = MESH + f"""
!q1 = tensor<2x4x8x8x${{T}}, {_s("-", "DIDx", "-", "-")}>
!q2 = tensor<2x8x8x8x${{T}}, {_s("-", "DIDx", "-", "-")}>
!k2 = tensor<2x4x8x8x${{T}}, {_s("-", "DIDx", "-", "-")}>
!q3 = tensor<1x2x6x4x${{T}}>
!k3 = tensor<1x2x10x4x${{T}}>
!v3 = tensor<1x2x10x6x${{T}}>
!q4 = tensor<4x4x8x8x${{T}}, {_s("DIDx", "-", "-", "-")}>
!k4 = tensor<4x2x8x8x${{T}}, {_s("DIDx", "-", "-", "-")}>
!q5 = tensor<2x2x8x8x${{T}}, {_s("-", "-", "DIDx", "-")}>
!k5 = tensor<2x2x8x8x${{T}}>
func.func @main(%q1: !q1, %k1: !q1, %v1: !q1, %q2: !q2, %k2: !k2, %v2: !k2, %q3: !q3, %k3: !k3, %v3: !v3,
                %q4: !q4, %k4: !k4, %v4: !k4, %q5: !q5, %k5: !k5, %v5: !k5) -> (!q1, !q2, tensor<1x2x6x6x${{T}}>, !q4, !q5) {{
  %0 = fusion.sdpa %q1, %k1, %v1 causal = true : (!q1, !q1, !q1) -> !q1
  %1 = fusion.sdpa %q2, %k2, %v2 scale = 0.25 causal = true : (!q2, !k2, !k2) -> !q2
  %2 = fusion.sdpa %q3, %k3, %v3 scale = 0.5 : (!q3, !k3, !v3) -> tensor<1x2x6x6x${{T}}>
  %3 = fusion.sdpa %q4, %k4, %v4 : (!q4, !k4, !k4) -> !q4
  %4 = fusion.sdpa %q5, %k5, %v5 causal = true : (!q5, !k5, !k5) -> !q5
  func.return %0, %1, %2, %3, %4 : !q1, !q2, tensor<1x2x6x6x${{T}}>, !q4, !q5
}}
"""


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
               scale: float | None = None) -> torch.Tensor:
    """Attention written out (not torch's sdpa), grouped-query by repeating
    k and v heads, causal mask aligned to the top left as torch's."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v


def sdpa(t: Tensors, dtype: str) -> Tensors:
    q1, k1, v1, q2, k2, v2, q3, k3, v3, q4, k4, v4, q5, k5, v5 = t
    return [_attention(q1, k1, v1, causal=True), _attention(q2, k2, v2, True, 0.25), _attention(q3, k3, v3, scale=0.5),
            _attention(q4, k4, v4), _attention(q5, k5, v5, causal=True)]  # fmt: skip


# ---- vocabulary-parallel embedding, its gradient and cross_entropy -----------------------------------------

VOCAB = MESH + f"""
!ids = tensor<4x6xi64>
!idr = tensor<4x6xi64, {_s("DIDx", "-")}>
!tv = tensor<32x16x${{T}}, {_s("DIDx", "-")}>
!th = tensor<32x16x${{T}}, {_s("-", "DIDx")}>
!e = tensor<4x6x16x${{T}}>
!eh = tensor<4x6x16x${{T}}, {_s("-", "-", "DIDx")}>
!lv = tensor<8x32x${{T}}, {_s("-", "DIDx")}>
!lr = tensor<8x32x${{T}}, {_s("DIDx", "-")}>
!l = tensor<8x32x${{T}}>
!y = tensor<8xi64>
!yr = tensor<8xi64, {_s("DIDx")}>
!loss = tensor<${{T}}>
!er = tensor<4x6x16x${{T}}, {_s("DIDx", "-", "-")}>
!t = tensor<32x16x${{T}}>
func.func @main(%ids: !ids, %idr: !idr, %tv: !tv, %th: !th, %lv: !lv, %y: !y, %lr: !lr, %yr: !yr, %l: !l, %y3: !y,
                %g: !e, %gh: !eh, %gr: !er)
    -> (!e, !eh, !e, !loss, !loss, !loss, !t, !th, !t) {{
  %0 = fusion.embedding %ids, %tv : (!ids, !tv) -> !e
  %1 = fusion.embedding %ids, %th : (!ids, !th) -> !eh
  %2 = fusion.embedding %idr, %tv : (!idr, !tv) -> !e
  %3 = fusion.cross_entropy %lv, %y : (!lv, !y) -> !loss
  %4 = fusion.cross_entropy %lr, %yr : (!lr, !yr) -> !loss
  %5 = fusion.cross_entropy %l, %y3 : (!l, !y) -> !loss
  %6 = fusion.embedding_grad %g, %ids vocab = 32 : (!e, !ids) -> !t
  %7 = fusion.embedding_grad %gh, %ids vocab = 32 : (!eh, !ids) -> !th
  %8 = fusion.embedding_grad %gr, %idr vocab = 32 : (!er, !idr) -> !t
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8 : !e, !eh, !e, !loss, !loss, !loss, !t, !th, !t
}}
"""


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return -(logits.log_softmax(1).gather(1, labels[:, None])).mean()


def _embedding_grad(g: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    table = torch.zeros(vocab, g.shape[-1], dtype=g.dtype, requires_grad=True)
    torch.nn.functional.embedding(ids, table).backward(g)
    return table.grad


def vocab(t: Tensors, dtype: str) -> Tensors:
    ids, idr, tv, th, lv, y, lr, yr, l, y3, g, gh, gr = t
    return [tv[ids], th[ids], tv[idr], _cross_entropy(lv, y), _cross_entropy(lr, yr), _cross_entropy(l, y3),
            _embedding_grad(g, ids, 32), _embedding_grad(gh, ids, 32), _embedding_grad(gr, idr, 32)]  # fmt: skip


# ---- dropout -----------------------------------------------------------------------------------

DROPOUT = MESH + f"""
!r = tensor<32x32x${{T}}, {_s("DIDx", "-")}>
!c = tensor<32x32x${{T}}, {_s("-", "DIDx")}>
!w = tensor<32x32x${{T}}, {_s("-", "-")}>
func.func @main(%x: !r, %seed: tensor<i64>) -> (!r, !c, !w, !r, !c) {{
  %0 = fusion.dropout %x, %seed p = 0.25 : (!r, tensor<i64>) -> !r
  %xc = fusion.set %x : (!r) -> !c
  %1 = fusion.dropout %xc, %seed p = 0.25 : (!c, tensor<i64>) -> !c
  %xw = fusion.set %x : (!r) -> !w
  %2 = fusion.dropout %xw, %seed p = 0.25 : (!w, tensor<i64>) -> !w
  %3 = fusion.dropout %x, %seed p = 0.0 : (!r, tensor<i64>) -> !r
  %4 = fusion.dropout %x, %seed p = 0.25 : (!r, tensor<i64>) -> !c
  func.return %0, %1, %2, %3, %4 : !r, !c, !w, !r, !c
}}
"""


def _dropout_mask(seed: torch.Tensor, shape: tuple[int, ...], p: float) -> torch.Tensor:
    """The counter-based mask the reference evaluator draws: uniform bits of
    (seed, row-major global index), kept where >= the threshold of p."""
    index = torch.arange(math.prod(shape), dtype=torch.int64).reshape(shape)
    return uniform_bits(seed.to(torch.int64), index) >= keep_threshold(p)


def dropout(t: Tensors, dtype: str) -> Tensors:
    x, seed = t
    keep = _dropout_mask(seed, tuple(x.shape), 0.25)
    y = torch.where(keep, x / 0.75, torch.zeros(()))
    return [y, y, y, x, y]


def dropout_check(inputs: Tensors, results: Tensors, dtype: str) -> None:
    x, seed = inputs
    masks = [r != 0 for r in results]
    for m in masks[1:3] + masks[4:]:  # the same mask whatever the sharding
        assert torch.equal(m, masks[0])
    keep = _dropout_mask(seed, tuple(x.shape), 0.25)
    assert torch.equal(masks[0], keep & (x != 0))
    fraction = keep.double().mean().item()
    assert 0.70 < fraction < 0.80, fraction  # 1 - p, within 3.7 standard deviations of 1024 draws


# ---- concat -------------------------------------------------------------------------------------

CONCAT = MESH + f"""
!a = tensor<8x4x${{T}}, {_s("DIDx", "-")}>
!b = tensor<8x8x${{T}}, {_s("DIDx", "-")}>
!c = tensor<4x4x${{T}}>
func.func @main(%a: !a, %b: !b, %c: !c) -> (tensor<8x12x${{T}}, {_s("DIDx", "-")}>, tensor<12x4x${{T}}>, tensor<8x16x${{T}}, {_s("-", "DIDx")}>) {{
  %0 = fusion.concat %a, %b dim = 1 : (!a, !b) -> tensor<8x12x${{T}}, {_s("DIDx", "-")}>
  %1 = fusion.concat %a, %c dim = 0 : (!a, !c) -> tensor<12x4x${{T}}>
  %2 = fusion.concat %a, %b, %a dim = -1 : (!a, !b, !a) -> tensor<8x16x${{T}}, {_s("-", "DIDx")}>
  func.return %0, %1, %2 : tensor<8x12x${{T}}, {_s("DIDx", "-")}>, tensor<12x4x${{T}}>, tensor<8x16x${{T}}, {_s("-", "DIDx")}>
}}
"""


def concat(t: Tensors, dtype: str) -> Tensors:
    a, b, c = t
    return [torch.cat([a, b], 1), torch.cat([a, c], 0), torch.cat([a, b, a], -1)]


# ---- transformer blocks (nvFuser's multi-device transformer tests, our shapes) -------------------

MLP = MESH + f"""
!x = tensor<8x16x${{T}}, {_s("DIDx", "-")}>
!w0 = tensor<64x16x${{T}}, {_s("DIDx", "-")}>
!b0 = tensor<64x${{T}}, {_s("DIDx")}>
!w1 = tensor<16x64x${{T}}, {_s("-", "DIDx")}>
!b1 = tensor<16x${{T}}>
!h = tensor<8x64x${{T}}>
func.func @main(%x: !x, %w0: !w0, %b0: !b0, %w1: !w1, %b1: !b1, %seed: tensor<i64>) -> (!x, !x) {{
  %h = fusion.linear %x, %w0, %b0 : (!x, !w0, !b0) -> !h
  %g = fusion.gelu %h {{approximate = "tanh"}} : (!h) -> !h
  %y = fusion.linear %g, %w1, %b1 : (!h, !w1, !b1) -> !x
  %d = fusion.dropout %y, %seed p = 0.1 : (!x, tensor<i64>) -> !x
  func.return %y, %d : !x, !x
}}
"""


def _mlp(x: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor) -> torch.Tensor:
    return F.linear(F.gelu(F.linear(x, w0, b0), approximate="tanh"), w1, b1)


def mlp(t: Tensors, dtype: str) -> Tensors:
    x, w0, b0, w1, b1, seed = t
    y = _mlp(x, w0, b0, w1, b1)
    keep = _dropout_mask(seed, tuple(y.shape), 0.1)
    return [y, torch.where(keep, y / 0.9, torch.zeros(()))]


ATTENTION_BODY = """
  %q = fusion.linear %X, %wq : (!xa, !wq) -> !p
  %k = fusion.linear %X, %wk : (!xa, !wq) -> !p
  %v = fusion.linear %X, %wv : (!xa, !wq) -> !p
  %q4 = fusion.reshape %q : (!p) -> !h4
  %k4 = fusion.reshape %k : (!p) -> !h4
  %v4 = fusion.reshape %v : (!p) -> !h4
  %qh = fusion.permute %q4 dims = [0, 2, 1, 3] : (!h4) -> !hh
  %kh = fusion.permute %k4 dims = [0, 2, 1, 3] : (!h4) -> !hh
  %vh = fusion.permute %v4 dims = [0, 2, 1, 3] : (!h4) -> !hh
  %o = fusion.sdpa %qh, %kh, %vh causal = true : (!hh, !hh, !hh) -> !hh
  %ot = fusion.permute %o dims = [0, 2, 1, 3] : (!hh) -> !h4
  %of = fusion.reshape %ot : (!h4) -> !p
  %A = fusion.linear %of, %wo, %bo : (!p, !wo, !bo) -> !xa
"""
"""Multi-head attention of the input %X (tensor-parallel: q, k, v
column-parallel, heads split, output projection row-parallel) into %A."""

ATTENTION_TYPES = f"""
!wq = tensor<16x16x${{T}}, {_s("DIDx", "-")}>
!wo = tensor<16x16x${{T}}, {_s("-", "DIDx")}>
!bo = tensor<16x${{T}}>
!p = tensor<2x8x16x${{T}}>
!h4 = tensor<2x8x4x4x${{T}}>
!hh = tensor<2x4x8x4x${{T}}>
"""

ATTENTION = MESH + ATTENTION_TYPES + f"""
!xa = tensor<2x8x16x${{T}}>
func.func @main(%x: !xa, %wq: !wq, %wk: !wq, %wv: !wq, %wo: !wo, %bo: !bo) -> !xa {{
{ATTENTION_BODY.replace("%X", "%x")}
  func.return %A : !xa
}}
"""


def _mha(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor,
         bo: torch.Tensor) -> torch.Tensor:
    def heads(w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w).reshape(2, 8, 4, 4).permute(0, 2, 1, 3)

    o = _attention(heads(wq), heads(wk), heads(wv), causal=True)
    return F.linear(o.permute(0, 2, 1, 3).reshape(2, 8, 16), wo, bo)


def attention(t: Tensors, dtype: str) -> Tensors:
    return [_mha(*t)]


FORWARD = MESH + ATTENTION_TYPES + f"""
!xa = tensor<2x8x16x${{T}}>
!xs = tensor<2x8x16x${{T}}, {_s("-", "DIDx", "-")}>
!n = tensor<16x${{T}}>
!w0 = tensor<64x16x${{T}}, {_s("DIDx", "-")}>
!b0 = tensor<64x${{T}}, {_s("DIDx")}>
!w1 = tensor<16x64x${{T}}, {_s("-", "DIDx")}>
!h = tensor<2x8x64x${{T}}>
func.func @main(%x: !xs, %g1: !n, %e1: !n, %wq: !wq, %wk: !wq, %wv: !wq, %wo: !wo, %bo: !bo,
                %g2: !n, %e2: !n, %w0: !w0, %b0: !b0, %w1: !w1, %b1: !n) -> !xs {{
  %ln1 = fusion.layer_norm %x, %g1, %e1 dims = [2] : (!xs, !n, !n) -> !xs
  %xa = fusion.set %ln1 : (!xs) -> !xa
{ATTENTION_BODY.replace("%X", "%xa")}
  %r1 = fusion.add %x, %A : (!xs, !xa) -> !xs
  %ln2 = fusion.layer_norm %r1, %g2, %e2 dims = [2] : (!xs, !n, !n) -> !xs
  %m0 = fusion.linear %ln2, %w0, %b0 : (!xs, !w0, !b0) -> !h
  %m1 = fusion.gelu %m0 {{approximate = "tanh"}} : (!h) -> !h
  %m2 = fusion.linear %m1, %w1, %b1 : (!h, !w1, !n) -> !xs
  %r2 = fusion.add %r1, %m2 : (!xs, !xs) -> !xs
  func.return %r2 : !xs
}}
"""


def forward(t: Tensors, dtype: str) -> Tensors:
    x, g1, e1, wq, wk, wv, wo, bo, g2, e2, w0, b0, w1, b1 = t
    r1 = x + _mha(F.layer_norm(x, [16], g1, e1), wq, wk, wv, wo, bo)
    return [r1 + _mlp(F.layer_norm(r1, [16], g2, e2), w0, b0, w1, b1)]


PROGRAMS = [
    Program("unary", UNARY, unary),
    Program("binary", BINARY, binary),
    Program("reduce", REDUCE, reduce),
    Program("norms", NORMS, norms),
    Program("softmax", SOFTMAX, softmax),
    Program("sdpa", SDPA, sdpa),
    Program("vocab", VOCAB, vocab),
    Program("dropout", DROPOUT, dropout, dropout_check),
    Program("concat", CONCAT, concat),
    Program("mlp", MLP, mlp),
    Program("attention", ATTENTION, attention),
    Program("forward", FORWARD, forward),
]
BY_NAME = {p.name: p for p in PROGRAMS}


def _ident(name: str, n: int, dtype: str) -> str:
    return f"{name}-n{n}-{dtype}"


# --------------------------------------------------------------------------
# One launch per job size; each (program, N, dtype) its own test
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Outcome, Path]]:
    if MPIEXEC is None:
        pytest.fail("mpiexec is not installed")
    directory = tmp_path_factory.mktemp("ops")
    save = directory / "saved"
    out: dict[str, tuple[Outcome, Path]] = {}
    for n in RANKS:
        if too_few_gpus(n):
            continue
        work = [
            (_ident(p.name, n, t), expand(p.text.replace("${T}", t), n), PIPELINE)
            for p in PROGRAMS
            for t in DTYPES
        ]
        for key, outcome in launch_batches(n, work, directory, BACKEND, save).items():
            ident, pipe = key.split("/")
            out[ident] = (outcome, save / ident / pipe)
    return out


def _load(directory: Path, prefix: str) -> Tensors:
    paths = sorted(directory.glob(f"{prefix}*.npy"), key=lambda p: int(p.stem.removeprefix(prefix)))
    return [torch.from_numpy(np.load(p)) for p in paths]


def _compare(got: torch.Tensor, want: torch.Tensor, dtype: str, what: str) -> None:
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {list(got.shape)}, expected {list(want.shape)}"
    if not want.is_floating_point():
        assert torch.equal(got.to(want.dtype), want), f"{what}: differs from torch"
        return
    g, w = got.double(), want.double()
    assert torch.isfinite(g).all(), f"{what}: not finite"
    err = (g - w).abs().max().item() if g.numel() else 0.0
    scale = w.abs().max().item() if w.numel() else 0.0
    assert err <= TOLERANCE[dtype] * max(scale, 1e-30), f"{what}: max error {err:.3e} (scale {scale:.3e})"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("name", [p.name for p in PROGRAMS])
def test_op_against_torch(name: str, n: int, dtype: str, runs: dict[str, tuple[Outcome, Path]]) -> None:
    if reason := too_few_gpus(n):
        pytest.skip(reason)
    outcome, saved = runs[_ident(name, n, dtype)]
    assert outcome.status == "ok", f"{outcome.status}:\n{outcome.detail}"
    program = BY_NAME[name]
    inputs = _load(saved, "in")
    results = _load(saved, "out")
    wide = [t.double() if t.is_floating_point() else t for t in inputs]
    expected = program.expected(wide, dtype)
    assert len(results) == len(expected)
    for i, (got, want) in enumerate(zip(results, expected)):
        _compare(got, want, dtype, f"{name} result {i}")
    if program.check is not None:
        program.check(wide, results, dtype)

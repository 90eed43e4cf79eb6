"""Attention's kernels: the forward with its log-sum-exp, and the backward
from the saved output and log-sum-exp (`fusion.sdpa`, `fusion.sdpa_grad`).

The log-sum-exp is one value per query row, [batch, heads, seq_q], the
natural log of the sum of exp(scale * q.k) over the keys the row sees: the
statistic every fused attention kernel saves for its backward, so the
backward computes no forward again.

- On cuda, the backend PyTorch's `scaled_dot_product_attention` itself
  would take for these tensors (`aten._fused_sdp_choice`: cuDNN, flash or
  memory-efficient attention, in the priority order of the running torch),
  then that backend's forward and, in the backward, its backward, as
  PyTorch's autograd pairs them. The backends agree on the statistic, so a
  forward and a backward may even choose differently. The kernels read
  q, k, v, the output and its cotangent strided (the heads of a [B, S, H,
  D] buffer, as a projection's output lies): no layout copies. Grouped
  heads are expanded for backends without them (`_native_gqa`: a backend
  of the running torch that takes them as they are, checked once).
- On the CPU, PyTorch's flash attention for CPU (the kernel of its sdpa
  there) and its backward.
- Elsewhere (no fused backend applies), `math_forward`/`math_backward`:
  the same formulas with matrix products, in f32 for 16-bit inputs.

`run_region` runs a `hir.launch` region holding one attention op (`ALONE`)
on both backends: the region's layout permutes are views, and the results
are copied into the region's output buffers; `region_values` are the
results themselves, which stand for the buffers (`Backend.launch_made`)
where nothing can tell.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from xdsl.ir import Block, BlockArgument, SSAValue

Tensors = tuple[torch.Tensor, ...]

MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3
"""`torch.nn.attention.SDPBackend` values (`aten._fused_sdp_choice`)."""

LSE_ALIGN = 32
"""The memory-efficient kernels keep the statistic of rows padded to a
multiple of this."""


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _grouped(q: torch.Tensor, k: torch.Tensor) -> int:
    """Query heads per key head (1 without grouped-query attention)."""
    return q.shape[1] // k.shape[1]


def _expand(t: torch.Tensor, groups: int) -> torch.Tensor:
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _fold(t: torch.Tensor, groups: int) -> torch.Tensor:
    """The cotangent of `_expand`: the query heads of each key head summed."""
    if groups == 1:
        return t
    b, h, s, d = t.shape
    return t.reshape(b, h // groups, groups, s, d).sum(2)


def _mask(sq: int, sk: int, device: torch.device) -> torch.Tensor:
    """PyTorch's causal mask: row i sees keys 0..i (top-left aligned)."""
    return torch.ones(sq, sk, dtype=torch.bool, device=device).tril()


# ---- math: the formulas --------------------------------------------------------


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float | None) -> torch.Tensor:
    s = (q @ k.transpose(-2, -1)) * _scale(q, scale)
    if causal:
        s = s.masked_fill(~_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    return s


def _wide(*ts: torch.Tensor) -> Tensors:
    """16-bit tensors in f32, the rest as they are."""
    return tuple(t.float() if t.dtype in (torch.bfloat16, torch.float16) else t for t in ts)


def math_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> Tensors:
    """(out, lse): out by PyTorch's math attention (what its sdpa computes
    when no fused kernel applies), lse = logsumexp(scale q k^T)."""
    groups = _grouped(q, k)
    out = torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, None, 0.0, causal, scale=scale, enable_gqa=groups != 1
    )[0]
    wq, wk = _wide(q, _expand(k, groups))
    return out, torch.logsumexp(_scores(wq, wk, causal, scale), dim=-1)


def math_backward(
    g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    causal: bool, scale: float | None,
) -> Tensors:
    """(dq, dk, dv) from the saved output and log-sum-exp: p = exp(scale q
    k^T - lse), dv = p^T g, ds = p (g v^T - rowsum(g out)), dq = scale ds k,
    dk = scale ds^T q."""
    dtype, groups = q.dtype, _grouped(q, k)
    g, q, k, v, out = _wide(g, q, _expand(k, groups), _expand(v, groups), out)
    p = torch.exp(_scores(q, k, causal, scale) - lse.to(q.dtype).unsqueeze(-1))
    dv = p.transpose(-2, -1) @ g
    ds = p * (g @ v.transpose(-2, -1) - (g * out).sum(-1, keepdim=True))
    c = _scale(q, scale)
    dq, dk = (ds @ k) * c, (ds.transpose(-2, -1) @ q) * c
    return dq.to(dtype), _fold(dk, groups).to(dtype), _fold(dv, groups).to(dtype)


# ---- the kernels -----------------------------------------------------------------


def choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> int:
    """The backend PyTorch's sdpa takes for these tensors (on the CPU:
    flash or math)."""
    if q.device.type not in ("cpu", "cuda"):
        return MATH
    gqa = q.shape[1] != k.shape[1]
    return int(torch.ops.aten._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=scale, enable_gqa=gqa))


def _cpu_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> bool:
    return q.device.type == "cpu" and choice(q, k, v, causal, scale) == FLASH


FLASH_HEAD_ALIGN = 8
"""PyTorch's flash kernels take head dims of a multiple of this only (its
sdpa pads the others with zeros, which change no product, and slices the
results back)."""


def _flash_padded(t: torch.Tensor) -> torch.Tensor:
    d = t.shape[-1]
    return t if d % FLASH_HEAD_ALIGN == 0 else F.pad(t, (0, -d % FLASH_HEAD_ALIGN))


def _fused_forward(backend: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> Tensors:
    """One fused backend's forward on k, v as given: (out, lse [B, H, Sq])."""
    if backend == FLASH:
        d, scale = v.shape[-1], _scale(q, scale)
        q, k, v = (_flash_padded(t) for t in (q, k, v))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)[:2]
        return out[..., :d], lse
    if backend == EFFICIENT:
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal, scale=scale)[:2]
        return out, lse[:, :, : q.shape[2]]
    out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)[:2]
    return out, lse.reshape(q.shape[:3])


def _fused_backward(
    backend: int, g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    causal: bool, scale: float | None,
) -> Tensors:
    """One fused backend's backward on k, v as given: (dq, dk, dv)."""
    lse = lse.float()
    sq, sk = q.shape[2], k.shape[2]
    none = torch.empty((), dtype=torch.int64, device=q.device)  # dropout's seed and offset: no dropout
    if backend == FLASH:
        d, scale = q.shape[-1], _scale(q, scale)
        g, q, k, v, out = (_flash_padded(t) for t in (g, q, k, v, out))
        grads = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            g, q, k, v, out, lse, None, None, sq, sk, 0.0, causal, none, none, scale=scale
        )
        return tuple(t[..., :d] for t in grads)
    if backend == EFFICIENT:
        # Rows past the last are read too: +inf makes their weights exp(s - inf) = 0.
        padded = torch.full(
            (*lse.shape[:2], -(-sq // LSE_ALIGN) * LSE_ALIGN), float("inf"), dtype=torch.float32, device=lse.device
        )
        padded[:, :, :sq].copy_(lse)
        return tuple(torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            g, q, k, v, None, out, padded, none, none, 0.0, [True, True, True, False], causal, scale=scale
        )[:3])  # fmt: skip
    stats = lse if _cudnn_stats_rank(q) == 3 else lse.unsqueeze(-1)
    return tuple(torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        g, q, k, v, out, stats, none, none, None, None, None, sq, sk, 0.0, causal, scale=scale
    ))  # fmt: skip


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> Tensors:
    """(out [B, H, Sq, Dv], lse [B, H, Sq] in the statistics type)."""
    if _cpu_flash(q, k, v, causal, scale):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
        return out, lse
    if q.device.type != "cuda":
        return math_forward(q, k, v, causal, scale)
    backend = choice(q, k, v, causal, scale)
    if backend not in (FLASH, EFFICIENT, CUDNN):
        return math_forward(q, k, v, causal, scale)
    groups = 1 if _native_gqa(q, backend) else _grouped(q, k)
    return _fused_forward(backend, q, _expand(k, groups), _expand(v, groups), causal, scale)


_STATS_RANK: dict[tuple[torch.device, torch.dtype], int] = {}
_GQA: dict[tuple[torch.device, torch.dtype, int], bool] = {}


def _native_gqa(q: torch.Tensor, backend: int) -> bool:
    """Whether this torch's `backend` takes fewer key/value heads than query
    heads as they are, forward and backward, with the results of the
    expanded heads (found once, on a small case): expanding them copies each
    key/value head to its group of query heads, and sums the gradients back,
    every call."""
    key = (q.device, q.dtype, backend)
    if key not in _GQA:
        gen = torch.Generator(device=q.device).manual_seed(0)
        d = q.shape[-1]
        t, g = (torch.randn((1, 4, 128, d), generator=gen, device=q.device).to(q.dtype) for _ in range(2))
        kv = torch.randn((1, 2, 128, d), generator=gen, device=q.device).to(q.dtype)

        def run(k: torch.Tensor) -> Tensors:
            out, lse = _fused_forward(backend, t, k, k, True, None)
            return (out, *_fused_backward(backend, g, t, k, k, out, lse, True, None))

        try:
            native, wide = run(kv), run(_expand(kv, 2))
            wide = (*wide[:2], _fold(wide[2], 2), _fold(wide[3], 2))
            _GQA[key] = all(
                a.shape == b.shape and bool(torch.allclose(a.float(), b.float(), atol=2e-2, rtol=2e-2)) for a, b in zip(native, wide)
            )
        except RuntimeError:
            _GQA[key] = False
    return _GQA[key]


def _cudnn_stats_rank(q: torch.Tensor) -> int:
    """The rank of the statistic PyTorch's cuDNN attention returns, which its
    backward takes back as it is: [B, H, S, 1] in some versions, [B, H, S]
    in others (found once, on a small forward)."""
    key = (q.device, q.dtype)
    if key not in _STATS_RANK:
        t = torch.zeros((1, 128, 1, q.shape[-1]), dtype=q.dtype, device=q.device).transpose(1, 2)
        stats = torch.ops.aten._scaled_dot_product_cudnn_attention(t, t, t, None, True, 0.0, False, False)[1]
        _STATS_RANK[key] = stats.dim()
    return _STATS_RANK[key]


def backward(
    g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    causal: bool, scale: float | None,
) -> Tensors:
    """(dq, dk, dv) from the output, its log-sum-exp and its cotangent."""
    if _cpu_flash(q, k, v, causal, scale):
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, out, lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32), 0.0, causal, scale=scale
        )
        return dq, dk, dv
    if q.device.type != "cuda":
        return math_backward(g, q, k, v, out, lse, causal, scale)
    backend = choice(q, k, v, causal, scale)
    if backend not in (FLASH, EFFICIENT, CUDNN):
        return math_backward(g, q, k, v, out, lse, causal, scale)
    groups = 1 if _native_gqa(q, backend) else _grouped(q, k)  # natively: the kernel sums the groups' gradients
    dq, dk, dv = _fused_backward(backend, g, q, _expand(k, groups), _expand(v, groups), out, lse, causal, scale)
    return dq, _fold(dk, groups), _fold(dv, groups)


# ---- a launch region of one attention op ------------------------------------------


def _views(body: Block) -> tuple[Any, dict[SSAValue, Any]] | None:
    """The region's attention op and, for each value the region reads or
    yields, how it is made from a region argument or the op's results by
    layout ops (permute, reshape, set); None when the region is not of
    that shape."""
    from fuserc.dialects import fusion
    from fuserc.dialects.fusion_nn import AttentionOp

    ops = list(body.ops)
    kernels = [o for o in ops if isinstance(o, AttentionOp)]
    if len(kernels) != 1:
        return None
    steps: dict[SSAValue, Any] = {a: ("arg", a.index) for a in body.args if isinstance(a, BlockArgument)}
    op = kernels[0]
    for k, r in enumerate(op.results):
        steps[r] = ("result", k)
    for o in ops[:-1]:
        if o is op:
            continue
        if not isinstance(o, (fusion.PermuteOp, fusion.ReshapeOp, fusion.SetOp)) or o.operands[0] not in steps:
            return None
        steps[o.results[0]] = (o, steps[o.operands[0]])
    return op, steps


def _apply(step: Any, leaves: dict[Any, torch.Tensor]) -> torch.Tensor:
    from fuserc.dialects import fusion

    if step[0] in ("arg", "result"):
        return leaves[step]
    o, inner = step
    t = _apply(inner, leaves)
    if isinstance(o, fusion.PermuteOp):
        return t.permute(o.keyword("dims"))
    if isinstance(o, fusion.ReshapeOp):
        from fuserc.dialects.fusion import shape_of

        return t.reshape(shape_of(o.results[0]))
    return t


_PLANS: weakref.WeakKeyDictionary[Block, tuple[Any, dict[SSAValue, Any]] | None] = weakref.WeakKeyDictionary()
"""Each region's attention op and views, for as long as its program's IR lives."""


def _plan(body: Block) -> tuple[Any, dict[SSAValue, Any]] | None:
    if body not in _PLANS:
        _PLANS[body] = _views(body)
    return _PLANS[body]


def runs_region(body: Block) -> bool:
    """Whether `run_region` runs this region (one attention op and layout
    views): it needs no generated kernel."""
    return _plan(body) is not None


def run_region(body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> bool:
    """Run a region holding one attention op with its kernel (the module
    docstring), its results copied into `outs`; False (nothing run) when
    the region holds none."""
    values = region_values(body, ins)
    if values is None:
        return False
    for buf, t in zip(outs, values, strict=True):
        buf.copy_(t)
    return True


def region_values(body: Block, ins: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
    """The values a region holding one attention op yields, as its kernel
    makes them (the layout ops as views of its results), to stand for the
    region's buffers (`Backend.launch_made`); None when the region holds
    none."""
    found = _plan(body)
    if found is None:
        return None
    op, steps = found
    leaves: dict[Any, torch.Tensor] = {("arg", i): t for i, t in enumerate(ins)}
    args = [_apply(steps[v], leaves) for v in op.operands]
    causal, scale = op.options()
    if op.name == "fusion.sdpa":
        results: Tensors = forward(*args, causal, scale)[: len(op.results)]
    else:
        q, k, v, out, lse, g = args
        results = backward(g, q, k, v, out, lse, causal, scale)
    for k, t in enumerate(results):
        leaves[("result", k)] = t
    yielded = body.last_op
    assert yielded is not None
    return [_apply(steps[v], leaves) for v in yielded.operands]

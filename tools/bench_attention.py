#!/usr/bin/env python
"""Ring attention's kernels on one device, beside one sdpa call of the
same work.

    python tools/bench_attention.py                 # one GPU: 32768 and 131072 tokens
    python tools/bench_attention.py --small         # CPU, tiny shapes (a smoke run)

Causal grouped-query attention (32 query heads, 8 key/value heads, head
dim 128, bf16) at each token count. Per shape, forward and forward +
backward, each figure with its ratio to PyTorch's sdpa on the whole
sequence (the limit: the same FLOPs in one call):

- `sdpa`: `torch.nn.functional.scaled_dot_product_attention` (autograd for
  the backward);
- `fuserc d=1`: the one-device program (`fusion.sdpa`, no ring: no mesh
  split), forward as a compiled program, forward + backward through
  `fuserc.torch.function`: parity with sdpa is the target;
- `ring d=D`: the D-rank ring schedule of passes/ring_attention.py (zigzag
  layout, `ring_attention.step`) run rank after rank on this one device:
  every step's attention on its blocks (runtime/kernels/attention.py's kernels,
  with their log-sum-exp) and the log-sum-exp merge into f32 accumulators
  (on a GPU, the merge's two launches each one Inductor-built kernel, as
  fuserc builds its regions);
  the backward every step's `sdpa_grad` on its blocks from the merged
  statistic, summed into dq, dk, dv. Target: >= 0.9 of sdpa. Its results
  are checked (exit 1 beyond tolerance);
- `context_parallel`: PyTorch's `torch.distributed.tensor.experimental.
  context_parallel` around the same sdpa on a one-rank mesh, where this
  torch has it (otherwise said).

TFLOP/s count 2 FLOPs per multiply-add over the causal (query, key) pairs:
2 matrix products forward (q k^T, p v), 7 forward + backward. On a GPU
the ring's results are checked against sdpa's own (bf16), on the CPU
against float64.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "examples" / "python")]

from bench_local import program_step  # noqa: E402
from bench_torch import device_ms  # noqa: E402

from fuserc.passes.ring_attention import FULL, step as ring_step  # noqa: E402
from fuserc.runtime.kernels import attention  # noqa: E402

Tensors = tuple[torch.Tensor, ...]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="32768,131072", help="comma-separated sequence lengths")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--ranks", default="4,8", help="comma-separated ring sizes d whose schedules are run")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations before each figure")
    p.add_argument("--small", action="store_true", help="CPU, tiny shapes: a smoke run")
    p.add_argument("--json", metavar="FILE")
    return p


# ---- the ring schedule on one device -------------------------------------------------


class Ring:
    """The tensors of a d-rank ring in the zigzag layout (made before timing,
    as each rank holds them): rank p's q is chunks p and 2d-1-p of the
    sequence's 2d, its k/v block likewise."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int):
        self.d = d
        self.q, self.k, self.v = (self.laid(t) for t in (q, k, v))

    def laid(self, t: torch.Tensor) -> list[torch.Tensor]:
        c = t.chunk(2 * self.d, dim=2)
        return [torch.cat([c[p], c[2 * self.d - 1 - p]], dim=2).contiguous() for p in range(self.d)]

    def unlaid(self, per_rank: list[torch.Tensor]) -> torch.Tensor:
        d = self.d
        chunks: list[torch.Tensor | None] = [None] * (2 * d)
        for p, t in enumerate(per_rank):
            chunks[p], chunks[2 * d - 1 - p] = t.chunk(2, dim=2)
        return torch.cat(chunks, dim=2)  # type: ignore[arg-type]

    def pieces(self) -> list[tuple[int, int, int, int, bool]]:
        """(rank, source block, q part, k part, causal) in the ring's order."""
        return [
            (p, (p - j) % self.d, *piece)
            for j in range(self.d)
            for p in range(self.d)
            if (piece := ring_step(self.d, p, j, True, True)) is not None
        ]


def part(t: torch.Tensor, which: int) -> torch.Tensor:
    return t if which == FULL else t.chunk(2, dim=2)[which]


def merge_out(ao: torch.Tensor, al: torch.Tensor, o: torch.Tensor, lse: torch.Tensor) -> None:
    """The output's log-sum-exp merge in place, the formula of
    passes/ring_attention.py's first merge launch (the log-sum-exp's is the
    second: `merge_lse`)."""
    new = torch.logaddexp(al, lse)
    ao.copy_(ao * torch.exp(al - new).unsqueeze(-1) + o.float() * torch.exp(lse - new).unsqueeze(-1))


def merge_lse(al: torch.Tensor, lse: torch.Tensor) -> None:
    al.copy_(torch.logaddexp(al, lse))


MERGES: dict[str, Callable[..., None]] = {}
"""The merge launches as this device runs them: on cuda each one kernel
built by Inductor, as fuserc's regions are (runtime/kernels/kernel_builds.py),
elsewhere op by op."""


def merges(cuda: bool) -> tuple[Callable[..., None], Callable[..., None]]:
    if not cuda:
        return merge_out, merge_lse
    if not MERGES:
        MERGES.update(out=torch.compile(merge_out, dynamic=False), lse=torch.compile(merge_lse, dynamic=False))
    return MERGES["out"], MERGES["lse"]


def ring_forward(r: Ring) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every rank's (output in f32, log-sum-exp), merged step by step."""
    acc_o: list[torch.Tensor | None] = [None] * r.d
    acc_l: list[torch.Tensor | None] = [None] * r.d
    out_merge, lse_merge = merges(r.q[0].is_cuda)
    for p, s, qp, kp, causal in r.pieces():
        o, lse = attention.forward(part(r.q[p], qp), part(r.k[s], kp), part(r.v[s], kp), causal, None)
        if acc_o[p] is None:
            acc_o[p], acc_l[p] = o.float(), lse.float()
            continue
        ao, al = part(acc_o[p], qp), part(acc_l[p], qp)  # type: ignore[arg-type]
        out_merge(ao, al, o, lse)
        lse_merge(al, lse)
    return acc_o, acc_l  # type: ignore[return-value]


def ring_backward(r: Ring, out: list[torch.Tensor], lse: list[torch.Tensor], g: list[torch.Tensor]) -> Tensors:
    """Every block's dq, dk, dv summed over the steps (f32), as the ring's
    accumulators travel."""
    dq = [torch.zeros_like(t, dtype=torch.float32) for t in r.q]
    dk = [torch.zeros_like(t, dtype=torch.float32) for t in r.k]
    dv = [torch.zeros_like(t, dtype=torch.float32) for t in r.v]
    for p, s, qp, kp, causal in r.pieces():
        a, b, c = attention.backward(
            part(g[p], qp), part(r.q[p], qp), part(r.k[s], kp), part(r.v[s], kp), part(out[p], qp), part(lse[p], qp), causal, None
        )
        part(dq[p], qp).add_(a)
        part(dk[s], kp).add_(b)
        part(dv[s], kp).add_(c)
    return r.unlaid(dq), r.unlaid(dk), r.unlaid(dv)


# ---- baselines ---------------------------------------------------------------------------


def fuserc_definition(shapes: list[list[int]], dtype: str) -> Any:
    from fuserc.api import FusionDefinition

    fd = FusionDefinition()
    q, k, v = (fd.define_tensor(s, dtype) for s in shapes)
    fd.add_output(fd.ops.sdpa(q, k, v, causal=True))
    return fd


def context_parallel_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None) -> Callable[[], Any] | str:
    """PyTorch's context_parallel around sdpa on a one-rank mesh, or why not."""
    try:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
    except ImportError as e:
        return f"not in this torch ({e})"
    try:
        if not dist.is_initialized():
            store = tempfile.NamedTemporaryFile(prefix="fuserc-bench-attention-", delete=False).name
            dist.init_process_group("nccl" if q.is_cuda else "gloo", init_method=f"file://{store}", rank=0, world_size=1)
        mesh = init_device_mesh(q.device.type, (1,))
    except Exception as e:  # noqa: BLE001 - a baseline that cannot start is reported, not fatal
        return f"no one-rank mesh ({type(e).__name__}: {e})"
    bufs = [t.detach().clone() for t in (q, k, v)]

    def run() -> Any:
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
            qs, ks, vs = (t.detach().requires_grad_(g is not None) for t in bufs)
            out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=qs.shape[1] != ks.shape[1])
            if g is not None:
                out.backward(g)
        return out

    try:
        run()
    except Exception as e:  # noqa: BLE001
        return f"failed here ({type(e).__name__}: {str(e).splitlines()[0][:100]})"
    return run


# ---- one shape -------------------------------------------------------------------------


def causal_flops(b: int, h: int, s: int, d: int, products: int) -> float:
    return 2.0 * b * h * (s * (s + 1) / 2) * d * products


def bench_shape(tokens: int, a: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    shapes = [[1, a.heads, tokens, a.head_dim], [1, a.kv_heads, tokens, a.head_dim], [1, a.kv_heads, tokens, a.head_dim]]
    q, k, v = (torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes)
    g = torch.randn(shapes[0], generator=gen, device=device, dtype=dtype)
    gqa = a.heads != a.kv_heads
    row: dict[str, Any] = {"tokens": tokens, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim, "dtype": a.dtype}
    fwd_flops = causal_flops(1, a.heads, tokens, a.head_dim, 2)
    row["flops"] = {"fwd": fwd_flops, "fwd_bwd": fwd_flops * 3.5}

    def sdpa_fwd() -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

    def sdpa_fwd_bwd() -> Any:
        F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=gqa).backward(g)

    times: dict[str, dict[str, float | str]] = {"fwd": {}, "fwd_bwd": {}}
    times["fwd"]["sdpa"] = device_ms(sdpa_fwd, a, cuda)
    times["fwd_bwd"]["sdpa"] = device_ms(sdpa_fwd_bwd, a, cuda)

    fd = fuserc_definition(shapes, a.dtype)
    fwd_step, program = program_step(fd, [q, k, v])
    times["fwd"]["fuserc d=1"] = device_ms(fwd_step, a, cuda)
    import fuserc.torch

    f = fuserc.torch.function(fuserc_definition(shapes, a.dtype))
    fl = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

    def fuserc_fwd_bwd() -> Any:
        f(*fl).backward(g)

    times["fwd_bwd"]["fuserc d=1"] = device_ms(fuserc_fwd_bwd, a, cuda)

    # the reference: float64 on the CPU (small shapes); on a GPU sdpa itself
    # (a float64 one would build the whole score matrix)
    ref_dtype = torch.float64 if not cuda else dtype
    refs = [t.detach().to(ref_dtype).requires_grad_(True) for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*refs, is_causal=True, enable_gqa=gqa)
    want.backward(g.to(ref_dtype))
    errors: dict[str, float] = {}
    for d in (int(x) for x in a.ranks.split(",")):
        if tokens % (2 * d):
            continue
        r = Ring(q, k, v, d)
        gz = r.laid(g)
        times["fwd"][f"ring d={d}"] = device_ms(lambda: ring_forward(r), a, cuda)
        out, lse = ring_forward(r)
        outs = [o.to(dtype) for o in out]

        def fwd_bwd(r: Ring = r, gz: list[torch.Tensor] = gz) -> Any:
            o, l_ = ring_forward(r)
            return ring_backward(r, [x.to(dtype) for x in o], l_, gz)

        times["fwd_bwd"][f"ring d={d}"] = device_ms(fwd_bwd, a, cuda)
        grads = ring_backward(r, outs, lse, gz)
        got = [r.unlaid(out), *grads]
        expected = [want.detach(), *(t.grad for t in refs)]
        errors[f"ring d={d}"] = max(
            ((x.double() - y.double()).abs().max() / y.double().abs().max().clamp_min(1)).item() for x, y in zip(got, expected)  # type: ignore[union-attr]
        )
    for which, grad in (("fwd", None), ("fwd_bwd", g)):
        cp = context_parallel_step(q, k, v, grad)
        times[which]["context_parallel"] = cp if isinstance(cp, str) else device_ms(cp, a, cuda)
    f.close()
    program.close()
    row["ms"] = times
    row["max_rel_error"] = errors
    return row


def lines(row: dict[str, Any]) -> list[str]:
    out = [f"causal GQA sdpa, {row['tokens']} tokens, {row['heads']} q heads, {row['kv_heads']} kv heads, head dim {row['head_dim']}, {row['dtype']}:"]
    for which in ("fwd", "fwd_bwd"):
        base = row["ms"][which]["sdpa"]
        for name, ms in row["ms"][which].items():
            if isinstance(ms, str):
                out.append(f"  {which:8s} {name:18s} {ms}")
                continue
            tflops = row["flops"][which] / ms / 1e9
            out.append(f"  {which:8s} {name:18s} {ms:10.3f} ms  {tflops:8.2f} TFLOP/s  {base / ms:5.2f} x sdpa")
    for name, err in row["max_rel_error"].items():
        out.append(f"  {name} against float64 sdpa (output, dq, dk, dv): max relative error {err:.2e}")
    return out


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.small:
        a.tokens, a.heads, a.kv_heads, a.head_dim, a.ranks, a.dtype = "256", 4, 2, 16, "2,4", "f32"
        a.iters, a.repeats, a.warmup = 1, 1, 0
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        print("bench_attention: no CUDA GPU here (use --small on the CPU)", file=sys.stderr)
        return 2
    tolerance = 5e-2 if a.dtype == "bf16" else 1e-4
    rows, bad = [], []
    for tokens in (int(t) for t in a.tokens.split(",")):
        row = bench_shape(tokens, a, device)
        rows.append(row)
        print("\n".join(lines(row)), flush=True)
        bad += [f"{name} at {tokens} tokens: {err:.2e}" for name, err in row["max_rel_error"].items() if not err <= tolerance]
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    if bad:
        print("bench_attention: ring results off sdpa's (tolerance {:.0e}): {}".format(tolerance, "; ".join(bad)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "OFF")
    sys.exit(main())

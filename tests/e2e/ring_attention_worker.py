"""Run under mpiexec by test_ring_attention.py: `fusion.sdpa` with its
sequence split over every rank (ring attention), through
`fuserc.torch.function` (forward and the autodiff backward), against float64
PyTorch sdpa and autograd on the global tensors. Each case prints `CASE
<name> ok` or `CASE <name> FAILED: <why>` on rank 0.

    mpiexec -n 4 python tests/e2e/ring_attention_worker.py [--device cuda] [--cases a,b]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import fuserc.torch
from fuserc.api import FusionDefinition, shard_tensor
from torch_function_worker import RANK, SIZE, run_cases
DEVICE = torch.device("cpu")
TOL = {"f32": 2e-4, "bf16": 3e-2}


@dataclass(frozen=True)
class Case:
    """One attention: q [B, H, S, D], k and v [B, Hkv, S, D(v)], S split
    over the ranks; `heads_axis`: the heads split too, over a second mesh
    axis of 2 (context x tensor parallel on a 2-D mesh)."""

    name: str
    heads: int = 4
    kv_heads: int = 4
    head_dim: int = 8
    causal: bool = False
    dtype: str = "f32"
    per_rank: int = 4
    heads_axis: bool = False


CASES = [
    Case("plain"),
    Case("causal", causal=True),
    Case("gqa_causal", heads=8, kv_heads=2, causal=True),
    Case("odd_head_dim", head_dim=5, causal=True, per_rank=3),
    Case("bf16_gqa_causal", heads=4, kv_heads=2, head_dim=16, causal=True, dtype="bf16", per_rank=8),
    Case("heads_x_sequence", heads=4, kv_heads=2, causal=True, heads_axis=True),
]


def run(c: Case) -> None:
    tp = 2 if c.heads_axis else 1
    cp = SIZE // tp
    if cp * tp != SIZE or cp < 1:
        return
    fd = FusionDefinition()
    mesh = fd.sched.mesh("m", [cp, tp] if c.heads_axis else [cp])
    seq = c.per_rank * cp
    shapes = [(2, c.heads, seq, c.head_dim), (2, c.kv_heads, seq, c.head_dim), (2, c.kv_heads, seq, c.head_dim)]
    q, k, v = (fd.define_tensor(list(s), c.dtype) for s in shapes)
    o = fd.ops.sdpa(q, k, v, causal=c.causal)
    fd.add_output(o)
    spec = ["-", "DIDx", "DIDy", "-"] if c.heads_axis else ["-", "-", "DIDx", "-"]
    for t in (q, k, v, o):
        fd.sched.shard(t, "m", spec)
    f = fuserc.torch.function(fd)
    try:
        gen = torch.Generator().manual_seed(3)
        glob = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
        ct = torch.randn(shapes[0], generator=gen, dtype=torch.float64)
        ref = [t.clone().requires_grad_(True) for t in glob]
        want = F.scaled_dot_product_attention(*ref, is_causal=c.causal, enable_gqa=c.heads != c.kv_heads)
        (want * ct).sum().backward()
        tdtype = torch.bfloat16 if c.dtype == "bf16" else torch.float32

        def local(t: torch.Tensor) -> torch.Tensor:
            return shard_tensor(t.to(tdtype), spec, mesh, RANK).contiguous().to(DEVICE)

        loc = [local(t).requires_grad_(True) for t in glob]
        got = f(*loc)
        (got * local(ct)).sum().backward()
        for what, g, w in (("out", got, want), *((f"grad {n}", lt.grad, rt.grad) for n, lt, rt in zip("qkv", loc, ref))):
            assert g is not None, f"{what}: missing"
            expect = shard_tensor(w.detach(), spec, mesh, RANK)
            err = (g.detach().double().cpu() - expect).abs().max().item()
            bound = TOL[c.dtype] * max(1.0, expect.abs().max().item())
            assert err <= bound, f"{what}: max abs error {err:.3e} over {bound:.1e}"
    finally:
        f.close()


def main() -> None:
    global DEVICE
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    a = p.parse_args()
    chosen = [c for c in CASES if not a.cases or c.name in a.cases.split(",")]
    if a.device == "cuda":
        DEVICE = fuserc.torch.device("cuda")
        torch.cuda.set_device(DEVICE)
        torch.backends.cuda.matmul.allow_tf32 = False
    failed = run_cases({c.name: (lambda c=c: run(c)) for c in chosen})
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

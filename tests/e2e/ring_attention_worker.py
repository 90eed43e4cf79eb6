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
from torch_function_worker import ENV, RANK, SIZE, run_cases
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


def train_step() -> None:
    """`fuserc.torch.function` inside a PyTorch training step: causal GQA
    attention over the split sequence with learned projections of x
    (torch.nn.Linear on this rank's tokens), three SGD steps, against the
    same model in float64 PyTorch on the global tokens."""
    fd = FusionDefinition()
    mesh = fd.sched.mesh("cp", [SIZE])
    seq, heads, kv, dim = 4 * SIZE, 4, 2, 8
    q, k, v = (fd.define_tensor([1, h, seq, dim]) for h in (heads, kv, kv))
    o = fd.ops.sdpa(q, k, v, causal=True)
    fd.add_output(o)
    for t in (q, k, v, o):
        fd.sched.shard(t, "cp", ["-", "-", "DIDx", "-"])
    f = fuserc.torch.function(fd)
    try:
        torch.manual_seed(0)
        width = 16
        ref = [torch.nn.Linear(width, h * dim, dtype=torch.float64) for h in (heads, kv, kv)]
        mine = [torch.nn.Linear(width, h * dim).to(DEVICE) for h in (heads, kv, kv)]
        for a, b in zip(ref, mine):
            b.load_state_dict({n: t.float() for n, t in a.state_dict().items()})
        opt_ref = torch.optim.SGD([p for m in ref for p in m.parameters()], lr=0.05)
        opt = torch.optim.SGD([p for m in mine for p in m.parameters()], lr=0.05)
        gen = torch.Generator().manual_seed(5)
        rows = slice(RANK * 4, RANK * 4 + 4)

        def heads_of(m: torch.nn.Linear, x: torch.Tensor, h: int) -> torch.Tensor:
            return m(x).reshape(1, x.shape[0], h, dim).transpose(1, 2)

        for _ in range(3):
            x = torch.randn(seq, width, generator=gen, dtype=torch.float64)
            target = torch.randn(1, heads, seq, dim, generator=gen, dtype=torch.float64)
            qkv = [heads_of(m, x, h) for m, h in zip(ref, (heads, kv, kv))]
            loss = ((F.scaled_dot_product_attention(*qkv, is_causal=True, enable_gqa=True) - target) ** 2).sum()
            opt_ref.zero_grad()
            loss.backward()
            opt_ref.step()
            xl = x[rows].float().to(DEVICE)
            out = f(*(heads_of(m, xl, h).contiguous() for m, h in zip(mine, (heads, kv, kv))))
            local = ((out - target[:, :, rows].float().to(DEVICE)) ** 2).sum()
            opt.zero_grad()
            local.backward()
            for p in (p for m in mine for p in m.parameters()):  # the data-parallel sum over the ranks' tokens
                assert p.grad is not None
                p.grad.copy_(torch.as_tensor(sum(ENV.allgather(p.grad.cpu().numpy()))))
            opt.step()
        for a, b in zip(ref, mine):
            for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
                err = (pa.detach() - pb.detach().double().cpu()).abs().max().item()
                assert err <= 1e-4, f"{n} after 3 steps: max abs error {err:.3e}"
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
    cases = {c.name: (lambda c=c: run(c)) for c in chosen}
    if not a.cases or "train_step" in a.cases.split(","):
        cases["train_step"] = train_step
    failed = run_cases(cases)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

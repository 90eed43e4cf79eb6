"""Run by test_moe.py (alone, or under mpiexec/torchrun): the dropless MoE
layer of examples/python/moe_layer.py through `fuserc.torch.function`,
outputs and every gradient against the PyTorch loop over experts in
float64. Each case prints `CASE <name> ok` or `CASE <name> FAILED: <why>`
on rank 0.

    python tests/e2e/moe_worker.py [--device cuda] [--only NAME]
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))

import fuserc.torch  # noqa: E402
from fuserc.runtime.job.mpi_env import mpi_env  # noqa: E402
from fuserc.api import Mesh, shard_tensor  # noqa: E402
from moe_layer import definition, loop, params, shardings  # noqa: E402

ENV = mpi_env()
RANK, SIZE = ENV.rank, ENV.size
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOL = {"f32": 1e-4, "bf16": 4e-2}


@dataclass(frozen=True)
class Case:
    name: str
    tokens: int = 32
    hidden: int = 16
    ffn: int = 24
    experts: int = 4
    k: int = 2
    shared: bool = False
    router: str = "softmax"
    dtype: str = "f32"
    skew: float = 0.0
    empty: bool = False
    """The case must leave some expert without tokens."""
    slots: bool | None = None
    """Dispatch and combine (default: on several ranks, expert parallel)."""
    chunks: int | None = None
    """Token chunks of dispatch and combine, forced through chunk-experts'
    option `token-chunks` (default: the cost model's choice)."""
    dp: int = 1
    """A mesh [dp, ranks / dp]: the tokens over both axes, the experts over
    the second, dispatched in dp groups (one expert-parallel team each)."""


CASES = [
    Case("top2"),
    Case("sigmoid-shared", router="sigmoid", experts=8, shared=True),
    Case("skewed-top2", experts=8, skew=6.0, empty=True),
    Case("skewed-top1-empty", experts=8, k=1, skew=6.0, empty=True),
    Case("bf16-shared-top2", shared=True, dtype="bf16"),
    Case("chunked-skewed-top2", experts=8, skew=6.0, empty=True, slots=True, chunks=2),
    Case("chunked4-sigmoid-shared", router="sigmoid", experts=8, shared=True, slots=True, chunks=4),
    Case("slots-skewed-top2", experts=8, skew=6.0, empty=True, slots=True),
    Case("slots-bf16-shared-top2", shared=True, dtype="bf16", slots=True),
    Case("dp2-skewed-top2-shared", experts=8, skew=6.0, empty=True, shared=True, dp=2),
]


def close(got: torch.Tensor | None, want: torch.Tensor, tol: float, what: str) -> None:
    if got is None:
        raise AssertionError(f"{what}: missing")
    err = (got.detach().double().cpu() - want.detach().double().cpu()).abs().max().item()
    scale = max(1.0, want.detach().abs().max().item())
    if not err <= tol * scale:
        raise AssertionError(f"{what}: max abs error {err:.3e} over {tol * scale:.1e}")


def run(c: Case, device: torch.device) -> None:
    dtype = DTYPES[c.dtype]
    glob = [t.to(dtype) for t in params(c.tokens, c.hidden, c.ffn, c.experts, c.shared, c.skew)]
    ref = [t.double().requires_grad_(True) for t in glob]
    y, aux = loop(*ref[:5], ref[5:], c.k, c.router)
    scores = ref[0] @ ref[1].t()
    ids = torch.topk(scores, c.k, dim=1).indices  # softmax and sigmoid keep the order
    counts = torch.bincount(ids.flatten(), minlength=c.experts)
    if c.skew and not counts[0] > c.tokens / 2:
        raise AssertionError(f"routing is not skewed: counts {counts.tolist()}")
    if c.empty and not (counts == 0).any():
        raise AssertionError(f"every expert has tokens: counts {counts.tolist()}")
    ct = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ((y * ct).sum() + 3.0 * aux).backward()
    fd = definition(c.tokens, c.hidden, c.ffn, c.experts, c.k, c.shared, c.router, c.dtype, SIZE, c.slots, c.dp)
    if c.chunks is None:
        f = fuserc.torch.function(fd)
    else:
        f = fuserc.torch.function(fd, pipeline=f"default{{token-chunks={c.chunks}}}", autodiff=f"token-chunks={c.chunks}")
        if SIZE > 1:  # each chunk's dispatch and combine: an alltoallv each, forward and backward
            report = fd.comm_report(f"autodiff{{token-chunks={c.chunks}}},default")
            for name in ("main_fwd", "main_bwd"):
                got = sum(line.kind == "alltoallv" for line in report.function(name).lines)
                if got != 2 * c.chunks:
                    raise AssertionError(f"@{name}: {got} alltoallvs, not the {2 * c.chunks} of {c.chunks} chunks")
    mesh = Mesh("ep", [c.dp, SIZE // c.dp] if c.dp > 1 and SIZE > 1 else [SIZE])
    SHARDINGS = shardings(c.dp)

    def local(t: torch.Tensor, s: list[str]) -> torch.Tensor:
        return shard_tensor(t.detach(), s, mesh, RANK).contiguous() if SIZE > 1 else t.detach()

    loc = [local(t, s).to(device).requires_grad_(True) for t, s in zip(glob, SHARDINGS)]
    ly, laux = f(*loc)
    ((ly * local(ct, SHARDINGS[0]).to(dtype).to(device)).sum() + 3.0 * laux).backward()
    tol = TOL[c.dtype]
    close(ly, local(y, SHARDINGS[0]), tol, "y")
    close(laux, aux, tol, "aux loss")
    names = ["x", "router", "w1", "w3", "w2", "shared w1", "shared w3", "shared w2"]
    for name, lt, rt, s in zip(names, loc, ref, SHARDINGS):
        close(lt.grad, local(rt.grad, s), tol, f"grad {name}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default=None)
    a = p.parse_args()
    device = torch.device(a.device)
    failed = 0
    for c in CASES:
        if a.only and c.name not in a.only.split(","):
            continue
        try:
            run(c, device)
            what = "ok"
        except Exception as e:  # reported per case; the job goes on
            what = f"FAILED: {e}"
            failed += 1
            if RANK == 0:
                traceback.print_exc()
        if RANK == 0:
            print(f"CASE {c.name} {what}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run by test_alltoallv_job.py under mpiexec (or torchrun): `hir.alltoallv`
with counts known only at run time, against the exchange computed with
NumPy from every rank's counts and rows (the same seed on every rank).
Each case prints `CASE <name> ok` or `CASE <name> FAILED: <why>` on rank 0.

    python tests/e2e/alltoallv_worker.py [--backend cuda]
"""

from __future__ import annotations

import argparse
import traceback
from dataclasses import dataclass

import numpy as np
import torch

from fuserc.ir import parse
from fuserc.runtime.backends.backend import make_backend
from fuserc.runtime.evaluator.evaluator import Program
from fuserc.runtime.job.mpi_env import mpi_env

ENV = mpi_env()
RANK, SIZE = ENV.rank, ENV.size
MLIR = {torch.float32: "f32", torch.bfloat16: "bf16", torch.int64: "i64"}


@dataclass(frozen=True)
class Case:
    name: str
    rows: int
    """Rows of each rank's input (the counts it sends add up to at most that)."""
    bound: int
    """Rows of each rank's output (the bound on those received)."""
    row: tuple[int, ...] = (3,)
    dtype: torch.dtype = torch.float32
    zeros: float = 0.0
    """The share of (sender, receiver) pairs that exchange no rows."""
    idle: bool = False
    """Rank 0 sends nothing at all and the last rank receives nothing."""
    twice: bool = False
    """The program runs twice with new counts (buffers and the plan reused)."""


CASES = [
    Case("uneven", rows=7, bound=7 * SIZE),
    Case("zero-counts", rows=6, bound=6 * SIZE, zeros=0.5, idle=True),
    Case("partial-bf16-3d", rows=5, bound=3 * SIZE, row=(2, 4), dtype=torch.bfloat16, zeros=0.3),
    Case("rerun", rows=4, bound=4 * SIZE, twice=True),
]


def program(case: Case) -> str:
    team = "[" + ", ".join(map(str, range(SIZE))) + "]"
    row = "x".join(map(str, case.row))
    t = MLIR[case.dtype]
    x, y, c = f"tensor<{case.rows}x{row}x{t}>", f"tensor<{case.bound}x{row}x{t}>", f"tensor<{SIZE}xi64>"
    return f"""
func.func @main(%x: {x}, %sc: {c}) -> ({y}, {c}) attributes {{hir.host}} {{
  %y = hir.alloc "y" : {y}
  %rc = hir.alloc "rc" : {c}
  %t = hir.alltoallv %x, %sc, %y, %rc team = {team} backend = nccl : ({x}, {c}, {y}, {c}) -> !hir.token
  hir.wait %t : !hir.token
  func.return %y, %rc : {y}, {c}
}}
"""


def counts(case: Case, rng: np.random.Generator) -> np.ndarray:
    """counts[s, r]: the rows rank s sends rank r (each row adds up to at
    most `rows`, each column to at most `bound`)."""
    while True:
        c = rng.integers(0, case.rows + 1, size=(SIZE, SIZE))
        c[rng.random((SIZE, SIZE)) < case.zeros] = 0
        if case.idle:
            c[0, :] = 0
            c[:, SIZE - 1] = 0
        c = np.minimum(c, case.rows // SIZE + rng.integers(0, 3, size=(SIZE, SIZE)))
        if (c.sum(1) <= case.rows).all() and (c.sum(0) <= case.bound).all():
            return c


def expected(xs: list[np.ndarray], c: np.ndarray, r: int) -> np.ndarray:
    """The rows rank r receives: from each sender in rank order, its block for r."""
    starts = np.cumsum(c, axis=1) - c
    return np.concatenate([xs[s][starts[s, r] : starts[s, r] + c[s, r]] for s in range(SIZE)])


def run(case: Case, backend_kind: str, seed: int) -> None:
    prog = Program.load(parse(program(case), f"{case.name}.mlir"), "main", make_backend(backend_kind, ENV))
    try:
        rng = np.random.default_rng(seed)
        for _ in range(2 if case.twice else 1):
            c = counts(case, rng)
            xs = [rng.standard_normal((case.rows, *case.row)) for _ in range(SIZE)]
            x = torch.from_numpy(xs[RANK]).to(case.dtype)
            y, rc = prog.run([x, torch.from_numpy(c[RANK].copy())])
            got_counts = rc.numpy()
            if not (got_counts == c[:, RANK]).all():
                raise AssertionError(f"rank {RANK}: received counts {got_counts.tolist()}, want {c[:, RANK].tolist()}")
            want = torch.from_numpy(expected(xs, c, RANK)).to(case.dtype)
            got = y[: int(c[:, RANK].sum())]
            if not torch.equal(got, want):  # data moves bit for bit
                raise AssertionError(f"rank {RANK}: rows received differ (counts {c.tolist()})")
    finally:
        prog.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    comm = ENV.comm
    for i, case in enumerate(CASES):
        try:
            run(case, args.backend, seed=100 + i)
            why = ""
        except Exception as e:  # noqa: BLE001 - reported per case; every rank reaches the same allgather
            why = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        whys = [w for w in comm.allgather(why) if w]
        if RANK == 0:
            print(f"CASE {case.name} ok" if not whys else f"CASE {case.name} FAILED: {whys[0]}", flush=True)


if __name__ == "__main__":
    main()

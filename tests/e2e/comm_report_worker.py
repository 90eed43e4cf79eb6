"""Run under `mpiexec -n 4` by test_comm_report.py: the communication
report's bytes against the bytes the cpu backend moves.

Every communication method of this rank's cpu backend is wrapped (here,
not inside fuserc) to count, from the buffers it is actually handed, the
bytes this rank moves when the collective runs as a ring (nccl-tests' bus
bytes; MPI's own algorithm is hidden, the buffers are not): an allgather
receives the n - 1 blocks it lacks; a reduce-scatter receives n - 1 blocks
of its output; an allreduce 2(n - 1) blocks of 1/n of its buffer; an
alltoall the n - 1 blocks of 1/n not its own; a broadcast and a reduce the
whole buffer; a scatter or gather n - 1 blocks; a recv, put or get its
buffer (a send is counted at its recv). Each program then runs once, and
every rank compares what it moved, kind by kind, with the report's lines
that name it.

    mpiexec -n 4 python tests/e2e/comm_report_worker.py [--cases a,b]

Prints `CASE <name> ok` or `CASE <name> FAILED: <why>` on rank 0.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from fuserc.runtime.job import io
from fuserc.runtime.backends.backend import make_backend
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.runtime.evaluator.program import Compiled, CompiledProgram, compile_module

from fuserc.comm_report import report

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "python"))
ENV = mpi_env()
RANK = ENV.rank

ROOTS = """
fusion.mesh @tp shape = [4]
fusion.mesh @one shape = [1] devices = [0]
!one = tensor<64x8xf32, #fusion.sharding<@one, [-, -]>>
!rows = tensor<64x8xf32, #fusion.sharding<@tp, [DIDx, -]>>
!all = tensor<64x8xf32, #fusion.sharding<@tp, [-, -]>>
!part = tensor<64x8xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
func.func @main(%x: !one, %a: tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %w: tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> (!one, !all, !one) {
  %s = fusion.set %x : (!one) -> !rows
  %r = fusion.relu %s : (!rows) -> !rows
  %g = fusion.set %r : (!rows) -> !one
  %b = fusion.set %x : (!one) -> !all
  %p = fusion.matmul %a, %w : (tensor<64x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> !part
  %q = fusion.set %p : (!part) -> !one
  func.return %g, %b, %q : !one, !all, !one
}
"""
"""Scatter, gather, broadcast and reduce between a mesh of one device and a mesh of 4."""

GRID = """
fusion.mesh @grid shape = [2, 2]
func.func @main(%x: tensor<32x16xbf16, #fusion.sharding<@grid, [DIDy, DIDx]>>, %w: tensor<16x8xbf16, #fusion.sharding<@grid, [DIDx, -]>>)
    -> tensor<32x8xbf16, #fusion.sharding<@grid, [-, -]>> {
  %p = fusion.matmul %x, %w : (tensor<32x16xbf16, #fusion.sharding<@grid, [DIDy, DIDx]>>, tensor<16x8xbf16, #fusion.sharding<@grid, [DIDx, -]>>) -> tensor<32x8xbf16, #fusion.sharding<@grid, [DIDy, -], partial = DIDx>>
  %y = fusion.set %p : (tensor<32x8xbf16, #fusion.sharding<@grid, [DIDy, -], partial = DIDx>>) -> tensor<32x8xbf16, #fusion.sharding<@grid, [-, -]>>
  func.return %y : tensor<32x8xbf16, #fusion.sharding<@grid, [-, -]>>
}
"""
"""A 2x2 mesh: an allreduce within each team of DIDx, an allgather within each of DIDy (bf16)."""


def gpt_text() -> str:
    from gpt_layer import build

    return build(32, 64, 4, 256, 4, "f32").to_mlir()


def example(name: str) -> str:
    return (ROOT / "examples" / name).read_text()


CASES: dict[str, tuple[Any, str, tuple[str, ...]]] = {
    "sp_mlp": (lambda: example("sp_mlp.mlir"), "default", ("main",)),
    "ring": (lambda: example("sp_mlp.mlir"), "default{algorithm=ring}", ("main",)),
    "collective": (lambda: example("sp_mlp.mlir"), "default{algorithm=collective}", ("main",)),
    "ring_sum": (lambda: example("matmul_reduce_scatter.mlir"), "default{algorithm=ring ring-form=sum chunks=8}", ("main",)),
    "alltoall": (lambda: example("alltoall_transpose.mlir"), "default", ("main",)),
    "stages": (lambda: example("pipeline.mlir"), "default", ("main",)),
    "roots": (lambda: ROOTS, "default", ("main",)),
    "grid": (lambda: GRID, "default", ("main",)),
    "gpt": (gpt_text, "autodiff,default", ("main_fwd", "main_bwd")),
}


# --------------------------------------------------------------------------
# Counting what the backend moves
# --------------------------------------------------------------------------


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Tally:
    """Bytes and calls per kind of the communications this rank's backend ran."""

    def __init__(self) -> None:
        self.bytes: dict[str, Fraction] = defaultdict(Fraction)
        self.calls: dict[str, int] = defaultdict(int)

    def add(self, kind: str, moved: Fraction | int) -> None:
        self.bytes[kind] += Fraction(moved)
        self.calls[kind] += 1


def count(backend: Any, tally: list[Tally]) -> None:
    """Wrap the backend's communications: each call adds what this rank
    moves (module docstring) to the current tally, then runs as before."""

    def wrap(name: str, moved: Any) -> None:
        inner = getattr(backend, name)
        kind = name.removesuffix("_block")

        def call(*args: Any) -> Any:
            tally[-1].add(kind, moved(*args))
            return inner(*args)

        setattr(backend, name, call)

    def n(team: Any) -> int:
        return len(team)

    wrap("allgather", lambda inp, out, team: (n(team) - 1) * nbytes(inp))
    wrap("reduce_scatter", lambda inp, out, op, team: (n(team) - 1) * nbytes(out))
    wrap("allreduce", lambda inp, out, op, team: Fraction(2 * (n(team) - 1) * nbytes(inp), n(team)))
    wrap("alltoall", lambda inp, out, team: Fraction((n(team) - 1) * nbytes(inp), n(team)))
    wrap("broadcast", lambda buf, root, team: nbytes(buf) if n(team) > 1 else 0)
    wrap("reduce", lambda inp, out, root, op, team: nbytes(inp) if n(team) > 1 else 0)
    wrap("scatter", lambda inp, out, root, team: (n(team) - 1) * nbytes(out))
    wrap("gather", lambda inp, out, root, team: (n(team) - 1) * nbytes(inp))
    wrap("send", lambda buf, peer, team: 0)
    wrap("recv", lambda buf, peer, team: nbytes(buf))
    wrap("put", lambda src, handle, peer: nbytes(src))
    wrap("put_block", lambda src, handle, peer, index, chunks: nbytes(src))
    wrap("get", lambda handle, peer, dst: nbytes(dst))
    wrap("get_block", lambda handle, peer, dst, index, chunks: nbytes(dst))


# --------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------


def expected(rep: Any, entry: str) -> tuple[dict[str, Fraction], dict[str, int]]:
    """This rank's bytes and communications per kind, by the report."""
    fn = rep.function(entry)
    moved: dict[str, Fraction] = defaultdict(Fraction)
    calls: dict[str, int] = defaultdict(int)
    for line in fn.lines:
        if RANK in line.ranks:
            moved[line.kind] += line.nbytes
            calls[line.kind] += line.runs
    return moved, calls


def run_case(name: str, backend: Any, tally: list[Tally]) -> str | None:
    """None when every figure agrees on this rank, else why not."""
    make, pipeline, entries = CASES[name]
    compiled = compile_module(make(), name, entries[0], pipeline, ranks=ENV.size, nodes=ENV.nodes())
    rep = report(compiled.host)
    problems = []
    for entry in entries:
        program = CompiledProgram(Compiled(compiled.source, compiled.host, entry), backend)
        local = program.program.prepare_inputs(io.shard_inputs(program.random_inputs(0), program.params, RANK))
        tally.append(Tally())
        program.program.run_prepared(local, copy_outputs=True)
        backend.synchronize()
        got = tally[-1]
        want_bytes, want_calls = expected(rep, entry)
        if dict(got.calls) != dict(want_calls) or dict(got.bytes) != dict(want_bytes):
            problems.append(
                f"@{entry} rank {RANK}: moved {dict(got.bytes)} in {dict(got.calls)} calls, "
                f"the report says {dict(want_bytes)} in {dict(want_calls)}"
            )
        totals = rep.function(entry).per_rank.get(RANK)
        moved = sum(got.bytes.values(), Fraction(0))
        if (totals.nbytes if totals else 0) != moved or (totals.count if totals else 0) != sum(got.calls.values()):
            problems.append(f"@{entry} rank {RANK}: the totals {totals} are not the {moved} bytes moved")
        if not got.calls:
            problems.append(f"@{entry} rank {RANK}: nothing was communicated (the case tests nothing)")
        program.close()
    return "; ".join(problems) or None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--backend", default="cpu")
    a = p.parse_args()
    backend = make_backend(a.backend, ENV)
    tally: list[Tally] = []
    count(backend, tally)
    failed = 0
    for name in a.cases.split(","):
        try:
            why = run_case(name, backend, tally)
        except Exception:  # noqa: BLE001 - reported per case
            why = traceback.format_exc(limit=4)
        whys = ENV.allgather(why)
        if RANK == 0:
            bad = [w for w in whys if w]
            print(f"CASE {name} " + ("ok" if not bad else "FAILED: " + " | ".join(bad)), flush=True)
            failed += bool(bad)
    backend.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

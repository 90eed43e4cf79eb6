"""`fuserc run --trace` end to end under `mpiexec -n N` on the cpu backend:
one valid Chrome trace with events from every rank, on several streams for
a pipelined program, one run only with --iters, and its PNG timeline. The
runs of a job size share one launch (cli_batch.mpirun_many)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cli_batch import CliRun, Ran, launches
from harness import ok, program

ROOT = Path(__file__).parents[2]

PIPELINED = """
fusion.mesh @tp shape = [2]
func.func @main(%x: tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>,
                %w: tensor<32x16xf32, #fusion.sharding<@tp, [-, -]>>)
    -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2), -]>> {
  %y = fusion.matmul %x, %w : (tensor<64x32xf32, #fusion.sharding<@tp, [DIDx, -]>>, tensor<32x16xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2), -]>>
  func.return %y : tensor<64x16xf32, #fusion.sharding<@tp, [Stream(2), -]>>
}
"""


def _load(path: Path) -> dict:
    assert path.exists(), f"no trace at {path}"
    data = json.loads(path.read_text())  # valid JSON
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    return data


def _ops(data: dict) -> list[dict]:
    return [e for e in data["traceEvents"] if e["ph"] == "X"]


def _check_events(data: dict, n: int) -> None:
    ops = _ops(data)
    assert {e["pid"] for e in ops} == set(range(n)), "events from every rank"
    for e in ops:
        assert e["name"].startswith("hir.") and e["cat"] in ("compute", "communication", "copy", "sync")
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and isinstance(e["tid"], int)
    names = {(e["pid"], e["tid"]) for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in ops} <= names, "every stream is named"
    assert data["otherData"]["ranks"] == n


@pytest.mark.parametrize("n", [2, 3])
@launches(lambda d, n: CliRun(n, [program("collectives.mlir.in", n, d), "-p", "", "--backend", "cpu", "--trace", d / "trace.json"]))
def test_trace_of_every_op(n: int, ran: Ran) -> None:
    """The collectives program (every communication, copies, streams):
    all four categories, on more than one stream of every rank."""
    trace = ran.dir / "trace.json"
    proc = ok(ran.proc)
    assert f"trace: {trace}" in proc.stdout
    data = _load(trace)
    _check_events(data, n)
    ops = _ops(data)
    assert {e["cat"] for e in ops} == {"compute", "communication", "copy", "sync"}
    for rank in range(n):
        assert len({e["tid"] for e in ops if e["pid"] == rank}) > 1, f"rank {rank} used one stream"
    counts = Counter(e["name"] for e in ops if e["pid"] == 0)
    assert counts["hir.allgather"] >= 1 and counts["hir.alltoall"] == 1 and counts["hir.put"] >= 1


def pipelined_runs(d: Path) -> dict[str, CliRun]:
    """PIPELINED traced in its one checked run, and in the last of 3 timed."""
    src = d / "ag.mlir"
    src.write_text(PIPELINED)
    pipe = ["-p", "propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{algorithm=collective}"]
    return {
        "single": CliRun(2, [src, *pipe, "--backend", "cpu", "--trace", d / "single.json", "--check"]),
        "timed": CliRun(2, [src, *pipe, "--backend", "cpu", "--warmup", "1", "--iters", "3", "--trace", d / "timed.json"]),
    }


@launches(pipelined_runs)
def test_trace_of_pipelined_program_and_png(ran: Ran, tmp_path: Path) -> None:
    """A Stream split pipelined by the collective algorithm runs its chunks
    on worker streams; with --iters only the last timed run is traced; the
    trace renders to a PNG."""
    single, timed = ran.dir / "single.json", ran.dir / "timed.json"
    ok(ran.procs["single"])
    proc = ok(ran.procs["timed"])
    assert "time: median" in proc.stdout
    one, last = _load(single), _load(timed)
    for data in (one, last):
        _check_events(data, 2)
        ops = _ops(data)
        for rank in range(2):
            mine = [e for e in ops if e["pid"] == rank]
            assert len({e["tid"] for e in mine if e["name"] == "hir.matmul"}) > 1, "GEMM chunks on several streams"
            assert any(e["cat"] == "communication" for e in mine)
    # the same program traced once, with or without timing runs around it
    assert Counter((e["pid"], e["name"]) for e in _ops(one)) == Counter((e["pid"], e["name"]) for e in _ops(last))
    pytest.importorskip("matplotlib")
    png = tmp_path / "timed.png"
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "trace_png.py"), str(timed), "-o", str(png)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"


def unwritable_run(d: Path) -> CliRun:
    """A trace to be written under a regular file."""
    blocker = d / "file"
    blocker.write_text("")
    return CliRun(2, [program("collectives.mlir.in", 2, d), "-p", "", "--backend", "cpu", "--trace", blocker / "t.json"])


@launches(unwritable_run)
def test_trace_to_unwritable_path(ran: Ran) -> None:
    """Refused before any work, as `opt -o` refuses such a path (bad usage)."""
    proc = ran.proc
    assert proc.returncode == 2
    assert "Invalid value for '--trace'" in proc.stderr and "is not a folder" in proc.stderr and "Traceback" not in proc.stderr


def moe_run(d: Path) -> CliRun:
    """examples/moe_layer.mlir on 2 ranks, its inputs given (-i), traced."""
    import numpy as np
    import torch

    g = torch.Generator().manual_seed(9)  # uneven: 20 and 12 pairs for the ranks' experts
    shapes = [(16, 8), (4, 8), (4, 12, 8), (4, 12, 8), (4, 8, 12), (12, 8), (12, 8), (8, 12)]
    args = []
    for i, s in enumerate(shapes):
        path = d / f"in{i}.npy"
        np.save(path, torch.randn(s, generator=g).numpy())
        args += ["-i", path]
    return CliRun(2, [ROOT / "examples" / "moe_layer.mlir", "--mesh", "tp=2", *args, "--backend", "cpu", "--trace", d / "moe.json"])


@launches(moe_run)
def test_trace_gives_the_alltoallv_rows_and_imbalance(ran: Ran) -> None:
    """Expert parallelism's dispatch and combine: the rows each rank
    received, in the trace and printed with the imbalance, are those of
    the routing (softmax top 2 of the inputs, in PyTorch): dispatch's the
    pairs of each rank's experts, combine's each rank's own pairs."""
    import numpy as np
    import torch

    proc = ok(ran.proc)
    x, wr = (torch.from_numpy(np.load(ran.dir / f"in{i}.npy")).double() for i in (0, 1))
    ids = torch.topk(torch.softmax(x @ wr.t(), dim=1), 2, dim=1).indices
    per_rank = torch.bincount(ids.flatten() // 2, minlength=2).tolist()  # 2 experts per rank
    assert per_rank[0] != per_rank[1]
    want = [per_rank, [16, 16]]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("alltoallv ")]
    assert len(lines) == 2, proc.stdout
    for k, (line, rows) in enumerate(zip(lines, want), 1):
        assert line == f"alltoallv {k}: rows received per rank {rows}, imbalance (largest over mean) {max(rows) / (sum(rows) / 2):.2f}"
    got = [e["args"]["rows_received"] for e in sorted(_ops(_load(ran.dir / "moe.json")), key=lambda e: (e["pid"], e["ts"])) if e["name"] == "hir.alltoallv"]
    assert got == [per_rank[0], 16, per_rank[1], 16]

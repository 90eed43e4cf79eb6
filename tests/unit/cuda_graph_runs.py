"""Runs replayed as CUDA graphs, on GPUs: `mpiexec -n N python cuda_graph_runs.py`
(test_cuda_backend.py runs it). For AllGather+GEMM and GEMM+ReduceScatter
unpipelined, by collectives and by each ring form, the inputs' contents
change in place before each of seven runs (so a replay that read stale or
unsynchronized data would be caught), every run's gathered result is
compared with torch, and the program must have captured once and replayed
(with FUSERC_CUDA_GRAPHS=always: every run from the third; by default:
runs 3 and 4 of the trial, then the faster way chosen); then a traced run
and a run on new input buffers (op by op) are checked too. Rank 0 prints `ok <case> captures=C replays=R` per
case and `all ok` at the end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

import bench  # noqa: E402

from fuserc.runtime.job import io  # noqa: E402
from fuserc.runtime.backends.backend import make_backend  # noqa: E402
from fuserc.runtime.evaluator.graphs import GRAPHS_ENV  # noqa: E402
from fuserc.runtime.job.mpi_env import mpi_env  # noqa: E402
from fuserc.runtime.evaluator.program import compile_text  # noqa: E402
from fuserc.runtime.evaluator.trace import tracing  # noqa: E402

LOWER = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"
RUNS = 7
ALWAYS = os.environ.get(GRAPHS_ENV) == "always"
"""Replay from the second run (every later run a replay); otherwise the
default: timed runs of each way, then the faster kept."""


def cases(d: int) -> list[tuple[str, str, int, str]]:
    """(name, pattern, Stream split, stream-pipeline options)."""
    return [
        ("ag-none", "ag", d, "algorithm=none"),
        ("ag-collective", "ag", d, "algorithm=collective"),
        ("ag-ring", "ag", d, "algorithm=ring"),
        ("rs-none", "rs", 0, "algorithm=none"),
        ("rs-collective", "rs", d, "algorithm=collective"),
        ("rs-sum", "rs", 2 * d, "algorithm=ring ring-form=sum"),
        ("rs-pull", "rs", d, "algorithm=ring ring-form=pull"),
    ]


def globals_for(params: list, seed: int) -> list[torch.Tensor]:
    """Small integers in bf16 (exact), the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-3, 4, s.global_shape, generator=g).to(s.dtype) for s in params]


def check(prog, env, local, seed: int, what: str) -> None:
    """Fill `local` in place with seed's shards, run, compare on rank 0."""
    values = globals_for(prog.params, seed)
    for buf, shard in zip(local, io.shard_inputs(values, prog.params, env.rank)):
        if buf is not None:
            buf.copy_(shard.to(buf.device))
    torch.cuda.synchronize()
    results = prog.program.run_prepared(local, copy_outputs=True)
    gathered = io.gather_outputs(results, prog.results, env)
    if env.rank == 0:
        want = (values[0].double() @ values[1].double()).float()
        got = torch.from_numpy(gathered[0]).float()
        err = float((got - want).abs().max() / want.abs().max())
        if err > 1e-2:
            raise AssertionError(f"{what}: max rel err {err:.3g}")


def main() -> int:
    env = mpi_env()
    d = env.size
    backend = make_backend("cuda", env)
    for name, pattern, chunks, options in cases(d):
        shape = bench.Shape.parse(f"{256 * d}x{64 * d}x{128 * d}")
        text = bench.program_text(pattern, shape, d, chunks)
        prog = compile_text(text, pipeline=f"{LOWER},stream-pipeline{{{options}}}", backend=backend)
        local = prog.program.prepare_inputs(io.shard_inputs(globals_for(prog.params, 0), prog.params, env.rank))
        for run in range(RUNS):
            check(prog, env, local, 100 + run, f"{name} run {run}")
        replays = prog.program.replays
        chosen = replays.replays == RUNS - 2 if ALWAYS else replays.prefer_graph is not None
        if replays.captures != 1 or replays.replays < 1 or not chosen:
            raise AssertionError(
                f"{name}: {replays.captures} captures and {replays.replays} replays in {RUNS} runs "
                f"({replays.mode()})"
            )
        with tracing(prog.program):
            check(prog, env, local, 200, f"{name} traced")
        fresh = prog.program.prepare_inputs(io.shard_inputs(globals_for(prog.params, 0), prog.params, env.rank))
        check(prog, env, fresh, 300, f"{name} new buffers")
        check(prog, env, local, 301, f"{name} old buffers again")
        if env.rank == 0:
            print(f"ok {name} captures={replays.captures} replays={replays.replays}: {replays.mode()}", flush=True)
        prog.close()
    backend.close()
    if env.rank == 0:
        print("all ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

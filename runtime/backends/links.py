"""Measure what stream-pipeline's cost model needs to know of a node, once,
and cache it as the links file it reads (passes/cost_model.py):

    mpiexec -n 4 python -m fuserc.runtime.backends.links [--backend cuda] [--out PATH]

writes ~/.cache/fuserc/links.json (or PATH) from rank 0. Measured, through
the Backend interface (so on the GPUs with the cuda backend): GEMM peak
throughput per element type and the work at which a GEMM reaches half of
it, the launch latency, device memory bandwidth, copy-engine peer copies
(`get` through a shared handle, from the next rank of the node), the
network when the job spans nodes (a send/recv between the first ranks of
two nodes; nodes as `MpiEnv.nodes` groups them, so $FUSERC_GPUS_PER_NODE
applies) and NCCL collectives (allgather bus bandwidth; a barrier's
latency), and the ranks per node.
Kept at the documented defaults: `chunk_us` (a pipeline's per-chunk host
cost, which a pipeline in a program shows and a copy timed alone does
not), `nccl_sm_slowdown` (it needs a GEMM and a collective overlapped,
which depends on the GEMM) and `ipc_fence_us` (the ranks' skew at a fence
inside a program, which fences timed alone, the ranks in step, do not
show). Each figure is the best
of a few timed repetitions, taken by the slowest rank.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from fuserc.runtime.backends.backend import Backend

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _best(backend: Backend, fn: Callable[[], Any], reps: int = 3) -> float:
    """Seconds of the fastest of `reps` runs of `fn` (after one warm-up),
    the slowest rank's time for each."""
    fn()
    backend.synchronize()
    times = []
    for _ in range(reps):
        backend.barrier()
        mark = backend.timer_start()
        fn()
        dt = backend.timer_stop(mark)
        times.append(backend.env.comm.allreduce(dt, op=backend.env.reduce_op("max")))
    return max(min(times), 1e-9)


def _gemm_seconds(backend: Backend, n: int, dtype: torch.dtype) -> float:
    a = backend.from_host(torch.randn(n, n).to(dtype))
    b = backend.from_host(torch.randn(n, n).to(dtype))
    out = backend.empty((n, n), dtype)
    return _best(backend, lambda: backend.matmul(a, b, out))


def measure(backend: Backend, big: int = 8192, small: int = 1024, nbytes: int = 256 << 20) -> dict[str, Any]:
    """The links figures of this node (collective over the job; every rank
    returns the same). `big`/`small`: GEMM sizes; `nbytes`: transfer size."""
    from fuserc.passes.cost_model import Machine, field_problems, machine_json

    tflops: dict[str, float] = {}
    half_gflop = []
    for name, dtype in DTYPES.items():
        t_big, t_small = _gemm_seconds(backend, big, dtype), _gemm_seconds(backend, small, dtype)
        peak = 2 * big**3 / t_big
        tflops[name] = peak / 1e12
        rate = 2 * small**3 / t_small
        if rate < peak:  # small / (small + half) = rate / peak
            half_gflop.append(2 * small**3 * (peak / rate - 1) / 1e9)
    launch = _gemm_seconds(backend, 16, torch.float32)

    n = nbytes // 2
    src = backend.from_host(torch.zeros(n, dtype=torch.bfloat16))
    dst = backend.empty((n,), torch.bfloat16)
    hbm = 2 * nbytes / _best(backend, lambda: backend.copy(src, dst))

    size, rank = backend.size, backend.rank
    nodes = backend.env.copy_nodes(backend.name)
    node_teams = sorted({tuple(r for r in range(size) if nodes[r] == k) for k in nodes})
    values: dict[str, Any] = {
        "gemm_tflops": tflops,
        "launch_us": launch * 1e6,
        "hbm_gbps": hbm / 1e9,
        "gpus_per_node": max(len(t) for t in node_teams),
    }
    if half_gflop:
        values["gemm_half_gflop"] = sorted(half_gflop)[len(half_gflop) // 2]
    if size > 1:
        team = tuple(range(size))
        backend.prepare_teams([team, *node_teams])
        if all(len(t) > 1 for t in node_teams):  # copy engines: a get from the next rank of the node
            mine = next(t for t in node_teams if rank in t)
            peer = (mine.index(rank) + 1) % len(mine)
            shared = backend.empty((n,), torch.bfloat16)
            tiny = backend.empty((8,), torch.bfloat16)
            tiny_dst = backend.empty((8,), torch.bfloat16)
            handle = backend.share(shared, mine)
            small_handle = backend.share(tiny, mine)
            backend.barrier()
            ce = _best(backend, lambda: backend.wait(backend.get(handle, peer, dst)))
            ce_lat = _best(backend, lambda: backend.wait(backend.get(small_handle, peer, tiny_dst)))
            backend.barrier()
            backend.release_handle(handle)
            backend.release_handle(small_handle)
            values |= {"copy_engine_gbps": nbytes / ce / 1e9, "copy_engine_latency_us": ce_lat * 1e6}
        if len(node_teams) > 1:  # the network: a send from the first rank of node 0 to that of node 1
            pair = (node_teams[0][0], node_teams[1][0])
            backend.prepare_teams([pair])
            tiny_src = backend.empty((8,), torch.bfloat16)
            tiny_dst2 = backend.empty((8,), torch.bfloat16)

            def move(a: Any, b: Any) -> None:
                if rank == pair[0]:
                    backend.wait(backend.send(a, 1, pair))
                elif rank == pair[1]:
                    backend.wait(backend.recv(b, 0, pair))

            net = _best(backend, lambda: move(src, dst))
            net_lat = _best(backend, lambda: move(tiny_src, tiny_dst2))
            values |= {"net_gbps": nbytes / net / 1e9, "net_latency_us": net_lat * 1e6}
        gathered = backend.empty(((n // size) * size,), torch.bfloat16)
        piece = backend.from_host(torch.zeros(n // size, dtype=torch.bfloat16))
        ag = _best(backend, lambda: backend.wait(backend.allgather(piece, gathered, team)))
        fence = _best(backend, lambda: backend.wait(backend.team_barrier(team)))
        values |= {
            "nccl_busbw_gbps": nbytes * (size - 1) / size / ag / 1e9,
            "nccl_latency_us": fence * 1e6,
        }
    problems = field_problems(values)  # what load_machine would refuse is never written
    if problems:
        raise ValueError(
            "the measured figures are not a valid links file: "
            + "; ".join(f"{'.'.join(k)}: {m}" for k, m in problems)
        )
    return machine_json(replace(Machine(), **values))


def main(argv: list[str] | None = None) -> int:
    from fuserc.passes.cost_model import DEFAULT_LINKS_PATH
    from fuserc.runtime.job import job as jobs

    parser = argparse.ArgumentParser(prog="python -m fuserc.runtime.backends.links", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--out", default=str(DEFAULT_LINKS_PATH), help="the links file to write (rank 0)")
    parser.add_argument("--gemm", type=int, default=8192, help="the large GEMM size (n x n x n)")
    parser.add_argument("--bytes", type=int, default=256 << 20, help="the size of the timed transfers")
    args = parser.parse_args(argv)
    jobs.run_guarded(lambda: _measure_and_write(args))


def _measure_and_write(args: argparse.Namespace) -> int:
    """Every rank measures; rank 0 writes the links file. A backend that
    cannot run here is one message (from rank 0), not one per rank."""
    from fuserc.diagnostics import Diagnostic
    from fuserc.runtime.job import job as jobs
    from fuserc.runtime.backends.backend import make_backend
    from fuserc.runtime.job.mpi_env import mpi_env

    env = mpi_env()
    with jobs.same_on_all_ranks("starting the backend"):
        backend = make_backend(args.backend, env)
    try:
        with jobs.same_on_all_ranks("measuring the links"):
            try:
                values = measure(backend, big=args.gemm, small=max(16, args.gemm // 8), nbytes=args.bytes)
            except ValueError as e:  # the same on every rank (the figures are collective)
                raise Diagnostic(str(e)) from None
    finally:
        backend.close()
    if env.rank == 0:
        out = Path(args.out).expanduser()
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(values, indent=2) + "\n")
        except OSError as e:
            jobs.current().alone(Diagnostic(f"cannot write the links file {out}: {e.strerror or e}"))
        print(f"wrote {out}: {json.dumps(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

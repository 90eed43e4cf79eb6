#!/usr/bin/env python
"""AllGather+GEMM and GEMM+ReduceScatter: fuserc beside its baselines.

    mpirun -n 4 python tools/bench.py [--pattern ag|rs|both] [--shapes MxKxN,...]
        [--warmup W] [--iters N] [--repeats R] [--per-iteration]
        [--backend cuda|cpu] [--pipeline P]
        [--algorithm auto|collective|ring|none] [--stream auto|S]
        [--seed N] [--small] [--json FILE] [--profile DIR [--profile-ranks all]]
    torchrun --nproc-per-node 4 tools/bench.py ...        (the same)

For each shape, in one run and the same processes, each figure measured
with the same method (synchronize, barrier, then N iterations back to
back, timed together; the median over R such repeats of the slowest
rank's time per iteration; `--per-iteration` times each iteration alone
after its own barrier):

- GEMM alone at the per-GPU shape: the limit (AG: [M,K]x[K,N]; RS:
  [M,K/d]x[K/d,N], d = ranks), torch.matmul;
- fuserc: the program below compiled with runtime/evaluator/program.py and run by
  the host evaluator, timed by the backend's timer (CUDA events on cuda);
- PyTorch eager over NCCL: all_gather_into_tensor then matmul (AG);
  matmul then reduce_scatter_tensor (RS);
- PyTorch async TP: torch.ops.symm_mem.fused_all_gather_matmul and
  fused_matmul_reduce_scatter ("n/a" with the reason where unavailable).

The programs, bf16 (d ranks on a 1-D mesh @tp):
  AG: x [M,K] [DIDx,-] @ w [K,N] [-,-] -> y [M,N] [Stream(S),-] (S = d by
      default; `--stream 0`: y [-,-])
  RS: x [M,K] [-,DIDx] @ w [K,N] [DIDx,-] -> y [M,N] [DIDx,-] (`--stream S`,
      a multiple of d: y [DIDx*Stream(S/d),-])

TFLOP/s per GPU is the GEMM each GPU runs, 2*M*K*N (AG) or 2*M*(K/d)*N
(RS), over the time; each ratio is GEMM alone's time over the figure's
(1.0 = as fast as the GEMM with no communication at all). fuserc's result
is checked once per shape against eager's (max |a-b| / max |b|).

`--backend cpu --small` runs the same harness on tiny shapes on the CPU
(gloo for eager, host timing, no async TP) so that it can be tested
without a GPU. NVLink multicast is never used: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set here
before NCCL or symmetric memory start. docs/performance.md has the command
and the meaning of every column.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import socket
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DEFAULT_SHAPES = "4096x4096x4096,8192x8192x8192,16384x8192x8192,32768x16384x8192"
SMALL_SHAPES = "64x32x16,128x64x32"
PATTERNS = ("ag", "rs")
TITLES = {"ag": "AllGather + GEMM", "rs": "GEMM + ReduceScatter"}


# --------------------------------------------------------------------------
# Options and shapes
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    m: int
    k: int
    n: int

    @staticmethod
    def parse(text: str) -> "Shape":
        parts = text.lower().strip().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"a shape is MxKxN with positive integers, got '{text}'")
        return Shape(*(int(p) for p in parts))

    def __str__(self) -> str:
        return f"{self.m}x{self.k}x{self.n}"


def parse_shapes(text: str) -> list[Shape]:
    shapes = [Shape.parse(s) for s in text.split(",") if s.strip()]
    if not shapes:
        raise argparse.ArgumentTypeError("no shapes given")
    return shapes


def parse_stream(text: str) -> int | None:
    """`auto` (None) or a number of chunks >= 0."""
    if text == "auto":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"--stream takes 'auto' or a number of chunks >= 0, got '{text}'")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="AllGather+GEMM and GEMM+ReduceScatter: fuserc beside GEMM alone, PyTorch eager and async TP.",
    )
    p.add_argument("--pattern", choices=("ag", "rs", "both"), default="both")
    p.add_argument("--shapes", type=parse_shapes, default=None, help=f"comma-separated MxKxN (default {DEFAULT_SHAPES}; with --small {SMALL_SHAPES})")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations per figure (default 7: fuserc's gauge and replay trial; --small: 1)")
    p.add_argument("--iters", type=int, default=None, help="iterations per timed repeat, run back to back (default 10; --small: 3)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per figure, the median reported (default 5; --small: 2)")
    p.add_argument("--per-iteration", action="store_true", help="time each iteration alone, after a barrier of its own (the median over iters x repeats)")
    p.add_argument("--backend", choices=("cuda", "cpu"), default="cuda", help="fuserc's backend and the device of the baselines")
    p.add_argument("--pipeline", default="default", help="fuserc's pass pipeline (default: default)")
    p.add_argument("--algorithm", choices=("auto", "collective", "ring", "none"), default=None, help="stream-pipeline{algorithm=...}")
    p.add_argument("--stream", type=parse_stream, default=None, metavar="auto|S", help="chunks S of the Stream split written on y (default auto: AG S = ranks, RS none; auto's cost model decides whether to pipeline)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", action="store_true", help="tiny shapes and few iterations (tests the harness)")
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="also write the results as JSON (rank 0)")
    p.add_argument("--profile", metavar="DIR", help="rank 0 writes torch.profiler's view of fuserc's last runs of each shape to DIR")
    add_profile_ranks(p)
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on --small; the pipeline with --algorithm."""
    if args.shapes is None:
        args.shapes = parse_shapes(SMALL_SHAPES if args.small else DEFAULT_SHAPES)
    if args.warmup is None:
        args.warmup = 1 if args.small else 7
    if args.iters is None:
        args.iters = 3 if args.small else 10
    if args.repeats is None:
        args.repeats = 2 if args.small else 5
    if args.warmup < 0 or args.iters < 1 or args.repeats < 1:
        raise argparse.ArgumentTypeError("--warmup must be >= 0, --iters and --repeats >= 1")
    if args.algorithm is not None:
        from fuserc.pipeline import with_option

        args.pipeline = with_option(args.pipeline, "stream-pipeline", "algorithm", args.algorithm)
    return args


# --------------------------------------------------------------------------
# The programs
# --------------------------------------------------------------------------


def stream_chunks(pattern: str, stream: int | None, d: int) -> int:
    """S of the Stream split written on y (0: none)."""
    if stream is None:  # auto decides whether to pipeline (it may decline a written split)
        return d if pattern == "ag" else 0
    return stream


def shape_problem(pattern: str, shape: Shape, d: int, chunks: int) -> str | None:
    """Why a shape cannot be run on d ranks (None when it can)."""
    if d < 2:
        return "needs 2 or more ranks"
    if shape.m % d:
        return f"M={shape.m} is not divisible by {d} ranks"
    if pattern == "rs" and shape.k % d:
        return f"K={shape.k} is not divisible by {d} ranks"
    if chunks and shape.m % chunks:
        return f"M={shape.m} is not divisible by Stream({chunks})"
    if pattern == "rs" and chunks % d:
        return f"--stream {chunks} is not a multiple of {d} ranks (y is [DIDx*Stream(S/d), -])"
    return None


def program_text(pattern: str, shape: Shape, d: int, chunks: int) -> str:
    """The fusion program of a pattern at a global shape on d ranks."""
    m, k, n = shape.m, shape.k, shape.n

    def t(rows: int, cols: int, axes: str) -> str:
        return f"tensor<{rows}x{cols}xbf16, #fusion.sharding<@tp, [{axes}]>>"

    if pattern == "ag":
        x, w = t(m, k, "DIDx, -"), t(k, n, "-, -")
        y = t(m, n, f"Stream({chunks}), -" if chunks else "-, -")
    else:
        x, w = t(m, k, "-, DIDx"), t(k, n, "DIDx, -")
        y = t(m, n, f"DIDx*Stream({chunks // d}), -" if chunks else "DIDx, -")
    return (
        f"fusion.mesh @tp shape = [{d}]\n"
        f"func.func @main(%x: {x}, %w: {w}) -> {y} {{\n"
        f"  %y = fusion.matmul %x, %w : ({x}, {w}) -> {y}\n"
        f"  func.return %y : {y}\n"
        "}\n"
    )


def gemm_flops(pattern: str, shape: Shape, d: int) -> int:
    """2*M*K*N of the GEMM each GPU runs."""
    k = shape.k if pattern == "ag" else shape.k // d
    return 2 * shape.m * k * shape.n


def pipeline_plan(module: Any) -> str:
    """How stream-pipeline lowered the program (its hir.pipeline notes)."""
    plans = []
    for op in module.walk():
        attr = op.attributes.get("hir.pipeline")
        if attr is None:
            continue
        d = attr.data
        algorithm = getattr(d.get("algorithm"), "data", "?")
        chunks = getattr(getattr(d.get("chunks"), "value", None), "data", "?")
        streams = getattr(getattr(d.get("streams"), "value", None), "data", "?")
        form = getattr(d.get("form"), "data", "")
        plans.append(f"{algorithm}{f' ({form})' if form else ''} S={chunks} streams={streams}")
    return "; ".join(plans) if plans else "not pipelined"


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured variant of one shape (None where not available)."""

    ms: float | None = None
    tflops: float | None = None
    ratio: float | None = None
    reason: str = ""  # why it is n/a
    times_ms: list[float] = field(default_factory=list)


@dataclass
class Row:
    pattern: str
    shape: str
    ranks: int
    flops_per_gpu: int
    gemm: Figure
    fuserc: Figure
    eager: Figure
    async_tp: Figure
    fuserc_rel_err: float | None = None
    async_tp_rel_err: float | None = None
    plan: str = ""
    replay: str = ""  # how fuserc's runs went: replayed as a graph or op by op, and the trial's times


@dataclass
class Clock:
    """How a figure is timed: `start()` a mark, `stop(mark)` seconds."""

    sync: Callable[[], None]
    start: Callable[[], Any]
    stop: Callable[[Any], float]


def host_clock() -> Clock:
    return Clock(lambda: None, time.perf_counter, lambda mark: time.perf_counter() - mark)


def cuda_clock() -> Clock:
    """CUDA events on the current stream (every variant joins its side
    streams back to it before returning)."""
    import torch

    def start() -> Any:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def stop(mark: Any) -> float:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        e.synchronize()
        return mark.elapsed_time(e) / 1e3

    return Clock(torch.cuda.synchronize, start, stop)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's garbage collected before a timed repeat and the collector
    off while it runs, as `timeit` has it. Without it, on 4 H100s, fuserc's
    GPT layer training step (hidden 4096, 8192 tokens, 10 steps a repeat)
    timed 5.63-5.72 ms in the first repeat and 5.87-6.00 in every later one
    (two machines); with the collection before each repeat, 5.56-5.64 in
    every repeat, whether the collector then ran or not.
    tools/bench_layer.py times every variant so."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def measure(step: Callable[[], Any], clock: Clock, comm: Any, warmup: int, iters: int, repeats: int, per_iteration: bool = False) -> list[float]:
    """Seconds of one iteration in each of `repeats` timed repeats, the
    slowest rank's, after `warmup` untimed iterations. Ranks meet
    (synchronized, barrier) before each repeat, outside the timed region,
    and a repeat runs `iters` iterations back to back, as a training loop
    runs its steps: a barrier before each iteration would time the ranks'
    skew in leaving it (tens of microseconds) in every communicating
    figure. `per_iteration`: every iteration is timed alone after its own
    barrier instead (iters x repeats figures). The garbage collector
    waits while a repeat runs (`gc_paused`)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        n = 1 if per_iteration else iters
        for _ in range(iters if per_iteration else 1):
            clock.sync()
            with gc_paused():
                comm.Barrier()
                mark = clock.start()
                for _ in range(n):
                    step()
                times.append(clock.stop(mark) / n)
    return [max(per_rank) for per_rank in zip(*comm.allgather(times))]


PROFILED_STEPS = 3


def add_profile_ranks(p: argparse.ArgumentParser) -> None:
    """`--profile-ranks`, whose `all` makes `profiled` write every rank's
    trace (both benchmark tools)."""
    p.add_argument("--profile-ranks", choices=("0", "all"), default="0", help="with --profile: rank 0's view only, or every rank's trace too (DIR/..._rank<r>.json)")


def profiled(step: Callable[[], Any], comm: Any, rank: int, cuda: bool, drain: Callable[[], None], stem: Path, every_rank: bool = False) -> None:
    """PROFILED_STEPS more steps under torch.profiler (every rank, so that
    their collectives meet; `drain` waits for the device); rank 0 writes
    `stem`.json, a Chrome trace, and `stem`.txt, the device's timeline and
    the ops with the most device time, then host time. `every_rank`: each
    other rank r writes its trace too, `stem`_rank<r>.json (one host's
    ranks' traces share its clock: where they wait for each other)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    drain()
    comm.Barrier()
    with profile(activities=activities) as prof:
        for _ in range(PROFILED_STEPS):
            step()
        drain()
    if rank != 0 and not every_rank:
        return
    stem.parent.mkdir(parents=True, exist_ok=True)
    if rank != 0:
        prof.export_chrome_trace(f"{stem}_rank{rank}.json")
        return
    trace = stem.with_suffix(".json")
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())
    ops = prof.key_averages()
    by_device = ops.table(sort_by="self_device_time_total", row_limit=40) if cuda else ""
    timeline = device_timeline(events["traceEvents"] if isinstance(events, dict) else events)
    stem.with_suffix(".txt").write_text(f"{PROFILED_STEPS} steps\n{timeline}\n{by_device}\n{ops.table(sort_by='cpu_time_total', row_limit=40)}\n")


DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
"""Chrome-trace categories of work on the device."""


def device_timeline(events: Sequence[dict[str, Any]], gaps: int = 8) -> str:
    """What the device did over a trace (times in microseconds, as torch's
    Chrome traces have them): the span from its first kernel or copy to the
    end of its last, the time some stream was busy, the idle rest and its
    longest gaps (no stream running: the host late, or every stream waiting
    for peers), and each stream's busy time."""
    work = sorted(
        (e["ts"], e["ts"] + e["dur"], e.get("args", {}).get("stream", e.get("tid")))
        for e in events
        if e.get("ph") == "X" and e.get("cat") in DEVICE_WORK
    )
    if not work:
        return "device timeline: no device work recorded"
    start, end = work[0][0], max(e for _, e, _ in work)
    busy, holes = 0.0, []
    run_start, run_end = work[0][0], work[0][1]
    for s, e, _ in work[1:]:
        if s > run_end:
            busy += run_end - run_start
            holes.append((s - run_end, run_end - start))
            run_start, run_end = s, e
        else:
            run_end = max(run_end, e)
    busy += run_end - run_start
    per: dict[Any, float] = {}
    for s, e, stream in work:
        per[stream] = per.get(stream, 0.0) + e - s
    return "\n".join([
        f"device timeline: span {(end - start) / 1e3:.3f} ms, some stream busy {busy / 1e3:.3f} ms, idle {(end - start - busy) / 1e3:.3f} ms",
        "  longest idle gaps (us at ms): " + (", ".join(f"{g:.0f} at {at / 1e3:.3f}" for g, at in sorted(holes, reverse=True)[:gaps]) or "none"),
        "  busy per stream (ms): " + ", ".join(f"{k} {v / 1e3:.3f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])),
    ])  # fmt: skip


def figure(times: Sequence[float], flops: int) -> Figure:
    median = statistics.median(times)
    tflops = flops / median / 1e12 if median > 0 else math.inf
    return Figure(median * 1e3, tflops, None, "", [t * 1e3 for t in times])


def agreed(comm: Any, body: Callable[[], Any]) -> tuple[Any, str]:
    """Run `body` on every rank; when it fails on any rank, every rank gets
    (None, the first failing rank's reason) instead of an exception."""
    try:
        value, error = body(), ""
    except Exception as e:  # noqa: BLE001 - a baseline's failure is reported, not fatal
        value, error = None, failure_reason(e)
    errors = comm.allgather(error)
    failed = [(r, m) for r, m in enumerate(errors) if m]
    if failed:
        r, m = failed[0]
        return None, m if all(x == m for _, x in failed) and len(failed) == len(errors) else f"rank {r}: {m}"
    return value, ""


def failure_reason(e: BaseException) -> str:
    from fuserc.diagnostics import Diagnostic

    text = e.message if isinstance(e, Diagnostic) else f"{type(e).__name__}: {e}"
    line = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def max_rel_err(got: Any, ref: Any, comm: Any) -> float:
    """max |got - ref| / max |ref| over every rank's block (either
    launcher's communicator: objects gathered, no MPI operators)."""
    g, r = got.float(), ref.float()
    if g.shape != r.shape:
        return math.inf
    num = max(comm.allgather(float((g - r).abs().max())))
    den = max(comm.allgather(float(r.abs().max())))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


# --------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------


class Bench:
    """One process of the benchmark: fuserc's backend, torch.distributed,
    and the figures of each shape."""

    def __init__(self, args: argparse.Namespace):
        import torch

        from fuserc.runtime.backends.backend import make_backend
        from fuserc.runtime.job.job import same_on_all_ranks
        from fuserc.runtime.job.mpi_env import mpi_env

        self.args = args
        self.env = mpi_env()
        self.comm = self.env.comm
        self.rank, self.d = self.env.rank, self.env.size
        self.cuda = args.backend == "cuda"
        with same_on_all_ranks("starting the backend"):  # cuda unavailable: one message, from rank 0
            self.backend = make_backend(args.backend, self.env)
        if self.cuda:
            self.device = torch.device("cuda", self.env.node_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.clock = cuda_clock() if self.cuda else host_clock()
        import torch.distributed as dist

        if not dist.is_initialized():  # under mpiexec: the tool's own world (under torchrun: main's)
            init_torch_distributed(self.comm, self.rank, self.d, self.env.node_rank, self.device if self.cuda else None)
        self.group_name = dist.group.WORLD.group_name
        self.async_tp_reason = self._async_tp_unavailable()

    # ---- setup ------------------------------------------------------------------
    def _async_tp_unavailable(self) -> str | None:
        """Why async TP cannot run here (the same on every rank)."""
        if not self.cuda:
            return "needs CUDA"
        if self.d < 2:
            return "needs 2 or more ranks"
        try:
            import torch
            import torch.distributed._symmetric_memory as symm_mem

            ops = torch.ops.symm_mem
            for name in ("fused_all_gather_matmul", "fused_matmul_reduce_scatter"):
                if not hasattr(ops, name):
                    return f"this torch has no torch.ops.symm_mem.{name}"
            if hasattr(symm_mem, "enable_symm_mem_for_group"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)  # deprecated: a no-op in newer torch
                    symm_mem.enable_symm_mem_for_group(self.group_name)
        except Exception as e:  # noqa: BLE001 - reported as n/a
            return failure_reason(e)
        return None

    def torch_stream(self) -> AbstractContextManager[Any]:
        """The baselines run on torch's default stream (fuserc's backend
        makes its own stream current)."""
        import torch

        return torch.cuda.stream(torch.cuda.default_stream(self.device)) if self.cuda else nullcontext()

    def sync(self) -> None:
        """Wait for all work on this GPU (every stream; torch's current
        stream is left as it is)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    # ---- inputs -----------------------------------------------------------------
    def randn(self, shape: tuple[int, int], seed: int) -> Any:
        import torch

        g = torch.Generator(device=self.device).manual_seed(seed)
        return torch.randn(shape, generator=g, device=self.device, dtype=torch.bfloat16)

    def inputs(self, pattern: str, shape: Shape, index: int) -> tuple[Any, Any]:
        """This rank's x and w: random, x different on every rank, w the same
        on every rank when it is replicated (AG)."""
        base = self.args.seed * 1_000_003 + index * 4099
        m, k, n, d = shape.m, shape.k, shape.n, self.d
        with self.torch_stream():
            if pattern == "ag":
                x, w = self.randn((m // d, k), base + 1 + self.rank), self.randn((k, n), base)
            else:
                x, w = self.randn((m, k // d), base + 1 + self.rank), self.randn((k // d, n), base + 1 + d + self.rank)
        self.sync()
        return x, w

    # ---- variants ---------------------------------------------------------------
    def timed(self, step: Callable[[], Any], clock: Clock | None = None) -> list[float]:
        self.sync()  # inputs are ready
        a = self.args
        return measure(step, clock or self.clock, self.comm, a.warmup, a.iters, a.repeats, a.per_iteration)

    def gemm_alone(self, pattern: str, shape: Shape, x: Any, w: Any, index: int) -> list[float]:
        import torch

        with self.torch_stream():
            a = self.randn((shape.m, shape.k), index * 7 + 3) if pattern == "ag" else x
            out = torch.empty((shape.m, shape.n), dtype=torch.bfloat16, device=self.device)
            times = self.timed(lambda: torch.matmul(a, w, out=out))
            del a, out
        return times

    def fuserc(self, pattern: str, shape: Shape, x: Any, w: Any, chunks: int) -> tuple[list[float], Any, str, str]:
        from fuserc.runtime.evaluator.program import compile_text

        text = program_text(pattern, shape, self.d, chunks)
        program = compile_text(text, pipeline=self.args.pipeline, backend=self.backend, filename=f"bench_{pattern}_{shape}.mlir")
        try:
            p = program.program
            local = p.prepare_inputs([x, w])
            b = self.backend
            # on GPUs the host does not wait inside the timed run: device time,
            # measured like the stream-ordered PyTorch baselines
            sync = self.args.backend != "cuda"
            step = lambda: p.run_prepared(local, synchronize=sync)  # noqa: E731
            times = self.timed(step, Clock(b.synchronize, b.timer_start, b.timer_stop))
            if self.args.profile:
                profiled(step, self.comm, self.rank, self.cuda, b.synchronize, Path(self.args.profile) / f"fuserc_{pattern}_{shape}", self.args.profile_ranks == "all")
            out = p.run_prepared(local)[0].clone()  # the program's buffer, reused by the next run
            b.synchronize()
            replayed = ", replayed" if p.replays.prefer_graph else ""
            return times, out, pipeline_plan(program.compiled.host) + replayed, p.replays.mode()
        finally:
            program.close()

    def eager(self, pattern: str, shape: Shape, x: Any, w: Any) -> tuple[list[float], Any]:
        import torch
        import torch.distributed as dist

        with self.torch_stream(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # *_tensor collectives are deprecated aliases
            if pattern == "ag":
                xg = torch.empty((shape.m, shape.k), dtype=torch.bfloat16, device=self.device)

                def step() -> Any:
                    dist.all_gather_into_tensor(xg, x)
                    return torch.matmul(xg, w)
            else:
                y = torch.empty((shape.m // self.d, shape.n), dtype=torch.bfloat16, device=self.device)

                def step() -> Any:
                    dist.reduce_scatter_tensor(y, torch.matmul(x, w), op=dist.ReduceOp.SUM)
                    return y

            times = self.timed(step)
            out = step().clone()
        self.sync()
        return times, out

    def async_tp(self, pattern: str, x: Any, w: Any) -> tuple[list[float], Any]:
        import torch

        ops = torch.ops.symm_mem
        gn = self.group_name
        with self.torch_stream():
            if pattern == "ag":
                schema = str(getattr(ops.fused_all_gather_matmul, "default", ops.fused_all_gather_matmul)._schema)
                extra = {"return_A": False} if "return_A" in schema else {}

                def step() -> Any:
                    return ops.fused_all_gather_matmul(x, [w], gather_dim=0, group_name=gn, **extra)[1][0]
            else:

                def step() -> Any:
                    return ops.fused_matmul_reduce_scatter(x, w, "sum", scatter_dim=0, group_name=gn)

            times = self.timed(step)
            out = step().clone()
        self.sync()
        return times, out

    # ---- one shape ----------------------------------------------------------------
    def row(self, pattern: str, shape: Shape, index: int) -> Row:
        chunks = stream_chunks(pattern, self.args.stream, self.d)
        flops = gemm_flops(pattern, shape, self.d)
        row = Row(pattern, str(shape), self.d, flops, Figure(), Figure(), Figure(), Figure())
        problem = shape_problem(pattern, shape, self.d, chunks)
        if problem:
            for f in (row.gemm, row.fuserc, row.eager, row.async_tp):
                f.reason = problem
            return row
        x, w = self.inputs(pattern, shape, index)
        times, why = agreed(self.comm, lambda: self.gemm_alone(pattern, shape, x, w, index))
        row.gemm = figure(times, flops) if times else Figure(reason=why)
        got, why = agreed(self.comm, lambda: self.fuserc(pattern, shape, x, w, chunks))
        row.fuserc = figure(got[0], flops) if got else Figure(reason=why)
        if got:
            row.plan, row.replay = got[2], got[3]
        ref, why = agreed(self.comm, lambda: self.eager(pattern, shape, x, w))
        row.eager = figure(ref[0], flops) if ref else Figure(reason=why)
        if self.async_tp_reason:
            row.async_tp = Figure(reason=self.async_tp_reason)
        else:
            tp, why = agreed(self.comm, lambda: self.async_tp(pattern, x, w))
            row.async_tp = figure(tp[0], flops) if tp else Figure(reason=why)
            if tp and ref:
                row.async_tp_rel_err = max_rel_err(tp[1], ref[1], self.comm)
        if got and ref:
            row.fuserc_rel_err = max_rel_err(got[1], ref[1], self.comm)
        if row.gemm.ms:
            for f in (row.gemm, row.fuserc, row.eager, row.async_tp):
                if f.ms:
                    f.ratio = row.gemm.ms / f.ms
        del x, w, got, ref
        self.release()
        return row

    def release(self) -> None:
        release(self.comm, self.device if self.cuda else None)

    def device_name(self) -> str:
        return device_name(self.device if self.cuda else None)

    def close(self) -> None:
        import torch.distributed as dist

        self.sync()
        self.backend.close()
        if dist.is_initialized() and not torch_launched():  # the world of an MPI job is the tool's own
            dist.destroy_process_group()


def torch_launched() -> bool:
    """Whether fuserc's launcher is torch.distributed (mpi_env's rule):
    under torchrun, or without mpi4py."""
    import importlib.util

    from fuserc.runtime.job.mpi_env import TORCHRUN_VARS

    return all(v in os.environ for v in TORCHRUN_VARS) or importlib.util.find_spec("mpi4py") is None


def start_torch_world(cuda: bool) -> None:
    """Under torch's launcher: the world (NCCL on CUDA, else gloo) before
    fuserc's job starts, which joins it (adding a gloo group of its own
    beside NCCL): torch.distributed's world is started once."""
    import torch
    import torch.distributed as dist

    defaults = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for k, v in defaults.items():  # a lone process: a world of one
        os.environ.setdefault(k, v)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())
    if cuda:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")


def init_torch_distributed(comm: Any, rank: int, size: int, local_rank: int, device: Any | None) -> str:
    """torch.distributed's world for an MPI job (NCCL on `device`, a CUDA
    device; gloo when None), on a port rank 0 chose; the world's group name."""
    import torch.distributed as dist

    port = comm.bcast(_free_port() if rank == 0 else None, root=0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local_rank))
    kwargs: dict[str, Any] = {"backend": "nccl" if device is not None else "gloo", "rank": rank, "world_size": size}
    if device is not None:
        kwargs["device_id"] = device
    try:
        dist.init_process_group(**kwargs)
    except TypeError:  # a torch without device_id
        kwargs.pop("device_id", None)
        dist.init_process_group(**kwargs)
    return dist.group.WORLD.group_name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

VARIANTS = (("gemm", "GEMM alone"), ("fuserc", "fuserc"), ("eager", "eager"), ("async_tp", "async TP"))


def release(comm: Any, device: Any | None) -> None:
    """Between measurements: garbage freed, the GPU's cached blocks given
    back (`device`: the rank's GPU, None on the CPU), every rank past it."""
    gc.collect()
    if device is not None:
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    comm.Barrier()


def device_name(device: Any | None) -> str:
    """The rank's GPU's name ("cpu" for None)."""
    if device is None:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(device)


def num_text(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def tflops_text(v: float | None) -> str:
    """One decimal at GPU scale, three significant digits below 10."""
    return "n/a" if v is None else (f"{v:.1f}" if v >= 10 else f"{v:.3g}")


def line(row: Row) -> str:
    """One shape's figures on one line (printed as it is measured)."""
    parts = []
    for key, title in VARIANTS:
        f: Figure = getattr(row, key)
        if f.ms is None:
            parts.append(f"{title} n/a ({f.reason})")
        else:
            parts.append(f"{title} {f.ms:.3f} ms {tflops_text(f.tflops)} TFLOP/s ({num_text(f.ratio, '.2f')}x)")
    err = f"fuserc max rel err {num_text(row.fuserc_rel_err, '.2e')}"
    return f"[{row.pattern} {row.shape} d={row.ranks}] " + " | ".join(parts) + f" | {err} | plan: {row.plan or '-'}"


def markdown(rows: Sequence[Row], pattern: str) -> str:
    """The table of one pattern: time, TFLOP/s per GPU and ratio to GEMM
    alone of each variant, fuserc's error against eager and its plan."""
    head = ["M x K x N", "GEMM ms", "GEMM TFLOP/s"]
    for _, title in VARIANTS[1:]:
        head += [f"{title} ms", f"{title} TFLOP/s", f"{title} / GEMM"]
    head += ["fuserc max rel err", "fuserc plan"]
    out = [f"### {TITLES[pattern]} ({rows[0].ranks} ranks, bf16)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, str] = {}
    for r in rows:
        cells = [r.shape.replace("x", " x ")]
        for i, (key, title) in enumerate(VARIANTS):
            f: Figure = getattr(r, key)
            if f.ms is None:
                notes.setdefault(f"{title}: {f.reason}", "")
                cells += ["n/a", "n/a"] + ([] if i == 0 else ["n/a"])
            else:
                cells += [f"{f.ms:.3f}", tflops_text(f.tflops)] + ([] if i == 0 else [f"{num_text(f.ratio, '.2f')}"])
        cells += [num_text(r.fuserc_rel_err, ".2e"), r.plan or "-"]
        out.append("| " + " | ".join(cells) + " |")
    if notes:
        out += [""] + [f"- n/a: {n}" for n in notes]
    return "\n".join(out)


def report(rows: Sequence[Row], args: argparse.Namespace, bench: Bench) -> dict[str, Any]:
    import torch

    return {
        "ranks": bench.d,
        "backend": args.backend,
        "device": bench.device_name(),
        "torch": torch.__version__,
        "pipeline": args.pipeline,
        "warmup": args.warmup,
        "iters": args.iters,
        "repeats": args.repeats,
        "per_iteration": args.per_iteration,
        "stream": args.stream,
        "rows": [asdict(r) for r in rows],
    }


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    bench = Bench(args)
    patterns = PATTERNS if args.pattern == "both" else (args.pattern,)
    rows: list[Row] = []
    if bench.rank == 0:
        print(
            f"fuserc bench: {bench.d} ranks, backend {args.backend} ({bench.device_name()}), bf16, "
            f"warmup {args.warmup}, {'each iteration timed alone' if args.per_iteration else 'back to back'}: iters {args.iters} x repeats {args.repeats}, pipeline '{args.pipeline}'",
            flush=True,
        )
    for pattern in patterns:
        for i, shape in enumerate(args.shapes):
            row = bench.row(pattern, shape, i)
            rows.append(row)
            if bench.rank == 0:
                print(line(row), flush=True)
    if bench.rank == 0:
        print()
        for pattern in patterns:
            print(markdown([r for r in rows if r.pattern == pattern], pattern))
            print()
        if args.json_path:
            with open(args.json_path, "w") as f:
                json.dump(report(rows, args, bench), f, indent=1)
            print(f"json: {args.json_path}")
        sys.stdout.flush()
    bench.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.update(MULTICAST_OFF)  # before NCCL or symmetric memory start
    p = parser()
    args = p.parse_args(argv)
    try:
        args = resolve(args)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    except Exception as e:  # noqa: BLE001 - a malformed pipeline is bad usage
        p.error(failure_reason(e))
    from fuserc.runtime.job.job import launcher_rank, run_guarded

    if args.backend == "cuda":  # the default: without a GPU, one line (every rank finds the same)
        from fuserc.runtime.backends.backend import cuda_unavailable

        reason = cuda_unavailable()
        if reason is not None:
            if launcher_rank() in (None, 0):
                print(f"error: the cuda backend cannot run here ({reason}); --backend cpu runs the benchmark on the CPU", file=sys.stderr)
            return 1
    if torch_launched():
        start_torch_world(cuda=args.backend == "cuda")
    run_guarded(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())

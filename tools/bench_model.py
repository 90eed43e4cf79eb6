#!/usr/bin/env python
"""A whole GPT model in a training step: fuserc beside PyTorch.

    python tools/bench_model.py --shapes 12x2048x8192,24x4096x4096 [--out DIR]   (one GPU: d = 1)
    torchrun --nproc-per-node 4 tools/bench_model.py --layers 12 --hidden 2048 --tokens 8192
    mpiexec -n 4 python tools/bench_model.py ...                                 (the same under MPI)
    python tools/bench_model.py --small                                          (the CPU: tests the harness)

The model is examples/python/train_gpt.py's: a vocabulary-parallel
embedding, a learned position embedding, L GPT layers (heads of 128, MLP
4 x hidden, gelu), a final layer_norm, a vocabulary-parallel LM head and
cross_entropy; bf16 (f32 with --small); vocabulary 32768. A training
step is the loss, its backward and an AdamW step over every parameter.
For each shape (L x hidden x tokens), in one process per rank, from the
same initial weights (train_gpt's initial_weights) and the same random
tokens:

- fuserc: the model of train_gpt.build through `fuserc.torch.function` on
  this rank's shards (its kernels built in the background of its first
  steps, the default);
- eager: the same model as a torch nn.Module (gpt_layer.Block layers); at
  d > 1 parallelized with DTensor: the embedding split over the
  vocabulary, each layer sequence + tensor parallel (bench_layer's plan),
  the head split over the vocabulary with `loss_parallel`;
- torch.compile: that module under torch.compile;
- async TP (d > 1, CUDA): under torch.compile with Inductor's
  `_micro_pipeline_tp`.

Each variant is made, takes its first step, waits for what it builds
(fuserc: its kernels, then its programs' choice of graphs or op by op),
takes W warm-up steps and then R repeats of N steps alone, over which its
peak memory is taken (torch.cuda.max_memory_allocated above the inputs,
the variant's parameters and its optimizer state: what it keeps between
steps besides, fuserc's cached buffers and captured graphs, counts). Its step
time: where the variants fit in memory together, they all stay and are
timed in turn (bench_torch.interleaved_ms): R rounds, in each every
variant takes W warm-up steps then N timed ones, round r starting with
variant r mod V; the median over rounds. So the device's clock drifting
between windows (3-10% on an H200, either way) touches every variant
alike. They fit when V x the first variant's memory (held between steps
plus its peak) x 1.5 (`MEMORY_MARGIN`) is at most what torch could
allocate on the device before it, on every rank; on the CPU always.
Otherwise (at 24 x 4096 x 4096, about 29 GB held and 13 GB of peak a
variant) each is timed alone, the median of its R repeats, and closed
before the next is made. The shape's "timing" line says which. Each
variant's line gives its step time, tokens/s (the global tokens of a step
over its time), its device time alone (on CUDA: R repeats of N steps
issued while the device is held for 0.5 s, timed by events around them,
the median: the device's work a step with the host far ahead, so that a
step time above it is time the device waited for the host), its peak
memory, its first step (compilation included)
and its compile time (fuserc: its passes and kernels, as
`Function.startup` counts them; torch.compile: the first step less a
timed one), the kernels it built
(fuserc: loaded and built from its kernel cache; torch.compile:
Inductor's generated kernels), and for fuserc the steps taken while its
kernels were still building (their median time) and when the first step
at full speed started (once every kernel was in). Ratios: "eager /
fuserc" and "torch.compile / fuserc" are speedups of fuserc's step (> 1:
fuserc faster); "peak / eager" is a peak over eager's. The first step's
loss of every variant is compared with eager's: beyond the tolerance
(bf16 2e-2, f32 1e-3, relative), the run fails (exit 1).

`--budget MIB` passes autodiff's memory budget to fuserc
(`autodiff{budget=MIB}`); `--autodiff-options TEXT` any of its options.
`--out DIR`: rank 0 writes the tables to DIR/bench_model.md (and the
figures to DIR/bench_model.json). NVLink multicast is never used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "python"))
sys.path.insert(0, str(ROOT / "tools"))

from bench import agreed, num_text  # noqa: E402
from bench_layer import HEAD_DIM, Job, tensor_parallel, timed, tool_main, variant_list, window_s  # noqa: E402
from bench_torch import interleaved_ms, interleaving  # noqa: E402
from gpt_layer import WEIGHTS, Block  # noqa: E402
from train_gpt import DTYPES, initial_weights, shapes  # noqa: E402
from train_gpt import build as build_model  # noqa: E402

VARIANTS = (("fuserc", "fuserc"), ("eager", "eager"), ("compile", "torch.compile"), ("async_tp", "async TP"))
BASELINES = VARIANTS[1:]
LOSS_TOLERANCE = {"bf16": 2e-2, "f32": 1e-3}
BUILDING_STEPS = 10
"""fuserc's steps timed while its kernels are still building, at most."""
SETTLE_STEPS = 20
"""Untimed steps, at most, until fuserc's programs settle how they run once
its kernels are in (gauged twice, then tried as graphs against op by op:
runtime/evaluator/graphs.py); the warm-up steps follow. Until then its
memory pool keeps its blocks (runtime/evaluator/alloc_cache.py), which a
timed step would count in its peak."""


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    tokens: int
    head_dim: int
    vocab: int

    @property
    def heads(self) -> int:
        return self.hidden // self.head_dim

    def model_args(self, dtype: str, seed: int = 0) -> argparse.Namespace:
        """train_gpt's options for this model."""
        return argparse.Namespace(
            layers=self.layers, hidden=self.hidden, tokens=self.tokens, heads=self.heads, ffn=4 * self.hidden,
            vocab=self.vocab, dtype=dtype, dropout=0.0, seed=seed,
        )  # fmt: skip

    def problem(self, d: int) -> str | None:
        if self.hidden % self.head_dim:
            return f"hidden {self.hidden} is not a multiple of the head dim {self.head_dim}"
        for what, n in (("heads", self.heads), ("tokens", self.tokens), ("vocabulary entries", self.vocab)):
            if n % d:
                return f"{n} {what} are not divisible by {d} ranks"
        return None

    def text(self) -> str:
        return f"{self.layers} x {self.hidden} x {self.tokens}"


def shape_list(text: str) -> list[tuple[int, int, int]]:
    """LxHxT,LxHxT,..."""
    out = []
    for part in text.split(","):
        try:
            dims = tuple(int(v) for v in part.lower().split("x"))
        except ValueError:
            dims = ()
        if len(dims) != 3 or min(dims) < 1:
            raise argparse.ArgumentTypeError(f"shapes are LAYERSxHIDDENxTOKENS, comma-separated, got '{part}'")
        out.append(dims)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=None, help="layers (with --hidden and --tokens: one shape; default 12)")
    p.add_argument("--hidden", type=int, default=None, help="hidden size, a multiple of 128 (default 2048)")
    p.add_argument("--tokens", type=int, default=None, help="tokens a step (sequence x batch) (default 8192)")
    p.add_argument("--shapes", type=shape_list, default=None, metavar="LxHxT,...", help="several shapes (instead of --layers/--hidden/--tokens)")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary (default 32768; --small 128)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps before the timed ones, in each round (default 3; --small 1)")
    p.add_argument("--iters", type=int, default=None, help="steps per timed repeat (default 5; --small 2)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats or rounds, the median reported (default 3; --small 2)")
    p.add_argument("--small", action="store_true", help="the CPU, f32, head dim 16, a 2-layer model of hidden 64: tests the harness")
    p.add_argument("--cpu-compile", action="store_true", help="with --small, run torch.compile on the CPU too (Inductor's C++ builds)")
    p.add_argument("--variants", type=partial(variant_list, variants=VARIANTS), default=None, metavar="LIST", help=f"of {','.join(k for k, _ in VARIANTS)} (default all)")
    p.add_argument("--budget", type=int, default=None, metavar="MIB", help="autodiff's memory budget for fuserc (autodiff{budget=MIB})")
    p.add_argument("--autodiff-options", default="", metavar="TEXT", help="more options of fuserc's autodiff pass, as a pipeline writes them")
    p.add_argument("--out", metavar="DIR", help="rank 0 writes the tables (bench_model.md) and figures (bench_model.json) there")
    return p


def resolve(a: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on --small; the shapes."""
    small = a.small
    if a.shapes and any(v is not None for v in (a.layers, a.hidden, a.tokens)):
        raise argparse.ArgumentTypeError("give --shapes or --layers/--hidden/--tokens, not both")
    dims = a.shapes or [(a.layers or 2, a.hidden or 64, a.tokens or 32) if small else (a.layers or 12, a.hidden or 2048, a.tokens or 8192)]
    a.head_dim = 16 if small else HEAD_DIM
    a.vocab = a.vocab or (128 if small else 32768)
    a.shape_list = [Shape(l, h, t, a.head_dim, a.vocab) for l, h, t in dims]
    a.warmup = (1 if small else 3) if a.warmup is None else a.warmup
    a.iters = (2 if small else 5) if a.iters is None else a.iters
    a.repeats = (2 if small else 3) if a.repeats is None else a.repeats
    if min(a.warmup, a.iters, a.repeats) < 1:
        raise argparse.ArgumentTypeError("--warmup, --iters and --repeats must be >= 1")
    a.dtype = "f32" if small else "bf16"
    a.variants = a.variants or tuple(k for k, _ in VARIANTS)
    a.autodiff = " ".join(o for o in (a.autodiff_options.strip(), f"budget={a.budget}" if a.budget is not None else "") if o)
    return a


# --------------------------------------------------------------------------
# The model in PyTorch
# --------------------------------------------------------------------------


class Model(nn.Module):
    """train_gpt's model (its `reference_loss`) as a module: ids -> logits."""

    def __init__(self, s: Shape, dtype: torch.dtype):
        super().__init__()
        self.emb = nn.Embedding(s.vocab, s.hidden, dtype=dtype)
        self.pos = nn.Parameter(torch.empty(s.tokens, s.hidden, dtype=dtype))
        self.layers = nn.ModuleList(Block(s.hidden, s.head_dim, 4 * s.hidden, dtype=dtype) for _ in range(s.layers))
        self.lnf = nn.LayerNorm(s.hidden, eps=1e-5, dtype=dtype)
        self.head = nn.Linear(s.hidden, s.vocab, bias=False, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = self.pos.to_local() if hasattr(self.pos, "to_local") else self.pos  # this rank's tokens at d > 1
        x = self.emb(ids) + pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.lnf(x))

    def parameter_order(self) -> list[nn.Parameter]:
        """The parameters in train_gpt's order (`shapes`)."""
        out = [self.emb.weight, self.pos]
        for layer in self.layers:
            named = dict(layer.named_parameters())
            out += [named[n] for n in WEIGHTS]
        return [*out, self.lnf.weight, self.lnf.bias, self.head.weight]


def torch_model(s: Shape, weights: Sequence[torch.Tensor], job: Job) -> Model:
    """The module holding copies of `weights`; at d > 1 parallelized with
    DTensor (the module docstring)."""
    with torch.device("meta"):
        m = Model(s, weights[0].dtype)
    m = m.to_empty(device=job.device)
    with torch.no_grad():
        for p, w in zip(m.parameter_order(), weights, strict=True):
            p.copy_(w)
    if job.d == 1:
        return m
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

    plan = {
        "emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
        "lnf": SequenceParallel(sequence_dim=0),
        "head": ColwiseParallel(input_layouts=Shard(0), output_layouts=Shard(-1), use_local_output=False),
    }
    parallelize_module(m, job.mesh, plan)
    for layer in m.layers:
        tensor_parallel(layer, job.mesh)
    m.pos = nn.Parameter(distribute_tensor(m.pos.detach(), job.mesh, [Shard(0)]))
    return m


# --------------------------------------------------------------------------
# Variants
# --------------------------------------------------------------------------


@dataclass
class Variant:
    """One way of taking a training step on this rank."""

    loss: Callable[[], torch.Tensor]
    params: list[torch.Tensor]
    parallel_loss: bool = False  # the loss and its backward under DTensor's loss_parallel
    ready: Callable[[], bool] = lambda: True
    """Whether what the first step left running is done (fuserc's kernels)."""
    settled: Callable[[], bool] = lambda: True
    """Whether its way of running is decided (fuserc's programs: graphs or op by op)."""
    kernels: Callable[[], str] = lambda: "n/a"
    runs: Callable[[], str] = lambda: ""
    """How fuserc's programs ran (replayed as graphs or op by op, and why)."""
    compile_s: Callable[[float, float], float | None] = lambda first, step: None
    close: Callable[[], None] = lambda: None
    opt: Any = None

    def __post_init__(self) -> None:
        fused = {"fused": True} if self.params and self.params[0].is_cuda else {}
        self.opt = torch.optim.AdamW(self.params, lr=1e-4, weight_decay=0.01, **fused)

    def step(self) -> float:
        """One training step; its loss (a float read at the end of the step)."""
        from contextlib import nullcontext

        self.opt.zero_grad(set_to_none=True)
        if self.parallel_loss:
            from torch.distributed.tensor.parallel import loss_parallel

            context: Any = loss_parallel()
        else:
            context = nullcontext()
        with context:
            loss = self.loss()
            loss.backward()
        self.opt.step()
        return loss.detach()


def fuserc_variant(s: Shape, weights: Sequence[torch.Tensor], ids: torch.Tensor, labels: torch.Tensor, job: Job, a: argparse.Namespace) -> Variant:
    import fuserc.torch as ft
    from fuserc.api import shard_tensor
    from fuserc.sharding import Mesh

    fd, _ = build_model(s.model_args(a.dtype), job.d)
    f = ft.function(fd, autodiff=a.autodiff)
    mesh = Mesh("tp", (job.d,))
    params = [nn.Parameter(shard_tensor(w, spec, mesh, job.rank).contiguous().clone()) for w, spec in zip(weights, fd.inputs[2:], strict=True)]

    def kernels() -> str:
        return f.startup.kernels.describe()

    def compile_s(first: float, step: float) -> float:
        return sum(v for k, v in f.startup.seconds.items() if k in ("passes", "kernels"))

    def runs() -> str:
        return "; ".join(f"@{name}: {how}" for name, how in f.runs().items())

    return Variant(lambda: f(ids, labels, *params), params, ready=lambda: f.wait_for_kernels(0), settled=f.settled, kernels=kernels, runs=runs, compile_s=compile_s,
                   close=f.close)  # fmt: skip


def module_variant(s: Shape, weights: Sequence[torch.Tensor], ids: torch.Tensor, labels: torch.Tensor, job: Job, options: dict[str, Any] | None,
                   reset: bool = True) -> Variant:  # fmt: skip
    """The module eager, or under torch.compile with Inductor `options`
    (compiled afresh; Dynamo's caches dropped first unless `reset` is
    False: where another compiled variant is still to be timed beside it)."""
    m = torch_model(s, weights, job)
    fn: Callable[[torch.Tensor], torch.Tensor] = m
    if options is not None:
        if reset:
            torch._dynamo.reset()
        fn = torch.compile(m, options=options)
    parallel = job.d > 1
    v = Variant(lambda: F.cross_entropy(fn(ids), labels), list(m.parameters()), parallel_loss=parallel)
    if options is not None:
        from torch._inductor import metrics

        metrics.generated_kernel_count = 0
        v.kernels = lambda: f"{metrics.generated_kernel_count} generated"
        v.compile_s = lambda first, step: max(first - step, 0.0)
        v.close = torch._dynamo.reset  # (Dynamo's caches hold the module: its memory goes back with them)
    return v


# --------------------------------------------------------------------------
# One shape
# --------------------------------------------------------------------------


@dataclass
class Result:
    """One variant at one shape (None where n/a, with `reason`)."""

    step_ms: float | None = None
    tokens_per_s: float | None = None
    peak_mib: float | None = None
    first_step_s: float | None = None
    compile_s: float | None = None
    kernels: str = "n/a"
    runs: str = ""
    loss: float | None = None
    building_step_ms: float | None = None
    building_steps: int = 0
    full_speed_at_s: float | None = None
    device_ms: float | None = None
    """The device's time a step with the host far ahead (`device_ms`)."""
    reason: str = ""


@dataclass
class ShapeResult:
    shape: Shape
    results: dict[str, Result] = field(default_factory=dict)
    speedup: dict[str, float | None] = field(default_factory=dict)  # baseline ms / fuserc ms
    peak_vs_eager: dict[str, float | None] = field(default_factory=dict)
    loss_diff: dict[str, float | None] = field(default_factory=dict)  # first loss vs eager's, relative
    timing: str = ""  # how the step times were taken: interleaved, or one variant after another


def inputs(s: Shape, job: Job, dtype: torch.dtype) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """train_gpt's initial weights (drawn on this rank's device from one
    seed: the same on every rank), random tokens and their successors."""
    weights = initial_weights(s.model_args("f32"), job.device, dtype)
    g = torch.Generator(job.device).manual_seed(1)
    seq = torch.randint(0, s.vocab, (s.tokens + 1,), generator=g, device=job.device)
    return weights, seq[:-1].contiguous(), seq[1:].contiguous()


MEMORY_MARGIN = 1.5
"""The variants are kept together and timed in turn when V times the first
one's memory (held between steps, plus its peak above that), times this,
fits in what the device had free at the shape's start."""


def begin(make: Callable[[], Variant], job: Job, a: argparse.Namespace, key: str) -> tuple[Variant, Result]:
    """A variant made and its first step, the steps while it builds
    (fuserc), its warm-up, then its steps alone: their peak memory, and
    their time (the step time where the variants are timed one after
    another). The variant is left open (`finish` closes it)."""
    r = Result()
    outside = allocated_mib(job)  # the inputs and what other variants hold
    v = make()
    try:
        job.drain()
        job.comm.Barrier()
        start = time.perf_counter()
        r.loss = float(v.step())
        job.drain()
        r.first_step_s = max(job.comm.allgather(time.perf_counter() - start))
        building = []
        while len(building) < BUILDING_STEPS and not all(job.comm.allgather(v.ready())):
            t0 = time.perf_counter()
            v.step()
            job.drain()
            building.append(max(job.comm.allgather(time.perf_counter() - t0)))
        while not all(job.comm.allgather(v.ready())):
            time.sleep(0.1)
        if key == "fuserc":
            r.full_speed_at_s = max(job.comm.allgather(time.perf_counter() - start))
            r.building_steps = len(building)
            r.building_step_ms = statistics.median(building) * 1e3 if building else None
        settle(v, job, a.warmup)
        v.opt.zero_grad(set_to_none=True)
        job.release()
        base = None if outside is None else outside + owned_mib(v)  # what the variant holds beyond: its programs' buffers and graphs
        job.reset_peak()
        times = timed(v.step, job, argparse.Namespace(warmup=0, iters=a.iters, repeats=a.repeats))
        peak = job.peak_mib()
        r.peak_mib = max(job.comm.allgather(peak - base)) if peak is not None and base is not None else None
        r.step_ms = statistics.median(times) * 1e3
        device = [device_ms(v.step, job, a.iters) for _ in range(a.repeats)]
        r.device_ms = None if None in device else max(job.comm.allgather(statistics.median(device)))  # type: ignore[type-var]
        r.kernels = v.kernels()  # (Inductor's count starts again with the next compiled variant)
        v.opt.zero_grad(set_to_none=True)
    except BaseException:
        end(v)
        raise
    return v, r


HOLD_S = 0.5
"""How long `device_ms` holds the device before the steps it times."""


def device_ms(step: Callable[[], Any], job: Job, iters: int) -> float | None:
    """Milliseconds a step of the device's time with the host far ahead:
    the device held (`HOLD_S`, a kernel that waits) while the host issues
    `iters` steps, timed by events before and after them, so that the
    host's time counts only where it falls behind by more than the
    launch queue holds. A step time above it is time the device waited
    for the host; one at it is the device's work. None off CUDA."""
    if not job.cuda:
        return None
    from fuserc.runtime.backends.cuda import spin

    job.drain()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spin(HOLD_S)
    start.record()
    for _ in range(iters):
        step()
    stop.record()
    job.drain()
    return start.elapsed_time(stop) / iters


def finish(v: Variant, r: Result, s: Shape) -> Result:
    """The figures that follow from the step time; the variant closed (its
    memory goes once its last reference does)."""
    try:
        r.tokens_per_s = s.tokens / (r.step_ms / 1e3)
        r.compile_s = v.compile_s(r.first_step_s, r.step_ms / 1e3)
        r.runs = v.runs()
    finally:
        end(v)
    return r


def end(v: Variant) -> None:
    v.close()
    for p in v.params:
        p.grad = None


def owned_mib(v: Variant) -> float:
    """The variant's parameters and optimizer state, MiB (this rank's
    shards): its peak is taken above them, so that what it keeps between
    steps besides (fuserc's cached buffers and captured graphs) counts."""
    tensors = [*v.params, *(t for state in v.opt.state.values() for t in state.values() if isinstance(t, torch.Tensor))]
    return sum(getattr(t, "_local_tensor", t).nbytes for t in tensors) / 2**20


def allocated_mib(job: Job) -> float | None:
    """What torch has allocated on this rank's GPU (None on the CPU)."""
    return torch.cuda.memory_allocated(job.device) / 2**20 if job.cuda else None


def free_mib(job: Job) -> float | None:
    """What torch could allocate on this rank's GPU now (None on the CPU):
    the device's free memory and torch's cached, unallocated blocks."""
    if not job.cuda:
        return None
    return (torch.cuda.mem_get_info(job.device)[0] + torch.cuda.memory_reserved(job.device) - torch.cuda.memory_allocated(job.device)) / 2**20


def variant_makers(
    s: Shape, weights: Sequence[torch.Tensor], ids: torch.Tensor, labels: torch.Tensor, job: Job, a: argparse.Namespace,
    reset: Callable[[], bool] = lambda: True,
) -> dict[str, tuple[str | None, Callable[[], Variant]]]:
    """Each variant's reason not to run here (None: it runs) and what makes
    it; a compiled one drops Dynamo's caches first where `reset()` (no
    other compiled variant is still to be timed beside it)."""
    return {
        "eager": (None, lambda: module_variant(s, weights, ids, labels, job, None)),
        "fuserc": (None, lambda: fuserc_variant(s, weights, ids, labels, job, a)),
        "compile": (job.compile_reason, lambda: module_variant(s, weights, ids, labels, job, {}, reset=reset())),
        "async_tp": (job.async_tp_reason or job.compile_reason, lambda: module_variant(s, weights, ids, labels, job, {"_micro_pipeline_tp": True}, reset=reset())),
    }


def settle(v: Variant, job: Job, warmup: int) -> None:
    """Steps until every rank's programs are settled (fuserc's gauged and
    tried as graphs first: a start-up cost, not its steps; at most
    `SETTLE_STEPS`), then `warmup` steps; the device drained."""
    for _ in range(SETTLE_STEPS):
        if all(job.comm.allgather(v.settled())):
            break
        v.step()
    for _ in range(warmup):
        v.step()
    job.drain()


def bench_shape(s: Shape, job: Job, a: argparse.Namespace) -> ShapeResult:
    """Every variant at one shape. Each is made, takes its first steps and
    its steps alone (`begin`: its peak memory); then, where they fit in
    memory together (`MEMORY_MARGIN`; on the CPU always), they stay and
    their step times are taken in turn (`interleaved_ms`), else each is
    timed alone and closed before the next (`ShapeResult.timing` says
    which)."""
    res = ShapeResult(s)
    problem = s.problem(job.d)
    if problem:
        res.results = {k: Result(reason=problem) for k, _ in VARIANTS}
        return res
    dtype = DTYPES[a.dtype]
    weights, ids, labels = inputs(s, job, dtype)
    job.release()
    free = free_mib(job)
    live: dict[str, tuple[Variant, Result]] = {}
    makers = variant_makers(s, weights, ids, labels, job, a, reset=lambda: not live)
    order = ("eager", "fuserc", "compile", "async_tp")  # eager first: the others are compared with it
    why = {k: "not asked for (--variants)" if k not in a.variants else makers[k][0] for k in order}
    count = sum(1 for k in order if not why[k])
    together: bool | None = None  # decided by the first variant that runs
    for key in order:
        if why[key]:
            res.results[key] = Result(reason=why[key])
            continue
        before = allocated_mib(job)
        opened: list[tuple[Variant, Result]] = []

        def body() -> tuple[Variant, Result]:
            opened.append(begin(makers[key][1], job, a, key))
            return opened[0]

        got, reason = agreed(job.comm, body)
        if got is None:
            while opened:  # begun here, failed on another rank
                end(opened.pop()[0])
            res.results[key] = Result(reason=reason)
            job.release()
            continue
        v, r = got
        del got, opened
        if together is None:  # its memory between steps and its peak, times the variants
            after = allocated_mib(job)
            mine = None if after is None or before is None else count * (after - before + (r.peak_mib or 0.0)) * MEMORY_MARGIN
            need = None if mine is None else max(job.comm.allgather(mine))
            least = None if free is None else min(job.comm.allgather(free))
            together = count > 1 and (need is None or least is None or need <= least)
            res.timing = timing(a, together, count, need, least)
        if together:
            live[key] = (v, r)
        else:
            res.results[key] = finished(v, r, s, job)
        del v
        job.release()
    if live:
        steps = {k: v.step for k, (v, _) in live.items()}
        times, reason = agreed(job.comm, lambda: interleaved_ms(steps, a, window=lambda step, n: window_s(step, job, n) * 1e3))
        del steps
        for key in list(live):
            v, r = live.pop(key)
            if times is None:
                end(v)
                res.results[key] = Result(reason=f"timed in turn: {reason}")
            else:
                r.step_ms = times[key]
                res.results[key] = finished(v, r, s, job)
            del v
            job.release()
    res.results = {k: res.results[k] for k in order}
    fus, eager = res.results["fuserc"], res.results["eager"]
    for key, _ in BASELINES:
        ms = res.results[key].step_ms
        res.speedup[key] = ms / fus.step_ms if ms and fus.step_ms else None
    for key, _ in VARIANTS:
        r = res.results[key]
        res.peak_vs_eager[key] = r.peak_mib / eager.peak_mib if r.peak_mib is not None and eager.peak_mib else None
        res.loss_diff[key] = abs(r.loss - eager.loss) / max(abs(eager.loss), 1e-12) if r.loss is not None and eager.loss is not None else None
    return res


def finished(v: Variant, r: Result, s: Shape, job: Job) -> Result:
    """`finish`, its failure on any rank the variant's reason."""
    got, reason = agreed(job.comm, lambda: finish(v, r, s))
    return got if got is not None else Result(reason=reason)


def timing(a: argparse.Namespace, together: bool, count: int, need: float | None, free: float | None) -> str:
    """How a shape's step times were taken, for a reader of the output."""
    if together:
        return interleaving(a, "steps")
    if count < 2:
        return "one variant, alone"
    return f"one after another (the variants would need about {num_text(need, ',.0f')} MiB together, {num_text(free, ',.0f')} MiB free)"


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def line(res: ShapeResult, key: str, title: str, d: int) -> str:
    r = res.results[key]
    head = f"[{res.shape.text()} d={d}] {title}:"
    if r.step_ms is None:
        return f"{head} n/a ({r.reason})"
    out = (
        f"{head} step {r.step_ms:.1f} ms, {r.tokens_per_s:,.0f} tokens/s, peak {num_text(r.peak_mib, ',.0f')} MiB, "
        f"device alone {num_text(r.device_ms, '.1f')} ms, first step {r.first_step_s:.1f} s, compile {num_text(r.compile_s, '.1f')} s, kernels {r.kernels}, "
        f"loss {r.loss:.4f} (vs eager {num_text(res.loss_diff.get(key), '.1e')})"
    )
    if r.runs:
        out += f"; programs: {r.runs}"
    if key == "fuserc" and r.full_speed_at_s is not None:
        out += f"; {r.building_steps} step(s) while its kernels built ({num_text(r.building_step_ms, '.1f')} ms each), full speed from {r.full_speed_at_s:.1f} s"
    if key != "fuserc":
        out += f"; {title} / fuserc {num_text(res.speedup.get(key), '.2f')}"
    return out


def markdown(results: Sequence[ShapeResult], d: int, dtype: str, device: str) -> str:
    head = ["layers x hidden x tokens"]
    for _, title in VARIANTS:
        head += [f"{title} ms", f"{title} tokens/s"]
    head += [f"{title} / fuserc" for _, title in BASELINES]
    out = [f"### training step (fwd+bwd+AdamW), {d} rank(s), {dtype}, {device}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, None] = {}
    for res in results:
        if res.timing:
            notes[f"timing at {res.shape.text()}: {res.timing}"] = None
        cells = [res.shape.text()]
        for key, title in VARIANTS:
            r = res.results[key]
            if r.step_ms is None:
                notes[f"n/a: {title}: {r.reason}"] = None
            cells += [num_text(r.step_ms, ".1f"), num_text(r.tokens_per_s, ",.0f")]
        cells += [num_text(res.speedup.get(k), ".2f") for k, _ in BASELINES]
        out.append("| " + " | ".join(cells) + " |")
    head = ["layers x hidden x tokens"] + [f"{t} device ms" for _, t in VARIANTS] + [f"{t} device / fuserc" for _, t in BASELINES]
    out += ["", "### the device's time a step, the host far ahead (where a step time is above it, the device waited for the host)", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    for res in results:
        mine = res.results["fuserc"].device_ms
        cells = [res.shape.text()] + [num_text(res.results[k].device_ms, ".1f") for k, _ in VARIANTS]
        cells += [num_text(res.results[k].device_ms / mine if res.results[k].device_ms and mine else None, ".2f") for k, _ in BASELINES]
        out.append("| " + " | ".join(cells) + " |")
    head = ["layers x hidden x tokens"] + [f"{t} peak MiB" for _, t in VARIANTS] + [f"{t} peak / eager" for k, t in VARIANTS if k != "eager"]
    out += ["", "### peak memory above parameters, optimizer state and inputs", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        cells = [res.shape.text()] + [num_text(res.results[k].peak_mib, ",.0f") for k, _ in VARIANTS]
        cells += [num_text(res.peak_vs_eager.get(k), ".2f") for k, _ in VARIANTS if k != "eager"]
        out.append("| " + " | ".join(cells) + " |")
    head = ["layers x hidden x tokens"] + [f"{t} first step s" for _, t in VARIANTS] + [f"{t} compile s" for _, t in VARIANTS]
    head += ["fuserc kernels", "torch.compile kernels", "fuserc steps while building (ms)", "fuserc full speed from (s)"]
    out += ["", "### first step, compile time and kernels", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        f = res.results["fuserc"]
        cells = [res.shape.text()] + [num_text(res.results[k].first_step_s, ".1f") for k, _ in VARIANTS]
        cells += [num_text(res.results[k].compile_s, ".1f") for k, _ in VARIANTS]
        building = f"{f.building_steps} x {num_text(f.building_step_ms, '.1f')}" if f.building_steps else "none"
        cells += [f.kernels, res.results["compile"].kernels, building, num_text(f.full_speed_at_s, ".1f")]
        out.append("| " + " | ".join(cells) + " |")
    out += [""] + [f"- {n}" for n in notes] if notes else []
    return "\n".join(out)


def failures(results: Sequence[ShapeResult], dtype: str) -> list[str]:
    out = []
    for res in results:
        for key, title in VARIANTS:
            diff = res.loss_diff.get(key)
            if diff is not None and diff > LOSS_TOLERANCE[dtype]:
                out.append(f"{res.shape.text()}: {title}'s first loss differs from eager's by {diff:.2e} (tolerance {LOSS_TOLERANCE[dtype]:g})")
    return out


def run(a: argparse.Namespace) -> int:
    job = Job(a)
    lead = job.rank == 0
    if lead:
        extra = f", autodiff options '{a.autodiff}'" if a.autodiff else ""
        print(f"fuserc bench_model: {job.d} rank(s) on {job.device_name()}, {a.dtype}, head dim {a.head_dim}, vocab {a.vocab}, "
              f"warmup {a.warmup}, {a.repeats} x {a.iters} steps, variants interleaved where they fit in memory together{extra}", flush=True)  # fmt: skip
    results = []
    for s in a.shape_list:
        res = bench_shape(s, job, a)
        results.append(res)
        if lead:
            print(f"[{s.text()} d={job.d}] timing: {res.timing or 'n/a'}", flush=True)
            for key, title in VARIANTS:
                print(line(res, key, title, job.d), flush=True)
    bad = failures(results, a.dtype)
    if lead:
        text = markdown(results, job.d, a.dtype, job.device_name())
        print("\n" + text + "\n")
        if a.out:
            folder = Path(a.out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "bench_model.md").write_text(text + "\n")
            figures = {
                "ranks": job.d, "device": job.device_name(), "torch": torch.__version__, "dtype": a.dtype, "autodiff": a.autodiff,
                "shapes": [{**asdict(res.shape), "results": {k: asdict(r) for k, r in res.results.items()}, "speedup": res.speedup,
                            "peak_vs_eager": res.peak_vs_eager, "loss_diff": res.loss_diff, "timing": res.timing} for res in results],
            }  # fmt: skip
            (folder / "bench_model.json").write_text(json.dumps(figures, indent=1))
            print(f"tables: {folder / 'bench_model.md'}")
        for b in bad:
            print(f"FAILED: {b}")
        sys.stdout.flush()
    job.end()
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main("bench_model", parser(), resolve, run, argv)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""A GPT layer, sequence + tensor parallel over d GPUs: fuserc beside PyTorch.

    torchrun --nproc-per-node 4 tools/bench_layer.py [--hidden 4096,8192]
        [--tokens 8192,16384] [--mode fwd|fwdbwd|both] [--warmup W] [--iters N]
        [--repeats R] [--json FILE] [--cpu-compile] [--variants LIST]
        [--profile DIR [--profile-ranks all]]
    mpiexec -n 4 python tools/bench_layer.py ...          (the same under MPI)
    python tools/bench_layer.py ...                        (one GPU: d = 1)
    torchrun --nproc-per-node 2 tools/bench_layer.py --small   (the CPU, gloo: a smoke run)

The layer is examples/python/gpt_layer.py's: h = x + attn(layer_norm(x)),
y = h + mlp(layer_norm(h)), causal attention with heads of 128 (head dim
128, hidden/128 heads), MLP 4*hidden with gelu, bf16 (f32 with --small).
Over d ranks, sequence parallel between the blocks (x, h and y split over
tokens) and tensor parallel inside (q, k, v and the first MLP GEMM split
by columns, the projections after them by rows): per block an all-gather
before and a reduce-scatter after. For each shape, in the same processes,
on the same inputs and weights:

- limit: the layer's local work alone on this GPU, as PyTorch eager runs
  it: every op at its per-rank shape (tokens/d for the norms and the
  residual, all tokens and heads/d for attention and the GEMMs), each
  collective left out (its result is a buffer of the right shape, filled
  once: nothing is copied or sent);
- fuserc: the layer of gpt_layer.build through `fuserc.torch.function` on
  this rank's shards (forward: its @main under no_grad; forward+backward:
  @main_fwd then @main_bwd through torch autograd);
- eager: the same layer as a torch nn.Module, parallelized with DTensor's
  `parallelize_module` (SequenceParallel for the norms, ColwiseParallel for
  q, k, v and fc1, RowwiseParallel to tokens for the projections);
- torch.compile: that module under plain torch.compile (Inductor, no
  async TP);
- async TP: that module under torch.compile with Inductor's
  `_micro_pipeline_tp` and symmetric memory enabled for the group (CUDA
  and d > 1 only). Whether it fused anything is counted in the graphs it
  compiled (tools/bench_layer_graphs.py): its fused all-gather + matmul
  and matmul + reduce-scatter calls and the collectives left unfused,
  per mode; plain torch.compile's collectives likewise.

First step: the seconds of each variant's first forward+backward (the
forward alone with --mode fwd), its compilation included (fuserc's passes
and the kernels its cache holds; the others are built in the background
of its steps, the default of fuserc.torch.function, and their launches
run another way until then: the line after says when they were all in,
`ready_s` in the JSON; torch.compile's graphs), the slowest rank's,
printed under each shape and in the JSON's `first_step_s`. The check
and the timed steps come after what the first step left running is done.
Then fuserc's line says how its programs' calls went:
replayed as CUDA graphs (with the trial's times) or op by op, and why;
and the next where its first step's time went (`Function.startup`, the
slowest rank's phases: backend, passes, communicators, kernels with how
many were loaded or built, the rest of the first runs). The variants run
in one process in the table's order, and a later one's first step finds
what an earlier one loaded (Inductor's and Dynamo's modules, CUDA's
libraries, cached Triton kernels): to compare first steps, run each
variant alone (`--variants fuserc`, then `--variants compile`), with the
same caches, cold or warm.

The two compiled variants are n/a on the CPU unless --cpu-compile asks
for them (Inductor's C++ builds of the layer take minutes there).
`--variants fuserc,limit` runs only those (the others print n/a).
`--algorithm collective|ring|none` pipelines fuserc's programs that way
at every site (stream-pipeline's option; default auto, the cost model's
choice). `--profile DIR`: after fuserc's timed steps of each shape and mode, 3 more
run under torch.profiler; rank 0 writes DIR/fuserc_<hidden>x<tokens>_<mode>
.json (a Chrome trace: kernels per stream, CUDA-graph replays included)
and .txt (the device's busy and idle time with its longest idle gaps, then
the ops with the most device time, then host time); with `--profile-ranks
all` every other rank r writes its trace too (..._rank<r>.json).

Peak memory: torch.cuda.max_memory_allocated of the rank, reset before
each variant's mode, over its warm-up and timed iterations (what the
harness holds for every variant, inputs and the eager module's weights,
included); n/a on the CPU.

Timing: W untimed iterations, then R repeats of N back-to-back iterations
with the device drained before and after each repeat (ranks meet at a
barrier before it); a repeat's time is its slowest rank's; the figure is
the median repeat over N. Forward runs under torch.no_grad();
forward+backward calls backward with a fixed random cotangent, gradients
set to None before each iteration as a training step's zero_grad does.

TFLOP/s per GPU counts the model's FLOPs on one rank: forward
24*T*H^2/d (the GEMMs, MLP 4H) + 2*T^2*H/d (causal attention, half of
QK^T and PV); forward+backward 3x that. Ratios: "/ limit" is the
limit's time over the figure's (1.00: as fast as the local work with no
communication at all); "eager / fuserc", "torch.compile / fuserc" and
"async TP / fuserc" are speedups of fuserc over each baseline (> 1:
fuserc faster).

The check (tools/bench_layer_check.py): one forward+backward of each
variant on the same inputs (the forward alone with --mode fwd); the output
and the gradients (of x and of every weight, this rank's shards) of
fuserc and the compiled variants against eager's, and of all against a
reference (eager in f32 for a bf16 run, f64 for f32), as
max |a - b| / max |b| over all ranks. A variant whose error against the
reference exceeds twice eager's plus a floor (bf16 1e-2, f32 1e-5), for
the output or any gradient, is printed as FAILED and the run exits with
code 1. `--perturb E` adds E to fuserc's first layer_norm bias (a test
that the check catches a wrong layer).

NVLink multicast is never used: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set
before NCCL or symmetric memory start. docs/performance.md has the
commands and the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "python"))
sys.path.insert(0, str(ROOT / "tools"))

from bench import (  # noqa: E402
    MULTICAST_OFF,
    Figure,
    add_profile_ranks,
    agreed,
    device_name,
    failure_reason,
    figure,
    gc_paused,
    init_torch_distributed,
    num_text,
    profiled,
    release,
    start_torch_world,
    tflops_text,
    torch_launched,
)
from bench_layer_check import WIDER, Check, Outcome, compare, judge, run_once, table  # noqa: E402
from bench_layer_graphs import GraphCount, collectives_text, fused_text  # noqa: E402
from gpt_layer import WEIGHTS, block, build  # noqa: E402

HEAD_DIM = 128
VARIANTS = (("limit", "limit"), ("fuserc", "fuserc"), ("eager", "eager"), ("compile", "torch.compile"), ("async_tp", "async TP"))
BASELINES = VARIANTS[2:]
"""The variants fuserc's speedups are over."""
CHECKED = ("eager", "fuserc", "compile", "async_tp")
COMPILED = ("compile", "async_tp")
MODES = {"fwd": "forward", "fwdbwd": "forward+backward"}


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of positive integers, got '{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"a comma-separated list of positive integers, got '{text}'")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int_list, default=None, help="hidden sizes, multiples of 128 (default 4096,8192)")
    p.add_argument("--tokens", type=int_list, default=None, help="tokens (sequence x batch) (default 8192,16384)")
    p.add_argument("--mode", choices=("fwd", "fwdbwd", "both"), default="both")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations per figure, at least 1 (default 7: fuserc's gauge and replay trial; --small 1)")
    p.add_argument("--iters", type=int, default=None, help="iterations per timed repeat (default 10; --small 2)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats, the median reported (default 3; --small 2)")
    p.add_argument("--small", action="store_true", help="the CPU, f32, hidden 64, 32 tokens, head dim 16: tests the harness")
    p.add_argument("--perturb", type=float, default=0.0, metavar="E", help="add E to fuserc's first layer_norm bias (the check must then fail)")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="rank 0 also writes every figure as JSON")
    p.add_argument("--cpu-compile", action="store_true", help="with --small, run the torch.compile variants on the CPU too (minutes of Inductor C++ builds)")
    p.add_argument("--variants", type=variant_list, default=None, metavar="LIST",
                   help=f"the variants to run, comma-separated, of {','.join(k for k, _ in VARIANTS)} (default all; the others print n/a)")
    p.add_argument("--profile", metavar="DIR", help="rank 0 writes torch.profiler's view of fuserc's last steps of each shape and mode to DIR")
    add_profile_ranks(p)
    p.add_argument("--algorithm", choices=("auto", "collective", "ring", "none"), default="auto",
                   help="how fuserc's programs pipeline their communication (stream-pipeline's option; default auto: the cost model chooses)")
    return p


def variant_list(text: str, variants: Sequence[tuple[str, str]] = VARIANTS) -> tuple[str, ...]:
    """--variants: keys among `variants`' (a benchmark's (key, title) pairs)."""
    keys = tuple(v.strip() for v in text.split(",") if v.strip())
    known = [k for k, _ in variants]
    bad = [k for k in keys if k not in known]
    if bad or not keys:
        raise argparse.ArgumentTypeError(f"variants are among {','.join(known)}, got '{text}'")
    return keys


def resolve(a: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on --small."""
    a.hidden = a.hidden or ([64] if a.small else [4096, 8192])
    a.tokens = a.tokens or ([32] if a.small else [8192, 16384])
    a.warmup = (1 if a.small else 7) if a.warmup is None else a.warmup
    a.iters = (2 if a.small else 10) if a.iters is None else a.iters
    a.repeats = (2 if a.small else 3) if a.repeats is None else a.repeats
    a.head_dim = 16 if a.small else HEAD_DIM
    a.dtype = "f32" if a.small else "bf16"
    a.variants = a.variants or tuple(k for k, _ in VARIANTS)
    if min(a.warmup, a.iters, a.repeats) < 1:  # (the first forward of a compiled module compiles)
        raise argparse.ArgumentTypeError("--warmup, --iters and --repeats must be >= 1")
    return a


@dataclass(frozen=True)
class Shape:
    hidden: int
    tokens: int
    head_dim: int

    @property
    def heads(self) -> int:
        return self.hidden // self.head_dim

    @property
    def ffn(self) -> int:
        return 4 * self.hidden

    def problem(self, d: int) -> str | None:
        """Why the layer cannot be split over d ranks (None when it can)."""
        if self.hidden % self.head_dim:
            return f"hidden {self.hidden} is not a multiple of the head dim {self.head_dim}"
        if self.heads % d:
            return f"{self.heads} heads are not divisible by {d} ranks"
        if self.tokens % d:
            return f"{self.tokens} tokens are not divisible by {d} ranks"
        return None

    def flops(self, d: int, mode: str) -> int:
        """Model FLOPs of one rank (module docstring)."""
        t, h = self.tokens, self.hidden
        fwd = (24 * t * h * h + 2 * t * t * h) // d
        return fwd if mode == "fwd" else 3 * fwd


# --------------------------------------------------------------------------
# The layer in PyTorch
# --------------------------------------------------------------------------


def tensor_parallel(m: nn.Module, mesh: Any) -> nn.Module:
    """DTensor's sequence + tensor parallel plan of the layer (x split over tokens)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    def gathered() -> PrepareModuleInput:  # the block's input, from tokens split to replicated
        return PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),))

    plan = {
        "ln1": SequenceParallel(sequence_dim=0),
        "attn": gathered(),
        "attn.wq": ColwiseParallel(),
        "attn.wk": ColwiseParallel(),
        "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=Shard(0)),
        "ln2": SequenceParallel(sequence_dim=0),
        "mlp": gathered(),
        "mlp.fc1": ColwiseParallel(),
        "mlp.fc2": RowwiseParallel(output_layouts=Shard(0)),
    }
    return parallelize_module(m, mesh, plan)


class LeftOut(torch.autograd.Function):
    """A collective left out of the local work: the result is `out` (a
    buffer of the collective's result shape, filled once), the gradient
    `back` (the input's shape); nothing is copied or communicated."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, out: torch.Tensor, back: torch.Tensor) -> torch.Tensor:
        ctx.back = back
        return out.detach()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return ctx.back.detach(), None, None


def local_work(shape: Shape, weights: Sequence[torch.Tensor], d: int, device: torch.device) -> nn.Module:
    """The layer at one rank's shard shapes with its collectives left out:
    after each layer_norm (the all-gather of tokens) and after each row
    parallel projection (the reduce-scatter back to tokens)."""
    m = block(weights, shape.head_dim, d, device)
    if d == 1:
        return m
    t, h, dtype = shape.tokens, shape.hidden, weights[0].dtype

    def buffer(rows: int) -> torch.Tensor:
        return torch.randn(rows, h, device=device).to(dtype)

    def left_out(rows_out: int, rows_in: int) -> Callable[..., torch.Tensor]:
        out, back = buffer(rows_out), buffer(rows_in)
        return lambda _m, _i, y: LeftOut.apply(y, out, back)

    for gathered in (m.ln1, m.ln2):
        gathered.register_forward_hook(left_out(t, t // d))
    for scattered in (m.attn.wo, m.mlp.fc2):
        scattered.register_forward_hook(left_out(t // d, t))
    return m


# --------------------------------------------------------------------------
# The job: launcher, devices, torch.distributed
# --------------------------------------------------------------------------


class Job:
    """This process: rank, size, device, fuserc's communicator and torch's mesh."""

    def __init__(self, a: argparse.Namespace):
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh

        from fuserc.runtime.job.mpi_env import mpi_env

        self.env = mpi_env()
        self.comm, self.rank, self.d = self.env.comm, self.env.rank, self.env.size
        self.cuda = not a.small
        if self.cuda:
            self.device = torch.device("cuda", self.env.node_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if not dist.is_initialized():  # under mpiexec
            init_torch_distributed(self.comm, self.rank, self.d, self.env.node_rank, self.device if self.cuda else None)
        self.group_name = dist.group.WORLD.group_name
        self.mesh = DeviceMesh(self.device.type, list(range(self.d)))
        self.compile_reason = None if self.cuda or a.cpu_compile else "on the CPU only with --cpu-compile (Inductor's C++ builds take minutes)"
        self.async_tp_reason = self._async_tp()
        if self.compile_reason is None:
            import torch._functorch.config as functorch

            functorch.enable_autograd_cache = False  # every graph compiled, so GraphCount sees it

    def _async_tp(self) -> str | None:
        """Symmetric memory for the world's group; why async TP cannot run."""
        if not self.cuda:
            return "needs CUDA (symmetric memory)"
        if self.d < 2:
            return "d = 1: no collective to fuse (torch.compile is the same work)"
        try:
            import torch._inductor.config as inductor
            import torch.distributed._symmetric_memory as symm_mem

            if not hasattr(inductor, "_micro_pipeline_tp"):
                return "this torch has no torch._inductor.config._micro_pipeline_tp"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # a no-op in newer torch
                symm_mem.enable_symm_mem_for_group(self.group_name)
        except Exception as e:  # noqa: BLE001 - reported as n/a
            return failure_reason(e)
        return None

    def stream(self) -> AbstractContextManager[Any]:
        """PyTorch's variants run on the device's default stream."""
        return torch.cuda.stream(torch.cuda.default_stream(self.device)) if self.cuda else nullcontext()

    def drain(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_mib(self) -> float | None:
        """The most memory torch allocated on the GPU since `reset_peak` (None on the CPU)."""
        return torch.cuda.max_memory_allocated(self.device) / 2**20 if self.cuda else None

    def release(self) -> None:
        release(self.comm, self.device if self.cuda else None)

    def end(self) -> None:
        """After the figures: the device drained; under mpiexec, the world
        this tool started ended."""
        self.drain()
        if not torch_launched():
            import torch.distributed as dist

            dist.destroy_process_group()

    def device_name(self) -> str:
        return device_name(self.device if self.cuda else None)


# --------------------------------------------------------------------------
# Inputs and variants
# --------------------------------------------------------------------------


def global_inputs(shape: Shape, job: Job, dtype: torch.dtype, seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """x, the weights (nn.Linear's uniform init, norms near 1 and 0) and the
    cotangent of y, global and the same on every rank (rank 0's, broadcast)."""
    import torch.distributed as dist

    g = torch.Generator(device=job.device).manual_seed(seed)
    h, f = shape.hidden, shape.ffn

    def u(*dims: int, fan_in: int) -> torch.Tensor:
        return ((torch.rand(*dims, generator=g, device=job.device) * 2 - 1) / fan_in**0.5).to(dtype)

    def n(*dims: int, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        return (mean + std * torch.randn(*dims, generator=g, device=job.device)).to(dtype)

    def proj(out: int, fan_in: int) -> list[torch.Tensor]:
        return [u(out, fan_in, fan_in=fan_in), u(out, fan_in=fan_in)]

    norm = lambda: [n(h, mean=1.0, std=0.1), n(h, std=0.1)]  # noqa: E731
    glob = [n(shape.tokens, h), *norm(), *proj(h, h), *proj(h, h), *proj(h, h), *proj(h, h), *norm(), *proj(f, h), *proj(h, f)]
    ct = n(shape.tokens, h)
    with job.stream():
        for t in (*glob, ct):
            dist.broadcast(t, src=0)
    return glob, ct


@dataclass
class Variant:
    """One way of running the layer on this rank: the call, and its inputs
    that take gradients (x, then the weights in WEIGHTS order)."""

    call: Callable[[], torch.Tensor]
    leaves: list[torch.Tensor]
    stream: Callable[[], AbstractContextManager[Any]] = nullcontext
    release: Callable[[], None] = lambda: None
    ready: Callable[[], Any] = lambda: None
    """Wait for what the first step left running (fuserc's kernels built
    in the background), before the steps that are timed and checked."""

    def forward(self) -> torch.Tensor:
        with self.stream(), torch.no_grad():
            return self.call()

    def step(self, ct: torch.Tensor) -> torch.Tensor:
        with self.stream():
            for p in self.leaves:
                p.grad = None
            y = self.call()
            y.backward(ct)
            return y

    def grads(self) -> list[torch.Tensor]:
        """This rank's shard of each gradient (a DTensor's laid out as its parameter)."""
        out = []
        for p in self.leaves:
            g = p.grad
            if hasattr(g, "to_local"):
                g = g.redistribute(placements=p.placements).to_local()
            out.append(g.detach())
        return out

    def close(self) -> None:
        for p in self.leaves:
            p.grad = None
        self.release()


def fuserc_variant(shape: Shape, shards: list[torch.Tensor], job: Job, a: argparse.Namespace) -> Variant:
    import fuserc.torch as ft

    fd = build(shape.tokens, shape.hidden, shape.heads, shape.ffn, job.d, a.dtype)
    f = ft.function(fd, algorithm=None if a.algorithm == "auto" else a.algorithm)
    leaves = [s.clone().requires_grad_(True) for s in shards]
    if a.perturb:
        with torch.no_grad():
            leaves[2] += a.perturb  # the first layer_norm's bias
    def release() -> None:  # how its programs' calls went (replayed or op by op), where its first call's time went, then close
        from fuserc.runtime.job.startup import combined

        first = combined(job.comm.allgather(f.startup))  # (the slowest rank's phases, the kernels of all)
        if job.rank == 0:
            print(f"fuserc at hidden {shape.hidden}, tokens {shape.tokens}: " + "; ".join(f"@{k} {v}" for k, v in f.runs().items()), flush=True)
            phases = ", ".join(f"{k} {v:.1f} s" for k, v in first.seconds.items())
            print(f"  fuserc's first step: {phases} (kernels: {first.kernels.describe()})", flush=True)
        f.close()

    return Variant(lambda: f(*leaves), leaves, release=release, ready=f.wait_for_kernels)


def module_variant(m: nn.Module, x: torch.Tensor, job: Job, options: dict[str, Any] | None = None) -> Variant:
    """`m` on this rank's x, or, with Inductor `options`, `m` under
    torch.compile (compiled afresh: dynamo's caches are reset, so that a
    module compiled before with other options is not reused)."""
    x = x.clone().requires_grad_(True)
    params = dict(m.named_parameters())
    fn: Callable[..., torch.Tensor] = m
    if options is not None:
        torch._dynamo.reset()
        fn = torch.compile(m, options=options)
    return Variant(lambda: fn(x), [x, *(params[n] for n in WEIGHTS)], job.stream)


# --------------------------------------------------------------------------
# Measurement and the check
# --------------------------------------------------------------------------


def window_s(step: Callable[[], Any], job: Job, iters: int) -> float:
    """Seconds per iteration of `iters` back-to-back calls of `step`: the
    device drained before and after, the ranks meeting at a barrier before,
    the garbage collector paused while it runs (`gc_paused`)."""
    job.drain()
    with gc_paused():
        job.comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        job.drain()
        return (time.perf_counter() - t0) / iters


def timed(step: Callable[[], Any], job: Job, a: argparse.Namespace) -> list[float]:
    """Seconds per iteration of each repeat (`window_s`) after the warm-up."""
    for _ in range(a.warmup):
        step()
    return [window_s(step, job, a.iters) for _ in range(a.repeats)]


@dataclass
class Row:
    hidden: int
    tokens: int
    heads: int
    ranks: int
    mode: str
    flops_per_gpu: int
    figures: dict[str, Figure] = field(default_factory=dict)
    speedup: dict[str, float | None] = field(default_factory=dict)  # baseline ms / fuserc ms
    peak_mib: dict[str, float | None] = field(default_factory=dict)  # per variant (None: n/a)
    graphs: dict[str, dict[str, int] | None] = field(default_factory=dict)  # compile, async_tp: GraphCount.mode


@dataclass
class ShapeResult:
    shape: Shape
    rows: list[Row]
    checks: dict[str, Check] = field(default_factory=dict)  # CHECKED
    compared: str = ""  # what the check ran: forward+backward or forward
    first_s: dict[str, float | None] = field(default_factory=dict)
    """Seconds of each variant's first step (compilation included: fuserc's passes and kernels, torch.compile's graphs), the slowest rank's."""
    ready_s: dict[str, float | None] = field(default_factory=dict)
    """Seconds from the start of the first step until what it left running is done (fuserc's kernels built in the background), the slowest rank's."""


# --------------------------------------------------------------------------
# One shape
# --------------------------------------------------------------------------


def reference_run(weights: Sequence[torch.Tensor], x: torch.Tensor, ct: torch.Tensor, shape: Shape, job: Job, a: argparse.Namespace) -> Outcome:
    """The check's reference: the eager layer in the wider type, on the same values."""
    wide = WIDER[a.dtype][0]
    with job.stream():
        m = tensor_parallel(block([w.to(wide) for w in weights], shape.head_dim, 1, job.device), job.mesh)
        v = module_variant(m, x.to(wide), job)
    job.drain()
    try:
        return run_once(v, ct.to(wide), a.mode != "fwd")
    finally:
        v.close()


def bench_shape(shape: Shape, job: Job, a: argparse.Namespace, index: int) -> ShapeResult:
    modes = ("fwd", "fwdbwd") if a.mode == "both" else (a.mode,)
    rows = [Row(shape.hidden, shape.tokens, shape.heads, job.d, m, shape.flops(job.d, m)) for m in modes]
    res = ShapeResult(shape, rows, compared=MODES["fwdbwd" if "fwdbwd" in modes else "fwd"])
    problem = shape.problem(job.d)
    if problem:
        for r in rows:
            r.figures = {k: Figure(reason=problem) for k, _ in VARIANTS}
            r.peak_mib = {k: None for k, _ in VARIANTS}
            r.graphs = {k: None for k in COMPILED}
        res.checks = {k: Check(reason=problem) for k in CHECKED}
        return res
    from fuserc.api import shard_tensor
    from fuserc.sharding import Mesh

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    specs = build(shape.tokens, shape.hidden, shape.heads, shape.ffn, job.d, a.dtype).inputs
    mesh = Mesh("tp", (job.d,))
    with job.stream():  # (fuserc's cuda backend makes its own stream current)
        glob, ct_glob = global_inputs(shape, job, dtype, seed=index)
        shards = [shard_tensor(t, s, mesh, job.rank).contiguous().clone() for t, s in zip(glob, specs)]
        ct = shard_tensor(ct_glob, specs[0], mesh, job.rank).contiguous().clone()
        module = tensor_parallel(block(glob[1:], shape.head_dim, 1, job.device), job.mesh)
    reference, no_reference = agreed(job.comm, lambda: reference_run(glob[1:], shards[0], ct, shape, job, a))
    del glob, ct_glob
    job.release()

    def measure(key: str, make: Callable[[], Variant], eager: Outcome | None = None, graphs: GraphCount | None = None) -> Outcome | None:
        """The variant's figures and peak memory in every mode, the graphs
        it compiled (`graphs`, for the compiled ones), and its check."""
        peaks: dict[str, float | None] = {}
        firsts: dict[str, float] = {}
        readies: dict[str, float] = {}

        def body() -> tuple[dict[str, list[float]], Outcome]:
            with job.stream():
                v = make()
            job.drain()
            job.comm.Barrier()
            try:
                start = time.perf_counter()
                run_once(v, ct, a.mode != "fwd")  # (a compiled module compiles here, fuserc's program too)
                job.drain()
                firsts[key] = max(job.comm.allgather(time.perf_counter() - start))
                if "fwd" in modes and a.mode != "fwd":
                    v.forward()  # the forward alone is another program (fuserc's @main): its first run too
                v.ready()
                readies[key] = max(job.comm.allgather(time.perf_counter() - start))
                out = run_once(v, ct, a.mode != "fwd")  # checked: the steps the timed ones are
                times = {}
                for m in modes:
                    job.drain()
                    job.reset_peak()
                    step = v.forward if m == "fwd" else lambda: v.step(ct)
                    times[m] = timed(step, job, a)
                    peaks[m] = job.peak_mib()
                    if a.profile and key == "fuserc":
                        profiled(step, job.comm, job.rank, job.cuda, job.drain, Path(a.profile) / f"fuserc_{shape.hidden}x{shape.tokens}_{m}", a.profile_ranks == "all")
                return times, out
            finally:
                v.close()

        if key not in a.variants:
            got, why = None, "not asked for (--variants)"
        else:
            got, why = agreed(job.comm, body)
        if key != "limit":
            res.first_s[key] = firsts.get(key) if got is not None else None
            res.ready_s[key] = readies.get(key) if got is not None else None
        for r in rows:
            r.figures[key] = Figure(reason=why) if got is None else figure(got[0][r.mode], r.flops_per_gpu)
            r.peak_mib[key] = peaks.get(r.mode) if got is not None else None
            if key in COMPILED:
                r.graphs[key] = graphs.mode(r.mode) if graphs is not None and got is not None else None
        if key == "limit":
            return None
        if got is None:
            res.checks[key] = Check(reason=why)
            return None
        job.drain()
        c = res.checks[key] = Check(reason=f"no reference: {no_reference}" if reference is None else "")
        c.vs_eager = compare(got[1], eager, job.comm) if eager is not None else None
        c.vs_reference = compare(got[1], reference, job.comm) if reference is not None else None
        return got[1]

    eager = measure("eager", lambda: module_variant(module, shards[0], job))
    job.release()
    measure("fuserc", lambda: fuserc_variant(shape, shards, job, a), eager)
    job.release()
    for key, why, options in (("compile", job.compile_reason, {}), ("async_tp", job.async_tp_reason or job.compile_reason, {"_micro_pipeline_tp": True})):
        if why:
            for r in rows:
                r.figures[key], r.peak_mib[key], r.graphs[key] = Figure(reason=why), None, None
            res.checks[key] = Check(reason=why)
            continue
        count = GraphCount()
        measure(key, partial(module_variant, module, shards[0], job, {**options, "post_grad_custom_post_pass": count}), eager, count)
        job.release()
    del module, eager, reference
    job.release()
    measure("limit", lambda: module_variant(local_work(shape, shards[1:], job.d, job.device), shards[0], job))
    del shards, ct
    job.release()
    base = res.checks["eager"].vs_reference
    for key in CHECKED[1:]:
        judge(res.checks[key], base, a.dtype)
    for r in rows:
        lim, fus = r.figures["limit"].ms, r.figures["fuserc"].ms
        for f in r.figures.values():
            f.ratio = lim / f.ms if lim and f.ms else None
        for key, _ in BASELINES:
            ms = r.figures[key].ms
            r.speedup[key] = ms / fus if ms and fus else None
    return res


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def line(res: ShapeResult, row: Row) -> str:
    """One shape and mode on one line (printed as it is measured)."""
    parts = []
    for key, title in VARIANTS:
        f = row.figures[key]
        if f.ms is None:
            parts.append(f"{title} n/a ({f.reason})")
        else:
            parts.append(f"{title} {f.ms:.3f} ms {tflops_text(f.tflops)} TFLOP/s ({num_text(f.ratio, '.2f')} of limit)")
    sp = ", ".join(f"{t} / fuserc {num_text(row.speedup.get(k), '.2f')}" for k, t in BASELINES)
    peaks = ", ".join(f"{t} {num_text(row.peak_mib.get(k), '.0f')}" for k, t in VARIANTS)
    return (
        f"[hidden {row.hidden} tokens {row.tokens} d={row.ranks} {MODES[row.mode]}] " + " | ".join(parts) + f" | {sp}"
        f" | peak MiB: {peaks} | torch.compile's collectives: {collectives_text(row.graphs.get('compile'))}"
        f" | async TP: {fused_text(row.graphs.get('async_tp'))}"
    )


def markdown(rows: Sequence[Row], mode: str, dtype: str) -> str:
    """The table of one mode: each variant's time, TFLOP/s per GPU and
    fraction of the limit; fuserc's speedups over the baselines."""
    head = ["hidden", "tokens", "heads"]
    for i, (_, title) in enumerate(VARIANTS):
        head += [f"{title} ms", f"{title} TFLOP/s"] + ([] if i == 0 else [f"{title} / limit"])
    head += [f"{title} / fuserc" for _, title in BASELINES]
    out = [f"### {MODES[mode]} ({rows[0].ranks} ranks, {dtype})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, None] = {}  # the lines under the table
    for r in rows:
        cells = [str(r.hidden), str(r.tokens), str(r.heads)]
        for i, (key, title) in enumerate(VARIANTS):
            f = r.figures[key]
            if f.ms is None:
                notes[f"n/a: {title}: {f.reason}"] = None
            cells += [num_text(f.ms, ".3f"), tflops_text(f.tflops)] + ([] if i == 0 else [num_text(f.ratio, ".2f")])
        cells += [num_text(r.speedup.get(k), ".2f") for k, _ in BASELINES]
        out.append("| " + " | ".join(cells) + " |")
        fused = r.graphs.get("async_tp")
        if fused is not None and not fused["ag_matmul"] and not fused["matmul_rs"]:
            notes[f"async TP at hidden {r.hidden}, tokens {r.tokens} fused nothing ({collectives_text(fused)} left): torch.compile's graph, micro-pipeline TP found no pattern"] = None
    out += [""] + [f"- {n}" for n in notes] if notes else []
    return "\n".join(out)


def memory_markdown(rows: Sequence[Row], mode: str) -> str:
    """Per mode: each variant's peak memory, and what torch.compile and
    async TP made of the collectives (tools/bench_layer_graphs.py)."""
    head = ["hidden", "tokens", *(f"{title} peak MiB" for _, title in VARIANTS), "torch.compile: collectives", "async TP: fused"]
    out = [f"### {MODES[mode]}: peak memory per GPU and the compiled graphs' collectives", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r.hidden), str(r.tokens), *(num_text(r.peak_mib.get(k), ".0f") for k, _ in VARIANTS)]
        cells += [collectives_text(r.graphs.get("compile")), fused_text(r.graphs.get("async_tp"))]
        out.append("| " + " | ".join(cells) + " |")
    if all(v is None for r in rows for v in r.peak_mib.values()):
        out += ["", "- n/a: peak memory: needs CUDA (torch.cuda.max_memory_allocated)"]
    return "\n".join(out)


def failures(results: Sequence[ShapeResult]) -> list[str]:
    """The checks whose verdict is FAILED."""
    out = []
    for res in results:
        for key, title in VARIANTS[1:]:
            c = res.checks.get(key)
            if c is not None and c.ok is False:
                out.append(f"hidden {res.shape.hidden} tokens {res.shape.tokens}: {title}: {c.failure}")
    return out


def as_json(results: Sequence[ShapeResult], job: Job, a: argparse.Namespace) -> dict[str, Any]:
    from bench_layer_check import FACTOR, FLOOR

    checks = [
        {"hidden": res.shape.hidden, "tokens": res.shape.tokens, "compared": res.compared, **{k: asdict(c) for k, c in res.checks.items()}}
        for res in results
    ]  # fmt: skip
    return {
        "ranks": job.d, "device": job.device_name(), "torch": torch.__version__, "dtype": a.dtype,
        "reference": WIDER[a.dtype][1], "factor": FACTOR, "floor": FLOOR[a.dtype], "head_dim": a.head_dim,
        "warmup": a.warmup, "iters": a.iters, "repeats": a.repeats, "algorithm": a.algorithm,
        "rows": [asdict(r) for res in results for r in res.rows], "checks": checks,
        "first_step_s": [{"hidden": res.shape.hidden, "tokens": res.shape.tokens, **res.first_s} for res in results],
        "ready_s": [{"hidden": res.shape.hidden, "tokens": res.shape.tokens, **res.ready_s} for res in results],
    }  # fmt: skip


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def run(a: argparse.Namespace) -> int:
    job = Job(a)
    lead, wide = job.rank == 0, WIDER[a.dtype][1]
    if lead:
        why = job.async_tp_reason or job.compile_reason
        compiled = f"n/a: {why}" if why else "micro-pipeline TP"
        print(f"fuserc bench_layer: {job.d} rank(s) on {job.device_name()}, {a.dtype}, head dim {a.head_dim}, "
              f"warmup {a.warmup}, {a.repeats} x {a.iters} iterations; async TP: {compiled}", flush=True)  # fmt: skip
    results = []
    for i, (h, t) in enumerate((h, t) for h in a.hidden for t in a.tokens):
        res = bench_shape(Shape(h, t, a.head_dim), job, a, i)
        results.append(res)
        if lead:
            for r in res.rows:
                print(line(res, r), flush=True)
            for key, title in (VARIANTS[2], VARIANTS[1], VARIANTS[3], VARIANTS[4]):
                c = res.checks.get(key) or Check(reason="not run")
                print(f"  check ({res.compared}) {title}: {c.text(wide)}", flush=True)
            print(f"  first {res.compared} step (s): " + ", ".join(f"{title} {num_text(res.first_s.get(key), '.1f')}" for key, title in VARIANTS[1:]), flush=True)
            later = res.ready_s.get("fuserc")
            if later is not None and later - (res.first_s.get("fuserc") or 0.0) >= 0.05:
                print(f"  fuserc's kernels built in the background were all in {later:.1f} s after its first step started", flush=True)
    bad = failures(results)
    if lead:
        print()
        for mode in ("fwd", "fwdbwd"):
            rows = [r for res in results for r in res.rows if r.mode == mode]
            if rows:
                print(markdown(rows, mode, a.dtype) + "\n")
                print(memory_markdown(rows, mode) + "\n")
        print(table([(r.shape.hidden, r.shape.tokens, r.checks) for r in results], wide, results[0].compared) + "\n")
        if a.json_path:
            Path(a.json_path).write_text(json.dumps(as_json(results, job, a), indent=1))
            print(f"json: {a.json_path}")
        for b in bad:
            print(f"FAILED: {b}")
        sys.stdout.flush()
    job.end()
    return 1 if bad else 0


def tool_main(name: str, p: argparse.ArgumentParser, resolve: Callable[[argparse.Namespace], argparse.Namespace],
              run: Callable[[argparse.Namespace], int], argv: Sequence[str] | None) -> int:  # fmt: skip
    """A GPU benchmark's start (bench_layer, bench_model): its options (bad
    usage: exit 2), a GPU unless --small, torch's world under torchrun,
    then `run` as the job of this process."""
    os.environ.update(MULTICAST_OFF)  # before NCCL or symmetric memory start
    a = p.parse_args(argv)
    try:
        a = resolve(a)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    from fuserc.runtime.job.job import launcher_rank, run_guarded

    if not a.small and not torch.cuda.is_available():
        if not launcher_rank():
            print(f"{name}: no CUDA GPU here (--small runs on the CPU)", file=sys.stderr)
        return 1
    if torch_launched():
        start_torch_world(cuda=not a.small)
    run_guarded(lambda: run(a))


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main("bench_layer", parser(), resolve, run, argv)


if __name__ == "__main__":
    sys.exit(main())

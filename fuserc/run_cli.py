"""`fuserc run`: compile a program and run it, one process per rank.

    mpiexec -n N fuserc run FILE [--entry main] [-p PIPELINE] [-i A.npy ...]
        [--seed N] [--save-outputs DIR] [--check] [--backend auto|cpu|cuda]
        [--warmup W --iters N] [--trace FILE.json] [--print-host-ir]

Every rank compiles the same program, takes its shards of the global inputs,
and runs the host program; rank 0 gathers the results for --save-outputs and
--check. Any failure on any rank ends the job (runtime/mpi_env.py).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # torch and numpy load only when a program runs
    import numpy as np
    import torch

WARMUP = 5
"""Untimed runs before --iters by default: on cuda, runs 2-5 are the trial
that chooses between replaying a captured graph and running op by op
(runtime/graphs.py), so the timed runs are the chosen way's."""

CHECK_TOLERANCES: dict[str, float] = {
    "f64": 1e-9,
    "f32": 1e-4,
    "f16": 1e-2,
    "bf16": 4e-2,
    "i64": 0.0,
    "i1": 0.0,
}
"""--check passes an output when max|out - ref| <= tol * max|ref| (normwise
relative error). tol is that of the least precise element type among the
values the output is computed from (an f32 result of bf16 work has bf16's).
The reference runs in float64 on the same (rounded) inputs, so the
tolerance covers the program's own rounding: accumulation over long
contractions in f32, and the 8-bit (bf16) or 11-bit (f16) significands of
the 16-bit types."""


def _dtype_name(dtype: "torch.dtype") -> str:
    from fuserc.dialects.interfaces import element_type

    return str(element_type(dtype))


@dataclass(frozen=True)
class CheckResult:
    index: int
    dtype: str  # the element type, f32, bf16, ...
    abs_err: float
    rel_err: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.rel_err <= self.tolerance

    def line(self) -> str:
        status = "ok" if self.ok else "FAILED"
        return (
            f"output {self.index}: max abs error {self.abs_err:.3e}, max rel error {self.rel_err:.3e} "
            f"({self.dtype} tolerance {self.tolerance:.0e}): {status}"
        )


def precision_of(func: Any) -> list[str]:
    """For each result of a fusion function, the least precise element type
    (the largest tolerance) among the values it is computed from."""
    from xdsl.dialects.builtin import TensorType
    from xdsl.dialects.func import ReturnOp
    from xdsl.ir import OpResult

    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    out = []
    for v in ret.operands:
        seen, stack, names = set(), [v], []
        while stack:
            value = stack.pop()
            if value in seen:
                continue
            seen.add(value)
            if isinstance(value.type, TensorType):
                names.append(str(value.type.element_type))
            if isinstance(value, OpResult):
                stack.extend(value.op.operands)
        known = [n for n in names if n in CHECK_TOLERANCES]
        out.append(max(known, key=lambda n: CHECK_TOLERANCES[n]) if known else "f32")
    return out


def compare(index: int, got: "np.ndarray", ref: "torch.Tensor", dtype: "torch.dtype", precision: str | None = None) -> CheckResult:
    """The error of one output against its float64 reference; `precision`
    (an element type name) sets the tolerance, by default the output's."""
    import numpy as np
    import torch

    name = precision or _dtype_name(dtype)
    tol = CHECK_TOLERANCES[name]
    r = ref.detach().cpu().to(torch.float64).numpy()
    g = got.astype(np.float64)
    if g.shape != r.shape:
        return CheckResult(index, name, float("inf"), float("inf"), tol)
    if g.size == 0:
        return CheckResult(index, name, 0.0, 0.0, tol)
    same_nonfinite = (~np.isfinite(r)) & (g == r)
    diff = np.where(same_nonfinite, 0.0, np.abs(g - r))
    abs_err = float(np.nan_to_num(diff, nan=np.inf).max())
    scale = float(np.abs(np.where(np.isfinite(r), r, 0.0)).max())
    rel_err = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
    return CheckResult(index, name, abs_err, rel_err, tol)


@click.command()
@click.argument("file")
@click.option("--entry", default="main", show_default=True, help="The function to run.")
@click.option("-p", "--pipeline", "--pass-pipeline", "pipeline", default="default", show_default=True, help="Passes that lower FILE to a host program ('' when FILE is one); the forms of `fuserc opt -p`.")
@click.option("-i", "--input", "inputs", multiple=True, type=click.Path(dir_okay=False), help="A .npy with the global tensor of an argument; once per argument, in order.")
@click.option("--seed", type=int, default=None, help="Seed of the random arguments when no inputs are given (default 0).")
@click.option("--save-outputs", "save_dir", type=click.Path(file_okay=False), help="Rank 0 writes each global result as DIR/out<i>.npy.")
@click.option("--check", is_flag=True, help="Compare each result with the unsharded float64 reference.")
@click.option("--backend", "backend_kind", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Untimed runs before timing (default 5; needs --iters).")
@click.option("--iters", type=click.IntRange(min=1), default=None, help="Timed runs: prints the median time and TFLOP/s per GPU.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, help="Write a Chrome/Perfetto trace of every rank's streams (the last timed run with --iters).")
@click.option("--print-host-ir", is_flag=True, help="Print the host program after the pipeline.")
def run(
    file: str,
    entry: str,
    pipeline: str,
    inputs: tuple[str, ...],
    seed: int | None,
    save_dir: str | None,
    check: bool,
    backend_kind: str,
    warmup: int | None,
    iters: int | None,
    trace_path: str | None,
    print_host_ir: bool,
) -> None:
    """Compile FILE and run it under MPI (one process per rank)."""
    if inputs and seed is not None:
        raise click.UsageError("give either -i/--input files or --seed, not both")
    if warmup is not None and iters is None:
        raise click.UsageError("--warmup needs --iters")
    from fuserc.pipeline import PipelineSpecError, build
    from fuserc.runtime.mpi_env import mpi_env, run_guarded

    env = mpi_env()
    try:
        build(pipeline)  # a malformed pipeline is bad usage (exit 2) on every rank
    except PipelineSpecError as d:
        if env.rank == 0:
            click.echo(d.render(), err=True)
        sys.exit(2)
    except Exception:  # noqa: BLE001 - reported by run_guarded below
        pass
    options = _Options(
        file, entry, pipeline, list(inputs), seed or 0, save_dir, check, backend_kind, warmup, iters, print_host_ir, trace_path
    )
    run_guarded(lambda: _run(options))


@dataclass(frozen=True)
class _Options:
    file: str
    entry: str
    pipeline: str
    inputs: list[str]
    seed: int
    save_dir: str | None
    check: bool
    backend: str
    warmup: int | None
    iters: int | None
    print_host_ir: bool
    trace: str | None = None


def _run(o: _Options) -> int:
    """The body of `fuserc run` on one rank; returns the exit code."""
    from fuserc.cli import read_source
    from fuserc.diagnostics import Diagnostic
    from fuserc.runtime import io
    from fuserc.runtime.backend import make_backend
    from fuserc.runtime.mpi_env import mpi_env, same_on_all_ranks
    from fuserc.runtime.program import CompiledProgram, compile_module

    env = mpi_env()
    with same_on_all_ranks():
        text, name = read_source(o.file)
        compiled = compile_module(text, name, o.entry, o.pipeline, ranks=env.size)
        if o.check and compiled.source_function() is None:
            raise Diagnostic(
                f"--check compares with the fusion function @{o.entry}, but {name} holds a host "
                "program: there is nothing to compare against"
            )
        backend = make_backend(o.backend, env)
        program = CompiledProgram(compiled, backend)  # refuses a job with too few ranks
    if o.print_host_ir and env.rank == 0:
        sys.stdout.write(program.host_ir())
        sys.stdout.flush()
    with same_on_all_ranks():
        if o.inputs:
            globals_ = io.load_inputs(o.inputs, program.params)
        else:
            globals_ = program.random_inputs(o.seed)
        local = program.program.prepare_inputs(io.shard_inputs(globals_, program.params, env.rank))
    if o.iters is not None:
        _time(program, local, WARMUP if o.warmup is None else o.warmup, o.iters, o.trace)
        results = program.program.run_prepared(local, copy_outputs=True)  # after timing: reused buffers
    elif o.trace:
        results = _traced(program, o.trace, lambda: program.program.run_prepared(local, copy_outputs=True))
    else:
        results = program.program.run_prepared(local, copy_outputs=True)
    gathered = None
    if o.save_dir or o.check:
        gathered = io.gather_outputs(results, program.results, env)
    program.close()
    backend.close()
    if env.rank != 0 or gathered is None:
        return 0
    if o.save_dir:
        io.save_outputs(o.save_dir, gathered)
    if o.check:
        return _check(program, globals_, gathered)
    return 0


def _check(program: Any, globals_: Sequence["torch.Tensor"], gathered: Sequence["np.ndarray"]) -> int:
    """Rank 0: compare with the reference; exit code 1 when over tolerance."""
    refs = program.reference(list(globals_))
    precisions = precision_of(program.compiled.source_function())
    results = [
        compare(i, g, r, s.dtype, p)
        for i, (g, r, s, p) in enumerate(zip(gathered, refs, program.results, precisions))
    ]
    for r in results:
        click.echo(r.line())
    failed = [r.index for r in results if not r.ok]
    if failed:
        click.echo(
            f"error: --check failed: output{'s' if len(failed) > 1 else ''} "
            f"{', '.join(map(str, failed))} over tolerance",
            err=True,
        )
        return 1
    return 0


def _traced(program: Any, path: str, body: Any) -> Any:
    """Run `body` (one run of the program) traced; write the trace of every
    rank to `path` (collective). Returns what `body` returns."""
    from fuserc.runtime.trace import tracing, write_trace

    with tracing(program.program) as tracer:
        out = body()
    meta = {"program": program.compiled.entry, "backend": program.backend.name}
    write_trace(path, tracer.events(), program.env, meta)
    if program.env.rank == 0:
        click.echo(f"trace: {path}")
    return out


def _time(program: Any, local: Sequence[Any], warmup: int, iters: int, trace: str | None = None) -> None:
    """Median over `iters` runs of the slowest rank's time; rank 0 prints
    it with TFLOP/s per GPU (2*M*N*K per matmul/linear of the global
    program, over the devices it uses). With `trace`, the last timed run
    is traced (its time includes the trace marks)."""
    from mpi4py import MPI

    p = program.program
    backend = program.backend
    comm = program.env.comm
    for _ in range(warmup):
        p.run_prepared(local)
    times = []
    for i in range(iters):
        backend.synchronize()
        backend.barrier()
        if trace and i == iters - 1:
            dt = _traced(program, trace, lambda: _timed_run(p, local))
        else:
            dt = _timed_run(p, local)
        times.append(comm.allreduce(dt, op=MPI.MAX))
    flops = program.compiled.global_flops()
    if flops is None:  # a host program: what the ranks executed
        flops = comm.allreduce(p.last_flops, op=MPI.SUM)
    median = statistics.median(times)
    if program.env.rank == 0:
        devices = p.devices
        tflops = flops / devices / median / 1e12 if median > 0 else float("inf")
        click.echo(
            f"time: median {median * 1e3:.3f} ms over {iters} iterations (warmup {warmup}); "
            f"{tflops:.3f} TFLOP/s per GPU ({flops} flops on {devices} devices, backend {backend.name})"
        )


def _timed_run(p: Any, local: Sequence[Any]) -> float:
    """Seconds of one run, by the backend's timer."""
    mark = p.backend.timer_start()
    p.run_prepared(local)
    return p.backend.timer_stop(mark)

"""`fuserc run`: compile a program and run it, one process per rank.

    mpiexec -n N fuserc run FILE [--entry main] [-p PIPELINE] [-i A.npy ...]
        [--seed N] [--save-outputs DIR] [--check] [--backend auto|cpu|cuda]
        [--warmup W --iters N] [--trace FILE.json] [--print-host-ir] [--time]
    torchrun --nproc-per-node N -m fuserc run FILE ...   (the same)

Every rank compiles the same program, takes its shards of the global inputs,
and runs the host program; rank 0 gathers the results for --save-outputs and
--check. Any failure on any rank ends the job with one copy of its message,
and the watchdog ends a job whose run or collective does not complete
(runtime/job/job.py, runtime/job/watchdog.py).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from fuserc.check import CHECK_TOLERANCES, CheckResult, compare, precision_of  # noqa: F401  (their home is fuserc.check)
from fuserc.cli import mesh_options

if TYPE_CHECKING:  # torch and numpy load only when a program runs
    import numpy as np
    import torch

WARMUP = 6
"""Untimed runs before --iters by default: on cuda, runs 2-6 are the trial
that chooses between replaying a captured graph and running op by op
(runtime/evaluator/graphs.py), so the timed runs are the chosen way's."""

@click.command(short_help="Compile FILE (or - for stdin) and run it, one process per rank.")
@click.argument("file")
@click.option("--entry", default="main", show_default=True, help="The function to run.")
@click.option("-p", "--pipeline", "--pass-pipeline", "pipeline", default="default", show_default=True, help="Passes that lower FILE to a host program ('' when FILE is one); the forms of `fuserc opt -p`.")
@click.option("-i", "--input", "inputs", multiple=True, type=click.Path(dir_okay=False), help="A .npy with the global tensor of an argument; once per argument, in order.")
@click.option("--seed", type=int, default=None, help="Seed of the random arguments when no inputs are given (default 0).")
@click.option("--save-outputs", "save_dir", type=click.Path(file_okay=False), help="Rank 0 writes each global result as DIR/out<i>.npy.")
@click.option("--check", is_flag=True, help="Compare each result with the unsharded float64 reference.")
@click.option("--backend", "backend_kind", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Untimed runs before timing (default 6; needs --iters).")
@click.option("--iters", type=click.IntRange(min=1), default=None, help="Timed runs: prints the median time and TFLOP/s per GPU.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, help="Write a Chrome/Perfetto trace of every rank's streams: of the last timed run with --iters, else of a run after one untraced run.")
@click.option("--print-host-ir", is_flag=True, help="Print the host program after the pipeline.")
@click.option("--comm-report", is_flag=True, help="Rank 0 prints the communication report of the host programs before running (as `fuserc opt --comm-report`).")
@click.option("--comm-report-unit", "comm_unit", metavar="SHAPExDTYPE", callback=lambda c, p, v: _comm_unit(v), help="Also give the report's bytes in units of this tensor's (8192x4096xbf16); implies --comm-report.")
@click.option("--mesh", "meshes", multiple=True, metavar="NAME=SHAPE", callback=lambda c, p, v: mesh_options(v), help="Give a declared mesh another shape, devices 0..n-1 (--mesh tp=2, --mesh grid=2x4): run one program on jobs of several sizes.")
@click.option("--watchdog", "watchdog_s", type=float, default=None, help="End the job when a run or a collective takes longer than this many seconds, naming the ranks that did not arrive (default $FUSERC_WATCHDOG, else 600; 0: off).")
@click.option("--time", "time_startup", is_flag=True, help="Print where the time to the first result went (imports, passes, backend, communicators, kernels from the cache or built, first run) and a steady run's time.")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error (also $FUSERC_DEBUG=1).")
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
    comm_report: bool,
    comm_unit: Any,
    meshes: dict[str, tuple[int, ...]],
    watchdog_s: float | None,
    time_startup: bool,
    debug: bool,
) -> None:
    """Compile FILE (or - for stdin) and run it, one process per rank:

    \b
    mpiexec -n N fuserc run FILE ...
    torchrun --nproc-per-node N -m fuserc run FILE ...
    fuserc run FILE ...          (one rank)

    docs/runtime.md says more (Launchers; `fuserc run`)."""
    gc.enable()  # off for the command's start (`fuserc.cli.entry`); a run makes and frees objects for as long as it lasts
    if inputs and seed is not None:
        raise click.UsageError("give either -i/--input files or --seed, not both")
    if warmup is not None and iters is None:
        raise click.UsageError("--warmup needs --iters")
    if trace_path is not None:
        from fuserc.cli import check_output_dir

        check_output_dir(trace_path, "'--trace'")
    from fuserc.diagnostics import Diagnostic
    from fuserc.pipeline import PipelineSpecError, build
    from fuserc.runtime.job import job as jobs
    from fuserc.runtime.job.watchdog import timeout_from

    try:
        timeout = timeout_from(watchdog_s)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--watchdog'") from None
    try:
        build(pipeline)  # a malformed pipeline is bad usage (exit 2), the same on every rank
    except PipelineSpecError as d:
        if jobs.launcher_rank() in (None, 0):
            click.echo(d.render(), err=True)
        sys.exit(2)
    except Exception:  # noqa: BLE001 - a pass that is not available: reported when compiling
        pass
    from fuserc.runtime.job.mpi_env import load_launcher, mpi_env, mpi_launch_problem

    problem = mpi_launch_problem()
    if problem is not None:  # every process is alone: rank 0 by the launcher's word says why
        if jobs.launcher_rank() in (None, 0):
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)
    try:
        job = jobs.start(mpi_env, timeout, debug or jobs.debug_from_env(), prepare=load_launcher)
    except Diagnostic as d:  # the launcher cannot start (mpi4py without an MPI library): the same on every rank
        if jobs.launcher_rank() in (None, 0):
            click.echo(d.render(), err=True)
        sys.exit(1)
    options = _Options(
        file, entry, pipeline, list(inputs), seed or 0, save_dir, check, backend_kind, warmup, iters, print_host_ir, trace_path, meshes,
        time_startup, comm_report or comm_unit is not None, comm_unit,
    )
    job.run(lambda: _run(options, job))


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
    meshes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    time: bool = False
    comm_report: bool = False
    comm_unit: Any = None


def _comm_unit(text: str | None) -> Any:
    from fuserc.cli import comm_unit

    return comm_unit(text)


def run_file(
    job: Any, file: str, *, pipeline: str = "default", backend: str = "auto", check: bool = False,
    meshes: dict[str, tuple[int, ...]] | None = None, entry: str = "main", seed: int = 0,
) -> int:
    """What `fuserc run FILE` does on this rank, inside a job already
    started (tools run several programs in one job: tools/check_examples.py):
    rank 0's exit code (0 on the others). A diagnostic ends the job as in
    `fuserc run`."""
    options = _Options(file, entry, pipeline, [], seed, None, check, backend, None, None, False, None, meshes or {})
    return _run(options, job)


def read_shared_source(job: Any, path: str) -> tuple[str, str]:
    """FILE's text on every rank. A regular file is read by every rank.
    Standard input (`-`, which a launcher gives to rank 0 alone) and a
    named pipe are read by rank 0 alone, which shares the text (or its
    error), inside a watchdog section: a pipe that no one writes never
    ends, the watchdog ends the job."""
    from fuserc.cli import file_kind, read_source
    from fuserc.diagnostics import Diagnostic

    kind = "standard input" if path == "-" else file_kind(path)
    if kind not in ("standard input", "a named pipe", "a socket"):
        return read_source(path)
    env = job.env
    got: Any = None
    label = "reading the program from standard input" if path == "-" else f"reading the program from {path} ({kind})"
    with job.section(label, doer=0):
        if env.rank == 0:
            try:
                got = read_source(path)
            except Diagnostic as d:
                got = d
        if env.size > 1:
            got = env.broadcast(got)
    if isinstance(got, Diagnostic):
        raise got
    return got


def _run(o: _Options, job: Any) -> int:
    """The body of `fuserc run` on one rank; returns the exit code."""
    from fuserc.diagnostics import Diagnostic
    from fuserc.runtime.job import io
    from fuserc.runtime.backends.backend import cuda_unavailable, make_backend
    from fuserc.runtime.job.mpi_env import ENDS_PROCESS
    from fuserc.runtime.evaluator.program import CompiledProgram, compile_module
    from fuserc.runtime.job.startup import Startup, Stopwatch, process_age

    env = job.env
    fallback = None
    startup = Startup()
    startup.add("imports", process_age() or 0.0)  # the process's start to here (Python, torch, the launcher's start)
    clock = Stopwatch()
    if o.backend in ("auto", "cuda"):  # the GPU's context is made while the passes run
        from fuserc.runtime.backends.cuda import open_device_early

        open_device_early()
    with job.agreed("compiling"):
        text, name = read_shared_source(job, o.file)
        compiled = compile_module(text, name, o.entry, o.pipeline, ranks=env.size, meshes=o.meshes, nodes=env.copy_nodes(o.backend))
        startup.add("passes", clock.lap())
        if o.check and compiled.source_function() is None:
            raise Diagnostic(
                f"--check compares with the fusion function @{o.entry}, but {name} holds a host "
                "program: there is nothing to compare against"
            )
        kind = o.backend
        if kind in ("auto", "cuda"):
            fallback = cuda_unavailable()  # imports the cuda backend (CuPy) where it can run
            if fallback is not None and kind == "cuda":
                raise Diagnostic(f"the cuda backend cannot run here: {fallback}")
            kind = "cpu" if fallback is not None else "cuda"
        if kind == "cpu" and env.rank == 0:
            _cpu_cost_note(compiled, o.entry, env.size)
        startup.add("imports", clock.lap())
    if kind == "cuda":  # Inductor's import goes on while CUDA and NCCL start
        from fuserc.runtime.backends.cuda import import_compiler_early
        from fuserc.runtime.evaluator.evaluator import find_host_program

        with contextlib.suppress(Diagnostic):  # the program's load says what is wrong with it
            import_compiler_early(find_host_program(compiled.host, compiled.entry))
    with job.section(f"starting the {kind} backend"):
        backend = make_backend(kind, env)
    startup.add("backend", clock.lap())
    job.watchdog.watch(backend)
    with job.agreed("loading the program and its inputs"):
        program = CompiledProgram(compiled, backend)  # refuses a job with too few ranks
        if o.inputs:
            globals_ = io.load_inputs(o.inputs, program.params)
        else:
            globals_ = program.random_inputs(o.seed)
        local = program.program.prepare_inputs(io.shard_inputs(globals_, program.params, env.rank))
    if env.rank == 0:
        _notes(o, program, fallback)
        if o.print_host_ir:
            sys.stdout.write(program.host_ir())
            sys.stdout.flush()
        if o.comm_report:
            click.echo(program.comm_report(o.comm_unit).text(), nl=False)
    runs = _Runs(job, program, local)
    if o.iters is not None:
        steady = _time(runs, WARMUP if o.warmup is None else o.warmup, o.iters, o.trace)
        results = runs.run(copy_outputs=True)  # after timing: reused buffers
    else:
        if o.trace or o.time:
            runs.run()  # a warm run follows: first-use costs (communicators, kernels, GEMM choices) fall here
        if o.time:
            clock.lap()
            runs.run()
            steady = clock.lap()
        if o.trace:
            results = _traced(runs, o.trace, lambda: runs.run(copy_outputs=True))
        else:
            results = runs.run(copy_outputs=True)
    if o.time:
        _report_startup(runs, startup, steady)
    gathered = None
    if o.save_dir or o.check:
        with job.section("gathering the results on rank 0"):
            gathered = io.gather_outputs(results, program.results, env)
    with job.section("closing the program"):
        program.close()
        if not ENDS_PROCESS[0]:  # else the process ends next: NCCL's teardown alone took 0.4 s on 2 GPUs
            backend.close()
    if env.rank != 0:
        return 0
    try:  # rank 0 alone from here: a failure is reported and ends rank 0 only
        code = 0
        saved = io.save_outputs(o.save_dir, gathered) if o.save_dir and gathered is not None else []
        if o.check and gathered is not None:
            code = _check(program, globals_, gathered)
        click.echo(_summary(o, program, saved))
        return code
    except Diagnostic as d:
        job.alone(d)


def _report_startup(runs: "_Runs", startup: Any, steady: float) -> None:
    """`--time`: this rank's phases with its program's first run, gathered;
    rank 0 prints the job's (the slowest rank per phase) on stderr."""
    from fuserc.runtime.job.startup import combined

    program = runs.program
    first = program.program.startup
    for phase, seconds in first.seconds.items():
        startup.add(phase, seconds)
    startup.kernels = first.kernels
    startup.add("steady run", steady)
    env = program.env
    with runs.job.section("gathering the startup times"):
        records = env.comm.allgather(startup)
    if env.rank == 0:
        click.echo(combined(records).report(f"startup of @{program.compiled.entry}", env.size), err=True, nl=False)


class _Runs:
    """Runs of the program, each under the watchdog (`run K of @main`)."""

    def __init__(self, job: Any, program: Any, local: Sequence[Any]):
        self.job, self.program, self.local, self.count = job, program, local, 0

    def run(self, copy_outputs: bool = False) -> Any:
        self.count += 1
        with self.job.section(f"run {self.count} of @{self.program.compiled.entry}"):
            return self.program.program.run_prepared(self.local, copy_outputs=copy_outputs)


CPU_NOTE_FLOPS = 1e11
"""A run of more floating-point operations than this per rank is noted on
the cpu backend: at the tens of GFLOP/s a CPU core gives, it takes seconds
to minutes a run, and the job prints nothing until it ends."""


def _cpu_cost_note(compiled: Any, entry: str, ranks: int) -> None:
    """Rank 0, before the cpu backend starts: a note when a run of the
    program is a GPU's work (examples/allgather_matmul_large.mlir)."""
    flops = compiled.global_flops()
    if flops is not None and flops / ranks > CPU_NOTE_FLOPS:
        click.echo(
            f"note: a run of @{entry} is {flops / ranks / 1e9:.0f} GFLOP per rank: on the cpu backend "
            "that may take minutes a run, with nothing printed meanwhile (it is work for GPUs)",
            err=True,
        )


def _notes(o: _Options, program: Any, fallback: str | None) -> None:
    """Rank 0, once: what the job runs on, when the user may not expect it."""
    if o.backend == "auto" and fallback is not None:
        click.echo(f"note: running on the cpu backend: the cuda backend cannot run here ({fallback})", err=True)
    used, size = program.program.required_ranks, program.env.size
    if used < size:
        idle = f"rank {used} has" if used == size - 1 else f"ranks {used}-{size - 1} have"
        click.echo(f"note: the program uses {used} of the job's {size} ranks; {idle} nothing to do", err=True)


def _summary(o: _Options, program: Any, saved: Sequence[str]) -> str:
    """What ran, where, and where its results are (rank 0, at the end)."""
    results = program.results
    kinds = ", ".join(str(r.global_type) for r in results) or "none"
    head = (
        f"ran @{program.compiled.entry} of {o.file if o.file != '-' else '<stdin>'} on {program.env.size} "
        f"rank{'s' if program.env.size > 1 else ''} (backend {program.backend.name}): "
        f"{len(results)} result{'s' if len(results) != 1 else ''} ({kinds})"
    )
    if saved:
        return head + "; saved as " + ", ".join(saved)
    if o.check:
        return head + "; --save-outputs DIR writes them as .npy"
    return head + "; --save-outputs DIR writes them as .npy, --check compares them with the unsharded reference"


def _check(program: Any, globals_: Sequence["torch.Tensor"], gathered: Sequence["np.ndarray"]) -> int:
    """Rank 0: compare with the reference (fuserc/check.py); exit code 1
    when an output fails."""
    from fuserc.check import check_outputs, input_notes

    func = program.compiled.source_function()
    for line in input_notes(func, globals_):
        click.echo(line)
    results = check_outputs(
        program.compiled.source, func, program.compiled.entry, globals_, gathered,
        [s.dtype for s in program.results], lambda accumulate: program.reference(list(globals_), accumulate),
    )  # fmt: skip
    for r in results:
        click.echo(r.line())
    failed = [r.index for r in results if not r.ok]
    if failed:
        click.echo(
            f"error: --check failed: output{'s' if len(failed) > 1 else ''} "
            f"{', '.join(map(str, failed))} differ{'s' if len(failed) == 1 else ''} from the reference",
            err=True,
        )
        return 1
    return 0


def _traced(runs: _Runs, path: str, body: Any) -> Any:
    """Run `body` (one run of the program) traced; write the trace of every
    rank to `path` (collective). Returns what `body` returns."""
    from fuserc.runtime.evaluator.trace import alltoallv_imbalance, tracing, write_trace

    program = runs.program
    with tracing(program.program) as tracer:
        out = body()
    meta = {"program": program.compiled.entry, "backend": program.backend.name}
    with runs.job.section("gathering the trace on rank 0"):
        trace = write_trace(path, tracer.events(), program.env, meta)
    if program.env.rank == 0:
        click.echo(f"trace: {path}")
        for line in alltoallv_imbalance(trace["traceEvents"] if trace else []):
            click.echo(line)
    return out


def _time(runs: _Runs, warmup: int, iters: int, trace: str | None = None) -> float:
    """Median over `iters` runs of the slowest rank's time; rank 0 prints
    it with TFLOP/s per GPU (2*M*N*K per matmul/linear of the global
    program, over the devices it uses). With `trace`, the last timed run
    is traced (its time includes the trace marks). Returns the median."""
    program = runs.program
    p = program.program
    backend = program.backend
    comm = program.env.comm
    for _ in range(warmup):
        runs.run()
    times = []
    for i in range(iters):
        with runs.job.section(f"timing run {runs.count + 1}"):
            backend.synchronize()
            backend.barrier()
        if trace and i == iters - 1:
            dt = _traced(runs, trace, lambda: _timed_run(runs))
        else:
            dt = _timed_run(runs)
        with runs.job.section(f"timing run {runs.count}"):
            times.append(comm.allreduce(dt, op=program.env.reduce_op("max")))
    flops = program.compiled.global_flops()
    if flops is None:  # a host program: what the ranks executed
        with runs.job.section("summing the flops of the ranks"):
            flops = comm.allreduce(p.last_flops, op=program.env.reduce_op("sum"))
    median = statistics.median(times)
    if program.env.rank == 0:
        devices = p.devices
        rate = flops / devices / median if median > 0 else float("inf")
        each = "GPU" if backend.name == "cuda" else "rank"
        click.echo(
            f"time: median {median * 1e3:.3f} ms over {iters} iterations (warmup {warmup}); "
            f"{flop_rate(rate)} per {each} ({flops} flops on {devices} device{'s' if devices != 1 else ''}, backend {backend.name})"
        )
    return median


def flop_rate(per_second: float) -> str:
    """`12.345 TFLOP/s`, in the largest unit that keeps the figure at 1 or
    more (a CPU's GFLOP/s are not shown as 0.000 TFLOP/s)."""
    for unit, scale in (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if per_second >= scale:
            return f"{per_second / scale:.3f} {unit}"
    return f"{per_second:.0f} FLOP/s"


def _timed_run(runs: _Runs) -> float:
    """Seconds of one run, by the backend's timer."""
    backend = runs.program.backend
    mark = backend.timer_start()
    runs.run()
    return backend.timer_stop(mark)

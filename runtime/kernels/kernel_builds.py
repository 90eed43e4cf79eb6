"""A program's generated kernels, fetched from the kernel cache or built
before its first run, in parallel (runtime/kernels/kernel_cache.py is the cache).

At a program's first run on the cuda backend (`prepare`, before any op):
1. The launches the run will make are found by running the program on a
   `LayoutBackend`: every buffer a meta tensor (shape, strides, dtype, no
   memory), no device work, no communication; each `hir.launch` is
   recorded with its operands. The interpreter's views are torch's on
   either backend, so the layouts are the run's.
2. Each launch becomes a job: a row kernel (runtime/kernels/cuda_rows.py) or a
   region's Inductor kernels (runtime/kernels/cuda_regions.py), with its key.
   Launches with the same key (the same region text at the same layouts)
   share one kernel.
3. Jobs whose entry is in the cache are loaded. The others are built, each
   by the process that takes its key's lock: this one, or a worker process
   it starts (runtime/kernels/kernel_worker.py, `FUSERC_BUILD_WORKERS`), which
   writes the entry that this process then loads. The ranks of a machine
   start at different jobs, so that kernels they share (row kernels, and
   Triton's compiled kernels in the cache's Triton folder) are built once.
   A key held by another process is waited for at the end.
Local rank 0 prints a line of progress on stderr while a build lasts.
A launch the dry run did not foresee is fetched at its first run (`fetch`).

Built in the background (`Background`: `$FUSERC_KERNEL_BUILDS=background`,
the default of `fuserc.torch.function`), the same jobs are fetched and
built by a thread of this process and its build workers while the runs go
on: a launch whose kernel is not in yet runs another way (`building`), and
the backend captures no run as a graph until every kernel is in.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import platform
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

import torch
from xdsl.ir import Block

from fuserc.runtime.backends.backend import Backend, Contexts, Event, Handle, Stream, Team, Work
from fuserc.runtime.kernels.kernel_cache import Fetched, KernelCache, KernelKey, KeyLock, NotKept, Sections, Unusable
from fuserc.runtime.kernels.kernel_worker import Pool, at_exit_first
from fuserc.runtime.job.startup import KERNELS as COUNTS

WORKERS_ENV = "FUSERC_BUILD_WORKERS"
MAX_WORKERS = 2
"""Workers of one rank at most. More start slower than they build: each
imports torch and Inductor and makes a CUDA context beside the others.
On 2 H200s (32 cores), the GPT layer's first fwd+bwd step (14 kernels a
rank, every cache empty) took 9.6 s with 2 workers a rank, 11.3 s with
none and 15.7 s with 8; on 4 H200s with 8 a rank, 19.3 s."""
MAX_BACKGROUND_WORKERS = 4
"""Workers of one rank at most when the kernels are built in the
background of the runs (`Background`): the workers are then the only
builders, and a worker's first kernel waits for its start (about 6 s
importing torch, then about 11 s for its first Inductor compile, on one
H200's host), so the cold starts are better paid side by side. The
12-layer GPT of train_gpt.py (14 kernels, 16 cores, every cache empty)
had its kernels in after 27.1 s and 22.2 s with 2 workers, 20.7 s with 4
and 24.7 s with 6."""
MIN_JOBS_FOR_WORKERS = 10
"""A worker pays for itself once a process has this many kernels to build.
A worker takes about as long to start (Python, torch, Inductor, a CUDA
context; ranks' workers starting side by side) as 5 kernels take to build
in the process: on 2 H100s, 5 kernels a rank were ready in 20.9 s with 4
workers a rank and in 11.2 s without."""
PROGRESS_AFTER_S = 3.0
PROGRESS_EVERY_S = 5.0
BUILDS_ENV = "FUSERC_KERNEL_BUILDS"
BEFORE, BACKGROUND = "before", "background"
BUILDS = (BEFORE, BACKGROUND)


class Job(Protocol):
    """A kernel to fetch or build (cuda_regions.RegionJob, cuda_rows.RowsJob)."""

    kind: str
    layouts: tuple[Any, ...]

    @property
    def key(self) -> KernelKey: ...

    def describe(self) -> str: ...

    def spec(self) -> dict[str, Any]: ...

    def build(self) -> tuple[Sections | NotKept, Any]: ...

    def load(self, sections: Sections) -> Any: ...

    @property
    def ident(self) -> Hashable:
        """What the launch looks its kernel up by in this process."""
        ...

    def install(self, value: Any) -> None: ...

    def installed(self) -> bool: ...


def device_id(device: torch.device, index: bool) -> str:
    """The device part of a key: the GPU's architecture and CUDA version
    (with its index when the kernel names its device: Inductor's code
    does), or the CPU's vector extensions."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        where = f"cuda:{device.index if device.index is not None else torch.cuda.current_device()} " if index else "cuda "
        return f"{where}sm_{major}{minor} cuda {torch.version.cuda}"
    return f"{device.type} {torch.backends.cpu.get_cpu_capability()} {platform.machine()}"


def layout_fields(layouts: Sequence[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]]) -> list[list[Any]]:
    """Layouts as JSON values for a key."""
    return [[list(shape), list(stride), str(dtype).removeprefix("torch.")] for shape, stride, dtype in layouts]


# ---- one kernel -------------------------------------------------------------------


def fetch(job: Job) -> Any:
    """`job`'s kernel from the cache, or built (waiting for another process
    that is building it); installed, counted. None when it cannot be built
    (with a warning: it runs another way)."""
    start = time.perf_counter()
    try:
        _imported_early()
        return _fetch([job], KernelCache())
    finally:
        COUNTS.seconds += time.perf_counter() - start


def first_launch(job: Job, launch: Callable[[], None]) -> bool:
    """A row kernel's first launch in this process: fetched (built into the
    cache's Triton folder by one process of the machine), then launched
    where Triton finds it. False when it cannot be built (nothing launched)."""
    cache = KernelCache()
    if fetch(job) is None:
        return False
    with cache.working_dirs():
        launch()
    return True


def _fetch(group: Sequence[Job], cache: KernelCache, lock: KeyLock | None = None) -> Any:
    """The kernel of a group of jobs with one key (holding its lock when
    `lock` is given), installed for each."""
    job = group[0]
    try:
        with cache.working_dirs():
            if lock is None:
                got = cache.fetch(job.key, job.build, job.load)
            else:
                got = cache.fetch_locked(job.key, job.build, job.load, time.perf_counter())
    except Exception as e:  # noqa: BLE001 - a kernel that cannot be built: the launch runs another way
        COUNTS.failed += 1
        warnings.warn(f"fuserc: no generated kernel for {job.describe()} ({type(e).__name__}: {e}); it runs another way", stacklevel=3)
        for j in group:
            _install(j, None)
        return None
    _counted(got)
    for j in group:
        _install(j, got.value)
    return got.value


_NOTED: set[str] = set()
"""Notes of this process already shown: a reason shared by every kernel of
a run (a torch that cannot save them) is said once, not once a kernel."""


def _counted(got: Fetched) -> None:
    COUNTS.count(got.how)
    if got.note and got.note not in _NOTED:
        _NOTED.add(got.note)
        warnings.warn(f"fuserc: {got.note}", stacklevel=4)


# ---- a program's kernels ------------------------------------------------------------


EARLY_MODULES = (
    "torch._inductor.standalone_compile",
    "torch._inductor.compile_fx",
    "torch._inductor.select_algorithm",
    "torch._inductor.async_compile",
)
"""What loading a region's kernel imports (CompiledArtifact.load and the
code Inductor generated): about 2 s of a warm start's 3 s of kernels."""
_EARLY: list[Any] = []


def import_early() -> None:
    """Import Inductor in a thread of this process (once), from now until
    the kernels are fetched (which waits for it first: `_imported_early`),
    for a program whose regions get its kernels (cuda.import_compiler_early
    decides). The import is Python's work (it holds the interpreter's
    lock), so it gains where this process waits outside Python meanwhile:
    CUDA's and NCCL's set-up, and the other ranks at the job's barriers."""
    if _EARLY or "torch._inductor.compile_fx" in sys.modules:
        return
    import threading

    def run() -> None:
        import importlib

        with contextlib.suppress(Exception):  # the fetch imports them again and reports what fails
            for name in EARLY_MODULES:
                importlib.import_module(name)
            from torch._inductor.codecache import torch_key

            torch_key()  # a digest of torch's sources, which every load checks

    thread = threading.Thread(target=run, name="fuserc-import-inductor", daemon=True)
    _EARLY.append(thread)
    thread.start()


def _imported_early() -> None:
    """Wait for `import_early`'s imports before this thread fetches kernels:
    two threads importing Inductor side by side can deadlock (its modules
    take locks of their own while Python's import locks are held)."""
    for thread in _EARLY:
        thread.join()


def prepare(
    programs: Sequence[Any],
    device: torch.device,
    local_rank: int = 0,
    local_size: int = 1,
    workers: int | None = None,
    mode: str = "inductor",
    background: bool = False,
) -> "Background | None":
    """Fetch or build every kernel the programs' runs will launch on
    `device` (see the module's docstring), those of the programs that get
    generated kernels under kernels `mode` (cuda_regions.program_generates),
    before their first runs; with `background`, those the cache holds are
    loaded now and the others built in a `Background` (returned when there
    are any) while the runs go on."""
    start = time.perf_counter()
    try:
        launches = launches_with_kernels(programs, mode)
    except Exception as e:  # noqa: BLE001 - the run reports a bad program; its kernels then come at first use
        from fuserc.diagnostics import Diagnostic

        if not isinstance(e, Diagnostic):
            warnings.warn(f"fuserc: kernels are built as the run reaches them (the run could not be planned ahead: {e})", stacklevel=2)
        return None
    try:
        groups = group_jobs(launches, device)
        later: list[Sequence[Job]] = []
        if background:  # what the cache holds is loaded now, the rest built behind the runs
            cache = KernelCache()
            later = [g for g in groups if not cache.entry_path(g[0].key).exists()]
            groups = [g for g in groups if not any(g is m for m in later)]
        build_all(groups, device, local_rank, local_size, workers)
        if not later:
            return None
        COUNTS.background += len(later)
        return Background(later, device, local_rank, local_size, workers)
    finally:
        COUNTS.seconds += time.perf_counter() - start


def builds_mode(default: str = BEFORE, given: str | None = None) -> str:
    """When a program's kernels are built: `given` (the caller's
    `kernel_builds`), else `$FUSERC_KERNEL_BUILDS`, else `default`;
    `before` its first run, or in the `background` of its runs."""
    where = "kernel_builds"
    if given is None:
        where, given = f"${BUILDS_ENV}", os.environ.get(BUILDS_ENV, "").strip().lower() or default
    if given not in BUILDS:
        from fuserc.diagnostics import Diagnostic

        raise Diagnostic(f"{where} must be one of {', '.join(BUILDS)}, got '{given}'")
    return given


_BUILDING: set[Hashable] = set()
"""The jobs (`Job.ident`) a `Background` has not installed yet."""


def _install(job: Job, value: Any) -> None:
    """Install a job's kernel (None: it has none); a background build's
    launches use it from now on."""
    job.install(value)
    _BUILDING.discard(job.ident)


def building(ident: Hashable) -> bool:
    """Whether the kernel of a launch is being built in the background: the
    launch then runs another way, without waiting for it."""
    return ident in _BUILDING


class Background:
    """A program's kernels fetched and built by a thread of this process
    (loading entries, feeding build workers: at least one, and the thread
    builds only where none can start) while its runs go on. Each kernel is
    installed as it comes; until then its launches run another way
    (`building`)."""

    def __init__(self, groups: Sequence[Sequence[Job]], device: torch.device, local_rank: int, local_size: int, workers: int | None):
        self.jobs = [j for g in groups for j in g]
        _BUILDING.update(j.ident for j in self.jobs)
        self.started = time.perf_counter()
        self.seconds: float | None = None
        """How long the builds took (None while they run)."""
        self._stop = threading.Event()
        _LIVE.add(self)
        at_exit_first(_stop_at_exit)
        n = worker_count(len(groups), local_size, background=True) if workers is None else workers
        if workers is None and not os.environ.get(WORKERS_ENV, "").strip():
            n = max(1, n)  # a build in this process would hold the interpreter the runs need
        self._thread = threading.Thread(
            target=self._run, args=(groups, device, local_rank, local_size, n), name="fuserc-kernel-builds", daemon=True
        )
        self._thread.start()

    def _run(self, groups: Sequence[Sequence[Job]], device: torch.device, local_rank: int, local_size: int, workers: int) -> None:
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)
            build_all(groups, device, local_rank, local_size, workers, here=False, stop=self._stop)
        except Exception as e:  # noqa: BLE001 - the launches keep running another way
            warnings.warn(f"fuserc: the kernels built in the background failed ({type(e).__name__}: {e}); their launches run another way", stacklevel=2)
        finally:
            _BUILDING.difference_update(j.ident for j in self.jobs)
            self.seconds = time.perf_counter() - self.started

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every kernel to be in (at most `timeout` seconds); whether they are."""
        self._thread.join(timeout)
        return self.done()

    def stop(self, timeout: float = 10.0) -> None:
        """End the builds (their workers stop; what is in stays; no build
        starts in this process from now on). A thread still busy after
        `timeout` (a kernel it was building itself) is left to end with
        the process."""
        self._stop.set()
        self._thread.join(timeout)


_LIVE: "weakref.WeakSet[Background]" = weakref.WeakSet()
"""The background builds of this process, stopped at its exit."""
EXIT_WAIT_S = 60.0
"""How long an ending process waits for a kernel its build thread was
building itself (Inductor's compile cannot be cut short: a process that
ends under it aborts)."""


def _stop_at_exit() -> None:
    """At exit, before the build workers are stopped (kernel_worker's
    `at_exit_first`): every background build is told to stop, then its
    thread is waited for, so that no build runs (or starts, in this
    process, for a worker that ended) while the interpreter and CUDA end."""
    builds = list(_LIVE)
    for b in builds:
        b._stop.set()
    for b in builds:
        b._thread.join(EXIT_WAIT_S)


def launches_with_kernels(programs: Sequence[Any], mode: str) -> list[tuple[Block, tuple[Any, ...], tuple[Any, ...], Contexts | None]]:
    """The launches of the programs' runs (`needed_launches`) in those that
    get generated kernels under kernels `mode` (cuda_regions.program_generates)."""
    from fuserc.runtime.kernels.cuda_regions import program_generates

    return [launch for program in programs if program_generates(mode, program.func) for launch in needed_launches(program)]


def group_jobs(launches: Sequence[tuple[Block, tuple[Any, ...], tuple[Any, ...], Contexts | None]], device: torch.device) -> list[list[Job]]:
    """The jobs of the launches not installed yet, grouped by key: those
    the cuda backend runs with a generated kernel (not those PyTorch's
    kernels run: runtime/kernels/torch_regions.py)."""
    from fuserc.runtime.kernels.cuda_regions import RegionJob, aliases_of, layout_of
    from fuserc.runtime.kernels.torch_regions import runs_region

    rows_job = _rows_jobs(device)
    groups: dict[str, list[Job]] = {}
    seen: set[Hashable] = set()
    for body, ins, outs, contexts in launches:
        if runs_region(body):
            continue  # PyTorch's kernels run it (runtime/kernels/torch_regions.py), as the cuda backend launches it
        job: Job | None = rows_job(body, ins, outs, device) if rows_job else None
        if job is None:
            aliases = aliases_of((*ins, *outs))
            if aliases is None:
                continue  # operands that overlap in part: the region runs op by op
            job = RegionJob(body, tuple(layout_of(t) for t in (*ins, *outs)), aliases, len(ins), contexts, device)
        ident = (job.kind, body, job.layouts, getattr(job, "aliases", None))
        if ident in seen or job.installed() or building(job.ident):
            continue
        seen.add(ident)
        groups.setdefault(job.key.digest, []).append(job)
    return list(groups.values())


def _rows_jobs(device: torch.device) -> Callable[..., Job | None] | None:
    """cuda_rows.rows_job where row kernels run (a GPU, or Triton's
    interpreter), else None."""
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return None
    try:
        from fuserc.runtime.kernels.cuda_rows import rows_job
    except ImportError:
        return None
    return rows_job


def build_all(
    groups: Sequence[Sequence[Job]],
    device: torch.device,
    local_rank: int = 0,
    local_size: int = 1,
    workers: int | None = None,
    here: bool = True,
    stop: threading.Event | None = None,
) -> None:
    """Load the groups whose entry is cached; build the others (here and in
    `workers` worker processes: by default `worker_count`; not `here`
    while a worker lives). `stop` set: the builds end where they are."""
    cache = KernelCache()
    _imported_early()
    missing = sorted((g for g in groups if not cache.entry_path(g[0].key).exists()), key=fallback_cost, reverse=True)
    n = worker_count(len(missing), local_size) if workers is None else workers
    pool = Pool(n, device, cache) if n > 0 and missing else None  # they start while the others load
    try:
        todo = missing + _load_all([g for g in groups if not any(g is m for m in missing)], cache)
        if todo:
            first = (local_rank * len(todo)) // max(local_size, 1)
            _build(collections.deque([*todo[first:], *todo[:first]]), pool, cache, _Progress(len(todo), local_rank == 0, n if pool else 0, cache), here, stop)
    finally:
        if pool is not None:
            pool.close()


def fallback_cost(group: Sequence[Job]) -> int:
    """What a group's launches cost a step while its kernel is not in (they
    run another way, op by op at worst): the elements of their operands
    over all its launches, times the region's ops. Kernels are built
    costliest first, so that the steps taken meanwhile speed up soonest:
    the MLP's and the norms' backward regions of every layer before a
    small region at the model's end."""
    job = group[0]
    elements = sum(math.prod(shape) for shape, _, _ in job.layouts)
    body = getattr(job, "body", None)
    ops = len(body.ops) if body is not None else 1
    return len(group) * elements * ops


def _load_all(groups: Sequence[Sequence[Job]], cache: KernelCache) -> list[Sequence[Job]]:
    """Load and install the groups' kernels; the groups whose entry is not
    there or unusable (rebuilt, with its note, by whoever takes its lock)."""
    left = []
    with cache.working_dirs():
        for group in groups:
            try:
                value = cache.load(group[0].key, group[0].load)
            except Unusable:
                value = None
            if value is None:
                left.append(group)
                continue
            COUNTS.count("loaded")
            for j in group:
                _install(j, value)
    return left


def _build(
    pending: collections.deque[Sequence[Job]],
    pool: Pool | None,
    cache: KernelCache,
    progress: _Progress,
    here: bool = True,
    stop: threading.Event | None = None,
) -> None:
    """Build the pending groups: each whose lock this process takes, by an
    idle worker or here (not `here`: only when no worker lives); then wait
    for those other processes hold."""
    held_elsewhere: list[Sequence[Job]] = []
    submitted: dict[int, float] = {}  # id(group) -> when a worker took it
    waiting = False  # for a worker to be idle
    while pending or (pool is not None and pool.running()):
        if stop is not None and stop.is_set():
            if pool is not None:
                pool.abandon()
            return
        if pool is not None:
            for group, lock, error in pool.finished(timeout=0.2 if waiting or not pending else 0.0):
                _finish(group, lock, error, cache, stop)
                progress.done(group, submitted.pop(id(group)), "in a build worker")
        waiting = False
        if not pending:
            progress.show()
            continue
        group = pending.popleft()
        lock = cache.key_lock(group[0].key)
        if not lock.acquire(wait=False):
            lock.release()
            held_elsewhere.append(group)
            continue
        worker = pool.idle() if pool is not None else None
        started = time.perf_counter()
        if worker is not None and worker.submit(group, lock):
            submitted[id(group)] = started
            continue
        if not here and pool is not None and pool.alive():
            lock.release()
            pending.appendleft(group)
            waiting = True
            continue
        try:
            _fetch(group, cache, lock)
        finally:
            lock.release()
        progress.done(group, started, "in this process")
    for group in held_elsewhere:  # another process builds it: wait, then load (or build, if it failed)
        if stop is not None and stop.is_set():
            return
        started = time.perf_counter()
        _fetch(group, cache)
        progress.done(group, started, "waited for another process's build")
    progress.end()


def _finish(group: Sequence[Job], lock: KeyLock, error: str | None, cache: KernelCache, stop: threading.Event | None = None) -> None:
    """A worker's build is done: load its entry (build here if it failed,
    unless the builds are stopping: its launches keep running another way)."""
    try:
        if error is not None and stop is not None and stop.is_set():
            return
        if error is None:
            try:
                with cache.working_dirs():
                    value = cache.load(group[0].key, group[0].load)
            except Unusable:
                value = None
            if value is not None:
                COUNTS.count("built")
                for j in group:
                    _install(j, value)
                return
        _fetch(group, cache, lock)
    finally:
        lock.release()


def worker_count(jobs: int, local_size: int, background: bool = False) -> int:
    """Build workers for `jobs` kernels to build: `$FUSERC_BUILD_WORKERS`,
    else none under `MIN_JOBS_FOR_WORKERS` kernels, else one per kernel
    beyond the first, at most one per CPU core this rank's share of the
    machine has beyond its own, at most `MAX_WORKERS` (in the
    `background` of the runs: `MAX_BACKGROUND_WORKERS`)."""
    explicit = os.environ.get(WORKERS_ENV, "").strip()
    if explicit:
        try:
            return max(0, int(explicit))
        except ValueError:
            from fuserc.diagnostics import Diagnostic

            raise Diagnostic(f"${WORKERS_ENV} must be a whole number of worker processes, got '{explicit}'") from None
    if jobs < MIN_JOBS_FOR_WORKERS:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(jobs - 1, cores // max(local_size, 1) - 1, MAX_BACKGROUND_WORKERS if background else MAX_WORKERS))


SLOWEST_SHOWN = 3


class _Progress:
    """Local rank 0's line on stderr while kernels are built: after
    `PROGRESS_AFTER_S`, then every `PROGRESS_EVERY_S`, and at the end of a
    build that showed any, with its slowest kernels (where a long build's
    time went: one kernel, or the wait for another rank's)."""

    def __init__(self, total: int, show: bool, workers: int, cache: KernelCache):
        self.total, self.show_lines, self.workers, self.cache = total, show, workers, cache
        self.count = 0
        self.start = self.last = time.perf_counter()
        self.shown = False
        self.took: list[tuple[float, str, str]] = []
        """(seconds, the kernel, how it was made) of each kernel done."""

    def done(self, group: Sequence[Job], since: float, how: str) -> None:
        self.count += 1
        self.took.append((time.perf_counter() - since, group[0].describe(), how))
        self.show()

    def show(self) -> None:
        now = time.perf_counter()
        if not self.show_lines or now - self.start < PROGRESS_AFTER_S or (self.shown and now - self.last < PROGRESS_EVERY_S):
            return
        helpers = f", {self.workers} build worker{'s' if self.workers != 1 else ''}" if self.workers else ""
        self._print(f"fuserc: building kernels: {self.count} of {self.total} ready after {now - self.start:.0f} s{helpers}")
        self.shown, self.last = True, now

    def end(self) -> None:
        if self.shown:
            took = time.perf_counter() - self.start
            self._print(f"fuserc: {self.total} kernel{'s' if self.total != 1 else ''} ready in {took:.1f} s (kept in {self.cache.root})")
            slowest = sorted(self.took, reverse=True)[:SLOWEST_SHOWN]
            self._print("fuserc: slowest: " + "; ".join(f"{what} {t:.1f} s ({how})" for t, what, how in slowest))

    @staticmethod
    def _print(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


# ---- the dry run ----------------------------------------------------------------------


def needed_launches(program: Any) -> list[tuple[Block, tuple[Any, ...], tuple[Any, ...], Contexts | None]]:
    """Every `hir.launch` a run of `program` makes on this rank, in order,
    with its operands as meta tensors (their layouts are the run's) and
    its contexts: the program run on a `LayoutBackend`."""
    from fuserc.runtime.evaluator.evaluator import Program

    backend = LayoutBackend(program.backend.env)
    dry = Program(program.module, program.func, backend)
    inputs = [backend.empty(p.shape, p.dtype) if p.present_on(backend.rank) else None for p in program.params]
    dry._start().run(inputs, False)  # the planning and the interpreter of a first run
    return backend.launches


class LayoutBackend(Backend):
    """The backend of a dry run: buffers are meta tensors (their views are
    torch's, as on cpu and cuda), nothing is computed or communicated,
    each launch is recorded."""

    name = "layout"

    def __init__(self, env: Any):
        super().__init__(env)
        self.launches: list[tuple[Block, tuple[Any, ...], tuple[Any, ...], Contexts | None]] = []
        self._stream = Stream()
        self._pool: dict[tuple[int, int], Stream] = {}

    def prepare_teams(self, teams: Sequence[Team]) -> None:
        pass

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, device="meta")

    def from_host(self, value: torch.Tensor) -> torch.Tensor:
        return self.empty(value.shape, value.dtype)

    def adopt(self, value: torch.Tensor) -> torch.Tensor:
        return self.from_host(value)

    def to_host(self, array: torch.Tensor) -> torch.Tensor:
        return torch.empty(tuple(array.shape), dtype=array.dtype)

    def copy(self, src: Any, dst: Any) -> None:
        pass

    def matmul(self, a: Any, b: Any, out: Any, acc: Any = None) -> None:
        pass

    def linear(self, x: Any, w: Any, bias: Any, out: Any, acc: Any = None, activation: str | None = None) -> None:
        pass

    def launch(self, body: Block, ins: Sequence[Any], outs: Sequence[Any], contexts: Contexts | None = None) -> None:
        self.launches.append((body, tuple(ins), tuple(outs), contexts))

    def _work(self, *_: Any) -> Work:
        return Work()

    allgather = broadcast = scatter = gather = reduce = allreduce = reduce_scatter = alltoall = alltoallv = send = recv = _work  # type: ignore[assignment]
    put = get = team_barrier = put_block = get_block = _work  # type: ignore[assignment]

    def wait(self, work: Work) -> None:
        pass

    def get_current_stream(self) -> Stream:
        return self._stream

    def set_current_stream(self, stream: Stream) -> None:
        self._stream = stream

    def stream_for(self, index: int, pool_size: int) -> Stream:
        return self._pool.setdefault((pool_size, index % pool_size), Stream())

    def record_event(self) -> Event:
        return Event()

    def wait_event(self, event: Event) -> None:
        pass

    def share(self, buf: Any, team: Team) -> Handle:
        handle = Handle()
        handle.team = team
        return handle

    def release_handle(self, handle: Handle) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def barrier(self) -> None:
        pass

    def timer_start(self) -> Any:
        return 0.0

    def timer_stop(self, mark: Any) -> float:
        return 0.0

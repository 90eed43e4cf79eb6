"""Job bootstrap: one process per device, launched by mpiexec or torchrun.

Rank r of the world is device id r. `MpiEnv` is the job as this process
sees it under mpiexec (mpi4py's `MPI.COMM_WORLD`); `TorchEnv` under torchrun
(torch.distributed over gloo, chosen when torchrun's variables are set or
mpi4py is not installed). Both give the runtime one communicator interface
(mpi4py's names; runtime/backends/torch_comm.py provides them on torch.distributed),
the few launcher facts the backends need (reduction operators, in-place
marker, waiting, team communicators, node grouping), and what
runtime/job/job.py and runtime/job/watchdog.py need of a launcher (a broadcast, an
allgather, a barrier that gives up after a time, ending the whole job).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from fuserc.diagnostics import Diagnostic
from fuserc.dialects.hir_team import Team as HirTeam

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""The environment torchrun gives each process (it selects TorchEnv; checked
without importing torch, which the start of an MPI job does not need)."""

MPI_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
"""Where MPI launchers (MPICH's Hydra, Open MPI, MVAPICH) put the job's
size: a process that sees one of them above 1 was started by mpiexec."""

POLL_S = 0.002
"""How often a barrier with a time limit polls for completion."""
WAIT_SPIN_S = 0.05
"""How long a wait for communications polls without pause (MPICH's own wait
spins for as long as it lasts): every collective of a normal run ends
within it. A longer wait (a peer that is late, stopped or gone) polls with
pauses growing to `WAIT_PAUSE_S`, so that waiting ranks sleep instead of
taking a core each (for 64 MiB allreduces on 2 ranks the time was the same)."""
WAIT_PAUSE_S = 0.001


NO_WINDOWS = (
    "peer copies need MPI one-sided windows, which torchrun's world lacks: launch with mpiexec "
    "(pip install 'fuserc[mpi]'), or run on the cuda backend"
)
"""Why the cpu backend cannot share a buffer under torchrun."""


@dataclass
class MpiEnv:
    """The job as this process sees it under mpiexec: world communicator,
    rank, size."""

    comm: Any  # mpi4py.MPI.Intracomm
    rank: int
    size: int
    _node_comm: Any = field(default=None, repr=False)
    _nodes: list[int] | None = field(default=None, repr=False)
    launched_by: str | None = "mpiexec"
    """What started the job (mpiexec, torchrun, the caller's torch.distributed
    world), None for a process started alone."""
    launcher = "mpiexec"
    ends_stopped_ranks = True
    """`abort` ends a stopped rank too (MPI's launchers kill with SIGKILL)."""
    shares_memory = True
    """The cpu backend's peer copies can reach other ranks (MPI's one-sided
    windows, `share_memory`)."""

    @property
    def node_comm(self) -> Any:
        """The ranks sharing this node's memory (created on first use;
        collective over the world, so every rank must ask at the same
        point). It decides which GPU a rank uses."""
        if self._node_comm is None:
            from mpi4py import MPI

            self._node_comm = _comm(self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank))
        return self._node_comm

    def reduce_op(self, name: str) -> Any:
        """The communicator's operator for "sum", "max", "min" or "prod"."""
        from mpi4py import MPI

        return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[name]

    @property
    def in_place(self) -> Any:
        from mpi4py import MPI

        return MPI.IN_PLACE

    def wait_all(self, requests: list[Any]) -> None:
        """Complete `requests`: polling, then sleeping between polls once
        the wait is long (`WAIT_SPIN_S`)."""
        from mpi4py import MPI

        test = MPI.Request.Testall
        if test(requests):
            return
        spin_until = time.perf_counter() + WAIT_SPIN_S
        while time.perf_counter() < spin_until:
            os.sched_yield()  # a peer waiting for this core runs first (a machine with more ranks than cores)
            if test(requests):
                return
        pause = 5e-5
        while not test(requests):
            time.sleep(pause)
            pause = min(pause * 2, WAIT_PAUSE_S)

    def team_comm(self, team: Sequence[int], tag: int) -> Any | None:
        """A communicator of `team`'s world ranks; None on other ranks.
        Every rank calls it for the same teams in the same order."""
        if self.rank not in team:
            return None
        group = self.comm.Get_group().Incl(list(team))
        comm = self.comm.Create_group(group, tag=tag)
        group.Free()
        return comm

    def family_comm(self, team: HirTeam, tag: int) -> tuple[tuple[int, ...] | None, Any | None]:
        """(this rank's own team of the family `team`, its communicator),
        (None, None) on ranks in no team: every team of the family at once,
        by one MPI_Comm_split of the world colored by team (every rank calls
        it for the same families in the same order)."""
        from mpi4py import MPI

        found = team.locate(self.rank)
        color, key = (found[0], found[1]) if found is not None else (MPI.UNDEFINED, 0)
        comm = self.comm.Split(color, key)
        if found is None or comm == MPI.COMM_NULL:
            return None, None
        return team.of(self.rank), comm

    def share_memory(self, mem: Any, comm: Any) -> Any:
        """An RMA window over `mem` (the cpu backend's peer copies)."""
        from mpi4py import MPI

        return MPI.Win.Create(mem, disp_unit=1, comm=comm)

    def _node_leaders(self) -> list[int]:
        from mpi4py import MPI

        return self.comm.allgather(self.node_comm.allreduce(self.rank, op=MPI.MIN))

    @property
    def node_rank(self) -> int:
        return self.node_comm.Get_rank()

    def gpu(self, count: int) -> int:
        """The GPU this rank computes on among the `count` it sees: its rank
        on its node modulo `count` (the cuda backend's, and
        `fuserc.torch.device`'s, so that a caller makes its tensors there
        before the first call)."""
        return self.node_rank % count

    def nodes(self) -> list[int]:
        """World rank -> node, the grouping peer copies and fences keep
        within (ranks of one node share memory over CUDA IPC; others talk
        by send/recv): rank // G with $FUSERC_GPUS_PER_NODE=G (a job on one
        machine then behaves as several nodes), else the ranks sharing
        memory. Collective over the world on first use without the
        variable, so every rank must ask at the same point."""
        if self._nodes is None:
            from fuserc.passes.cost_model import gpus_per_node_override

            try:
                g = gpus_per_node_override()
            except ValueError as e:
                raise Diagnostic(str(e)) from None
            if g is not None:
                self._nodes = [r // g for r in range(self.size)]
            elif self.comm is None:  # a job without MPI (tests): one node
                self._nodes = [0] * self.size
            else:
                leaders = self._node_leaders()
                ids = {leader: i for i, leader in enumerate(dict.fromkeys(leaders))}
                self._nodes = [ids[leader] for leader in leaders]
        return self._nodes

    def copy_nodes(self, backend: str) -> list[int]:
        """World rank -> the group that `backend`'s peer copies and
        copy-engine fences keep within, and stream-pipeline's rings with
        them: `nodes()`, except for the cpu backend in a job whose ranks
        cannot share memory (`shares_memory`: torchrun's world has no MPI
        windows), where every rank is a group of its own, so that rings send
        and receive. `auto` is resolved (`backend.resolve_auto`) only there,
        where it matters."""
        if not self.shares_memory:
            from fuserc.runtime.backends.backend import resolve_auto

            if resolve_auto(backend) == "cpu":
                return list(range(self.size))
        return self.nodes()

    # ---- what runtime/job/job.py and runtime/job/watchdog.py need -----------------------
    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root) if self.size > 1 else obj

    def allgather(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj) if self.size > 1 else [obj]

    def barrier_within(self, seconds: float | None) -> bool:
        """A barrier of every rank; False when `seconds` pass first (the
        barrier is then left pending: the job is about to end)."""
        if self.size == 1:
            return True
        request = self.comm.Ibarrier()
        end = None if seconds is None else time.monotonic() + seconds
        while not request.Test():
            if end is not None and time.monotonic() > end:
                return False
            time.sleep(POLL_S)
        return True

    def abort(self, code: int) -> NoReturn:
        """End every rank of the job now, with exit code `code` (callable
        from any thread). MPI's own banner is not printed: the caller has
        said why."""
        flush_output()
        if self.size > 1:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 2)
            except OSError:
                pass
            self.comm.Abort(code)
        os._exit(code)


@dataclass
class TorchEnv(MpiEnv):
    """The job under torchrun: torch.distributed (gloo) from RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT; a single process without
    them. Peer copies of the cpu backend (RMA windows) need MPI."""

    launcher = "torchrun"
    shares_memory = False
    ends_stopped_ranks = False
    """torchrun ends the other workers with SIGTERM, which a stopped process
    only acts on once continued (torchrun's SIGKILL comes 30 s later)."""

    def reduce_op(self, name: str) -> Any:
        from fuserc.runtime.backends.torch_comm import reduce_op

        return reduce_op(name)

    @property
    def in_place(self) -> Any:
        from fuserc.runtime.backends.torch_comm import IN_PLACE

        return IN_PLACE

    def wait_all(self, requests: list[Any]) -> None:
        for r in requests:
            r.Wait()

    def team_comm(self, team: Sequence[int], tag: int) -> Any | None:
        return self.comm.team(team)

    def family_comm(self, team: HirTeam, tag: int) -> tuple[tuple[int, ...] | None, Any | None]:
        """Every team of the family made as a group (torch.distributed's
        groups are made by every rank, one by one); this rank's."""
        own = team.of(self.rank)
        mine = None
        for members in team.teams():
            comm = self.comm.team(members)
            mine = comm if comm is not None else mine
        return own, mine if own is not None else None

    def share_memory(self, mem: Any, comm: Any) -> Any:
        raise Diagnostic(f"hir.share on the cpu backend: {NO_WINDOWS}")

    @property
    def node_comm(self) -> Any:
        if self._node_comm is None:
            from fuserc.runtime.backends.torch_comm import host_name

            hosts = self.comm.allgather(host_name())
            teams = {h: [r for r, x in enumerate(hosts) if x == h] for h in dict.fromkeys(hosts)}
            mine = None
            for team in teams.values():  # every rank makes every node's group, in the same order
                comm = self.comm.team(team)
                mine = comm if comm is not None else mine
            self._node_comm = mine
        return self._node_comm

    def _node_leaders(self) -> list[int]:
        return self.comm.allgather(self.node_comm.ranks[0])

    def barrier_within(self, seconds: float | None) -> bool:
        """gloo's monitored barrier; False when `seconds` pass first."""
        if self.size == 1:
            return True
        import datetime

        import torch.distributed as dist

        if seconds is None:
            dist.barrier()
            return True
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=seconds), wait_all_ranks=True)
        except RuntimeError:
            return False
        return True


_ENV: MpiEnv | None = None


def load_launcher() -> None:
    """Import what the job's bootstrap needs, before it starts: under
    torchrun, torch (seconds of local work, which the watchdog's section of
    the bootstrap should not count; MPI's import is its bootstrap)."""
    if all(v in os.environ for v in TORCHRUN_VARS) or not _mpi_importable():
        import fuserc.runtime.backends.torch_comm  # noqa: F401


def _mpi_importable() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def launch_commands(n: int) -> list[str]:
    """How to start `fuserc run` on `n` ranks with the launchers installed
    here."""
    import shutil

    out = []
    if _mpi_importable() and (shutil.which("mpiexec") or shutil.which("mpirun")):
        out.append(f"mpiexec -n {n} fuserc run ...")
    torchrun = "torchrun" if shutil.which("torchrun") else "python -m torch.distributed.run"
    out.append(f"{torchrun} --nproc-per-node {n} -m fuserc run ...")
    return out


def mpi_launch_problem() -> str | None:
    """Why this process cannot join the job mpiexec started, or None: an
    MPI launcher says the job has several ranks, but mpi4py is missing, so
    every process would run alone as a job of one."""
    if all(v in os.environ for v in TORCHRUN_VARS) or _torch_world_started():
        return None
    sizes = [os.environ.get(v, "").strip() for v in MPI_SIZE_VARS]
    size = next((int(s) for s in sizes if s.isdigit()), 1)
    if size <= 1 or _mpi_importable():
        return None
    return (
        f"mpiexec started a job of {size} ranks, but mpi4py is not installed, so each process would run alone: "
        f"pip install 'fuserc[mpi]' (mpi4py and MPICH), or launch with torchrun --nproc-per-node {size} -m fuserc ..."
    )


def _torch_world_started() -> bool:
    """Whether the caller already started torch.distributed's world (checked
    without importing torch)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def mpi_env() -> MpiEnv:
    """The process's job environment, made on first call: torch.distributed
    under torchrun, when the caller already started its world (joined, never
    started twice), or when mpi4py is not installed; else MPI (outside any
    launcher this is a job of one rank). A job mpiexec started without
    mpi4py is a Diagnostic (`mpi_launch_problem`)."""
    global _ENV
    if _ENV is None:
        problem = mpi_launch_problem()
        if problem is not None:
            raise Diagnostic(problem)
        if all(v in os.environ for v in TORCHRUN_VARS) or _torch_world_started() or not _mpi_importable():
            _ENV = _torch_env()
        else:
            MPI = _import_mpi()
            comm = _comm(MPI.COMM_WORLD)
            launched = comm.Get_size() > 1 or any(v in os.environ for v in MPI_SIZE_VARS)
            _ENV = MpiEnv(comm, comm.Get_rank(), comm.Get_size(), launched_by="mpiexec" if launched else None)
    return _ENV


def _import_mpi() -> Any:
    """mpi4py's MPI module; a Diagnostic, in one line, when mpi4py is
    installed without an MPI library it can load (its RuntimeError lists
    every path it tried)."""
    try:
        from mpi4py import MPI
    except RuntimeError as e:
        first = str(e).split("\n")
        tried = f" ({first[1]})" if len(first) > 1 else ""
        raise Diagnostic(
            f"mpi4py is installed, but {first[0]}{tried}: pip install mpich (or your MPI, with MPI4PY_LIBMPI=PATH), "
            "or pip uninstall mpi4py to run under torchrun"
        ) from None
    return MPI


def _comm(comm: Any) -> Any:
    """`comm` (mpi4py) with an object `allreduce` that waits without holding
    Python's lock: mpi4py's reduces objects in an MPI operation that calls
    Python, so a rank waiting there for a stopped peer holds the lock, its
    watchdog's heartbeat stops, and the watchdog would take it for stopped
    too. An allgather (which waits with the lock released) and a reduction
    here instead: the values are a few numbers."""
    from mpi4py import MPI

    class Comm(type(comm)):  # type: ignore[misc]
        def allreduce(self, sendobj: Any, op: Any = MPI.SUM) -> Any:
            return functools.reduce(op, self.allgather(sendobj))

    return Comm(comm)


def _torch_env() -> TorchEnv:
    from fuserc.runtime.backends.torch_comm import init_world

    launched_by: str | None = "torchrun"
    if _torch_world_started():
        launched_by = "torchrun" if all(v in os.environ for v in TORCHRUN_VARS) else "torch.distributed"
    elif not all(v in os.environ for v in TORCHRUN_VARS):  # a lone process: a world of one
        launched_by = None
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    comm = init_world()
    return TorchEnv(comm, comm.Get_rank(), comm.Get_size(), launched_by=launched_by)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flush_output() -> None:
    """Flush standard output and error, which may be closed already (a
    process about to end must not fail on that)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


EXIT_GRACE_S = 30.0
"""How long `quick_exit`'s steps may take before the process ends anyway."""


_EXIT_STEP = ["flushing output"]
"""The step `quick_exit` is in, for the line of `_exit_late`."""


def _exit_late(code: int) -> None:
    """End a process whose exit steps got stuck, saying at which step and
    where every thread was (a stuck exit is a bug to report)."""
    import faulthandler

    try:
        sys.__stderr__.write(
            f"fuserc: the process's exit steps took over {EXIT_GRACE_S:.0f} s (stuck {_EXIT_STEP[0]}); it ends now. Its threads:\n"
        )
        sys.__stderr__.flush()
        faulthandler.dump_traceback(sys.__stderr__, all_threads=True)
        sys.__stderr__.flush()
    finally:
        os._exit(code)


ENDS_PROCESS = [False]
"""True once the `fuserc` command runs as its process's entry point
(`fuserc.cli.entry`): the process ends with `quick_exit` after it, so what
the system frees at exit (a backend's communicators and peer mappings)
need not be freed one by one first."""


def quick_exit(code: int) -> NoReturn:
    """End this process now with `code`, after what a normal exit does that
    anybody sees: the output flushed, threads that are not daemons joined,
    the `atexit` handlers run and MPI finalized (mpi4py would do it after
    Python's own teardown). Python's teardown itself is skipped: with
    torch, Triton and Inductor loaded it takes a second or more (the last
    garbage collection over every module), after the results are out. Steps
    that last over `EXIT_GRACE_S` (a handler or a peer that never returns)
    do not keep the process: it ends then with `code`, and says so."""
    import atexit
    import threading

    guard = threading.Timer(EXIT_GRACE_S, _exit_late, (code,))
    guard.daemon = True
    guard.start()
    flush_output()
    if threading.current_thread() is threading.main_thread():
        _EXIT_STEP[0] = "joining threads"
        threading._shutdown()  # type: ignore[attr-defined]  # as Python's exit: pools told to stop, then non-daemon threads joined
    _EXIT_STEP[0] = "in atexit handlers"
    atexit._run_exitfuncs()
    mpi = sys.modules.get("mpi4py.MPI")
    c_exit = False
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        c_exit = _needs_c_exit(mpi)
        _EXIT_STEP[0] = "in MPI_Finalize"
        mpi.Finalize()
    flush_output()
    _EXIT_STEP[0] = "ending the process"
    _end_process(code, c_exit)


def _needs_c_exit(mpi: Any) -> bool:
    """Whether this MPI needs the C library's exit handlers after
    MPI_Finalize: MPICH's do part of a rank's leaving (a rank that ends with
    `_exit` right after MPI_Finalize was taken, about one time in three on
    a 2-core machine with MPICH 5.0, for one that ended without it: Hydra
    killed the job's other ranks with SIGKILL and failed the job with code
    9, nothing said). Open MPI's launcher has measured fine without."""
    try:
        return str(mpi.Get_library_version()).startswith("MPICH")
    except Exception:  # noqa: BLE001 - an MPI that cannot say: the plain end
        return False


def _end_process(code: int, c_exit: bool) -> NoReturn:
    """End the process with `code`: with the C library's `exit` (its exit
    handlers and the libraries' destructors run, Python's teardown does
    not) when `c_exit`, else at once."""
    if c_exit:
        import ctypes

        ctypes.CDLL(None).exit(code)  # the interpreter's lock is released: the exit guard's timer still runs
    os._exit(code)

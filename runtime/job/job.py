"""A job of one process per rank: what ends it, and what a user sees then.

Every rank runs the same steps; a failure on any rank must end the whole
job promptly with one copy of its message, never a hang (docs/runtime.md,
Failure handling). Four cases:

- **Every rank knows the outcome.** Steps without communication (reading
  and compiling the program, loading the inputs) end in an *agreement*
  (`agree`, or the block `agreed`): the ranks exchange their outcome, each
  distinct message is printed once (by the lowest rank that has it, with
  the ranks named unless all of them share it), and every rank exits with
  the code: a clean exit, no MPI abort.
- **Ranks diverge.** A rank failing where the others may wait for it (in a
  run, in a collective) prints its message (one line; the traceback only
  with `--debug` or `$FUSERC_DEBUG=1`) and ends the job through the
  launcher's `abort`. Ranks failing the same way print one copy: each
  message is claimed on the job's board (runtime/job/watchdog.py) before it
  is printed.
- **A rank does not arrive.** The watchdog ends the job and names it.
- **A rank ends without a word** (it exits with an error code, crashes, is
  killed). A rank of its node names it with how it ended
  (runtime/job/watchdog.py); a survivor's own failure that follows (a lost
  connection) is not printed (`fail`).
- **The launcher dies** (torchrun's agent or MPI's proxy killed). Its ranks
  end too (`follow_launcher`): the kernel sends each SIGTERM when its parent
  dies, and the watchdog sees the parent gone.

The launcher (mpiexec: runtime/job/mpi_env.py; torchrun: TorchEnv in the same module) provides
`Launcher`: rank, size, `broadcast`, `allgather`, `barrier_within(seconds)`
(a barrier that gives up after the time) and `abort(code)`. Nothing here
uses MPI directly.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from fuserc.diagnostics import Diagnostic

if TYPE_CHECKING:  # imported where a job starts: `fuserc opt` and the launcher checks run without them
    from fuserc.runtime.job.watchdog import Board, Watchdog

DEBUG_ENV = "FUSERC_DEBUG"
PEER_GRACE_S = 0.5
"""How long a rank that failed where the others may wait for it looks for
a peer of its node that ended just before (its own failure, a lost
connection, then follows from that one's end, which is reported)."""
LOST_CONNECTION = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|ECONNRESET|EPIPE|remote process exited|Connection refused"
)
"""What a communication library says when a peer's process is gone."""
AGREE_GRACE_S = 30.0
"""How long a rank that failed waits for the others at an agreement before
it decides that they are stuck elsewhere (in a collective it left) and
ends the job itself."""
RANK_ENVS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID", "RANK")
SIZE_ENVS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE")
"""Where launchers put the rank of a process and the job's size, read
before any bootstrap (usage errors are printed by rank 0 only)."""


class Launcher(Protocol):
    rank: int
    size: int
    ends_stopped_ranks: bool
    """Whether `abort` ends a stopped (SIGSTOP) rank too."""

    def broadcast(self, obj: Any, root: int = 0) -> Any: ...

    def allgather(self, obj: Any) -> list[Any]: ...

    def barrier_within(self, seconds: float | None) -> bool: ...

    def abort(self, code: int) -> NoReturn: ...


def launcher_rank() -> int | None:
    """This process's rank as its launcher's environment says (None outside
    a launcher)."""
    return _first_int(RANK_ENVS)


def launcher_size() -> int | None:
    return _first_int(SIZE_ENVS)


LOCAL_RANK_ENVS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
"""Where launchers put a process's rank on its machine."""


LOCAL_SIZE_ENVS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE")
"""Where launchers (MPICH/Hydra, Open MPI, torchrun) say how many ranks share
this node."""


def launcher_local_rank() -> int | None:
    """This process's rank on its machine, as its launcher gives it: 0 for a
    process started alone (no launcher's size), None under a launcher that
    does not say."""
    local = _first_int(LOCAL_RANK_ENVS)
    if local is None and launcher_size() is None:
        return 0
    return local


PR_SET_PDEATHSIG = 1


def follow_launcher() -> int | None:
    """Under a launcher (its environment says so): ask the kernel to send
    this rank SIGTERM when its parent, the launcher's process that started
    it (torchrun's agent, MPI's proxy), dies, so that no rank runs on
    orphaned (torchrun killed with SIGKILL left its ranks running for
    minutes). The parent's pid, which the watchdog also watches; None
    outside a launcher (a process started alone lives on after its shell).
    The first call decides (the `fuserc` command makes it before its
    imports); later calls return its answer."""
    if _LAUNCHER:
        return _LAUNCHER[0]
    parent: int | None = os.getppid()
    if launcher_size() is None or parent is None or parent <= 1:
        parent = None
    else:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # not Linux: the watchdog's check alone
    _LAUNCHER.append(parent)
    return parent


_LAUNCHER: list[int | None] = []
"""The launcher's process, once `follow_launcher` decided."""


def _start_sentinel(board: Board, size: int) -> None:
    """Start the node's sentinel (runtime/job/peers.py), which names a rank that
    ends without a word under MPI's launchers."""
    from fuserc.runtime.kernels.kernel_worker import worker_env
    from fuserc.runtime.job.peers import start_sentinel

    local = _first_int(LOCAL_SIZE_ENVS) or size
    start_sentinel(board.path, local, worker_env())


def _first_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def debug_from_env() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def exit_code(error: BaseException) -> int:
    """2 for bad usage, else 1."""
    from fuserc.pipeline import PipelineSpecError

    return 2 if isinstance(error, PipelineSpecError) else 1


def describe(error: BaseException, debug: bool = False) -> str:
    """What a user sees of a failure: a Diagnostic's text; anything else
    (an internal error) in one line that says what failed and where (the
    op, from the evaluator's note, or the innermost frame), or with its
    traceback when debugging."""
    if isinstance(error, Diagnostic):
        return error.render()
    if isinstance(error, KeyboardInterrupt):
        return "error: interrupted"
    if debug:
        return "internal error: " + "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip("\n")
    text = str(error).strip().splitlines()
    what = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    notes = [n for n in getattr(error, "__notes__", []) if n.strip()]
    if notes:
        where = notes[0]  # the innermost op (enclosing ops add theirs after)
    else:
        frames = traceback.extract_tb(error.__traceback__)
        where = f"at {_short(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"internal error: {what}{f' ({where})' if where else ''}; --debug or ${DEBUG_ENV}=1 shows the traceback"


def _short(path: str) -> str:
    for cut in ("/fuserc/", "/runtime/", "/passes/", "/dialects/"):
        if cut in path:
            return cut.strip("/") + "/" + path.rsplit(cut, 1)[1]
    return path


def who(ranks: list[int], size: int) -> str:
    """The prefix naming the ranks a message comes from ('' for all)."""
    if len(ranks) == size:
        return ""
    if len(ranks) == 1:
        return f"[rank {ranks[0]}] "
    return f"[ranks {', '.join(map(str, ranks))}] "


def prefixed(prefix: str, text: str) -> str:
    return "\n".join(prefix + line for line in text.split("\n")) if prefix else text


@dataclass
class Job:
    """This rank's view of the job: its launcher, the watchdog and the board."""

    env: Launcher
    watchdog: Watchdog
    debug: bool = False
    out: Any = field(default_factory=lambda: sys.stderr)

    @classmethod
    def start(
        cls,
        bootstrap: Callable[[], Launcher],
        timeout: float,
        debug: bool = False,
        own_process: bool = False,
        prepare: Callable[[], None] | None = None,
    ) -> Job:
        """Collective: the watchdog first (so that a rank stopped while the
        job starts is caught too; rank and size from the launcher's
        environment until it is up), then the launcher's bootstrap (after
        `prepare`, its local work: imports) and the job's board.
        `own_process`: the process is fuserc's (`fuserc run`, a tool), so
        the watchdog may take SIGTERM (runtime/job/watchdog.py)."""
        from fuserc.runtime.job.watchdog import Board, Watchdog

        dog = Watchdog(launcher_rank() or 0, launcher_size() or 1, timeout, own_signals=own_process)
        dog.launcher_pid = follow_launcher()
        dog.start()
        if prepare is not None:
            prepare()
        with dog.section("starting the job"):
            env = bootstrap()
            dog.rank, dog.size, dog.end_job = env.rank, env.size, env.abort
            dog.end_stopped = not env.ends_stopped_ranks
            if timeout > 0 and env.size > 1:
                dog.board = Board.create(env)
                if dog.board is not None:
                    # Every rank's record (pid, start) is on the board and this node's peers are
                    # watched before any step that can fail: a pidfd opened only after a peer ended
                    # and was reaped could not say how it ended, nor could a missing record name it.
                    dog.beat()
                    env.barrier_within(None)
                    dog.track()
                dog.sentinel = dog.board is not None and getattr(env, "launcher", None) == "mpiexec"
                if dog.sentinel and launcher_local_rank() == 0:
                    _start_sentinel(dog.board, env.size)
        return cls(env, dog, debug)

    def close(self) -> None:
        self.watchdog.stop()
        if self.watchdog.board is not None:
            self.watchdog.board.close()

    def section(self, label: str, doer: int | None = None) -> Any:
        return self.watchdog.section(label, doer)

    # ---- outcomes -------------------------------------------------------------
    def agree(self, label: str, error: BaseException | None) -> None:
        """Collective: every rank says how `label` went; when any failed,
        each distinct message is printed once and every rank exits with
        the code (no abort: no rank waits for another)."""
        env = self.env
        if env.size > 1:
            if error is not None:
                # the others may be stuck in a collective this rank left
                if not env.barrier_within(min(AGREE_GRACE_S, self.watchdog.timeout or AGREE_GRACE_S)):
                    self.fail(error)
            else:
                with self.section(f"agreeing after {label}"):
                    env.barrier_within(None)
        mine = None if error is None else (exit_code(error), describe(error, self.debug))
        outcomes = env.allgather(mine) if env.size > 1 else [mine]
        failed = [(r, o) for r, o in enumerate(outcomes) if o is not None]
        if not failed:
            return
        by_message: dict[str, list[int]] = {}
        for r, (_, text) in failed:
            by_message.setdefault(text, []).append(r)
        for text, ranks in by_message.items():
            if env.rank == ranks[0]:
                self._print(prefixed(who(ranks, env.size), text))
        self.close()
        sys.exit(failed[0][1][0])

    @contextmanager
    def agreed(self, label: str) -> Iterator[None]:
        """A block every rank runs without communicating, ended by `agree`."""
        error: BaseException | None = None
        try:
            yield
        except Exception as e:  # noqa: BLE001 - agreed on below
            error = e
        self.agree(label, error)

    def fail(self, error: BaseException) -> NoReturn:
        """This rank failed where the others may wait for it: print (one copy
        per distinct message across the job), end the job. When a rank of
        this node ended just before, this failure follows from it (a lost
        connection): that rank's end is what is reported."""
        dog = self.watchdog
        if not dog.peer_failed(PEER_GRACE_S):
            text = describe(error, self.debug)
            if not self.debug and not isinstance(error, Diagnostic) and LOST_CONNECTION.search(str(error)):
                first = str(error).strip().splitlines()[0]
                text = (
                    f"error: lost the connection to another rank in {dog.label} (a rank of another node "
                    f"ended, or a node or the network failed): {type(error).__name__}: {first}"
                )
            board = dog.board
            same = re.sub(r" on rank \d+", "", text)  # the same failure on several ranks: one copy
            key = hashlib.sha1(same.encode()).hexdigest()[:16]
            if board is None or board.claim(f"failure-{key}"):
                self._print(prefixed(f"[rank {self.env.rank}] ", text))
        dog.mark_ending()
        dog.stop()
        if self.env.size == 1:
            os._exit(exit_code(error))  # no other rank to stop; no abort banner
        time.sleep(0.5)  # the launcher forwards the message before the abort kills everyone
        self.env.abort(exit_code(error))

    def alone(self, error: BaseException) -> NoReturn:
        """This rank failed after the last step that involves the others
        (rank 0 writing or checking results): report and exit with the code."""
        self._print(describe(error, self.debug))
        self.close()
        sys.exit(exit_code(error))

    def _print(self, text: str) -> None:
        sys.stdout.flush()
        self.out.write(text + "\n")
        self.out.flush()

    def run(self, body: Callable[[], int]) -> NoReturn:
        """Run `body` (returning an exit code): an exception ends the job
        (`fail`), an exit code is this rank's."""
        try:
            code = body()
        except SystemExit:
            self.close()
            raise
        except BaseException as e:  # noqa: BLE001 - every failure must end the job
            self.fail(e)
        self.close()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(code)


_CURRENT: Job | None = None


def current() -> Job:
    """The job of this process (started on first use, by mpiexec's
    bootstrap, with the watchdog's timeout from the environment)."""
    global _CURRENT
    if _CURRENT is None:
        from fuserc.runtime.job.mpi_env import load_launcher, mpi_env
        from fuserc.runtime.job.watchdog import timeout_from

        _CURRENT = Job.start(mpi_env, timeout_from(None), debug_from_env(), own_process=True, prepare=load_launcher)
    return _CURRENT


def start(bootstrap: Callable[[], Launcher], timeout: float, debug: bool, prepare: Callable[[], None] | None = None) -> Job:
    """Start the job of this process, `fuserc run`'s (collective)."""
    global _CURRENT
    _CURRENT = Job.start(bootstrap, timeout, debug, own_process=True, prepare=prepare)
    return _CURRENT


def run_guarded(body: Callable[[], int]) -> NoReturn:
    """`body` as the job of this process (tools call this)."""
    current().run(body)


@contextmanager
def same_on_all_ranks(label: str = "a step of every rank") -> Iterator[None]:
    """A block every rank runs, whose failures every rank learns (`agreed`)."""
    with current().agreed(label):
        yield

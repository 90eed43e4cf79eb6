"""The watchdog: a run or a collective that does not complete in time ends
the job, with a message naming the ranks that did not arrive.

Like PyTorch's NCCL watchdog (10 minutes by default), every rank runs a
thread that holds a deadline: the main thread opens a *section* around each
step that needs the other ranks (a run of the program, a collective of the
job such as sharing the inputs or gathering the results) and the thread
ends the job when a section lasts longer than the timeout (`fuserc run
--watchdog SECONDS`, else `$FUSERC_WATCHDOG`, else 600; 0 turns it off).
A rank that cannot move at all is told apart from long work sooner: when a
section has lasted `stall_s` (20 s, or the timeout if shorter) and the
heartbeat of another rank has stopped for as long (it is stopped, or stuck
outside Python), the job ends then; a rank in a long kernel or collective
keeps its heartbeat (the thread runs while the main thread waits outside
Python) and only the timeout ends it.

Naming the ranks that did not arrive needs to know where every rank is,
also a rank that is stopped (SIGSTOP) or stuck, which cannot answer a
message. So each rank's thread writes, every heartbeat, a record to the
job's *board*: a folder every rank can read (one file per rank, replaced
atomically): the time, the section it is in (numbered in order: every rank
opens the same sections in the same order), and how many communications
it has started per team (`watch` counts them at the backend). When a
deadline passes, the ranks behind the others are those whose section is
earlier, whose count on a team they belong to is lower than a teammate's,
or whose heartbeat has stopped. The rank that notices first (an exclusive
file on the board) prints the message; then it ends the job through its
launcher (`abort`), which kills every rank (the stopped ones included; under
torchrun, whose SIGTERM a stopped process ignores, the reporter first kills
the stopped ranks of its node itself).

The same thread watches the processes of the other ranks of its node
(runtime/job/peers.py): a rank that ends without having said why is named,
with how it ended, by the first of them to see it, and the job ends.

The watchdog starts before the launcher's bootstrap (rank and size from
the launcher's environment) and needs of the launcher only `broadcast(obj)`
(to agree on the board's folder, once) and `abort(code)` (from any thread;
until the bootstrap is done it exits instead, and the launcher ends the
other ranks), so a launcher other than mpiexec (torchrun: torch.distributed's
store and process group) plugs in by providing these (runtime/job/job.py's
`Launcher`). The board (runtime/job/board.py) is a local folder, which every
rank of one node shares; for a job over several nodes, `$FUSERC_JOB_DIR`
names a folder on a shared file system, else ranks on other nodes are
reported as unknown (the deadline still ends the job).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from fuserc.runtime.job.board import JOB_DIR_ENV, Board, Launcher, ranks_text, stragglers
from fuserc.runtime.job.peers import Peer, Peers, alive, clean_exit, how, identity, parent, start_time

WATCHDOG_ENV = "FUSERC_WATCHDOG"
DEFAULT_TIMEOUT_S = 600.0
FAULT_ENV = "FUSERC_FAULT"
"""Testing hook: `RANK:KIND` or `RANK:KIND:N` makes rank RANK fail before
its N-th counted communication (default the first) in one of the ways a
rank fails: `hang` (sleeps forever: never reaches the collective), `stop`
(SIGSTOP, as from outside), `exit` (exits with code 3), `segv` (a
segmentation fault), `kill` (SIGKILL) or `raise` (an exception)."""
FAULT_KINDS = ("hang", "stop", "exit", "segv", "kill", "raise")
REPORT_GRACE_S = 0.5
"""After printing, before ending the job: time for the launcher to forward
the message before every process is killed."""
ORPHAN_GRACE_S = 0.3
"""How long SIGTERM waits to see the launcher gone: the parent-death signal
comes as soon as the thread of the launcher that started the rank exits,
before the launcher's whole process has."""
RECORD_EVERY_S = 0.05
"""A new section is written to the board by the watchdog's thread, at most
this often (and at every heartbeat): a rank's record is at most this far
behind it, and a tight loop of runs writes nothing per run."""
STALL_S = 20.0
"""A section this old while another rank's heartbeat has stopped as long
ends the job (the timeout ends it otherwise)."""


def timeout_from(option: float | None) -> float:
    """The watchdog's timeout in seconds: the option, else $FUSERC_WATCHDOG,
    else 600; 0 turns the watchdog off. A ValueError for a bad value."""
    if option is not None:
        value, source = option, "--watchdog"
    else:
        text = os.environ.get(WATCHDOG_ENV, "").strip()
        if not text:
            return DEFAULT_TIMEOUT_S
        try:
            value, source = float(text), f"${WATCHDOG_ENV}"
        except ValueError:
            raise ValueError(f"${WATCHDOG_ENV} must be a number of seconds, got '{text}'") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{source} must be a number of seconds >= 0 (0: off), got {value:g}")
    return float(value)


# --------------------------------------------------------------------------
# The watchdog
# --------------------------------------------------------------------------

_TEAM_ARG: dict[str, int] = {
    "allgather": 2, "broadcast": 2, "scatter": 3, "gather": 3, "reduce": 4, "allreduce": 3,
    "reduce_scatter": 3, "alltoall": 2, "alltoallv": 4, "team_barrier": 0,
}  # fmt: skip
"""Backend communications over a team, and the position of their `team`
argument; `send`/`recv` (peer at 1, team at 2) count per pair of ranks."""


@dataclass
class Watchdog:
    """This rank's watchdog. It can start before the launcher's bootstrap
    (rank and size from the launcher's environment), so that a rank stopped
    while the job starts is caught too; `board` and `end_job` (the
    launcher's `abort`) are set once the bootstrap is done (until then the
    job ends by exiting: the launcher ends the other ranks).

    Its thread also watches the processes of the other ranks of this node
    (runtime/job/peers.py): a rank that ends without having said why (it exited
    with an error code, crashed, was killed) is named, with how it ended,
    by one of them, and the job ends. With `own_signals` (a process that is
    fuserc's own: `fuserc run`, the tools) the thread also takes SIGTERM, so
    that a launcher ending this rank (torchrun, once a peer ended) lets it
    say so first; the rank then exits at once with 143."""

    rank: int
    size: int
    timeout: float
    board: Board | None = None
    end_job: Callable[[int], Any] = os._exit
    out: TextIO = field(default_factory=lambda: sys.stderr)
    own_signals: bool = False
    end_stopped: bool = False
    """The launcher cannot end a stopped rank (torchrun): the rank that
    reports SIGKILLs those of its node."""
    seq: int = 0
    label: str = "starting"
    doer: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    teams: dict[str, list[int]] = field(default_factory=dict)
    peers: Peers | None = None
    _deadline: float | None = None
    _since: float = 0.0
    _thread: threading.Thread | None = None
    _wake: tuple[int, int] | None = None
    sentinel: bool = False
    """The node's sentinel (runtime/job/peers.py) names a rank that ended
    without a word (under MPI's launchers, which kill the other ranks before
    they can); this rank only marks on the board that it saw it end."""
    launcher_pid: int | None = None
    """The launcher's process (the parent of this rank), watched: a rank
    whose launcher died ends (runtime/job/job.py also asks the kernel to
    SIGTERM it then)."""
    _fired: bool = False
    _written: float = 0.0
    _awake_since: float = 0.0
    _ending: bool = False
    _end_at: float | None = None
    _remove_board: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ended_lock: threading.Lock = field(default_factory=threading.Lock)
    _start: int | None = field(default_factory=lambda: start_time(os.getpid()))

    @property
    def interval(self) -> float:
        """Seconds between heartbeats."""
        return min(2.0, max(0.05, self.timeout / 20))

    @property
    def stale_s(self) -> float:
        """A heartbeat older than this means the rank does not run."""
        return max(5 * self.interval, 2.0)

    @property
    def stall_s(self) -> float:
        """A section this old, while a rank's heartbeat has stopped for as
        long, ends the job before its timeout."""
        return max(self.stale_s, min(STALL_S, self.timeout))

    def start(self) -> None:
        if self.timeout <= 0 or self._thread is not None:
            return
        self._wake = os.pipe()
        os.set_blocking(self._wake[1], False)
        if self.own_signals:
            _take_sigterm(self._wake[1])
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="fuserc-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        _give_back_sigterm(self._wake[1] if self._wake else -1)
        self._poke(WAKE_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
            if not self._thread.is_alive() and self._wake is not None:
                for fd in self._wake:
                    os.close(fd)
                self._wake = None
        self._thread = None
        if self.peers is not None:
            self.peers.close()

    def _poke(self, byte: int) -> None:
        if self._wake is not None:
            try:
                os.write(self._wake[1], bytes([byte]))
            except OSError:
                pass

    @contextmanager
    def section(self, label: str, doer: int | None = None) -> Iterator[None]:
        """A step every rank takes (in the same order) that needs the others:
        the job ends when it lasts longer than the timeout. `doer`: the rank
        doing the step alone while the others wait for it."""
        self.seq += 1
        self.label = label
        self.doer = doer
        self._since = time.time()
        now = time.monotonic()
        self._deadline = now + self.timeout if self.timeout > 0 else None
        if now - self._written >= RECORD_EVERY_S:  # the thread writes it (a write costs a millisecond on a busy disk; a run can cost less)
            self._written = now
            self._poke(WAKE_RECORD)
        try:
            yield
        finally:
            self._deadline = None

    # ---- counting communications -------------------------------------------
    def watch(self, backend: Any) -> None:
        """Count the backend's communications (per team, per pair of ranks
        for send/recv), so that a rank behind its teammates can be named."""
        fault = _fault_for(self.rank)
        for name, at in _TEAM_ARG.items():
            method = getattr(backend, name, None)
            if method is not None:
                setattr(backend, name, self._team_counter(name, method, at, fault))
        for name in ("send", "recv"):
            method = getattr(backend, name, None)
            if method is not None:
                setattr(backend, name, self._pair_counter(name, method, fault))

    def _key(self, key: str, members: Sequence[int]) -> str:
        if key not in self.counts:
            self.teams[key] = list(members)
            self.counts[key] = 0
        return key

    def _team_counter(self, name: str, method: Callable[..., Any], at: int, fault: _Fault | None) -> Callable[..., Any]:
        """`method`, counting each call on its team (a dictionary lookup and
        an increment: the host's cost per communication stays small)."""
        keys: dict[tuple[int, ...], str] = {}
        counts = self.counts

        def counted(*args: Any, **kwargs: Any) -> Any:
            team = kwargs["team"] if "team" in kwargs else args[at]
            if type(team) is not tuple:
                team = tuple(team)
            key = keys.get(team)
            if key is None:
                key = keys[team] = self._key(f"{name} on team {list(team)}", team)
            if fault is not None:
                fault.tick(key)
            counts[key] += 1
            return method(*args, **kwargs)

        return counted

    def _pair_counter(self, name: str, method: Callable[..., Any], fault: _Fault | None) -> Callable[..., Any]:
        """`method` (send or recv), counting each call per pair of ranks."""
        rank, counts = self.rank, self.counts

        def counted(*args: Any, **kwargs: Any) -> Any:
            team = tuple(kwargs["team"] if "team" in kwargs else args[2])
            peer = team[int(kwargs["peer"] if "peer" in kwargs else args[1])]
            src, dst = (rank, peer) if name == "send" else (peer, rank)
            key = self._key(f"send/recv {src}->{dst}", (src, dst))
            if fault is not None:
                fault.tick(key)
            counts[key] += 1
            return method(*args, **kwargs)

        return counted

    # ---- the thread -----------------------------------------------------------
    def record(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "where": _IDENTITY,
            "start": self._start,
            "time": time.time(),
            "seq": self.seq,
            "label": self.label,
            "doer": self.doer,
            "since": self._since,
            "counts": dict(self.counts),
            "teams": dict(self.teams),
            "ending": self._ending,
        }

    def beat(self) -> None:
        """Write this rank's record on the board now."""
        if self.board is not None and self.timeout > 0:
            with self._lock:  # the main thread (a new section) and the heartbeat
                self.board.write(self.record())

    def mark_ending(self) -> None:
        """This rank ends knowingly (it said why, or another rank did): its
        peers do not report its end as a failure of its own."""
        self._ending = True
        self.beat()

    def _loop(self) -> None:
        next_beat = time.monotonic() + self.interval
        self._awake_since = time.monotonic()
        while True:
            now = time.monotonic()
            wait = next_beat - now
            if self._end_at is not None:
                wait = min(wait, self._end_at - now)
            peers = self.peers.fds() if self.peers is not None else {}
            poller = select.poll()
            poller.register(self._wake[0], select.POLLIN)
            for fd in peers:
                poller.register(fd, select.POLLIN)
            ready = {fd for fd, _ in poller.poll(max(0.0, wait) * 1000)}
            ended = [self.peers.ended(peers[fd]) for fd in ready if fd in peers] if self.peers is not None else []
            if ended:
                self.peers_ended(ended)
            if self._wake[0] in ready:
                pokes = os.read(self._wake[0], 64)
                if signal.SIGTERM in pokes:
                    if self.peers is not None and self.peers_ended(self.peers.check(0.0)):
                        self._exit(128 + signal.SIGTERM)  # a peer's end first: the launcher ends this rank because of it
                    if self.orphaned(within=ORPHAN_GRACE_S):
                        self._exit(1)
                    self._exit(128 + signal.SIGTERM)
                if WAKE_STOP in pokes:
                    return
                if WAKE_RECORD in pokes:
                    self.beat()
            now = time.monotonic()
            if now >= next_beat:
                if now - next_beat > self.stale_s:  # this process was stopped itself (the whole job, ^Z): the others' records are as old
                    self._awake_since = now
                next_beat = now + self.interval
                self.beat()
                self.track()
                if self.orphaned():
                    self._exit(1)
                deadline = self._deadline
                if deadline is not None and not self._fired:
                    if now > deadline:
                        self._fired = True
                        self.expire()
                    elif self._stalled(now):
                        self._fired = True
                        self.expire(stalled=True)
            if self._end_at is not None and now >= self._end_at:
                self._end()
                return

    def _stalled(self, now: float) -> bool:
        """Whether the current section has lasted `stall_s` and the heartbeat
        of another rank has stopped as long (the board is read only then)."""
        stall = self.stall_s
        if self.board is None or self.size == 1 or now - self._awake_since < stall:
            return False
        if time.time() - self._since < stall:
            return False
        wall = time.time()
        return any(
            q != self.rank and not rec.get("ending") and wall - rec["time"] > stall for q, rec in self.board.read().items()
        )

    def orphaned(self, within: float = 0.0) -> bool:
        """Whether this rank's launcher died (it is no longer the parent;
        waiting up to `within` seconds for it): said once for the job; the
        rank then ends."""
        if self.launcher_pid is None:
            return False
        end = time.monotonic() + within
        while parent() == self.launcher_pid:
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)
        if self.board is None or self.board.claim("launcher-ended"):
            self._write(f"error: the job's launcher (process {self.launcher_pid}) ended: its ranks end too (rank {self.rank} at {self.label})")
        self._ending = True
        return True

    def track(self) -> None:
        """Watch the processes of this node's other ranks as their records
        appear (every rank's, once)."""
        if self.board is None:
            return
        with self._ended_lock:  # the main thread may ask too (`peer_failed`)
            if self.peers is None:
                self.peers = Peers(self.rank, _IDENTITY)
            if len(self.peers.seen) < self.size - 1:
                self.peers.track(self.board.read())

    def peers_ended(self, ended: list[Peer]) -> bool:
        """Ranks of this node whose processes ended: a rank that ended
        without saying why (its record is there, not marked as ending) is
        named with how it ended by the first rank to see it, and the job
        ends. True when one of them failed (it did not exit with 0)."""
        failed = False
        if self.sentinel and self.board is not None:  # first, before the launcher's cleanup may kill this rank
            for p in ended:
                if not clean_exit(p.status):
                    self.board.mark(f"saw-{p.rank}")
        with self._ended_lock:
            for p in ended:
                if clean_exit(p.status):
                    continue
                failed = True
                rec = self.board.read_rank(p.rank) if self.board is not None else None
                if rec is None or rec.get("ending") or self.board is None or self.board.claimed("watchdog"):
                    continue  # it said why (or was ended by the watchdog); its launcher ends the job
                if self.sentinel:
                    pass  # the node's sentinel says it (runtime/job/peers.py): it outlives MPICH's cleanup
                elif self.board.claim(f"ended-{p.rank}"):
                    where = f" (last at {rec['label']})" if rec.get("label") else ""
                    self._write(f"error: rank {p.rank} ended: {how(p.status)}{where}")
                if self._end_at is None:
                    self._end_at = time.monotonic() + REPORT_GRACE_S
                self._ending = True
        return failed

    def peer_failed(self, within: float) -> bool:
        """Whether a rank of this node ended with an error within `within`
        seconds (before this rank's own failure, which then follows from
        it: a lost connection); its end is reported if it said nothing."""
        self.track()
        if self.peers is None:
            return False
        if any(p.ended and not clean_exit(p.status) for p in self.peers.peers.values()):
            return True
        return self.peers_ended(self.peers.check(within))

    def message(self) -> str:
        """What a user sees when the current section is over time."""
        return self._message()[0]

    def _message(self, stalled: bool = False) -> tuple[str, list[int]]:
        setting = f"(--watchdog SECONDS or ${WATCHDOG_ENV} sets the time; 0 turns it off)"
        if stalled:
            head = f"error: watchdog: {self.label} waits for a rank whose heartbeat stopped {self.stall_s:g} s ago {setting}"
        else:
            head = f"error: watchdog: {self.label} did not complete within {self.timeout:g} s {setting}"
        if self.size == 1:
            return head, []
        if self.board is None:
            return head + "; which ranks did not arrive is unknown (no job folder)", []
        self.beat()
        time.sleep(min(self.interval, 0.2))  # the other ranks' latest records
        records = self.board.read()
        verdict = stragglers(records, self.size, time.time(), self.stale_s)
        culprits, waiting, unknown = verdict.lines, verdict.waiting, verdict.unknown
        lines = [head, *("  " + c for c in culprits)]
        if not culprits:
            lines.append("  every rank arrived and none completes (a deadlock in the program?)")
        elif waiting:
            lines.append(f"  rank{'s' if len(waiting) > 1 else ''} {ranks_text(waiting)} wait{'' if len(waiting) > 1 else 's'} for {'them' if len(culprits) > 1 else 'it'}")
        if unknown:
            lines.append(
                f"  no record of rank{'s' if len(unknown) > 1 else ''} {ranks_text(unknown)} (on another node? "
                f"${JOB_DIR_ENV} on a shared file system lets the watchdog see them)"
            )
        return "\n".join(lines), [q for q in verdict.stopped if records[q].get("where") == _IDENTITY]

    def expire(self, stalled: bool = False) -> None:
        """End the job (the section is over time, or `stalled`: a rank's
        heartbeat stopped): the first rank to notice reports, ends the ranks
        of its node that are stopped when the launcher cannot (torchrun's
        SIGTERM; its SIGKILL comes 30 s later) and ends the job; the others
        end it themselves if it does not end."""
        reporter = self.board is None or self.board.claim("watchdog")
        self._ending = True
        if not reporter:
            self._end_at = time.monotonic() + self.stale_s + 5.0
            return
        text, stopped = self._message(stalled)
        self._write(text)
        records = self.board.read() if self.board is not None and self.end_stopped else {}
        for q in stopped:
            rec = records.get(q)
            if rec is not None and alive(int(rec["pid"]), rec.get("start")):
                try:
                    os.kill(int(rec["pid"]), signal.SIGKILL)
                except OSError:
                    pass
        self._end_at = time.monotonic() + REPORT_GRACE_S
        self._remove_board = True

    def _write(self, text: str) -> None:
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass

    def _end(self) -> None:
        """End the job (the watchdog's report or a peer's end)."""
        self.mark_ending()
        if self.board is not None and self._remove_board:
            self.board.remove()
        self.end_job(1)

    def _exit(self, code: int) -> None:
        """The launcher ends this rank (SIGTERM): at once, after what a
        peer's end had to report."""
        self.mark_ending()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)


WAKE_STOP = 0
"""The byte that stops the watchdog's thread (signals wake it with their
number: `signal.set_wakeup_fd`)."""
WAKE_RECORD = 255
"""The byte that makes the thread write this rank's record (a new section)."""
_IDENTITY = identity()


def _take_sigterm(wake_fd: int) -> None:
    """SIGTERM wakes the watchdog's thread, which ends the process (the main
    thread may be blocked in a collective, where a Python handler would
    never run). Only from the main thread, and only when nobody else
    handles SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    previous = signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)
    if previous != -1:  # someone else's: leave it all to them
        signal.set_wakeup_fd(previous)
        return
    signal.signal(signal.SIGTERM, _ignore)


def _give_back_sigterm(wake_fd: int) -> None:
    """SIGTERM ends the process again (the watchdog's thread stops)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is _ignore:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)


def _ignore(signum: int, frame: Any) -> None:
    """SIGTERM's Python handler: the watchdog's thread acts on it."""


@dataclass
class _Fault:
    """The fault $FUSERC_FAULT injects on this rank."""

    kind: str
    countdown: int

    def tick(self, where: str) -> None:
        """Before a counted communication: strike at the N-th."""
        self.countdown -= 1
        if self.countdown == 0:
            self.strike(where)

    def strike(self, where: str) -> None:
        sys.stderr.write(f"{FAULT_ENV}: {self.kind} before {where} (at {time.time():.3f})\n")
        sys.stderr.flush()
        if self.kind == "hang":
            while True:
                time.sleep(3600)
        if self.kind == "raise":
            raise RuntimeError(f"{FAULT_ENV}: injected failure before {where}")
        sys.stdout.flush()
        sys.stderr.flush()
        if self.kind == "exit":
            os._exit(3)
        signals = {"stop": signal.SIGSTOP, "segv": signal.SIGSEGV, "kill": signal.SIGKILL}
        if self.kind == "segv":
            signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # not Python's faulthandler
        os.kill(os.getpid(), signals[self.kind])


def _fault_for(rank: int) -> _Fault | None:
    """The fault $FUSERC_FAULT asks of this rank, or None."""
    parts = os.environ.get(FAULT_ENV, "").strip().split(":")
    if len(parts) < 2 or parts[1] not in FAULT_KINDS:
        return None
    try:
        if int(parts[0]) != rank:
            return None
        return _Fault(parts[1], max(1, int(parts[2]) if len(parts) > 2 else 1))
    except ValueError:
        return None

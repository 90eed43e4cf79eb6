"""The processes of the other ranks of this node: seeing one end, and how.

A rank that exits, crashes or is killed cannot say so itself, and its
launcher's report of it comes late or names someone else (torchrun prints
it after a 30-line ChildFailedError report; MPICH's Hydra often names a
rank it killed itself). Its peers on the same node can see it: each rank's
watchdog thread (runtime/job/watchdog.py) holds a pidfd of every other rank's
process on its node (their pids are on the job's board), which becomes
readable the moment the process ends. How it ended is read from the
zombie's `/proc/PID/stat` (its exit code field) while the launcher has not
reaped it yet, and from the pidfd itself afterwards (`PIDFD_GET_INFO` with
`PIDFD_INFO_EXIT`, Linux 6.15 and later); else it is unknown.

Under MPI's launchers a watching rank rarely gets to say anything: MPICH's
Hydra kills every other rank with SIGKILL within a millisecond of one
ending. So the lowest rank of each node also starts the node's *sentinel*
(`start_sentinel`; `python -m fuserc.runtime.job.peers`), a small process in a
session of its own, which Hydra does not kill and whose standard error
Hydra forwards until it ends: it watches the node's ranks and prints the
line naming the one that ended first (unless a rank said why already),
then exits; it exits as well once every rank it watches has ended.

Processes are compared by `identity()` (host name and pid namespace, so
that pids of ranks in other containers are never mistaken for ours) and by
their start time (so that a reused pid is never mistaken for the rank).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
"""ioctl `_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)` for the struct's
first published size (64 bytes, `PIDFD_INFO_SIZE_VER0`)."""
PIDFD_INFO_EXIT = 1 << 3
PIDFD_INFO_EXIT_CODE_AT = 60
"""Offset of `exit_code` (a wait status) in `struct pidfd_info`."""


def identity() -> str:
    """Where a pid means this process: the host and the pid namespace."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()} {ns}"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 on)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def parent(pid: int | None = None) -> int:
    """The parent of process `pid` (default this one). Not `os.getppid()`
    in a thread: the kernel gives a process's threads their new parent one
    by one, and sends the parent-death signal as it gives the main thread
    its own, so another thread woken by it may still see the old one."""
    fields = _stat_fields(os.getpid() if pid is None else pid)
    return int(fields[1]) if fields and len(fields) > 1 else os.getppid()


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot), to tell it from a
    later process given the same pid."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def exit_status(pid: int, pidfd: int | None) -> int | None:
    """The wait status of a process that ended, or None when it cannot be
    known here (reaped already, on a kernel older than 6.15)."""
    fields = _stat_fields(pid)
    if fields and fields[0] == "Z" and len(fields) >= 50:  # a zombie: the launcher has not reaped it yet
        return int(fields[-1])
    if pidfd is None:
        return None
    buf = bytearray(64)
    struct.pack_into("Q", buf, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, PIDFD_GET_INFO, buf)
    except OSError:
        return None
    if not struct.unpack_from("Q", buf, 0)[0] & PIDFD_INFO_EXIT:
        return None
    return struct.unpack_from("i", buf, PIDFD_INFO_EXIT_CODE_AT)[0]


def how(status: int | None) -> str:
    """A wait status in words: 'exit code 3', 'killed by signal 9 (SIGKILL)'."""
    if status is None:
        return "how is not known here (the launcher's report says)"
    if os.WIFEXITED(status):
        return f"exit code {os.WEXITSTATUS(status)}"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        text = f"killed by signal {sig} ({name}"
        meaning = signal.strsignal(sig) if name not in ("SIGKILL", "SIGTERM") else None
        text += f": {meaning.lower()})" if meaning else ")"
        return text + (", core dumped" if os.WCOREDUMP(status) else "")
    return f"wait status {status}"


def clean_exit(status: int | None) -> bool:
    """An exit with code 0: a rank that ended its part, not a failure."""
    return status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@dataclass
class Peer:
    """Another rank's process on this node: its pidfd (None where pidfds are
    not available: its liveness is checked by pid and start time), and once
    it ended, its wait status (None: not known here)."""

    rank: int
    pid: int
    pidfd: int | None
    start: int | None = None
    status: int | None = None
    ended: bool = False


@dataclass
class Peers:
    """This node's other ranks, from their records on the job's board."""

    rank: int
    me: str = field(default_factory=identity)
    peers: dict[int, Peer] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)

    def track(self, records: dict[int, dict[str, Any]]) -> None:
        """Watch the processes of the ranks whose records say they run on
        this node, as they appear on the board."""
        for q, rec in records.items():
            if q == self.rank or q in self.seen:
                continue
            self.seen.add(q)
            if rec.get("where") != self.me or "pid" not in rec:
                continue
            pid = int(rec["pid"])
            try:
                fd: int | None = os.pidfd_open(pid)
            except (AttributeError, OSError):
                fd = None  # gone already, or no pidfds here: its liveness is checked instead
            if fd is not None and start_time(pid) != rec.get("start"):
                os.close(fd)  # the pid is another process now: ours is gone
                fd = None
            self.peers[q] = Peer(q, pid, fd, rec.get("start"))

    def fds(self) -> dict[int, int]:
        """pidfd -> rank, of the peers still running."""
        return {p.pidfd: q for q, p in self.peers.items() if p.pidfd is not None and not p.ended}

    def ended(self, q: int) -> Peer:
        """Rank q's process ended: how (read once, at once)."""
        p = self.peers[q]
        if not p.ended:  # the status first: another thread may be asking whether it failed
            p.status = exit_status(p.pid, p.pidfd)
            p.ended = True
        return p

    def check(self, timeout: float | None = 0.0) -> list[Peer]:
        """The peers found ended (waiting up to `timeout` seconds for one;
        None: until one ends)."""
        fds = self.fds()
        found = []
        if fds:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            found = [fds[fd] for fd, _ in poller.poll(None if timeout is None else timeout * 1000)]
        for q, p in self.peers.items():  # no pidfd: is the process still there?
            if p.pidfd is None and not p.ended and not alive(p.pid, p.start):
                found.append(q)
        return [self.ended(q) for q in found]

    def close(self) -> None:
        for p in self.peers.values():
            if p.pidfd is not None:
                try:
                    os.close(p.pidfd)
                except OSError:
                    pass
                p.pidfd = None


def alive(pid: int, start: int | None = None) -> bool:
    """Whether process `pid` runs (not a zombie; the one that started at
    `start` when given)."""
    fields = _stat_fields(pid)
    if fields is None:
        if os.path.exists("/proc/self/stat"):
            return False  # no such process
        try:  # no /proc: ask the kernel
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True
    if fields[0] in ("Z", "X"):
        return False
    return start is None or len(fields) <= 19 or int(fields[19]) == start


# ---- the node's sentinel (under MPI's launchers) ---------------------------------

SENTINEL_WAIT_S = 0.05
"""How often the sentinel looks for the records of its node's ranks, until
all are on the board."""


def start_sentinel(board: Path, local_ranks: int, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    """Start the sentinel of this node's `local_ranks` ranks (their records
    on `board`), writing on this process's standard error; `env` without
    the launcher's variables (it is no rank). None when it cannot start."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "fuserc.runtime.job.peers", str(board), str(local_ranks), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # out of the rank's process group, which Hydra kills
        )
    except OSError:
        return None


def _records(board: Path, me: str) -> dict[int, dict[str, Any]] | None:
    """The records of this node's ranks on the board (None: the board is gone)."""
    if not board.is_dir():
        return None
    out = {}
    for f in board.glob("rank*.json"):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("rank"), int) and rec.get("where") == me:
            out[rec["rank"]] = rec
    return out


def first_to_end(failed: list[Peer], reaped: dict[int, bool], board: Path) -> list[Peer]:
    """Which of the ranks found ended with an error ended first (one, or
    those it cannot tell apart): MPICH's cleanup kills the others with
    SIGKILL after it has reaped the first, so one that ended another way,
    else one a surviving rank saw end (its `saw-R` mark on the board), else
    one already reaped while the others are not."""
    def killed(p: Peer) -> bool:
        return p.status is not None and os.WIFSIGNALED(p.status) and os.WTERMSIG(p.status) == signal.SIGKILL

    for group in (
        [p for p in failed if p.status is not None and not killed(p)],
        [p for p in failed if (board / f"saw-{p.rank}").exists()],
        [p for p in failed if reaped.get(p.rank)] if not all(reaped.get(p.rank) for p in failed) else [],
    ):
        if len(group) == 1:
            return group
    return failed


def sentinel(board: Path, local_ranks: int, starter: int) -> None:
    """Watch this node's ranks; print the line naming the first that ended
    with an error, unless a rank said why already; end once it is said or
    every rank ended."""
    me = identity()
    peers = Peers(-1, me)
    while len(peers.seen) < local_ranks:
        records = _records(board, me)
        if records is None or (not alive(starter) and len(records) + len(peers.seen) < local_ranks):
            return  # the job ended (or its first rank) before every rank was up
        peers.track(records)
        time.sleep(SENTINEL_WAIT_S)
    while any(not p.ended for p in peers.peers.values()):
        ended = peers.check(None)
        reaped = {p.rank: not os.path.exists(f"/proc/{p.pid}") for p in ended}
        failed = [p for p in ended if not clean_exit(p.status)]
        if not failed:
            continue
        if (board / "claim-watchdog").exists() or any(board.glob("claim-ended-*")) or any(board.glob("claim-failure-*")):
            return  # said already
        records = _records(board, me) or {}
        if any(records.get(p.rank, {}).get("ending") for p in failed):
            return  # it said why, then ended the job
        failed = [p for p in failed if p.rank in records]
        if not failed:
            continue  # the ranks agreed on how the job ends (their records are gone)
        first = first_to_end(failed, reaped, board)
        try:
            fd = os.open(board / f"claim-ended-{first[0].rank}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
        except FileExistsError:
            return
        except OSError:
            pass
        if len(first) == 1:
            rec = records.get(first[0].rank, {})
            where = f" (last at {rec['label']})" if rec.get("label") else ""
            line = f"error: rank {first[0].rank} ended: {how(first[0].status)}{where}"
        else:
            ranks = ", ".join(str(p.rank) for p in sorted(first, key=lambda p: p.rank))
            line = f"error: one of ranks {ranks} ended first ({how(first[0].status)}); mpiexec then ended the others"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return


if __name__ == "__main__":
    sentinel(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))

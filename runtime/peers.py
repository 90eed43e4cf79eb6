"""The processes of the other ranks of this node: seeing one end, and how.

A rank that exits, crashes or is killed cannot say so itself, and its
launcher's report of it comes late or names someone else (torchrun prints
it after a 30-line ChildFailedError report; MPICH's Hydra often names a
rank it killed itself). Its peers on the same node can see it: each rank's
watchdog thread (runtime/watchdog.py) holds a pidfd of every other rank's
process on its node (their pids are on the job's board), which becomes
readable the moment the process ends. How it ended is read from the
zombie's `/proc/PID/stat` (its exit code field) while the launcher has not
reaped it yet, and from the pidfd itself afterwards (`PIDFD_GET_INFO` with
`PIDFD_INFO_EXIT`, Linux 6.15 and later); else it is unknown.

Processes are compared by `identity()` (host name and pid namespace, so
that pids of ranks in other containers are never mistaken for ours) and by
their start time (so that a reused pid is never mistaken for the rank).
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import struct
from dataclasses import dataclass, field
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

    def check(self, timeout: float = 0.0) -> list[Peer]:
        """The peers found ended (waiting up to `timeout` seconds for one)."""
        fds = self.fds()
        found = []
        if fds:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            found = [fds[fd] for fd, _ in poller.poll(timeout * 1000)]
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

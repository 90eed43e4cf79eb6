"""The job's board: a folder every rank of the job reads, where each rank's
watchdog thread writes its record at every heartbeat (runtime/job/watchdog.py),
and, from those records, who holds the job up when a section is over time
(`stragglers`).

`rank<r>.json` holds rank r's last record (replaced atomically: the time,
the section it is in, how many communications it started per team);
`claim-<name>` files elect the one rank that reports. The folder is local
(`tempfile.gettempdir()`), shared by the ranks of one node; for a job over
several nodes `$FUSERC_JOB_DIR` names a folder on a shared file system.
Boards of jobs that ended without cleaning up are swept by the next job.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from fuserc.runtime.job.peers import alive

JOB_DIR_ENV = "FUSERC_JOB_DIR"


class Launcher(Protocol):
    """What the board asks of the launcher of the job."""

    rank: int
    size: int

    def broadcast(self, obj: Any, root: int = 0) -> Any: ...


# --------------------------------------------------------------------------
# The board
# --------------------------------------------------------------------------


class Board:
    """A folder of the job that every rank reads: `rank<r>.json` holds rank
    r's last record; `claim-<name>` files elect one rank to report."""

    def __init__(self, path: Path, rank: int):
        self.path = path
        self.rank = rank
        self._file = path / f"rank{rank}.json"
        self._tmp = path / f".rank{rank}.json.tmp"

    @classmethod
    def create(cls, env: Launcher) -> Board | None:
        """Collective: rank 0 names the folder (and removes the folders of
        jobs whose processes are all gone), every rank opens it. None (no
        board) when the folder cannot be made."""
        root = Path(os.environ.get(JOB_DIR_ENV) or tempfile.gettempdir())
        name = None
        if env.rank == 0:
            name = f"{BOARD_PREFIX}{uuid.uuid4().hex[:16]}"
            sweep(root)
        name = env.broadcast(name, root=0)
        path = root / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return cls(path, env.rank)

    def write(self, record: dict[str, Any]) -> None:
        try:
            self._tmp.write_text(json.dumps(record))
            os.replace(self._tmp, self._file)
        except OSError:
            pass  # the folder is gone (the job ends) or full: the record is advisory

    def read(self) -> dict[int, dict[str, Any]]:
        """Every rank's last record."""
        try:
            files = list(self.path.glob("rank*.json"))
        except OSError:
            return {}
        records = (_load(f) for f in files)
        return {rec["rank"]: rec for rec in records if rec is not None}

    def claim(self, name: str) -> bool:
        """True for the first rank to claim `name` (on this board)."""
        try:
            fd = os.open(self.path / f"claim-{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        except OSError:
            return True  # no board to elect on: report
        os.write(fd, str(self.rank).encode())
        os.close(fd)
        return True

    def mark(self, name: str) -> None:
        """Leave a mark named `name` on the board (one system call)."""
        try:
            os.close(os.open(self.path / name, os.O_CREAT | os.O_WRONLY))
        except OSError:
            pass

    def read_rank(self, rank: int) -> dict[str, Any] | None:
        """Rank `rank`'s last record (None: there is none)."""
        return _load(self.path / f"rank{rank}.json")

    def claimed(self, name: str) -> bool:
        """Whether a rank claimed `name` (on this board)."""
        return (self.path / f"claim-{name}").exists()

    def close(self) -> None:
        """Remove this rank's record; the last rank out removes the folder."""
        for f in (self._file, self._tmp):
            try:
                f.unlink()
            except OSError:
                pass
        try:
            if not any(self.path.glob("rank*.json")):
                self.remove()
        except OSError:
            pass

    def remove(self) -> None:
        """Remove the folder (the job ends)."""
        shutil.rmtree(self.path, ignore_errors=True)


def _load(file: Path) -> dict[str, Any] | None:
    """A record from the board (None when it is gone or torn)."""
    try:
        rec = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("rank"), int) else None


BOARD_PREFIX = "fuserc-job-"
SWEEP_AFTER_S = 60.0


def sweep(root: Path) -> None:
    """Remove the boards left by jobs that ended without cleaning up (killed
    by their launcher): no process of theirs is alive on this host, and
    nothing was written for a minute."""
    try:
        folders = list(root.glob(f"{BOARD_PREFIX}*"))
    except OSError:
        return
    for folder in folders:
        try:
            if time.time() - folder.stat().st_mtime < SWEEP_AFTER_S:
                continue
            pids = []
            for f in folder.glob("rank*.json"):
                pids.append(int(json.loads(f.read_text())["pid"]))
            if not any(alive(p) for p in pids):
                shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError, KeyError, TypeError):
            continue


# --------------------------------------------------------------------------
# Who did not arrive
# --------------------------------------------------------------------------


class Verdict(NamedTuple):
    """Who holds the job up, from the ranks' records."""

    lines: list[str]
    """One line per rank that holds the others up."""
    waiting: list[int]
    """The ranks that wait for them."""
    unknown: list[int]
    """The ranks with no record."""
    stopped: list[int]
    """The ranks among those holding the job up whose heartbeat stopped."""


def stragglers(records: dict[int, dict[str, Any]], size: int, now: float, stale_s: float) -> Verdict:
    """Who holds the job up when a section is over time.

    A rank holds the others up when its heartbeat stopped (it is stopped,
    or stuck outside Python), or its section is earlier than the latest
    any rank reached and than that of every rank whose heartbeat stopped
    (a rank behind only as far as a stopped one may be waiting for it);
    else, when it started fewer communications on one of its teams than a
    teammate, unless it is itself ahead of such a rank on a team they
    share (it waits for that one); else, in a section one rank does alone
    while the others wait (reading the program it shares), that rank."""
    if not records:
        return Verdict([], [], list(range(size)), [])
    latest = max(r["seq"] for r in records.values())
    front = {q: r for q, r in records.items() if r["seq"] == latest}
    label = next(iter(front.values()))["label"]
    most: dict[str, int] = {}
    members: dict[str, list[int]] = {}
    for r in front.values():
        for key, n in r["counts"].items():
            most[key] = max(most.get(key, 0), n)
        members.update(r["teams"])

    def count(q: int, key: str) -> int:
        return records[q]["counts"].get(key, 0)

    lag: dict[int, str] = {}  # rank -> the first key it is behind on
    for q in front:
        for key, team in members.items():
            if q in team and count(q, key) < most.get(key, 0):
                lag[q] = key
                break
    stale = {q: now - r["time"] for q, r in records.items() if now - r["time"] > stale_s}
    first_stopped = min((records[q]["seq"] for q in stale), default=latest)
    behind = {q for q, r in records.items() if r["seq"] < min(latest, first_stopped)}
    if stale or behind:
        culprits = sorted(set(stale) | behind)
    elif lag:
        def ahead(q: int, other: int) -> bool:
            return any(q in t and other in t and count(q, k) > count(other, k) for k, t in members.items())

        culprits = sorted(q for q in lag if not any(ahead(q, o) for o in lag if o != q)) or sorted(lag)
    else:
        doers = {r.get("doer") for r in front.values()}
        doer = doers.pop() if len(doers) == 1 else None
        culprits = [doer] if doer in records else []
    lines = []
    for q in culprits:
        r = records[q]
        why = []
        if q in stale:
            why.append(f"no heartbeat for {stale[q]:.1f} s (stopped, or stuck outside Python)")
        if r["seq"] < latest:  # a stopped rank's record is of its last heartbeat: it may have gone a little further
            why.append(f"{'last recorded' if q in stale else 'still'} at {r['label']}, the others are at {label}")
        elif q in lag:
            key = lag[q]
            there = [t for t in members[key] if t in front and count(t, key) > count(q, key)]
            are = "are" if len(there) > 1 else "is"
            why.append(f"not at {key} #{count(q, key) + 1} of {label}, where rank{'s' if len(there) > 1 else ''} {ranks_text(there)} {are}")
        elif not why:
            why.append("it does this step alone and has not finished it")
        lines.append(f"rank {q} did not arrive: {'; '.join(why)}")
    waiting = [q for q in sorted(records) if q not in culprits]
    unknown = [q for q in range(size) if q not in records]
    return Verdict(lines, waiting, unknown, sorted(q for q in culprits if q in stale))


def ranks_text(ranks: Sequence[int]) -> str:
    """'0, 2, 3'."""
    return ", ".join(map(str, ranks))

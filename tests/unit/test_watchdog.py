"""The watchdog in-process: its timeout setting, the board, who it names
(from records of ranks stopped, behind, or waiting), ending the job when a
section is over time, counting a backend's communications, and the ranks
of the node whose processes end (named with how they ended, unless they
said why themselves) or are stopped (ended when the launcher cannot)."""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fuserc.runtime.job import peers
from fuserc.runtime.job.job import Job
from fuserc.runtime.job import board as jb
from fuserc.runtime.job import watchdog as wd


def test_timeout_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(wd.WATCHDOG_ENV, raising=False)
    assert wd.timeout_from(None) == wd.DEFAULT_TIMEOUT_S == 600
    monkeypatch.setenv(wd.WATCHDOG_ENV, "2.5")
    assert wd.timeout_from(None) == 2.5
    assert wd.timeout_from(7) == 7  # the option wins
    assert wd.timeout_from(0) == 0  # off
    monkeypatch.setenv(wd.WATCHDOG_ENV, "soon")
    with pytest.raises(ValueError, match=r"\$FUSERC_WATCHDOG must be a number of seconds, got 'soon'"):
        wd.timeout_from(None)
    with pytest.raises(ValueError, match=r"--watchdog must be a number of seconds >= 0"):
        wd.timeout_from(-1)


def _rec(rank: int, seq: int, label: str, counts: dict[str, int], teams: dict[str, list[int]], age: float = 0.0) -> dict[str, Any]:
    return {"rank": rank, "pid": 1, "time": 1000.0 - age, "seq": seq, "label": label, "since": 0.0, "counts": counts, "teams": teams}


AG, RS = "allgather on team [0, 1, 2, 3]", "reduce_scatter on team [0, 1, 2, 3]"
TEAMS = {AG: [0, 1, 2, 3], RS: [0, 1, 2, 3]}


def test_stragglers_behind_on_a_collective_not_those_waiting() -> None:
    """Rank 1 has not started allgather #5; rank 3 started it and waits for
    rank 1 before its reduce_scatter #5: rank 1 holds the job up, 3 waits."""
    records = {
        0: _rec(0, 9, "run 5 of @main", {AG: 5, RS: 5}, TEAMS),
        1: _rec(1, 9, "run 5 of @main", {AG: 4, RS: 4}, TEAMS),
        2: _rec(2, 9, "run 5 of @main", {AG: 5, RS: 5}, TEAMS),
        3: _rec(3, 9, "run 5 of @main", {AG: 5, RS: 4}, TEAMS),
    }
    culprits, waiting, unknown, _ = jb.stragglers(records, 4, 1000.0, 2.0)
    assert culprits == [f"rank 1 did not arrive: not at {AG} #5 of run 5 of @main, where ranks 0, 2, 3 are"]
    assert waiting == [0, 2, 3] and unknown == []


def test_stragglers_stopped_earlier_section_and_unknown() -> None:
    records = {
        0: _rec(0, 9, "run 5 of @main", {AG: 5}, TEAMS),
        1: _rec(1, 9, "run 5 of @main", {AG: 5}, TEAMS, age=7.0),  # stopped inside the collective
        2: _rec(2, 8, "gathering the results", {AG: 5}, TEAMS),
    }
    culprits, waiting, unknown, _ = jb.stragglers(records, 4, 1000.0, 2.0)
    assert culprits == [
        "rank 1 did not arrive: no heartbeat for 7.0 s (stopped, or stuck outside Python)",
        "rank 2 did not arrive: still at gathering the results, the others are at run 5 of @main",
    ]
    assert waiting == [0] and unknown == [3]


def test_stragglers_everyone_arrived() -> None:
    records = {q: _rec(q, 3, "run 1 of @main", {AG: 1}, TEAMS) for q in range(4)}
    assert jb.stragglers(records, 4, 1000.0, 2.0) == ([], [0, 1, 2, 3], [], [])


def test_stragglers_waiting_for_a_stopped_rank_are_not_named() -> None:
    """Rank 1 was stopped inside run 1 after ranks 2 and 3 had received its
    part and moved on to the next section; rank 0 still waits for rank 1's
    part in run 1. Rank 0 is behind the others but not behind the stopped
    rank: it waits for it, and only rank 1 is named."""
    records = {
        0: _rec(0, 7, "run 1 of @main", {AG: 1}, TEAMS),
        1: _rec(1, 7, "run 1 of @main", {AG: 1}, TEAMS, age=9.0),
        2: _rec(2, 8, "timing run 1", {AG: 1}, TEAMS),
        3: _rec(3, 8, "timing run 1", {AG: 1}, TEAMS),
    }
    verdict = jb.stragglers(records, 4, 1000.0, 2.0)
    assert verdict.lines == ["rank 1 did not arrive: no heartbeat for 9.0 s (stopped, or stuck outside Python); last recorded at run 1 of @main, the others are at timing run 1"]
    assert verdict.waiting == [0, 2, 3] and verdict.stopped == [1]
    records[0] = _rec(0, 6, "timing run 1", {AG: 1}, TEAMS)  # behind the stopped rank too: it holds the job up as well
    assert jb.stragglers(records, 4, 1000.0, 2.0).lines[0].startswith("rank 0 did not arrive: still at timing run 1")


def test_stragglers_of_a_step_one_rank_does_alone() -> None:
    """Rank 0 reads the program from a pipe while the others wait for it:
    every rank is in the section, and rank 0 is the one that holds it."""
    records = {q: _rec(q, 2, "reading the program from standard input", {}, {}) | {"doer": 0} for q in range(3)}
    verdict = jb.stragglers(records, 3, 1000.0, 2.0)
    assert verdict.lines == ["rank 0 did not arrive: it does this step alone and has not finished it"]
    assert verdict.waiting == [1, 2]


def test_send_recv_pairs() -> None:
    """Counts of send/recv are per pair of ranks: rank 2 has not received
    what rank 1 sent (a pipeline's stages)."""
    key = "send/recv 1->2"
    teams = {key: [1, 2]}
    records = {
        0: _rec(0, 4, "run 1 of @main", {}, {}),
        1: _rec(1, 4, "run 1 of @main", {key: 3}, teams),
        2: _rec(2, 4, "run 1 of @main", {key: 2}, teams),
    }
    culprits = jb.stragglers(records, 3, 1000.0, 2.0).lines
    assert culprits == [f"rank 2 did not arrive: not at {key} #3 of run 1 of @main, where rank 1 is"]


class _Env:
    rank, size = 0, 2

    def __init__(self, board_dir: Path):
        self.board_dir = board_dir
        self.aborted: list[int] = []

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return obj


def test_board_claims_and_cleanup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jb.JOB_DIR_ENV, str(tmp_path))
    board = jb.Board.create(_Env(tmp_path))
    assert board is not None and board.path.parent == tmp_path
    other = jb.Board(board.path, 1)
    board.write({"rank": 0, "pid": os.getpid()})
    other.write({"rank": 1, "pid": os.getpid()})
    assert sorted(board.read()) == [0, 1]
    assert board.claim("x") and not other.claim("x") and other.claim("y")
    board.close()
    assert board.path.exists()  # rank 1 is still there
    other.close()
    assert not board.path.exists()  # the last one out removes the folder


def test_sweep_removes_boards_of_dead_jobs(tmp_path: Path) -> None:
    dead, live, fresh = (tmp_path / f"{jb.BOARD_PREFIX}{n}" for n in ("dead", "live", "fresh"))
    for folder, pid in ((dead, 2**22 + 12345), (live, os.getpid()), (fresh, 2**22 + 12345)):
        folder.mkdir()
        (folder / "rank0.json").write_text(f'{{"rank": 0, "pid": {pid}}}')
    old = time.time() - 2 * jb.SWEEP_AFTER_S
    os.utime(dead, (old, old))
    os.utime(live, (old, old))
    jb.sweep(tmp_path)
    assert not dead.exists() and live.exists() and fresh.exists()


def test_expiry_reports_once_and_ends_the_job(tmp_path: Path) -> None:
    """A section over time: the first rank to notice prints the message and
    ends the job through the launcher; the others only end it."""
    ended: list[int] = []
    out = io.StringIO()
    board = jb.Board(tmp_path, 0)
    dog = wd.Watchdog(0, 2, 0.2, board, end_job=ended.append, out=out)
    jb.Board(tmp_path, 1).write(_rec(1, 0, "starting", {}, {}) | {"time": time.time()})
    _until_ended(dog, ended)
    assert ended == [1]
    text = out.getvalue()
    assert text.startswith("error: watchdog: run 1 of @main did not complete within 0.2 s")
    assert "rank 1 did not arrive: " in text and "still at starting, the others are at run 1 of @main" in text
    assert not tmp_path.exists()  # the reporter removed the board


def _until_ended(dog: wd.Watchdog, ended: list[int], section: str | None = "run 1 of @main") -> None:
    """Start the watchdog, wait (inside `section`) until it ends the job or
    20 s pass, stop it."""
    dog.start()
    with dog.section(section) if section else contextlib.nullcontext():
        deadline = time.monotonic() + 20
        while not ended and time.monotonic() < deadline:
            time.sleep(0.05)
    dog.stop()


@pytest.fixture
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeats every 50 ms and a stall of 2 s (the least `stale_s`), for
    a watchdog whose timeout stays the default."""
    monkeypatch.setattr(wd.Watchdog, "interval", property(lambda self: 0.05))
    monkeypatch.setattr(wd, "STALL_S", 0.5)


def test_a_stopped_peer_ends_the_job_long_before_the_timeout(tmp_path: Path, quick_beats: None) -> None:
    """Under the default timeout (600 s) a rank whose heartbeat stopped ends
    the job once the section and the silence have lasted `stall_s`."""
    ended: list[int] = []
    out = io.StringIO()
    dog = wd.Watchdog(0, 2, wd.DEFAULT_TIMEOUT_S, jb.Board(tmp_path, 0), end_job=ended.append, out=out)
    assert dog.stall_s == 2.0
    jb.Board(tmp_path, 1).write(_rec(1, 0, "starting", {}, {}) | {"time": time.time() - 30})
    start = time.monotonic()
    _until_ended(dog, ended)
    assert ended == [1] and time.monotonic() - start < 10
    text = out.getvalue()
    assert text.startswith("error: watchdog: run 1 of @main waits for a rank whose heartbeat stopped 2 s ago"), text
    assert "rank 1 did not arrive: no heartbeat for" in text


def test_long_work_with_a_heartbeat_is_not_cut(tmp_path: Path, quick_beats: None) -> None:
    """A peer in a long kernel or collective keeps its heartbeat (its thread
    runs): a section lasting past `stall_s` does not end the job."""
    ended: list[int] = []
    dog = wd.Watchdog(0, 2, wd.DEFAULT_TIMEOUT_S, jb.Board(tmp_path, 0), end_job=ended.append, out=io.StringIO())
    peer = jb.Board(tmp_path, 1)
    dog.start()
    with dog.section("run 1 of @main"):
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            peer.write(_rec(1, 1, "run 1 of @main", {}, {}) | {"time": time.time()})
            time.sleep(0.05)
    dog.stop()
    assert ended == []


def test_a_rank_whose_launcher_died_says_so_once_and_ends(tmp_path: Path) -> None:
    out = io.StringIO()
    dog = wd.Watchdog(1, 2, 5.0, jb.Board(tmp_path, 1), out=out, launcher_pid=os.getppid())
    assert not dog.orphaned()
    dog.launcher_pid = os.getppid() + 1_000_000  # no longer the parent: it died, this rank was adopted
    other = wd.Watchdog(0, 2, 5.0, jb.Board(tmp_path, 0), out=out, launcher_pid=dog.launcher_pid)
    assert dog.orphaned() and other.orphaned()
    assert out.getvalue() == f"error: the job's launcher (process {dog.launcher_pid}) ended: its ranks end too (rank 1 at starting)\n"


def test_no_expiry_within_time_or_when_off() -> None:
    ended: list[int] = []
    dog = wd.Watchdog(0, 1, 5.0, end_job=ended.append)
    dog.start()
    with dog.section("run 1 of @main"):
        time.sleep(0.3)
    dog.stop()
    off = wd.Watchdog(0, 1, 0.0, end_job=ended.append)
    off.start()
    with off.section("run 1 of @main"):
        time.sleep(0.1)
    assert ended == [] and off._thread is None


class _Backend:
    def allgather(self, inp: Any, out: Any, team: tuple[int, ...]) -> str:
        return "work"

    def team_barrier(self, team: tuple[int, ...], backend: str = "nccl") -> str:
        return "fence"

    def send(self, buf: Any, peer: int, team: tuple[int, ...]) -> str:
        return "sent"

    def recv(self, buf: Any, peer: int, team: tuple[int, ...]) -> str:
        return "received"


def test_counting_communications(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(wd.FAULT_ENV, raising=False)
    dog = wd.Watchdog(1, 4, 10.0)
    b = _Backend()
    dog.watch(b)
    assert b.allgather(None, None, (0, 1)) == "work"
    b.allgather(None, None, team=(0, 1))
    b.team_barrier((1, 2, 3))
    b.send(None, 1, (1, 3))  # to position 1 of the team: rank 3
    b.recv(None, 1, (2, 3, 1))
    assert dog.counts == {
        "allgather on team [0, 1]": 2,
        "team_barrier on team [1, 2, 3]": 1,
        "send/recv 1->3": 1,
        "send/recv 3->1": 1,
    }
    assert dog.teams["send/recv 1->3"] == [1, 3]


def test_fault_injection_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wd.FAULT_ENV, "1:raise:2")
    assert wd._fault_for(0) is None
    dog = wd.Watchdog(1, 2, 10.0)
    b = _Backend()
    dog.watch(b)
    b.allgather(None, None, (0, 1))
    with pytest.raises(RuntimeError, match="FUSERC_FAULT: injected failure before allgather on team"):
        b.allgather(None, None, (0, 1))
    monkeypatch.setenv(wd.FAULT_ENV, "1:bogus")
    assert wd._fault_for(1) is None


# ---- peers of the node that end ------------------------------------------------

def test_how_a_process_ended_in_words() -> None:
    assert peers.how(3 << 8) == "exit code 3"
    assert peers.how(signal.SIGKILL) == "killed by signal 9 (SIGKILL)"
    assert peers.how(signal.SIGSEGV | 0x80) == "killed by signal 11 (SIGSEGV: segmentation fault), core dumped"
    assert peers.how(None).startswith("how is not known here")
    assert peers.clean_exit(0) and not peers.clean_exit(3 << 8) and not peers.clean_exit(None)


def _child(code: str) -> subprocess.Popen[bytes]:
    """A Python process that waits for a line on its standard input, then runs `code`."""
    return subprocess.Popen([sys.executable, "-c", f"import os, signal, sys; sys.stdin.readline(); {code}"], stdin=subprocess.PIPE)


def test_exit_status_of_a_peer_before_and_after_it_is_reaped() -> None:
    """A peer's status is read from the zombie (before its launcher reaps
    it) and, on kernels that keep it (6.15+), from its pidfd afterwards."""
    child = _child("os._exit(3)")
    fd = os.pidfd_open(child.pid)
    child.stdin.write(b"go\n")
    child.stdin.flush()
    select.select([fd], [], [], 30)
    assert peers.exit_status(child.pid, fd) == 3 << 8  # a zombie: /proc/PID/stat
    child.wait()
    after = peers.exit_status(child.pid, fd)  # reaped: PIDFD_GET_INFO, where the kernel has it
    assert after in (3 << 8, None)
    os.close(fd)


def _peer_board(tmp_path: Path, child: subprocess.Popen[bytes], **extra: Any) -> jb.Board:
    board = jb.Board(tmp_path, 0)
    rec = _rec(1, 3, "run 1 of @main", {}, {}) | {"time": time.time(), "pid": child.pid, "where": peers.identity(), "start": peers.start_time(child.pid)}
    jb.Board(tmp_path, 1).write(rec | extra)
    return board


def _watching(dog: wd.Watchdog, child: subprocess.Popen[bytes]) -> wd.Watchdog:
    """`dog` started, once it watches `child` (rank 1), which then goes on."""
    dog.start()
    deadline = time.monotonic() + 30
    while (dog.peers is None or 1 not in dog.peers.peers) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.stdin.write(b"go\n")
    child.stdin.flush()
    return dog


@pytest.mark.parametrize("code, said", [
    ("os._exit(3)", "error: rank 1 ended: exit code 3 (last at run 1 of @main)"),
    ("os.kill(os.getpid(), signal.SIGKILL)", "error: rank 1 ended: killed by signal 9 (SIGKILL) (last at run 1 of @main)"),
])  # fmt: skip
def test_a_peer_that_ends_is_named_and_the_job_ends(code: str, said: str, tmp_path: Path) -> None:
    """Rank 1 of this node ends without a word: rank 0's watchdog thread
    sees it at once (its pidfd), says who ended and how, and ends the job."""
    child = _child(code)
    ended: list[int] = []
    out = io.StringIO()
    dog = _watching(wd.Watchdog(0, 2, 2.0, _peer_board(tmp_path, child), end_job=ended.append, out=out), child)
    _until_ended(dog, ended, None)
    child.wait()
    assert ended == [1] and out.getvalue() == said + "\n"


@pytest.mark.parametrize("code, extra", [
    ("os._exit(1)", {"ending": True}),  # it said why itself (and ends the job)
    ("os._exit(0)", {}),  # it finished its part
])  # fmt: skip
def test_a_peer_that_ends_knowingly_is_not_reported(code: str, extra: dict[str, Any], tmp_path: Path) -> None:
    child = _child(code)
    ended: list[int] = []
    out = io.StringIO()
    dog = _watching(wd.Watchdog(0, 2, 2.0, _peer_board(tmp_path, child, **extra), end_job=ended.append, out=out), child)
    child.wait()
    assert dog.peer_failed(1.0) == (code != "os._exit(0)")  # a rank failing now: a consequence of the peer's end or not
    time.sleep(0.5)
    dog.stop()
    assert ended == [] and out.getvalue() == ""


def test_the_reporter_ends_a_stopped_peer_the_launcher_cannot(tmp_path: Path) -> None:
    """Under torchrun (whose SIGTERM a stopped process ignores), the rank
    that reports a stopped rank of its node kills it."""
    child = _child("")
    os.kill(child.pid, signal.SIGSTOP)
    board = _peer_board(tmp_path, child)
    rec = board.read()[1] | {"time": time.time() - 30}  # its heartbeat stopped
    jb.Board(tmp_path, 1).write(rec)
    ended: list[int] = []
    dog = wd.Watchdog(0, 2, 0.3, board, end_job=ended.append, out=io.StringIO(), end_stopped=True)
    _until_ended(dog, ended)
    assert ended == [1]
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_sigterm_ends_a_blocked_process_at_once(tmp_path: Path) -> None:
    """`fuserc run` blocked in a collective (its main thread in C code, where
    Python's handler never runs) still ends on its launcher's SIGTERM, from
    the watchdog's thread, with 143."""
    script = (
        "import os, signal, sys, threading, time\n"
        "from fuserc.runtime.job import watchdog as wd\n"
        "dog = wd.Watchdog(0, 1, 60.0, own_signals=True)\n"
        "dog.start()\n"
        "print('ready', flush=True)\n"
        "threading.Event().wait(60)\n"  # blocked: no Python handler runs
        "print('not ended', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 143


class _Launcher:
    """A launcher of 2 ranks whose `abort` ends the test's job only."""

    rank, size, ends_stopped_ranks = 0, 2, True

    def abort(self, code: int) -> None:
        raise SystemExit(code)


def test_a_lost_connection_is_not_an_internal_error(tmp_path: Path) -> None:
    """A survivor whose collective fails because a peer's process is gone:
    when the peer was on this node and ended (here: knowingly, having said
    why), the survivor says nothing; else one line saying the connection
    was lost, not an internal error."""
    error = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer [127.0.0.1]:4242")
    out = io.StringIO()
    job = Job(_Launcher(), wd.Watchdog(0, 2, 0.0), out=out)  # no peer known (watchdog off)
    with job.section("run 3 of @main"), pytest.raises(SystemExit) as code:
        job.fail(error)
    assert code.value.code == 1
    assert out.getvalue() == (
        "[rank 0] error: lost the connection to another rank in run 3 of @main (a rank of another node ended, "
        f"or a node or the network failed): RuntimeError: {error}\n"
    )
    child = _child("os._exit(1)")
    out = io.StringIO()
    dog = _watching(wd.Watchdog(0, 2, 30.0, _peer_board(tmp_path, child, ending=True), out=out), child)
    child.wait()
    with pytest.raises(SystemExit):
        Job(_Launcher(), dog, out=out).fail(error)
    assert out.getvalue() == ""

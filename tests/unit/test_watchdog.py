"""The watchdog in-process: its timeout setting, the board, who it names
(from records of ranks stopped, behind, or waiting), ending the job when a
section is over time, and counting a backend's communications."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pytest

from fuserc.runtime import watchdog as wd


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
    culprits, waiting, unknown = wd.stragglers(records, 4, 1000.0, 2.0)
    assert culprits == [f"rank 1 did not arrive: not at {AG} #5 of run 5 of @main, where ranks 0, 2, 3 are"]
    assert waiting == [0, 2, 3] and unknown == []


def test_stragglers_stopped_earlier_section_and_unknown() -> None:
    records = {
        0: _rec(0, 9, "run 5 of @main", {AG: 5}, TEAMS),
        1: _rec(1, 9, "run 5 of @main", {AG: 5}, TEAMS, age=7.0),  # stopped inside the collective
        2: _rec(2, 8, "gathering the results", {AG: 5}, TEAMS),
    }
    culprits, waiting, unknown = wd.stragglers(records, 4, 1000.0, 2.0)
    assert culprits == [
        "rank 1 did not arrive: no heartbeat for 7.0 s (stopped, or stuck outside Python)",
        "rank 2 did not arrive: still at gathering the results, the others are at run 5 of @main",
    ]
    assert waiting == [0] and unknown == [3]


def test_stragglers_everyone_arrived() -> None:
    records = {q: _rec(q, 3, "run 1 of @main", {AG: 1}, TEAMS) for q in range(4)}
    assert wd.stragglers(records, 4, 1000.0, 2.0) == ([], [0, 1, 2, 3], [])


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
    culprits, _, _ = wd.stragglers(records, 3, 1000.0, 2.0)
    assert culprits == [f"rank 2 did not arrive: not at {key} #3 of run 1 of @main, where rank 1 is"]


class _Env:
    rank, size = 0, 2

    def __init__(self, board_dir: Path):
        self.board_dir = board_dir
        self.aborted: list[int] = []

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return obj


def test_board_claims_and_cleanup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wd.JOB_DIR_ENV, str(tmp_path))
    board = wd.Board.create(_Env(tmp_path))
    assert board is not None and board.path.parent == tmp_path
    other = wd.Board(board.path, 1)
    board.write({"rank": 0, "pid": os.getpid()})
    other.write({"rank": 1, "pid": os.getpid()})
    assert sorted(board.read()) == [0, 1]
    assert board.claim("x") and not other.claim("x") and other.claim("y")
    board.close()
    assert board.path.exists()  # rank 1 is still there
    other.close()
    assert not board.path.exists()  # the last one out removes the folder


def test_sweep_removes_boards_of_dead_jobs(tmp_path: Path) -> None:
    dead, live, fresh = (tmp_path / f"{wd.BOARD_PREFIX}{n}" for n in ("dead", "live", "fresh"))
    for folder, pid in ((dead, 2**22 + 12345), (live, os.getpid()), (fresh, 2**22 + 12345)):
        folder.mkdir()
        (folder / "rank0.json").write_text(f'{{"rank": 0, "pid": {pid}}}')
    old = time.time() - 2 * wd.SWEEP_AFTER_S
    os.utime(dead, (old, old))
    os.utime(live, (old, old))
    wd.sweep(tmp_path)
    assert not dead.exists() and live.exists() and fresh.exists()


def test_expiry_reports_once_and_ends_the_job(tmp_path: Path) -> None:
    """A section over time: the first rank to notice prints the message and
    ends the job through the launcher; the others only end it."""
    ended: list[int] = []
    out = io.StringIO()
    board = wd.Board(tmp_path, 0)
    dog = wd.Watchdog(0, 2, 0.2, board, end_job=ended.append, out=out)
    wd.Board(tmp_path, 1).write(_rec(1, 0, "starting", {}, {}) | {"time": time.time()})
    dog.start()
    with dog.section("run 1 of @main"):
        deadline = time.monotonic() + 20
        while not ended and time.monotonic() < deadline:
            time.sleep(0.05)
    dog.stop()
    assert ended == [1]
    text = out.getvalue()
    assert text.startswith("error: watchdog: run 1 of @main did not complete within 0.2 s")
    assert "rank 1 did not arrive: " in text and "still at starting, the others are at run 1 of @main" in text
    assert not tmp_path.exists()  # the reporter removed the board


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

"""The cuda backend's communicators of a family of teams (a team with
translates), on 8 simulated ranks (threads, with a fake NCCL and MPI):
every rank prepares the same list; the members of each team of the family
get one NCCL communicator with the same unique id, made by the team's
first member, at their position in their own team; a plain team is made
as before; a rank in no team of a family gets none. The cpu backend's
split (MPI_Comm_split colored by team) runs under mpiexec in
tests/e2e/test_mesh_teams.py."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

import pytest

from fuserc.dialects.hir import Team
from fuserc.runtime.backends import cuda_comm

N = 8


class _World:
    """An allgather over the threads of one simulated job."""

    def __init__(self, n: int) -> None:
        self.barrier = threading.Barrier(n, timeout=20)  # a rank left behind breaks it, never hangs the test
        self.slots: list[Any] = [None] * n

    def allgather(self, rank: int, obj: Any) -> list[Any]:
        self.slots[rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class _Env:
    def __init__(self, rank: int, world: _World) -> None:
        self.rank = rank
        self.comm = types.SimpleNamespace(allgather=lambda obj: world.allgather(rank, obj))

    def team_comm(self, team: Any, tag: int) -> Any:
        return ("group", tuple(team)) if self.rank in tuple(team) else None

    def family_comm(self, team: Team, tag: int) -> tuple[Any, Any]:
        own = team.of(self.rank)
        return own, (("split", own) if own is not None else None)


@pytest.fixture()
def fake_nccl(monkeypatch: pytest.MonkeyPatch) -> Any:
    ids = iter(range(10**6))
    lock = threading.Lock()

    def unique_id() -> int:
        with lock:
            return next(ids)

    nccl = types.SimpleNamespace(get_unique_id=unique_id, NcclCommunicator=lambda n, uid, pos: ("nccl", n, uid, pos))
    cuda = types.SimpleNamespace(nccl=nccl)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    return nccl


def test_family_communicators(fake_nccl: Any) -> None:
    rows = Team([0, 1, 2], [(2, 4)])  # [0, 1, 2] and [4, 5, 6]: ranks 3 and 7 in none
    plain = Team([3, 7])
    world = _World(N)
    comms: list[Any] = [None] * N
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            c = cuda_comm.Communicators(_Env(rank, world), 0, [r // 4 for r in range(N)], [(r // 4, r % 4) for r in range(N)])
            c.prepare([rows, plain])
            comms[rank] = c
        except BaseException as e:  # reported below
            errors.append(e)
            world.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    for team in [(0, 1, 2), (4, 5, 6), (3, 7)]:
        made = [comms[r]._nccl[team] for r in team]
        assert [m[3] for m in made] == list(range(len(team)))  # positions in their own team
        assert len({m[2] for m in made}) == 1 and all(m[1] == len(team) for m in made)  # one id per team
        assert all(comms[r]._mpi[team] == (("split", team) if team != (3, 7) else ("group", team)) for r in team)
    assert comms[0]._nccl[(0, 1, 2)][2] != comms[4]._nccl[(4, 5, 6)][2]
    assert set(comms[3]._nccl) == {(3, 7)} and set(comms[0]._nccl) == {(0, 1, 2)}


def test_ranks_sharing_a_gpu_refused_on_every_rank(fake_nccl: Any) -> None:
    """Two members of one translate on one GPU: every rank refuses, not only
    that translate's (no rank goes on into a collective alone)."""
    world = _World(4)
    errors: list[str] = []

    def rank_main(rank: int) -> None:
        gpus = [(0, 0), (0, 1), (0, 2), (0, 2)]  # ranks 2 and 3 share a GPU
        c = cuda_comm.Communicators(_Env(rank, world), 0, [0] * 4, gpus)
        try:
            c.prepare([Team([0, 1], [(2, 2)])])
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 4 and all("ranks 2 and 3 of team [2, 3] would share GPU 2" in e for e in errors), errors

"""`hir.Team`: a team and its translates. For every mesh axis of meshes of
equally spaced ids, the family `Mesh.translates` gives holds exactly the
mesh's teams (`Mesh.team`), and each rank finds its own team and position
arithmetically; a family the verifier accepts has disjoint teams (checked
by listing them, on random families); ids not equally spaced give none."""

from __future__ import annotations

import itertools
import random

import pytest

from fuserc.dialects.hir import Team
from fuserc.sharding import DEVICE_TYPES, Mesh

MESHES = [
    Mesh("a", (4,)),
    Mesh("b", (2, 4)),
    Mesh("c", (4, 2)),
    Mesh("d", (2, 3, 2)),
    Mesh("e", (3, 1, 2)),
    Mesh("f", (2, 2), (5, 8, 11, 14)),
]


@pytest.mark.parametrize("mesh", MESHES, ids=[m.name for m in MESHES])
def test_family_is_the_mesh_teams(mesh: Mesh) -> None:
    for ptype in DEVICE_TYPES[: mesh.rank]:
        family = mesh.translates(ptype)
        assert family is not None
        team = Team(*family)
        assert team.check() is None
        assert sorted(team.teams()) == sorted(mesh.teams(ptype))
        assert team.count == mesh.team_count(ptype)
        for d in mesh.devices:
            own = mesh.team(d, ptype)
            assert team.of(d) == own and team.position(d) == own.index(d) and team.covers(d)
        outside = set(range(max(mesh.devices) + 3)) - set(mesh.devices)
        assert not any(team.covers(r) for r in outside)
        assert team.top == mesh.max_device


def test_ids_not_equally_spaced_give_no_family() -> None:
    assert Mesh("r", (2, 2), (3, 2, 1, 0)).translates("DIDx") is None
    assert Mesh("s", (2, 2), (0, 1, 2, 4)).translates("DIDy") is None


def test_accepted_families_are_disjoint() -> None:
    """Random bases and translates: whatever `check` accepts lists
    distinct ranks, and `of` finds each rank's team among them."""
    rng = random.Random(7)
    accepted = 0
    for _ in range(3000):
        base = sorted(rng.sample(range(12), rng.randint(1, 4)))
        translates = [(rng.randint(1, 3), rng.randint(1, 12)) for _ in range(rng.randint(1, 2))]
        team = Team(base, translates)
        if team.check() is not None:
            continue
        accepted += 1
        teams = list(team.teams())
        ranks = [r for t in teams for r in t]
        assert len(ranks) == len(set(ranks)), (base, translates)
        for t, r in itertools.product(teams, range(max(ranks) + 2)):
            if r in t:
                assert team.of(r) == t and team.position(r) == t.index(r)
        assert not any(team.covers(r) for r in set(range(max(ranks) + 2)) - set(ranks))
    assert accepted > 300


def test_plain_team_is_its_tuple() -> None:
    assert Team([0, 1]) == (0, 1) and hash(Team([0, 1])) == hash((0, 1))
    assert Team([0, 1], [(2, 2)]) != (0, 1) and Team([0, 1], [(2, 2)]) != Team([0, 1], [(2, 4)])
    assert Team([0, 1], [(1, 5)]).translates == ()  # a single translate is the team itself

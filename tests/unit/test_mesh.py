"""Meshes at any size: coordinates, teams and placements computed
arithmetically (fuserc/sharding.py), checked against the definitions (a
row-major walk over the device list), and meshes of millions of devices
without any list of their devices."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import torch

from fuserc.sharding import DEVICE_TYPES, MAX_MESH_DEVICES, Mesh, Sharding, Split, parse_axis, shard_array


def _reference_coords(mesh: Mesh, ids: list[int], device: int) -> tuple[int, ...]:
    pos = ids.index(device)
    return tuple(np.unravel_index(pos, mesh.shape))


def _reference_teams(mesh: Mesh, ids: list[int], ptype: str) -> list[tuple[int, ...]]:
    """By the definition: devices sharing every coordinate but the ptype
    axis, ordered along it; the teams in the order of their first device."""
    axis = mesh.axis_of(ptype)
    coords = {d: _reference_coords(mesh, ids, d) for d in ids}
    teams: list[tuple[int, ...]] = []
    for d in ids:
        rest = [c for a, c in enumerate(coords[d]) if a != axis]
        team = tuple(sorted((e for e in ids if [c for a, c in enumerate(coords[e]) if a != axis] == rest), key=lambda e: coords[e][axis]))
        if team not in teams:
            teams.append(team)
    return teams


MESHES = [(1,), (5,), (2, 3), (3, 1), (1, 4), (2, 3, 4), (1, 1, 1), (3, 1, 2)]


@pytest.mark.parametrize("shape", MESHES, ids=[str(s) for s in MESHES])
@pytest.mark.parametrize("explicit", [False, True])
def test_mesh_matches_its_definition(shape: tuple[int, ...], explicit: bool) -> None:
    rng = random.Random(len(shape) * 10 + math.prod(shape))
    n = math.prod(shape)
    ids = rng.sample(range(3 * n), n) if explicit else list(range(n))
    mesh = Mesh("m", shape, tuple(ids))
    assert list(mesh.devices) == ids and mesh.size == n and mesh.max_device == max(ids)
    for d in ids:
        assert mesh.has(d) and mesh.coords(d) == _reference_coords(mesh, ids, d)
        assert mesh.device_at(mesh.coords(d)) == d
    assert not mesh.has(-1) and not mesh.has(3 * n + 1)
    for p in DEVICE_TYPES[: len(shape)]:
        teams = _reference_teams(mesh, ids, p)
        assert mesh.teams(p) == teams
        assert mesh.team_count(p) == len(teams)
        for d in ids:
            assert mesh.team(d, p) in teams and d in mesh.team(d, p)


def _reference_teams_over(mesh: Mesh, ids: list[int], ptypes: tuple[str, ...]) -> list[tuple[int, ...]]:
    """By the definition: devices sharing every coordinate but those of the
    ptypes' axes, ordered row-major over them (outermost axis first)."""
    axes = sorted(mesh.axis_of(p) for p in ptypes)
    coords = {d: _reference_coords(mesh, ids, d) for d in ids}
    teams: list[tuple[int, ...]] = []
    for d in sorted(ids, key=lambda e: coords[e]):
        rest = [c for a, c in enumerate(coords[d]) if a not in axes]
        team = tuple(sorted((e for e in ids if [c for a, c in enumerate(coords[e]) if a not in axes] == rest), key=lambda e: [coords[e][a] for a in axes]))
        if team not in teams:
            teams.append(team)
    return teams


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (3, 1, 2), (2, 2)], ids=str)
@pytest.mark.parametrize("explicit", [False, True])
def test_teams_over_several_axes(shape: tuple[int, ...], explicit: bool) -> None:
    """The team of a partial sum over several mesh axes: every device
    sharing the other coordinates, row-major over those axes; as one team
    and its translates where the family is disjoint (hir.Team's rule)."""
    from fuserc.dialects.hir import Team

    n = math.prod(shape)
    ids = random.Random(n).sample(range(3 * n), n) if explicit else list(range(n))
    mesh = Mesh("m", shape, tuple(ids))
    types = DEVICE_TYPES[: len(shape)]
    for k in range(2, len(shape) + 1):
        for ptypes in itertools.combinations(types, k):
            teams = _reference_teams_over(mesh, ids, ptypes)
            assert mesh.teams(ptypes) == teams, ptypes
            assert mesh.team_count(ptypes) == len(teams) and mesh.axis_size(ptypes) == len(teams[0])
            for d in ids:
                assert mesh.team(d, ptypes) in teams and d in mesh.team(d, ptypes)
            family = mesh.translates(ptypes)
            if family is not None and Team(*family).check() is None:
                assert sorted(Team(*family).teams()) == sorted(teams), ptypes
    # the teams over [DIDz, DIDx] of a [2, 3, 4] mesh interleave: no translates
    cube = Mesh("m", (2, 3, 4))
    assert Team(*cube.translates(("DIDz", "DIDx"))).check() is not None  # type: ignore[misc]
    assert cube.team(5, ("DIDz", "DIDx")) == (4, 5, 6, 7, 16, 17, 18, 19)
    assert Team(*cube.translates(("DIDy", "DIDx"))).check() is None  # type: ignore[misc]


def test_explicit_row_major_ids_are_the_default_mesh() -> None:
    assert Mesh("m", (2, 2), (0, 1, 2, 3)) == Mesh("m", (2, 2)) and Mesh("m", (2, 2)).ids == ()
    assert Mesh("m", (2,), (1, 0)) != Mesh("m", (2,))


def test_a_device_not_on_the_mesh_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="device 7 is not on mesh @m"):
        Mesh("m", (2,), (3, 5)).coords(7)
    with pytest.raises(ValueError, match="device 4 is not on mesh @m"):
        Mesh("m", (2, 2)).team(4, "DIDx")


def test_huge_meshes_list_nothing() -> None:
    """A mesh of 10^18 devices answers position questions at once: nothing
    of its size is built unless its whole device list is asked for."""
    big = Mesh("m", (1000, 10**9, 10**6))
    last = 10**18 - 1
    assert big.size == 10**18 and big.max_device == last and big.has(last) and not big.has(10**18)
    assert big.coords(last) == (999, 10**9 - 1, 10**6 - 1)
    assert big.team(5, "DIDz") == tuple(range(5, 10**18, 10**15)) == big.team(5 + 7 * 10**15, "DIDz")
    assert big.team_count("DIDx") == 10**12
    s = Sharding("m", (parse_axis("DIDz*DIDy"), parse_axis("DIDx")))
    assert not s.errors((10**12, 10**6), big)
    assert s.local_shape((10**12, 10**6), big) == (1, 1)
    assert s.dim_indices(0, 10**12, big, last) == range(10**12 - 1, 10**12)
    assert MAX_MESH_DEVICES < 10**18  # the verifier refuses it before any pass (lit: fusion/invalid_mesh.mlir)


def _reference_indices(s: Sharding, dim: int, extent: int, mesh: Mesh, device: int) -> list[int]:
    """The global indices of `device` along `dim`: [f1][f2]...[E/prod(f)]
    with device splits taking the device's coordinate, Stream ones all."""
    splits = s.dims[dim]
    sizes = [sp.size(mesh) for sp in splits]
    inner = extent // max(1, math.prod(sizes))
    grid = np.arange(extent).reshape(*sizes, inner) if extent else np.zeros((*sizes, 0), dtype=int)
    coords = mesh.coords(device)
    index = tuple(coords[mesh.axis_of(sp.ptype)] if not sp.is_stream else slice(None) for sp in splits)
    return [int(i) for i in grid[index].reshape(-1)]


AXES = ["-", "DIDx", "Stream(2)", "DIDx*Stream(2)", "Stream(2)*DIDx", "DIDy*DIDx", "DIDx*DIDy", "Stream(2)*DIDy*DIDx", "DIDy*Stream(3)*DIDx"]
GRID = Mesh("g", (2, 2), (3, 0, 2, 1))


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("extent", [0, 24])
def test_dim_indices_and_shards(axis: str, extent: int) -> None:
    """Each device's indices (a range when contiguous), and the shard of a
    global array (torch and NumPy) is the array at those indices; extent 0
    gives empty shards."""
    mesh = GRID
    s = Sharding("g", (parse_axis(axis), ()))
    assert not s.errors((extent, 3), mesh)
    x = np.arange(extent * 3, dtype=np.float32).reshape(extent, 3)
    for d in mesh.devices:
        idx = s.dim_indices(0, extent, mesh, d)
        assert list(idx) == _reference_indices(s, 0, extent, mesh, d)
        assert isinstance(idx, range) == s.is_contiguous_block(0)
        want = x[list(idx)]
        np.testing.assert_array_equal(shard_array(x, s, mesh, d), want)
        np.testing.assert_array_equal(shard_array(torch.from_numpy(x), s, mesh, d).numpy(), want)
        assert shard_array(x, s, mesh, d).shape == s.local_shape((extent, 3), mesh)


def test_teams_of_every_small_mesh_cover_it_once() -> None:
    for shape in itertools.product([1, 2, 3], repeat=3):
        mesh = Mesh("m", shape)
        for p in DEVICE_TYPES:
            members = [d for t in mesh.teams(p) for d in t]
            assert sorted(members) == list(range(mesh.size)), (shape, p)
            assert all(len(t) == mesh.axis_size(p) for t in mesh.teams(p))


def test_stream_split_sizes_do_not_need_the_mesh_list() -> None:
    mesh = Mesh("m", (4096, 1024))
    s = Sharding("m", ((Split("Stream", 4), Split("DIDy")), (Split("DIDx"),)))
    assert s.local_shape((4 * 4096 * 2, 2048), mesh) == (8, 2)


@pytest.mark.parametrize("axis", ["Stream(٣)", "Stream(４)", "Stream(4٣)"])
def test_axis_counts_are_ascii_digits(axis: str) -> None:
    """A Stream count of the Python API is written with 0-9, as in the IR:
    `٣` is refused, never read as 3."""
    with pytest.raises(ValueError, match="invalid sharding axis"):
        parse_axis(axis)

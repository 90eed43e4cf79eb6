"""A Stream split outside a device split (`Stream(2)*DIDx`) is placement:
the sharding model, the sharding rules and the reshard planner agree
(docs/passes.md, "Stream splits outside a device split")."""

from __future__ import annotations

import itertools

import pytest

from fuserc.passes.reshard_util import ALLGATHER, LOCAL_SLICE, plan_reshard, reshard_step
from fuserc.sharding import Mesh, Sharding, Split

MESHES = {"g": Mesh("g", (2, 2)), "t": Mesh("t", (4,)), "h": Mesh("h", (2,), (2, 3))}


def sh(mesh: str, *axes: str, partial: str | None = None) -> Sharding:
    return Sharding.from_axes(mesh, axes, partial)


@pytest.mark.parametrize(
    "axes,placed",
    [
        ("Stream(2)*DIDx", "Stream(2)*DIDx"),
        ("DIDx*Stream(2)", "DIDx"),
        ("Stream(2)", "-"),
        ("DIDy*Stream(2)*DIDx", "DIDy*Stream(2)*DIDx"),
        ("Stream(2)*DIDy*Stream(3)", "Stream(2)*DIDy"),
    ],
)
def test_placement_keeps_only_interleaving_streams(axes: str, placed: str) -> None:
    assert sh("g", axes, "-").placement() == sh("g", placed, "-")


def test_interleaved_is_another_placement() -> None:
    assert not sh("t", "Stream(2)*DIDx", "-").same_placement(sh("t", "DIDx", "-"))
    assert sh("t", "DIDx*Stream(2)", "-").same_placement(sh("t", "DIDx", "-"))
    assert sh("t", "-", "Stream(2)*DIDx").interleaved_dims() == [1]


def test_interleaved_rows_are_gathered_chunk_by_chunk() -> None:
    """To the pipelined GEMM's `[Stream(2), -]`: one allgather step."""
    step = reshard_step(sh("t", "Stream(2)*DIDx", "-"), sh("t", "Stream(2)", "-"), (64, 8), MESHES)
    assert step is not None and (step.kind, step.gather_dim) == (ALLGATHER, 0)


def test_interleaved_is_made_by_a_slice_and_left_by_a_gather() -> None:
    shape = (64, 8)
    to = plan_reshard(sh("t", "DIDx", "-"), sh("t", "Stream(2)*DIDx", "-"), shape, MESHES)
    assert to is not None and [s.kind for s, _ in to] == [ALLGATHER, LOCAL_SLICE]
    back = plan_reshard(sh("t", "Stream(2)*DIDx", "-"), sh("t", "-", "DIDx"), shape, MESHES)
    assert back is not None and [s.kind for s, _ in back] == [ALLGATHER, LOCAL_SLICE]
    step = reshard_step(sh("t", "-", "-"), sh("t", "Stream(2)*DIDx", "-"), shape, MESHES)
    assert step is not None and step.kind == LOCAL_SLICE


def test_no_alltoall_moves_interleaved_blocks() -> None:
    assert reshard_step(sh("t", "Stream(2)*DIDx", "-"), sh("t", "-", "DIDx"), (64, 8), MESHES) is None


def _placements(mesh: str, types: list[str], shape: tuple[int, int]) -> list[Sharding]:
    opts: list[tuple[Split, ...]] = [()]
    for k in (1, 2):
        for combo in itertools.permutations(types, k):
            base = tuple(Split(p) for p in combo)
            opts.append(base)
            opts += [base[:i] + (Split("Stream", 2),) + base[i:] for i in range(len(base) + 1)]
    out = {Sharding(mesh, (a, b)).placement() for a in opts for b in opts}
    return sorted((s for s in out if not s.errors(shape, MESHES[mesh])), key=str)


def test_every_placement_reaches_every_other() -> None:
    """Interleaved or not, on a 1-D or a 2-D mesh or across meshes."""
    shape = (48, 48)
    every = _placements("g", ["DIDx", "DIDy"], shape) + _placements("t", ["DIDx"], shape) + _placements("h", ["DIDx"], shape)
    assert any(s.interleaved_dims() for s in every)
    missing = [(a, b) for a in every for b in every if plan_reshard(a, b, shape, MESHES) is None]
    assert not missing, missing[:5]

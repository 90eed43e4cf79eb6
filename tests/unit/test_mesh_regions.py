"""Programs on meshes of millions of devices compile to host programs whose
size does not grow with the mesh: a partial sum whole over the other mesh
axes, set onto one device, is reduced by one team to the root (one
`hir.reduce`, in one `hir.if_rank`), not all-reduced in every DIDx slice
(one region per slice: 65,536 of them at [65536, 64]); a collective within
every slice is one op whose team has translates. Sizes are asserted, not
times; tools/bench_mesh.py times the same programs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from fuserc import ir
from fuserc import pipeline as pl

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
try:
    from bench_mesh import mixed_precision, partial_to_one
finally:
    sys.path.pop(0)


def _compile(text: str, spec: str) -> str:
    ctx = ir.make_context()
    with ir.compiling():
        module = ir.parse(text, "mesh.mlir", ctx)
        pl.PassRunner(pl.build(spec)).run(ctx, module)
        return ir.to_text(module)


@pytest.mark.parametrize("spec", ["default", "autodiff,default"])
@pytest.mark.parametrize("rows", [4, 256, 65536])
def test_partial_to_one_device_is_one_reduce(rows: int, spec: str) -> None:
    """[rows, 64] meshes, up to 4,194,304 devices: the same regions and
    collectives whatever the number of DIDx slices."""
    out = _compile(partial_to_one((rows, 64)), spec)
    regions = out.count("hir.if_rank")
    assert regions == (4 if spec == "default" else 11), out[:4000]
    assert len(out) < 6000
    assert out.count("hir.reduce ") == (1 if spec == "default" else 2)  # the forward's, and the loss gradient's in the backward
    assert "hir.allreduce" not in out
    teams = re.findall(r"team = (\[[^\]]*\])", out)
    assert teams and set(teams) <= {"[0 to 64]", f"[0 to {rows * 64}]"}, teams  # the root's own DIDx slice; the backward's broadcast


@pytest.mark.parametrize("rows", [4, 65536])
def test_mixed_precision_autodiff_is_one_op_per_collective(rows: int) -> None:
    """The mixed-precision program under autodiff on [rows, 64] meshes, up
    to 4,194,304 devices: each collective within every DIDx slice is one op
    whose team is the first slice's translated to the others, so the host
    programs have the same regions, ops and size whatever the number of
    slices (one `hir.if_rank` per function, not one per slice)."""
    out = _compile(mixed_precision((rows, 64)), "autodiff,default")
    assert out.count("hir.if_rank") == 3, out[:4000]  # @main, @main_fwd, @main_bwd
    assert len(out) < 12000
    teams = re.findall(r"team = ([^:]*?) (?:backend|:)", out)
    assert len(teams) == 4 and set(teams) == {f"[0 to 64] translated [{rows} step 64]"}, teams  # 3 allreduces, 1 team_index

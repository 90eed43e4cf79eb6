"""Collectives within every slice of a multi-dimensional mesh, run on 8
ranks (one mpiexec launch, tests/e2e/batch.py) against the float64
reference: each is one op whose team has translates (`team = [0, 1, 2, 3]
translated [2 step 4]`), every rank taking part in its own slice's team
(the evaluator finds it, the backends make every slice's communicator by
one split of the world), AllGather + GEMM and GEMM + ReduceScatter rings
and ring attention included, also across nodes that the rows lie on differently. Meshes of
equally spaced ids (default, or
`devices = [0, 2, ...]`) get the translated form, on 2-D and 3-D meshes
(a team over DIDy of [2, 2, 2] has two translates: one interleaving it,
one beyond it); a mesh whose ids run backwards keeps one op per slice."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from batch import Outcome, launch_batches
from harness import BACKEND, MPIEXEC

from fuserc.ir import to_text
from fuserc.runtime.evaluator.program import compile_module

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
try:
    from bench_mesh import mixed_precision, partial_to_one
finally:
    sys.path.pop(0)

N = 8


def _gather(mesh: str, axes: str, extent: str = "8x16") -> str:
    """A tensor split over `axes` of `mesh`, made whole (allgathers over
    each split axis, one after the other)."""
    a = f"tensor<{extent}xf32, #fusion.sharding<@m, [{axes}]>>"
    b = f"tensor<{extent}xf32, #fusion.sharding<@m, [-, -]>>"
    return f"{mesh}\nfunc.func @main(%x: {a}) -> {b} {{\n  %y = fusion.set %x : ({a}) -> {b}\n  func.return %y : {b}\n}}\n"


def _partial(mesh: str, axes: str) -> str:
    """A contraction over a dimension split over `axes` (`DIDy*DIDx`): a
    partial sum over all of them, made whole by one allreduce over the
    team spanning them (the backward: the weight's gradient likewise)."""
    x = f"tensor<8x16xf32, #fusion.sharding<@m, [-, {axes}]>>"
    w = f"tensor<16x8xf32, #fusion.sharding<@m, [{axes}, -]>>"
    y = "tensor<8x8xf32, #fusion.sharding<@m, [-, -]>>"
    return f"{mesh}\nfunc.func @main(%x: {x}, %w: {w}) -> {y} {{\n  %y = fusion.matmul %x, %w : ({x}, {w}) -> {y}\n  func.return %y : {y}\n}}\n"


ALLTOALL = """fusion.mesh @g shape = [2, 4]
func.func @main(%x: tensor<8x16xf32, #fusion.sharding<@g, [DIDy, DIDx]>>) -> tensor<8x16xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>> {
  %y = fusion.relu %x : (tensor<8x16xf32, #fusion.sharding<@g, [DIDy, DIDx]>>) -> tensor<8x16xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>>
  func.return %y : tensor<8x16xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>>
}
"""

AG_GEMM = """fusion.mesh @g shape = [2, 4]
func.func @main(%x: tensor<64x16xf32, #fusion.sharding<@g, [DIDx, -]>>, %w: tensor<16x8xf32, #fusion.sharding<@g, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@g, [Stream(4), -]>> {
  %y = fusion.matmul %x, %w : (tensor<64x16xf32, #fusion.sharding<@g, [DIDx, -]>>, tensor<16x8xf32, #fusion.sharding<@g, [-, -]>>) -> tensor<64x8xf32, #fusion.sharding<@g, [Stream(4), -]>>
  func.return %y : tensor<64x8xf32, #fusion.sharding<@g, [Stream(4), -]>>
}
"""

GEMM_RS = """fusion.mesh @g shape = [2, 4]
func.func @main(%x: tensor<64x32xf32, #fusion.sharding<@g, [-, DIDx]>>, %w: tensor<32x8xf32, #fusion.sharding<@g, [DIDx, -]>>) -> tensor<64x8xf32, #fusion.sharding<@g, [DIDx, -]>> {
  %y = fusion.matmul %x, %w : (tensor<64x32xf32, #fusion.sharding<@g, [-, DIDx]>>, tensor<32x8xf32, #fusion.sharding<@g, [DIDx, -]>>) -> tensor<64x8xf32, #fusion.sharding<@g, [DIDx, -]>>
  func.return %y : tensor<64x8xf32, #fusion.sharding<@g, [DIDx, -]>>
}
"""

RING_ATTENTION = """fusion.mesh @m shape = [4, 2]
!q = tensor<2x4x32x8xf32, #fusion.sharding<@m, [-, DIDx, DIDy, -]>>
!k = tensor<2x2x32x8xf32, #fusion.sharding<@m, [-, DIDx, DIDy, -]>>
func.func @main(%q: !q, %k: !k, %v: !k) -> !q {
  %o = fusion.sdpa %q, %k, %v causal = true : (!q, !k, !k) -> !q
  func.return %o : !q
}
"""
"""Causal ring attention over the sequence on DIDy, heads on DIDx: one
ring (zigzag layout included) for both columns."""

RINGS = {
    "ring": "default{algorithm=ring}",
    "ring_pull": "default{algorithm=ring ring-form=pull}",
    "ring_sum": "default{algorithm=ring ring-form=sum}",
    "collective": "default{algorithm=collective}",
}
"""Pipelines of AllGather + GEMM and GEMM + ReduceScatter in every row of
the mesh: one ring (or one collective per chunk) for all rows."""

NODES_ENV = {"FUSERC_GPUS_PER_NODE": "3"}
"""Nodes of 3 ranks: the rows' teams lie on nodes differently ([0..3]
spans nodes 0 and 1, [4..7] nodes 1 and 2), so each translate's ring takes
its own links."""

ACROSS = ("ring", "ring_pull")
"""The ring forms run again across nodes (send/recv between nodes, copies
within one)."""

FWD_BWD = {"fwd": "default", "bwd": "autodiff,default --entry main_bwd"}
LOWERING = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"

CASES: dict[str, tuple[str, dict[str, str], str]] = {
    # (program, pipelines, the team of its first collective as printed)
    "mixed_2x4": (mixed_precision((2, 4)), FWD_BWD, "team = [0, 1, 2, 3] translated [2 step 4]"),
    "mixed_4x2": (mixed_precision((4, 2)), {"fwd": "default"}, "team = [0, 1] translated [4 step 2]"),
    "partial_to_one_2x4": (partial_to_one((2, 4)), {"fwd": "default"}, "team = [0, 1, 2, 3] backend"),
    "gather_columns_2x4": (_gather("fusion.mesh @m shape = [2, 4]", "DIDy, DIDx"), {"fwd": "default"}, "team = [0, 4] translated [4 step 1]"),
    "gather_3d": (_gather("fusion.mesh @m shape = [2, 2, 2]", "DIDy, DIDx"), {"fwd": "default"}, "team = [0, 2] translated [2 step 4, 2 step 1]"),
    "spaced_ids": (
        _gather("fusion.mesh @m shape = [2, 2] devices = [1, 3, 5, 7]", "DIDy, DIDx"),
        {"fwd": "default"},
        "team = [1, 5] translated [2 step 2]",
    ),
    "backwards_ids": (
        _gather("fusion.mesh @m shape = [2, 4] devices = [7, 6, 5, 4, 3, 2, 1, 0]", "DIDy, DIDx"),
        {"fwd": "default"},
        "team = [7, 6, 5, 4] backend",
    ),
    # partial sums over several axes: one team over the whole mesh; over
    # [DIDz, DIDy] of [2, 2, 2], a team and its translate interleaving it;
    # over [DIDz, DIDx], teams that interleave otherwise ([0, 1, 4, 5] and
    # [2, 3, 6, 7]: no family of translates), one op per team
    "partial_axes_2x4": (_partial("fusion.mesh @m shape = [2, 4]", "DIDy*DIDx"), FWD_BWD, "team = [0, 1, 2, 3, 4, 5, 6, 7] backend"),
    "partial_axes_3d": (_partial("fusion.mesh @m shape = [2, 2, 2]", "DIDz*DIDx"), FWD_BWD, "team = [0, 1, 4, 5] backend"),
    "partial_axes_zy": (_partial("fusion.mesh @m shape = [2, 2, 2]", "DIDz*DIDy"), {"fwd": "default"}, "team = [0, 2, 4, 6] translated [2 step 1]"),
    "ag_gemm_2x4": (AG_GEMM, RINGS, "team = [0, 1, 2, 3] translated [2 step 4]"),
    "gemm_rs_2x4": (GEMM_RS, RINGS, "team = [0, 1, 2, 3] translated [2 step 4]"),
    "ring_attention_4x2": (RING_ATTENTION, FWD_BWD, "team = [0, 2, 4, 6] translated [2 step 1]"),
    "alltoall_2x4": (
        ALLTOALL,
        {"collective": f"{LOWERING},stream-pipeline{{algorithm=collective}}", "none": f"{LOWERING},stream-pipeline{{algorithm=none}}"},
        "team = [0, 4] translated [4 step 1]",
    ),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    work = [(name, text, pipes) for name, (text, pipes, _) in CASES.items()]
    out = {f"one/{k}": v for k, v in launch_batches(N, work, tmp_path_factory.mktemp("teams"), BACKEND).items()}
    os.environ.update(NODES_ENV)
    try:
        rings = [(name, CASES[name][0], {p: RINGS[p] for p in ACROSS}) for name in ("ag_gemm_2x4", "gemm_rs_2x4")]
        out.update({f"nodes/{k}": v for k, v in launch_batches(N, rings, tmp_path_factory.mktemp("nodes"), BACKEND).items()})
    finally:
        for k in NODES_ENV:
            os.environ.pop(k, None)
    return out


ITEMS = [("one", name, pipe) for name, (_, pipes, _) in CASES.items() for pipe in pipes]
ITEMS += [("nodes", name, pipe) for name in ("ag_gemm_2x4", "gemm_rs_2x4") for pipe in ACROSS]


@pytest.mark.parametrize("nodes,name,pipe", ITEMS, ids=[f"{a}-{b}-{c}" for a, b, c in ITEMS])
def test_checked(nodes: str, name: str, pipe: str, results: dict[str, Outcome]) -> None:
    """Each program, on 8 ranks (on one node, and the rings as nodes of 3
    ranks), within --check's tolerance of the reference."""
    r = results.get(f"{nodes}/{name}/{pipe}")
    assert r is not None, "the batch reported nothing for this case"
    assert r.status == "ok", f"{r.status}:\n{r.detail}\n\n{CASES[name][0]}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_op_for_every_slice(name: str) -> None:
    """Slices that are translates of one another communicate by one op
    over the whole mesh's region; others by one op per slice."""
    text, pipes, team = CASES[name]
    spec = next(iter(pipes.values())).split(" --entry ")[0]
    host = to_text(compile_module(text, f"{name}.mlir", "main", spec).host)
    assert team in host, host
    comms = [ln for ln in host.splitlines() if " team = " in ln and "hir.team_index" not in ln]
    if "translated" in team:
        assert "hir.if_rank [0, 1, 2, 3]\n" not in host and all(" = [0, 4]" not in ln or "translated" in ln for ln in comms), host
    if name == "partial_axes_3d":
        assert "team = [2, 3, 6, 7] backend" in host and not any("translated" in ln for ln in comms), host
    if name == "backwards_ids":
        assert not any("translated" in ln for ln in comms) and len(comms) == 4 + 2, host  # the rows' allgathers, then the columns'

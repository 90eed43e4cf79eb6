"""The communication report from Python: `fd.comm_report` of a definition
(no job), its totals per rank and as data, and the unit's parsing."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from fuserc.api import FusionDefinition
from fuserc.comm_report import Unit


def sp_mlp(d: int, dtype: str) -> FusionDefinition:
    """x [DIDx, -] @ w1 [-, DIDx] @ w2 [DIDx, -] -> [DIDx, -]: an allgather
    of x before, a reduce-scatter of the partial product after."""
    fd = FusionDefinition()
    fd.sched.mesh("tp", [d])
    x = fd.define_tensor([64, 32], dtype)
    w1 = fd.define_tensor([32, 128], dtype)
    w2 = fd.define_tensor([128, 32], dtype)
    y = fd.ops.gelu(x @ w1) @ w2
    fd.add_output(y)
    for t, s in ((x, ["DIDx", "-"]), (w1, ["-", "DIDx"]), (w2, ["DIDx", "-"]), (y, ["DIDx", "-"])):
        fd.sched.shard(t, "tp", s)
    return fd


def test_definition_report() -> None:
    """64x32 bf16 activations (4096 bytes) over 4 ranks: the forward's
    allgather and reduce-scatter move 3/4 of them each (3072); the totals
    of a step are the sums of the lines of both programs, whatever the
    backward's plan."""
    rep = sp_mlp(4, "bf16").comm_report("autodiff,default{algorithm=none}", "64x32xbf16")
    fwd = rep.function("main_fwd")
    assert [(ln.kind, ln.dtype, ln.shape, ln.team, ln.runs, ln.nbytes) for ln in fwd.lines] == [
        ("allgather", "bf16", (64, 32), (0, 1, 2, 3), 1, 3072),
        ("reduce_scatter", "bf16", (64, 32), (0, 1, 2, 3), 1, 3072),
    ]
    assert all(ln.overlap == "no" and ln.ranks == [0, 1, 2, 3] for ln in fwd.lines)
    assert sorted(fwd.per_rank) == [0, 1, 2, 3]
    step = rep.totals(["main_fwd", "main_bwd"])
    for r, t in step.items():
        want = sum((ln.nbytes for f in ("main_fwd", "main_bwd") for ln in rep.function(f).lines if r in ln.ranks), Fraction(0))
        assert t.nbytes == want and t.count == sum(ln.runs for f in ("main_fwd", "main_bwd") for ln in rep.function(f).lines)
    assert rep.unit is not None and rep.unit.of(step[0].nbytes) == step[0].nbytes / 4096
    data = json.loads(json.dumps(rep.as_dict()))
    assert data["unit"] == {"text": "64x32xbf16", "bytes": 4096}
    assert [g["name"] for g in data["totals"]] == ["module", "@main_fwd + @main_bwd"]
    assert data["functions"][1]["lines"][0]["bytes"] == 3072
    assert "total per rank (4 ranks)" in str(rep)


def test_unlowered_module_has_no_report() -> None:
    rep = sp_mlp(2, "f32").comm_report("propagate-shardings")
    assert rep.functions == [] and "no host program in the module" in rep.text()


@pytest.mark.parametrize("text", ["8192", "8192xbf", "x", "8x?xf32", "0x4xf32", "8x4xindex"])
def test_bad_units(text: str) -> None:
    with pytest.raises(ValueError, match="tensor type|no bytes"):
        Unit.parse(text)


def test_unit() -> None:
    u = Unit.parse("8192x4096xbf16")
    assert u.nbytes == 8192 * 4096 * 2 and u.of(u.nbytes * 3 // 4) == 0.75


def test_gpt_layer_backward_gathers_beside_a_weight_gradient(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT layer at d = 4, hidden 4096, 8192 tokens, with per-chunk and
    fence costs that leave every collective whole (`chunk_us` 30,
    `ipc_fence_us` 200; the defaults ring most of them): the backward's reduce-scatter after the MLP has both MLP
    weight gradients to hide it, the gather of the attention block's
    cotangent after it none of its own; one weight gradient runs beside
    the gather instead (schedule.share_compute), so every [T, H]
    collective of the backward but its first overlaps a GEMM."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
    from gpt_layer import build

    links = tmp_path / "links.json"
    links.write_text('{"chunk_us": 30, "ipc_fence_us": 200}')  # else the documented defaults, whatever this machine's cache holds
    monkeypatch.setenv("FUSERC_LINKS", str(links))
    rep = build(8192, 4096, 32, 16384, 4, "bf16").comm_report("autodiff,default", "8192x4096xbf16")
    bwd = rep.function("main_bwd")
    assert [(ln.kind, ln.overlap) for ln in bwd.lines] == [
        ("allgather", "no"),
        ("reduce_scatter", "gemm"),
        ("allgather", "gemm"),
        ("reduce_scatter", "gemm"),
        ("allreduce", "kernel"),  # 48 KiB: latency, not worth a GEMM's move
    ]

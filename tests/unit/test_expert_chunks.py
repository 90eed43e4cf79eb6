"""chunk-experts (passes/expert_chunks.py): which expert-parallel layers it
cuts into token chunks, and into how many: the cost model's count where no
count is forced, the IR as it was where that count is one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from fuserc.dialects.fusion_dispatch import DispatchOp
from fuserc.ir import make_context, parse, to_text
from fuserc.passes import cost_model
from fuserc.passes.expert_chunks import CHUNKS_ATTR
from fuserc.pipeline import run_pipeline

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "examples" / "python"))

from moe_layer import definition  # noqa: E402


@pytest.fixture(autouse=True)
def documented_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cost model's documented defaults, whatever links file this machine has."""
    monkeypatch.delenv(cost_model.LINKS_ENV, raising=False)
    monkeypatch.delenv(cost_model.GPUS_PER_NODE_ENV, raising=False)
    monkeypatch.setattr(cost_model, "DEFAULT_LINKS_PATH", tmp_path / "none.json")


def lowered(text: str, pipeline: str) -> Any:
    ctx = make_context()
    return run_pipeline(parse(text, "moe", ctx), pipeline, ctx)


def dispatches(module: Any, func: str = "main") -> list[DispatchOp]:
    f = next(o for o in module.ops if getattr(o, "sym_name", None) is not None and o.sym_name.data == func)
    return [o for o in f.walk() if isinstance(o, DispatchOp)]


def test_one_chunk_leaves_the_ir_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/moe_layer.mlir on 4 devices: the cost model is asked (4
    tokens a device, top 2, rows of 8 f32, three grouped GEMMs of 8 x 12
    per row), answers one chunk, and the IR is exactly propagate-shardings'."""
    asked: list[tuple[Any, ...]] = []
    choose = cost_model.moe_chunks

    def recorded(*args: Any) -> tuple[int, dict[int, float]]:
        asked.append(args[1:])
        return choose(*args)

    monkeypatch.setattr(cost_model, "moe_chunks", recorded)
    text = (ROOT / "examples" / "moe_layer.mlir").read_text()
    whole = to_text(lowered(text, "propagate-shardings"))
    chosen = to_text(lowered(text, "propagate-shardings,chunk-experts"))
    assert asked == [(4, 2, 32, [2.0 * 8 * 12] * 3, 4, "f32")]
    assert choose(cost_model.Machine(), *asked[0])[0] == 1
    assert chosen == whole


def test_the_cost_model_cuts_a_layer_where_it_pays() -> None:
    """The DeepSeek-like layer on 8 devices (8192 tokens each, hidden 2048,
    64 experts of ffn 1408, top 6, bf16): its all-to-alls are as long as
    its GEMMs, and the pass cuts it into the cost model's count of chunks,
    forward and backward, with no count given."""
    fd = definition(8 * 8192, 2048, 1408, 64, 6, False, "softmax", "bf16", 8)
    want = cost_model.moe_chunks(cost_model.Machine(), 8192, 6, 2048 * 2, [2.0 * 2048 * 1408] * 3, 8, "bf16")[0]
    assert want == 4  # docs/passes.md, chunk-experts
    module = lowered(fd.to_mlir(), "propagate-shardings,chunk-experts")
    cut = dispatches(module)
    assert len(cut) == want and all(d.attributes[CHUNKS_ATTR].value.data == want for d in cut)  # type: ignore[attr-defined]
    report = fd.comm_report("autodiff,default")
    for name in ("main_fwd", "main_bwd"):
        assert sum(line.kind == "alltoallv" for line in report.function(name).lines) == 2 * want, name


def test_chunks_are_not_cut_again_and_an_escaping_slot_keeps_its_layer() -> None:
    """A layer already in chunks is left (so the forward autodiff cut in 2
    chunks stays in 2 through `default{token-chunks=2}`, not 4), and so is
    one whose slots are also a result (a chunk's slots are not a slice of
    them)."""
    fd = definition(32, 16, 24, 4, 2, False, "softmax", "f32", 4)
    again = "propagate-shardings,chunk-experts{token-chunks=2}"
    assert len(dispatches(lowered(fd.to_mlir(), f"{again},chunk-experts{{token-chunks=2}}"))) == 2
    module = lowered(fd.to_mlir(), f"autodiff{{token-chunks=2 save=inputs}},{again}")
    # the backward: the forward's 2 recomputed, and the 2 of the cotangents
    assert [len(dispatches(module, f)) for f in ("main", "main_fwd", "main_bwd")] == [2, 2, 4]
    escaping = (ROOT / "examples" / "moe_layer.mlir").read_text()
    escaping = escaping.replace(
        "-> (tensor<16x8xf32, #tok>, tensor<f32, #fusion.sharding<@tp, []>>) {",
        "-> (tensor<16x8xf32, #tok>, tensor<f32, #fusion.sharding<@tp, []>>, tensor<4x16x12xf32>) {",
    ).replace(
        "func.return %y, %aux : tensor<16x8xf32, #tok>, tensor<f32, #fusion.sharding<@tp, []>>",
        "func.return %y, %aux, %h1 : tensor<16x8xf32, #tok>, tensor<f32, #fusion.sharding<@tp, []>>, tensor<4x16x12xf32>",
    )
    kept = lowered(escaping, "propagate-shardings,chunk-experts{token-chunks=2}")
    assert len(dispatches(kept)) == 1 and CHUNKS_ATTR not in dispatches(kept)[0].attributes


def test_autodiffs_count_holds_for_the_pipeline_after_it() -> None:
    """`autodiff{token-chunks=N}` alone forces N through the default
    pipeline too, in @main (the call without gradients, which autodiff does
    not derive) as in @main_fwd and @main_bwd: the module keeps N
    (`module_chunks`). On the DeepSeek-like layer, where the cost model's
    own choice is 4, N = 1 leaves one dispatch and one combine in each, N =
    2 two; `default`'s own option still wins (in @main: the derived ones,
    whose slots are saved for the backward, are not cut after autodiff)."""
    fd = definition(8 * 8192, 2048, 1408, 64, 6, False, "softmax", "bf16", 8)

    def alltoallvs(pipeline: str) -> list[int]:
        report = fd.comm_report(pipeline)
        return [sum(line.kind == "alltoallv" for line in report.function(f).lines) for f in ("main", "main_fwd", "main_bwd")]

    assert alltoallvs("autodiff,default") == [8, 8, 8]
    assert alltoallvs("autodiff{token-chunks=1},default") == [2, 2, 2]
    assert alltoallvs("autodiff{token-chunks=2},default") == [4, 4, 4]
    assert alltoallvs("autodiff{token-chunks=1},default{token-chunks=2}") == [4, 2, 2]
    module = lowered(fd.to_mlir(), "autodiff{token-chunks=1}")
    assert module.attributes[CHUNKS_ATTR].value.data == 1  # type: ignore[attr-defined]

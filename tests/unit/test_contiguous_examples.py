"""make-resharding-contiguous on every example and lit test program: after
`propagate-shardings,make-resharding-contiguous`, `check_contract` finds
nothing (every tensor sharded, every op local or a single-step pure reshard,
communicated buffers contiguous), and the pass is idempotent. Also checks
that `check_contract` does catch each kind of violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuserc.diagnostics import Diagnostic
from fuserc.ir import make_context, parse, split_input, to_text
from fuserc.pipeline import pass_class, run_pipeline
from fuserc.passes.make_resharding_contiguous import check_contract
from fuserc.passes.reshard_util import ALLGATHER, ALLTOALL, LOCAL_SLICE, REDUCE_SCATTER, plan_reshard, reshard_step
from fuserc.sharding import Mesh, Sharding

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.mlir"))
LIT_FILES = sorted(
    p for p in (ROOT / "tests" / "lit").rglob("*.mlir") if "Output" not in p.parts and "Inputs" not in p.parts
)
PIPELINE = "propagate-shardings,make-resharding-contiguous"


def _propagation_available() -> bool:
    try:
        pass_class("propagate-shardings")
    except Diagnostic:
        return False
    return True


needs_propagation = pytest.mark.skipif(not _propagation_available(), reason="propagate-shardings is not available yet")


def _compile(text: str, name: str):
    module = parse(text, name, make_context())
    run_pipeline(module, PIPELINE)
    return module


@needs_propagation
@pytest.mark.skipif(not EXAMPLES, reason="no examples yet")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_meets_contract(path: Path) -> None:
    module = _compile(path.read_text(), str(path))
    assert check_contract(module) == []
    once = to_text(module)
    run_pipeline(module, "make-resharding-contiguous")
    assert to_text(module) == once, "make-resharding-contiguous is not idempotent"


def _programs() -> list[tuple[str, str]]:
    """Every chunk of the lit tests that is a valid program (no expected
    diagnostics), as (id, text)."""
    out = []
    for path in LIT_FILES:
        for offset, chunk in split_input(path.read_text()):
            if "expected-error" in chunk or "fusion." not in chunk:
                continue
            out.append((f"{path.relative_to(ROOT / 'tests' / 'lit')}:{offset + 1}", chunk))
    return out


@needs_propagation
@pytest.mark.parametrize("name,text", _programs(), ids=[p[0] for p in _programs()])
def test_lit_program_meets_contract(name: str, text: str) -> None:
    try:
        module = parse(text, name, make_context())
    except Diagnostic:
        pytest.skip("not a valid program on its own")
    try:
        run_pipeline(module, "propagate-shardings")
    except Diagnostic:
        pytest.skip("propagate-shardings refuses it")
    run_pipeline(module, "make-resharding-contiguous")
    assert check_contract(module) == []


# ---- check_contract catches violations -------------------------------------

_TP = "fusion.mesh @tp shape = [4]\n"


def _t(shape: str, axes: str, partial: str = "") -> str:
    p = f", partial = {partial}" if partial else ""
    return f"tensor<{shape}xf32, #fusion.sharding<@tp, [{axes}]{p}>>"


def _func(body: str, args: str, result: str) -> str:
    return _TP + f"func.func @f({args}) -> {result} {{\n{body}\n}}\n"


def test_contract_flags_resharding_op() -> None:
    a, r = _t("64x16", "DIDx, -"), _t("64x16", "-, -")
    text = _func(f"  %y = fusion.relu %x : ({a}) -> {r}\n  func.return %y : {r}", f"%x: {a}", r)
    problems = check_contract(parse(text))
    assert len(problems) == 1 and "'fusion.relu' op is resharding" in problems[0]


def test_contract_flags_non_contiguous_alltoall() -> None:
    a, r = _t("64x16", "DIDx, -"), _t("64x16", "-, DIDx")
    text = _func(f"  %y = fusion.set %x : ({a}) -> {r}\n  func.return %y : {r}", f"%x: {a}", r)
    problems = check_contract(parse(text))
    assert problems, "an alltoall of [16, 16] blocks cannot be contiguous without a layout change"
    assert all("alltoall" in p and "not outermost" in p for p in problems)
    assert not any("not a single-step" in p for p in problems)


def test_contract_flags_non_contiguous_gather_and_layout_mismatch() -> None:
    a, r = _t("8x64", "-, DIDx"), _t("8x64", "-, -")
    gather = _func(f"  %y = fusion.set %x : ({a}) -> {r}\n  func.return %y : {r}", f"%x: {a}", r)
    problems = check_contract(parse(gather))
    assert len(problems) == 1 and "allgather over dim 1" in problems[0] and "not outermost" in problems[0]
    mismatch = _func(
        f"  %n = fusion.neg %x {{alloc_order = array<i64: 1, 0>}} : ({a}) -> {a}\n"
        f"  %y = fusion.set %n : ({a}) -> {r}\n  func.return %y : {r}",
        f"%x: {a}",
        r,
    )
    problems = check_contract(parse(mismatch))
    assert any("differs from result's" in p for p in problems)


def test_contract_flags_two_changes_and_missing_sharding() -> None:
    grid = "fusion.mesh @g shape = [2, 4]\n"
    a = "tensor<16x32xf32, #fusion.sharding<@g, [DIDx, -]>>"
    r = "tensor<16x32xf32, #fusion.sharding<@g, [-, DIDy]>>"
    text = grid + f"func.func @f(%x: {a}) -> {r} {{\n  %y = fusion.set %x : ({a}) -> {r}\n  func.return %y : {r}\n}}\n"
    problems = check_contract(parse(text))
    assert len(problems) == 1 and "not a single-step reshard" in problems[0]
    u = "tensor<16x32xf32>"
    text = grid + f"func.func @f(%x: {a}) -> {u} {{\n  %y = fusion.relu %x : ({a}) -> {u}\n  func.return %y : {u}\n}}\n"
    problems = check_contract(parse(text))
    assert len(problems) == 1 and "result has no sharding" in problems[0]


# ---- reshard steps and plans ------------------------------------------------

MESHES = {"tp": Mesh("tp", (4,)), "g": Mesh("g", (2, 4))}


def _s(mesh: str, axes: list[str], partial: str | None = None) -> Sharding:
    return Sharding.from_axes(mesh, axes, partial)


def test_reshard_steps() -> None:
    shape = (16, 32)
    step = reshard_step(_s("tp", ["DIDx", "-"]), _s("tp", ["-", "-"]), shape, MESHES)
    assert step is not None and (step.kind, step.gather_dim) == (ALLGATHER, 0)
    step = reshard_step(_s("tp", ["DIDx", "-"]), _s("tp", ["Stream(4)", "-"]), shape, MESHES)
    assert step is not None and step.kind == ALLGATHER
    step = reshard_step(_s("tp", ["DIDx", "-"]), _s("tp", ["-", "DIDx"]), shape, MESHES)
    assert step is not None and (step.kind, step.gather_dim, step.scatter_dim) == (ALLTOALL, 0, 1)
    step = reshard_step(_s("tp", ["-", "-"], "DIDx"), _s("tp", ["-", "DIDx"]), shape, MESHES)
    assert step is not None and (step.kind, step.scatter_dim) == (REDUCE_SCATTER, 1)
    assert reshard_step(_s("tp", ["DIDx", "-"]), _s("tp", ["Stream(2)*DIDx", "-"]), shape, MESHES) is None
    assert reshard_step(_s("g", ["DIDx", "-"]), _s("g", ["-", "DIDy"]), shape, MESHES) is None


def test_plan_prefers_slicing_before_gathering() -> None:
    plan = plan_reshard(_s("g", ["DIDx", "-"]), _s("g", ["-", "DIDy"]), (16, 32), MESHES)
    assert plan is not None
    assert [step.kind for step, _ in plan] == [LOCAL_SLICE, ALLGATHER]
    assert plan[0][1] == _s("g", ["DIDx", "DIDy"])
    assert plan_reshard(_s("tp", ["DIDx", "-"]), _s("tp", ["-", "-"], "DIDx"), (16, 32), MESHES) is None

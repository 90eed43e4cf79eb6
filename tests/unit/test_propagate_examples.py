"""propagate-shardings on every program of examples/: afterwards no tensor
(block argument or op result) is left without a sharding, what the user
wrote is unchanged, and a second run changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue

from fuserc.dialects.fusion import sharding_of
from fuserc.ir import parse, to_text
from fuserc.passes.sharding_rules import is_resharding
from fuserc.pipeline import run_pipeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROGRAMS = sorted(EXAMPLES.glob("*.mlir"))


def tensor_values(module: ModuleOp) -> list[tuple[str, SSAValue]]:
    """(description, value) of every tensor block argument and op result
    inside a function."""
    out: list[tuple[str, SSAValue]] = []
    for func in module.walk():
        if not isinstance(func, FuncOp) or func.is_declaration:
            continue
        for block in func.body.blocks:
            out += [(f"@{func.sym_name.data} argument #{a.index}", a) for a in block.args]
        for op in func.walk():
            if op is not func:
                out += [(f"@{func.sym_name.data} result of {op.name}", r) for r in op.results]
    return [(d, v) for d, v in out if isinstance(v.type, TensorType)]


def test_examples_exist() -> None:
    assert PROGRAMS, f"no programs in {EXAMPLES}"


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_every_tensor_has_a_sharding(path: Path) -> None:
    module = parse(path.read_text(), str(path))
    before = [(d, sharding_of(v)) for d, v in tensor_values(module)]
    run_pipeline(module, "propagate-shardings")
    after = tensor_values(module)
    assert len(after) == len(before)
    missing = [d for d, v in after if sharding_of(v) is None]
    assert not missing, f"{path.name}: values without a sharding: {missing}"
    for (d, old), (_, v) in zip(before, after):
        if old is not None:
            assert sharding_of(v) == old, f"{path.name}: {d} changed from {old} to {sharding_of(v)}"
    for op in module.walk():
        is_resharding(op)  # defined for every op once all tensors are sharded
    text = to_text(module)
    assert to_text(run_pipeline(parse(text, str(path)), "propagate-shardings")) == text

"""The communication plan of an L-layer GPT (examples/python/gpt_model.py)
is linear in its layers: after propagate-shardings and
make-resharding-contiguous, every reshard of the forward and backward
priced as lower-to-host-ir lowers it, the L-layer model moves the 1-layer
model's bytes plus L - 1 times one layer's, and every reshard of an
activation-sized tensor ([tokens, hidden] or larger) is bf16. The backward
of the stacked layers is one component of undecided values for the search:
a search bounded by a budget, or one that prices a pin by the whole
function, gave the 4-layer model f32 reduce-scatters and all-reduces.
(tests/lit/passes/gpt-model-plan.mlir pins the report of 12 layers.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from fuserc.dialects.fusion import MeshOp, SetOp, shape_of, sharding_of
from fuserc.ir import compiling, make_context, parse
from fuserc.passes.sharding_search import PlanCost
from fuserc.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
from gpt_model import build  # noqa: E402

TOKENS, HIDDEN = 32, 64


def plan(layers: int, devices: int) -> tuple[float, list[str]]:
    """(bytes per device the reshards of main_fwd and main_bwd move, the
    element types of those of [tokens, hidden] or more elements)."""
    a = argparse.Namespace(layers=layers, hidden=HIDDEN, tokens=TOKENS, heads=4, ffn=128, vocab=256, dropout=0.0, dtype="bf16")
    ctx = make_context()
    with compiling():
        module = run_pipeline(parse(build(a, devices)[0].to_mlir(), "model", ctx), "autodiff,propagate-shardings,make-resharding-contiguous", ctx)
    meshes = [m for m in module.ops if isinstance(m, MeshOp)]
    cost = PlanCost({m.sym_name.data: m.model for m in meshes}, meshes)
    total, dtypes = 0.0, []
    for s in module.walk():
        if not isinstance(s, SetOp):
            continue
        src, dst = sharding_of(s.operands[0]), sharding_of(s.results[0])
        assert src is not None and dst is not None
        moved = cost.reshard_bytes(s.operands[0], src, dst)
        total += moved
        shape = shape_of(s.operands[0])
        if moved and len(shape) >= 2 and shape[0] * shape[1] >= TOKENS * HIDDEN:
            dtypes.append(str(s.operands[0].type.element_type))  # type: ignore[attr-defined]
    return total, dtypes


@pytest.mark.parametrize("devices", [2, 4])
def test_plan_linear_in_layers(devices: int) -> None:
    one, _ = plan(1, devices)
    layer = plan(2, devices)[0] - one
    assert layer > 0
    for layers in range(1, 17):
        total, dtypes = plan(layers, devices)
        assert total == pytest.approx(one + (layers - 1) * layer, rel=1e-12), layers
        assert dtypes and set(dtypes) == {"bf16"}, (layers, dtypes)

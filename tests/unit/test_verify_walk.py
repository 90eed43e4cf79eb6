"""The verification after each pass (`fuserc.ir.verify`): it verifies an op
once per signature, and a function and a `hir.launch` once per their own
signature and their bodies' shape, so what it must still catch at every
op: a value used outside the function that defines it, and a launch whose
body reads a value from outside, even where a launch of the same look was
verified before."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.dialects.func import FuncOp
from xdsl.ir import BlockArgument, OpResult

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import hir
from fuserc.dialects.fusion import FusionOp
from fuserc.ir import compiling, make_context, parse, verify, walk
from fuserc.pipeline import run_pipeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TWO = """fusion.mesh @tp shape = [2]
func.func @f(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = fusion.relu %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %n = fusion.neg %r : (tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %n : tensor<4x4xf32>
}
func.func @g(%b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %t = fusion.tanh %b : (tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %t : tensor<4x4xf32>
}
"""


ELEMENTWISE = """fusion.mesh @tp shape = [2]
func.func @f(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = fusion.add %a, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %n = fusion.neg %r : (tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %n : tensor<4x4xf32>
}
"""
"""One launch whose inputs are the host program's arguments."""


def _funcs(module):  # type: ignore[no-untyped-def]
    return {f.sym_name.data: f for f in module.ops if isinstance(f, FuncOp)}


@pytest.mark.parametrize("outside", ["result", "argument"])
def test_value_from_another_function(outside: str) -> None:
    """@g's tanh made to read @f's relu result or @f's argument: refused at
    the tanh, after the same module verified clean (its ops' signatures
    are all known by then)."""
    module = parse(TWO)
    verify(module)
    f, g = _funcs(module)["f"], _funcs(module)["g"]
    tanh = next(o for o in g.body.block.ops if isinstance(o, FusionOp))
    relu = next(o for o in f.body.block.ops if isinstance(o, FusionOp))
    tanh.operands[0] = relu.results[0] if outside == "result" else f.body.block.args[0]
    with pytest.raises(Diagnostic, match="'fusion.tanh' op operand #0 .* is used before its definition"):
        verify(module)


def test_use_before_definition_in_block() -> None:
    """An op moved before the op whose result it reads is refused."""
    module = parse(TWO)
    verify(module)
    f = _funcs(module)["f"]
    relu, neg = [o for o in f.body.block.ops if isinstance(o, FusionOp)]
    neg.detach()
    f.body.block.insert_op_before(neg, relu)
    with pytest.raises(Diagnostic, match="'fusion.neg' op operand #0 .* is used before its definition"):
        verify(module)


@pytest.mark.parametrize("outside", ["result", "argument"])
def test_launch_reading_outside_value(outside: str) -> None:
    """After the default pipeline, every launch verified: a launch's body op
    made to read the launch's own input from outside instead of through
    its region argument is refused, though a launch of the same classes
    and types was verified before. With an input that is a block argument
    outside (a host program's), the body op reads a block argument either
    way: only where in the launch's block it is defined tells them apart."""
    ctx = make_context()
    text = (EXAMPLES / "sp_mlp.mlir").read_text() if outside == "result" else ELEMENTWISE
    with compiling():
        module = run_pipeline(parse(text, "launches", ctx), "default", ctx)
        verify(module)
        want = BlockArgument if outside == "argument" else OpResult
        launch, j = next(
            (o, j) for o in module.walk() if isinstance(o, hir.LaunchOp)
            for j, v in enumerate(o.ins) if isinstance(v, want) and o.body.block.args[j].uses
        )  # fmt: skip
        arg = launch.body.block.args[j]
        body_op = next(o for o in launch.body.block.ops if arg in o.operands)
        body_op.operands[list(body_op.operands).index(arg)] = launch.ins[j]
        with pytest.raises(Diagnostic, match="uses a value defined outside it"):
            verify(module)


def test_walk_is_xdsls_order() -> None:
    """`fuserc.ir.walk`, the passes' walk, lists what xDSL's `walk()` yields,
    in its order, for a host program of nested regions (rank regions,
    pipelined loops, launches), for each op in it, and for a region."""
    ctx = make_context()
    with compiling():
        module = run_pipeline(parse((EXAMPLES / "sp_mlp.mlir").read_text(), "walk", ctx), "default", ctx)
    every = list(module.walk())
    assert any(len(o.regions) and any(len(i.regions) for i in o.walk() if i is not o) for o in every)  # nesting to walk
    assert walk(module) == every
    for op in every:
        assert walk(op) == list(op.walk())
    func = next(o for o in every if isinstance(o, FuncOp))
    assert walk(func.body) == list(func.body.walk())


def test_cached_shapes_and_placements() -> None:
    """A tensor type's shape (`shape_of`) and a sharding's placement, kept
    on the object after the first query, are what a fresh one gives."""
    from xdsl.dialects.builtin import TensorType, f32

    from fuserc.dialects.fusion import shape_of
    from fuserc.sharding import Sharding

    t = TensorType(f32, [4, 8])
    assert shape_of(t) == shape_of(t) == (4, 8) == tuple(TensorType(f32, [4, 8]).get_shape())
    s = Sharding.from_axes("tp", ["Stream(2)*DIDx", "DIDx*Stream(2)", "Stream(4)"])
    assert s.placement() is s.placement()
    assert s.placement() == Sharding.from_axes("tp", ["Stream(2)*DIDx", "DIDx", "-"])
    assert s == Sharding.from_axes("tp", ["Stream(2)*DIDx", "DIDx*Stream(2)", "Stream(4)"]) and hash(s) == hash(Sharding.from_axes("tp", ["Stream(2)*DIDx", "DIDx*Stream(2)", "Stream(4)"]))

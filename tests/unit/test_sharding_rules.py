"""The per-op sharding rules: `is_resharding` (nvFuser's truth table) and
the agreement of `local_result`, `forward` and `required_operands`."""

from __future__ import annotations

import pytest
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Operation

from fuserc.dialects.fusion import FusionOp, lookup_mesh, sharding_of
from fuserc.ir import parse
from fuserc.passes import sharding_rules as rules
from fuserc.sharding import Sharding

MESHES = "fusion.mesh @tp shape = [4]\nfusion.mesh @b shape = [4] devices = [4, 5, 6, 7]\nfusion.mesh @g shape = [2, 2]\n"


def sh(axes: str, mesh: str = "tp", partial: str | None = None) -> str:
    p = f", partial = {partial}" if partial else ""
    return f"#fusion.sharding<@{mesh}, [{axes}]{p}>"


def one_op(op_text: str, operands: list[str], result: str) -> FusionOp:
    """Parse a function holding one op `%y = OP_TEXT %a0, %a1 ... : (types) -> result`."""
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    kw = op_text.split(" ", 1)
    head, keywords = kw[0], (" " + kw[1] if len(kw) > 1 else "")
    text = (
        f"{MESHES}func.func @f({args}) -> {result} {{\n"
        f"  %y = {head} {names}{keywords} : ({', '.join(operands)}) -> {result}\n"
        f"  func.return %y : {result}\n}}\n"
    )
    module = parse(text)
    return next(o for o in module.walk() if isinstance(o, FusionOp))


def t(shape: str, sharding: str | None = None, elem: str = "f32") -> str:
    return f"tensor<{shape}x{elem}, {sharding}>" if sharding else f"tensor<{shape}x{elem}>"


CASES = [
    # (op, operand types, result type, resharding?)
    ("fusion.relu", [t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -")), False),
    ("fusion.relu", [t("8x8", sh("DIDx, -"))], t("8x8", sh("-, -")), True),
    ("fusion.relu", [t("8x8", sh("-, -"))], t("8x8", sh("DIDx, -")), True),
    ("fusion.relu", [t("8x8", sh("DIDx, -"))], t("8x8", sh("-, DIDx")), True),
    ("fusion.set", [t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -", "b")), True),
    # a Stream split inside a device split keeps placement; outside one it
    # interleaves the device blocks: another placement
    ("fusion.set", [t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx*Stream(2), -")), False),
    ("fusion.set", [t("8x8", sh("DIDx, -"))], t("8x8", sh("Stream(2)*DIDx, -")), True),
    ("fusion.relu", [t("8x8", sh("Stream(2)*DIDx, -"))], t("8x8", sh("Stream(2)*DIDx, -")), False),
    ("fusion.relu", [t("8x8", sh("Stream(2)*DIDx, -"))], t("8x8", sh("DIDx, -")), True),
    ("fusion.set", [t("8x8", sh("-, -", partial="DIDx"))], t("8x8", sh("-, -", partial="DIDx")), False),
    ("fusion.set", [t("8x8", sh("-, -", partial="DIDx"))], t("8x8", sh("DIDx, -")), True),
    ("fusion.add", [t("8x8", sh("DIDx, -")), t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -")), False),
    ("fusion.add", [t("8x8", sh("DIDx, -")), t("8x8", sh("-, -"))], t("8x8", sh("DIDx, -")), True),
    ("fusion.add", [t("8x8", sh("-, -", partial="DIDx"))] * 2, t("8x8", sh("-, -", partial="DIDx")), False),
    ("fusion.mul", [t("8x8", sh("-, -", partial="DIDx"))] * 2, t("8x8", sh("-, -", partial="DIDx")), True),
    ("fusion.exp", [t("8x8", sh("-, -", partial="DIDx"))], t("8x8", sh("-, -", partial="DIDx")), True),
    # sum over an unsharded dimension: local; over a sharded one: partial locally
    ("fusion.sum dims = [1]", [t("8x8", sh("DIDx, -"))], t("8", sh("DIDx")), False),
    ("fusion.sum dims = [1]", [t("8x8", sh("-, DIDx"))], t("8", sh("-")), True),
    ("fusion.sum dims = [1]", [t("8x8", sh("-, DIDx"))], t("8", sh("-", partial="DIDx")), False),
    ("fusion.max dims = [1]", [t("8x8", sh("-, DIDx"))], t("8", sh("-")), True),
    # matmul: x [DIDx, -] with a replicated weight computes [DIDx, -] locally
    ("fusion.matmul", [t("8x16", sh("DIDx, -")), t("16x8", sh("-, -"))], t("8x8", sh("DIDx, -")), False),
    ("fusion.matmul", [t("8x16", sh("DIDx, -")), t("16x8", sh("-, -"))], t("8x8", sh("-, -")), True),
    ("fusion.matmul", [t("8x16", sh("DIDx, -")), t("16x8", sh("-, -"))], t("8x8", sh("Stream(4), -")), True),
    ("fusion.matmul", [t("8x16", sh("-, DIDx")), t("16x8", sh("DIDx, -"))], t("8x8", sh("-, -", partial="DIDx")), False),
    ("fusion.matmul", [t("8x16", sh("-, DIDx")), t("16x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -")), True),
    ("fusion.matmul", [t("8x16", sh("-, DIDx")), t("16x8", sh("-, -"))], t("8x8", sh("-, -", partial="DIDx")), True),
    ("fusion.matmul", [t("8x16", sh("DIDx, -")), t("16x8", sh("-, DIDx"))], t("8x8", sh("-, DIDx")), True),
    ("fusion.linear", [t("8x16", sh("-, -")), t("32x16", sh("DIDx, -")), t("32", sh("DIDx"))], t("8x32", sh("-, DIDx")), False),
    ("fusion.linear", [t("8x16", sh("-, -")), t("32x16", sh("DIDx, -")), t("32", sh("-"))], t("8x32", sh("-, DIDx")), True),
    ("fusion.linear", [t("8x16", sh("-, DIDx")), t("32x16", sh("-, DIDx"))], t("8x32", sh("-, -", partial="DIDx")), False),
    ("fusion.linear", [t("8x16", sh("-, DIDx")), t("32x16", sh("-, DIDx")), t("32", sh("-"))], t("8x32", sh("-, -")), True),
    ("fusion.permute dims = [1, 0]", [t("8x16", sh("DIDx, -"))], t("16x8", sh("-, DIDx")), False),
    ("fusion.permute dims = [1, 0]", [t("8x16", sh("DIDx, -"))], t("16x8", sh("DIDx, -")), True),
    ("fusion.reshape", [t("8x6", sh("DIDx, -"))], t("48", sh("DIDx")), False),
    ("fusion.reshape", [t("6x8", sh("-, DIDx"))], t("48", sh("-")), True),
    ("fusion.broadcast_in_dim dims = [1]", [t("8", sh("DIDx"))], t("4x8", sh("-, DIDx")), False),
    ("fusion.broadcast_in_dim dims = [2]", [t("1", sh("-"))], t("8x4x4", sh("DIDx, -, -")), False),
    ("fusion.slice starts = [0, 0] limits = [8, 4]", [t("8x8", sh("DIDx, -"))], t("8x4", sh("DIDx, -")), False),
    ("fusion.slice starts = [0, 0] limits = [4, 8]", [t("8x8", sh("DIDx, -"))], t("4x8", sh("-, -")), True),
    ("fusion.softmax dim = 1", [t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -")), False),
    ("fusion.softmax dim = 1", [t("8x8", sh("-, DIDx"))], t("8x8", sh("-, DIDx")), True),
    # the transformer ops: a normalized, softmax or reduced dimension split
    # needs statistics across devices (resharding: the op is expanded)
    ("fusion.layer_norm dims = [1]", [t("8x16", sh("DIDx, -")), t("16", sh("-")), t("16", sh("-"))], t("8x16", sh("DIDx, -")), False),
    ("fusion.layer_norm dims = [1]", [t("8x16", sh("-, DIDx")), t("16", sh("DIDx"))], t("8x16", sh("-, DIDx")), True),
    ("fusion.rms_norm dims = [1]", [t("8x16", sh("DIDx, -")), t("16", sh("DIDx"))], t("8x16", sh("DIDx, -")), True),
    ("fusion.mean dims = [1]", [t("8x8", sh("DIDx, -"))], t("8", sh("DIDx")), False),
    ("fusion.mean dims = [1]", [t("8x8", sh("-, DIDx"))], t("8", sh("-")), True),
    ("fusion.var dims = [0] correction = 0", [t("8x8", sh("-, DIDx"))], t("8", sh("DIDx")), False),
    ("fusion.min dims = [0]", [t("8x8", sh("DIDx, -"))], t("8", sh("-")), True),
    ("fusion.log_softmax dim = 0", [t("8x8", sh("-, DIDx"))], t("8x8", sh("-, DIDx")), False),
    ("fusion.log_softmax dim = 0", [t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -")), True),
    # attention: local over split heads (k and v split alike), not over a split sequence
    ("fusion.sdpa causal = true", [t("2x8x4x4", sh("-, DIDx, -, -")), t("2x4x4x4", sh("-, DIDx, -, -")), t("2x4x4x4", sh("-, DIDx, -, -"))],
     t("2x8x4x4", sh("-, DIDx, -, -")), False),
    ("fusion.sdpa", [t("2x4x8x4", sh("-, -, DIDx, -")), t("2x4x8x4", sh("-, -, -, -")), t("2x4x8x4", sh("-, -, -, -"))],
     t("2x4x8x4", sh("-, -, DIDx, -")), True),
    ("fusion.sdpa", [t("2x4x8x4", sh("-, DIDx, -, -")), t("2x4x8x4", sh("-, -, -, -")), t("2x4x8x4", sh("-, -, -, -"))],
     t("2x4x8x4", sh("-, DIDx, -, -")), True),
    # a vocabulary split makes a partial sum of lookups; the loss expands
    ("fusion.embedding", [t("2x3", sh("-, -"), "i64"), t("16x8", sh("DIDx, -"))], t("2x3x8", sh("-, -, -", partial="DIDx")), False),
    ("fusion.embedding", [t("2x3", sh("-, -"), "i64"), t("16x8", sh("DIDx, -"))], t("2x3x8", sh("-, -, -")), True),
    ("fusion.embedding", [t("4x3", sh("DIDx, -"), "i64"), t("16x8", sh("-, -"))], t("4x3x8", sh("DIDx, -, -")), False),
    ("fusion.embedding", [t("4x3", sh("-, -"), "i64"), t("16x8", sh("-, DIDx"))], t("4x3x8", sh("-, -, DIDx")), False),
    ("fusion.embedding_grad vocab = 16", [t("4x3x8", sh("-, -, DIDx")), t("4x3", sh("-, -"), "i64")], t("16x8", sh("-, DIDx")), False),
    ("fusion.embedding_grad vocab = 16", [t("4x3x8", sh("DIDx, -, -")), t("4x3", sh("DIDx, -"), "i64")], t("16x8", sh("-, -")), True),
    ("fusion.cross_entropy", [t("8x16", sh("DIDx, -")), t("8", sh("DIDx"), "i64")], "tensor<f32, #fusion.sharding<@tp, []>>", True),
    ("fusion.cross_entropy", [t("8x16", sh("-, DIDx")), t("8", sh("-"), "i64")], "tensor<f32, #fusion.sharding<@tp, []>>", True),
    ("fusion.cross_entropy", [t("8x16", sh("-, -")), t("8", sh("-"), "i64")], "tensor<f32, #fusion.sharding<@tp, []>>", False),
    # routing: the dimension selected, sorted, scanned or scattered along is
    # gathered; counts of split ids are partial; grouped GEMMs gather rows and K
    ("fusion.argsort dim = 0", [t("8", sh("DIDx"), "i64")], t("8", sh("-"), "i64"), True),
    ("fusion.cumsum dim = 1", [t("8x8", sh("DIDx, -"))], t("8x8", sh("DIDx, -")), False),
    ("fusion.bincount length = 4", [t("8", sh("DIDx"), "i64")], t("4", sh("-", partial="DIDx"), "i64"), False),
    ("fusion.index_select dim = 0", [t("8x8", sh("-, DIDx")), t("16", sh("DIDx"), "i64")], t("16x8", sh("DIDx, -")), True),
    ("fusion.index_select dim = 0", [t("8x8", sh("-, -")), t("16", sh("DIDx"), "i64")], t("16x8", sh("DIDx, -")), False),
    ("fusion.index_add dim = 0", [t("8x8", sh("-, DIDx")), t("16", sh("-"), "i64"), t("16x8", sh("-, DIDx"))], t("8x8", sh("-, DIDx")), False),
    ("fusion.grouped_matmul", [t("16x8", sh("-, -")), t("4x8x8", sh("-, -, DIDx")), t("4", sh("-"), "i64")], t("16x8", sh("-, DIDx")), False),
    ("fusion.grouped_matmul", [t("16x8", sh("-, DIDx")), t("4x8x8", sh("-, DIDx, -")), t("4", sh("-"), "i64")], t("16x8", sh("-, -", partial="DIDx")), True),
    # split experts (expert parallelism): each device the rows of its experts, a partial sum
    ("fusion.grouped_matmul", [t("16x8", sh("-, -")), t("4x8x8", sh("DIDx, -, -")), t("4", sh("-"), "i64")], t("16x8", sh("-, -", partial="DIDx")), False),
    ("fusion.grouped_matmul", [t("16x8", sh("-, -")), t("4x8x8", sh("DIDx, -, -")), t("4", sh("-"), "i64")], t("16x8", sh("-, -")), True),
    ("fusion.grouped_matmul", [t("8x16", sh("-, -")), t("16x8", sh("-, -")), t("4", sh("-"), "i64")], t("4x8x8", sh("DIDx, -, -")), False),
    ("fusion.grouped_matmul", [t("16x8", sh("DIDx, -")), t("4x8x8", sh("-, -, -")), t("4", sh("-"), "i64")], t("16x8", sh("DIDx, -")), True),
    # dropout and iota: any block, computed where it lies
    ("fusion.dropout p = 0.5", [t("8x8", sh("DIDx, -")), "tensor<i64, #fusion.sharding<@tp, []>>"], t("8x8", sh("DIDx, -")), False),
    ("fusion.dropout p = 0.5", [t("8x8", sh("DIDx, -")), "tensor<i64, #fusion.sharding<@tp, []>>"], t("8x8", sh("-, DIDx")), True),
    ("fusion.iota dim = 0", [], t("8x8", sh("-, DIDx"), "i64"), False),
    ("fusion.concat dim = 1", [t("8x4", sh("DIDx, -")), t("8x8", sh("DIDx, -"))], t("8x12", sh("DIDx, -")), False),
    ("fusion.concat dim = 0", [t("8x4", sh("DIDx, -")), t("8x4", sh("DIDx, -"))], t("16x4", sh("DIDx, -")), True),
    # broadcasting: operands align from the right; rank-0 ones anywhere
    ("fusion.add", [t("8x8", sh("DIDx, -")), t("8", sh("-"))], t("8x8", sh("DIDx, -")), False),
    ("fusion.add", [t("8x8", sh("-, DIDx")), t("8", sh("DIDx"))], t("8x8", sh("-, DIDx")), False),
    ("fusion.add", [t("8x8", sh("DIDx, -")), t("8", sh("DIDx"))], t("8x8", sh("DIDx, -")), True),
    ("fusion.pow", [t("8x8", sh("DIDx, -")), "tensor<f32, #fusion.sharding<@tp, []>>"], t("8x8", sh("DIDx, -")), False),
    ("fusion.where", [t("8x8", sh("DIDx, -"), "i1"), t("8x8", sh("DIDx, -")), "tensor<f32, #fusion.sharding<@tp, []>>"],
     t("8x8", sh("DIDx, -")), False),
    ("fusion.lt", [t("8x8", sh("DIDx, -")), t("8x1", sh("DIDx, -"))], t("8x8", sh("DIDx, -"), "i1"), False),
    ("fusion.lt", [t("8x8", sh("DIDx, -")), t("1x8", sh("-, -"))], t("8x8", sh("-, DIDx"), "i1"), True),
    # a contraction split over several mesh axes: a partial sum over all of them
    ("fusion.matmul", [t("8x16", sh("-, DIDy*DIDx", "g")), t("16x8", sh("DIDy*DIDx, -", "g"))], t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), False),
    ("fusion.matmul", [t("8x16", sh("-, DIDy*DIDx", "g")), t("16x8", sh("DIDy*DIDx, -", "g"))], t("8x8", sh("-, -", "g", "DIDx")), True),
    ("fusion.matmul", [t("8x16", sh("-, DIDy*DIDx", "g")), t("16x8", sh("DIDy, -", "g"))], t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), True),
    ("fusion.sum dims = [0]", [t("16x8", sh("DIDy*DIDx, -", "g"))], t("8", sh("-", "g", "[DIDx, DIDy]")), False),
    ("fusion.sum dims = [0, 1]", [t("16x8", sh("DIDy, DIDx", "g"))], "tensor<f32, #fusion.sharding<@g, [], partial = [DIDy, DIDx]>>", False),
    ("fusion.sum dims = [0]", [t("16x8", sh("DIDy, DIDx", "g"))], t("8", sh("DIDx", "g", "DIDy")), False),
    ("fusion.linear", [t("8x16", sh("-, DIDx*DIDy", "g")), t("32x16", sh("-, DIDx*DIDy", "g"))], t("8x32", sh("-, -", "g", "[DIDy, DIDx]")), False),
    ("fusion.add", [t("8x8", sh("-, -", "g", "[DIDy, DIDx]"))] * 2, t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), False),
    ("fusion.add", [t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), t("8x8", sh("-, -", "g", "DIDy"))], t("8x8", sh("-, -", "g", "DIDy")), True),
    ("fusion.mul", [t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), t("8x8", sh("-, -", "g"))], t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), False),
    ("fusion.exp", [t("8x8", sh("-, -", "g", "[DIDy, DIDx]"))], t("8x8", sh("-, -", "g", "[DIDy, DIDx]")), True),
    ("fusion.set", [t("8x8", sh("-, -", "g", "[DIDy, DIDx]"))], t("8x8", sh("-, -", "g")), True),
    ("fusion.relu", [t("8x8")], t("8x8"), False),
]


@pytest.mark.parametrize("op_text,operands,result,expected", CASES)
def test_is_resharding(op_text: str, operands: list[str], result: str, expected: bool) -> None:
    assert rules.is_resharding(one_op(op_text, operands, result)) is expected


def test_is_resharding_needs_every_sharding() -> None:
    op = one_op("fusion.relu", [t("8x8", sh("DIDx, -"))], t("8x8"))
    with pytest.raises(ValueError, match="run propagate-shardings first"):
        rules.is_resharding(op)


def test_non_tensor_ops_are_not_resharding() -> None:
    op = one_op("fusion.relu", [t("8x8", sh("DIDx, -"))], t("8x8", sh("-, -")))
    ret = op.next_op
    assert isinstance(ret, ReturnOp) and not rules.is_resharding(ret)


def _operand_shardings(op: Operation) -> list[Sharding]:
    out = [sharding_of(v) for v in op.operands]
    assert all(s is not None for s in out)
    return out  # type: ignore[return-value]


@pytest.mark.parametrize("op_text,operands,result,expected", CASES[:-1])
def test_forward_is_local_result_when_local(op_text: str, operands: list[str], result: str, expected: bool) -> None:
    op = one_op(op_text, operands, result)
    mesh_of = lambda name: lookup_mesh(op, name)  # noqa: E731
    local = rules.local_result(op, _operand_shardings(op), mesh_of)
    if local is not None:
        assert rules.forward(op, _operand_shardings(op), mesh_of) == local


@pytest.mark.parametrize("op_text,operands,result,expected", CASES[:-1])
def test_required_operands_compute_the_result(op_text: str, operands: list[str], result: str, expected: bool) -> None:
    """Resharded to `required_operands`, an op computes its result locally,
    unless no operands can: a split on a dimension the op needs whole
    (softmax's), a partial sum the op neither makes nor carries."""
    op = one_op(op_text, operands, result)
    res = sharding_of(op.results[0])
    assert res is not None
    mesh_of = lambda name: lookup_mesh(op, name)  # noqa: E731
    m = rules.op_map(op)
    needs_whole = {t.dim for ts in m.operands for t in ts if t.kind in (rules.DROP, rules.STAT)} if m else set()
    if any(res.dims[d] for d in needs_whole if d is not None):
        return
    if res.partial and not rules.can_make_partial(op, res.partial, mesh_of(res.mesh)) and rules.carries_partial(op) != rules.ALL:
        return
    req = rules.required_operands(op, res, mesh_of)
    assert rules.computes_locally(op, req, res, mesh_of), (op_text, req)


def test_forward_priorities() -> None:
    """Weight before input (nvFuser), most splits first for elementwise."""
    op = one_op("fusion.matmul", [t("8x16", sh("DIDx, -")), t("16x8", sh("-, DIDx"))], t("8x8"))
    mesh_of = lambda name: lookup_mesh(op, name)  # noqa: E731
    assert str(rules.forward(op, _operand_shardings(op), mesh_of)) == sh("-, DIDx")
    op = one_op("fusion.add", [t("8x8", sh("-, -")), t("8x8", sh("DIDx, -"))], t("8x8"))
    assert str(rules.forward(op, _operand_shardings(op), mesh_of)) == sh("DIDx, -")
    op = one_op("fusion.add", [t("8x8", sh("-, DIDx")), t("8x8", sh("DIDx, -"))], t("8x8"))
    assert str(rules.forward(op, _operand_shardings(op), mesh_of)) == sh("-, DIDx")


@pytest.mark.parametrize(
    "src,dst,groups",
    [
        ((8, 6), (48,), [([0, 1], [0])]),
        ((48,), (8, 6), [([0], [0, 1])]),
        ((6, 4), (4, 6), [([0, 1], [0, 1])]),
        ((8, 6), (1, 8, 6), [([], [0]), ([0], [1]), ([1], [2])]),
        ((4, 1, 6), (4, 6), [([0], [0]), ([1], []), ([2], [1])]),
        ((2, 3, 4), (6, 4), [([0, 1], [0]), ([2], [1])]),
    ],
)
def test_reshape_groups(src, dst, groups) -> None:
    assert rules.reshape_groups(src, dst) == groups


@pytest.mark.parametrize(
    "src,dst,axes,want",
    [
        # a nested split cut between dimensions (token groups of a mesh [2, 2]), and back
        ((32, 16), (2, 16, 16), ["DIDy*DIDx", "-"], ["DIDy", "DIDx", "-"]),
        ((2, 16, 2, 16), (32, 2, 16), ["DIDy", "DIDx", "-", "-"], ["DIDy*DIDx", "-", "-"]),
        # the outer factor is not the outer extent: the whole split stays outermost where it divides
        ((32, 16), (4, 8, 16), ["DIDy*DIDx", "-"], ["DIDy*DIDx", "-", "-"]),
        ((32, 16), (8, 4, 16), ["DIDy*DIDx", "-"], ["DIDy*DIDx", "-", "-"]),
        # a merge whose outer dimension is not split whole: its inner split cannot carry
        ((4, 8, 16), (32, 16), ["DIDy", "DIDx", "-"], None),
        ((4, 8, 16), (32, 16), ["DIDy", "-", "-"], ["DIDy", "-"]),
    ],
)
def test_reshape_sharding_nested(src, dst, axes, want) -> None:
    from fuserc.sharding import Mesh

    got = rules.reshape_sharding(Sharding.from_axes("m", axes), src, dst, Mesh("m", (2, 2)), True)
    assert (got.axes_text() if got is not None else None) == want


@pytest.mark.parametrize(
    "dst,steps",
    [
        # one allreduce over the team spanning both axes, not one per axis
        (["-", "-"], [("allreduce", ("DIDy", "DIDx"), None)]),
        # one reduce-scatter, its blocks in the team's row-major order
        (["DIDy*DIDx", "-"], [("reduce_scatter", ("DIDy", "DIDx"), 0)]),
        # a split over one axis: reduce-scattered over it, reduced over the other
        (["DIDx", "-"], [("reduce_scatter", "DIDx", 0), ("allreduce", "DIDy", None)]),
    ],
)
def test_reshards_of_a_partial_over_two_axes(dst: list[str], steps: list[tuple]) -> None:
    from fuserc.passes.reshard_util import plan_reshard
    from fuserc.sharding import Mesh

    meshes = {"g": Mesh("g", (2, 4))}
    src = Sharding.from_axes("g", ["-", "-"], ["DIDx", "DIDy"])
    assert src.partial == ("DIDy", "DIDx")
    plan = plan_reshard(src, Sharding.from_axes("g", dst), (16, 8), meshes)
    assert plan is not None and [(s.kind, s.ptype, s.scatter_dim) for s, _ in plan] == steps
    assert plan[-1][1] == Sharding.from_axes("g", dst)


def test_reshard_plans_kept_per_meshes() -> None:
    """`plan_reshard` and `reshard_step` are found once per placements,
    shape and meshes: the same shardings and shape on a mesh of another
    shape plan anew, and a caller may change the plan it got."""
    from fuserc.passes.reshard_util import plan_reshard, reshard_step
    from fuserc.sharding import Mesh

    src, dst = Sharding.from_axes("g", ["DIDx", "-"]), Sharding.from_axes("g", ["-", "DIDx"])
    two, four = {"g": Mesh("g", (2,))}, {"g": Mesh("g", (4,))}
    plan = plan_reshard(src, dst, (8, 6), two)
    assert plan is not None and [s.kind for s, _ in plan] == ["alltoall"]
    step = reshard_step(src, dst, (8, 6), two)
    assert step is not None and step.kind == "alltoall"
    plan.clear()
    assert plan_reshard(src, dst, (8, 6), dict(two)) == [(step, dst)]
    # 6 columns do not split over 4 devices: no plan, no step
    assert plan_reshard(src, dst, (8, 6), four) is None and reshard_step(src, dst, (8, 6), four) is None
    assert plan_reshard(src, dst, (8, 8), four) == [(reshard_step(src, dst, (8, 8), four), dst)]

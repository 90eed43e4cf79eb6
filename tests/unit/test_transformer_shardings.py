"""The sharding rules of the transformer ops and the communication they
imply once lowered (propagate-shardings, make-resharding-contiguous,
lower-to-host-ir on a mesh of 4): statistics across devices instead of
gathers for norms, softmaxes and reductions over a split dimension; a
vocabulary split over devices never gathered for embedding and
cross_entropy; attention local over split heads, a sequence-split q
gathered; pointwise ops, broadcasting, iota and dropout local."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fuserc.dialects import hir
from fuserc.dialects.fusion import FusionOp, shape_of, sharding_of
from fuserc.ir import parse
from fuserc.pipeline import run_pipeline

LOWER = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"
COMMS = (hir.AllgatherOp, hir.AllreduceOp, hir.ReduceScatterOp, hir.BroadcastOp, hir.ScatterOp, hir.GatherOp,
         hir.ReduceOp, hir.AlltoallOp, hir.SendOp, hir.RecvOp)  # fmt: skip


def _s(*axes: str) -> str:
    return f"#fusion.sharding<@m, [{', '.join(axes)}]>"


def program(args: dict[str, str], body: str, results: list[tuple[str, str]]) -> str:
    """A function on a mesh of 4 devices."""
    params = ", ".join(f"%{n}: {t}" for n, t in args.items())
    rtypes = ", ".join(t for _, t in results)
    rets = ", ".join(f"%{n}" for n, _ in results)
    return (
        "fusion.mesh @m shape = [4]\n"
        f"func.func @main({params}) -> ({rtypes}) {{\n{body}\n  func.return {rets} : {rtypes}\n}}\n"
    )


def derived_backward(devices: int, params: str, line: str, result: str, pipeline: str) -> Any:
    """@main_bwd of `%z = ...` (`line`) over a mesh @m of `devices`, after `pipeline`."""
    text = f"fusion.mesh @m shape = [{devices}]\nfunc.func @main({params}) -> {result} {{\n  {line}\n  func.return %z : {result}\n}}\n"
    module = parse(text)
    run_pipeline(module, pipeline)
    return next(o for o in module.ops if getattr(o, "sym_name", None) is not None and o.sym_name.data == "main_bwd")


def comms(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(name, local shape of the buffer sent) of every communication of the
    lowered program, in order."""
    module = run_pipeline(parse(text), LOWER)
    return [
        (op.name.removeprefix("hir."), shape_of(op.operands[0]))
        for op in module.walk()
        if isinstance(op, COMMS)
    ]


def propagated(text: str, name: str) -> str:
    """The sharding propagate-shardings gives the value named `name`."""
    module = run_pipeline(parse(text), "propagate-shardings")
    value = next(op.results[0] for op in module.walk() if isinstance(op, FusionOp) and op.results[0].name_hint == name)
    s = sharding_of(value)
    assert s is not None
    return str(s)


X3 = "tensor<4x8x16xf32, {}>"


# ---- norms -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_over_split_hidden_reduces_statistics_not_x(op: str) -> None:
    """A normalized dimension split over devices: per-row statistics (4x8x1
    each) are all-reduced, x is never gathered, and the result stays split
    as x (propagated so when not given)."""
    x, w = X3.format(_s("-", "-", "DIDx")), f"tensor<16xf32, {_s('DIDx')}>"
    operands = "%x, %w, %w" if op == "layer_norm" else "%x, %w"
    types = f"{x}, {w}, {w}" if op == "layer_norm" else f"{x}, {w}"
    text = program({"x": x, "w": w}, f"  %y = fusion.{op} {operands} dims = [2] : ({types}) -> {x}", [("y", x)])
    stats = [("allreduce", (4, 8, 1))] * (2 if op == "layer_norm" else 1)  # mean and variance / mean square
    assert comms(text) == stats
    loose = text.replace(f"-> {x}\n", "-> tensor<4x8x16xf32>\n").replace(f"-> ({x})", "-> (tensor<4x8x16xf32>)")
    loose = loose.replace(f"func.return %y : {x}", "func.return %y : tensor<4x8x16xf32>")
    assert propagated(loose, "y") == "#fusion.sharding<@m, [-, -, DIDx]>"


def test_norm_over_two_dims_one_split() -> None:
    x, w = X3.format(_s("-", "DIDx", "-")), f"tensor<8x16xf32, {_s('DIDx', '-')}>"
    text = program({"x": x, "w": w}, f"  %y = fusion.layer_norm %x, %w dims = [1, 2] : ({x}, {w}) -> {x}", [("y", x)])
    assert comms(text) == [("allreduce", (4, 1, 1))] * 2


def test_norm_with_split_batch_is_local() -> None:
    x, w = X3.format(_s("DIDx", "-", "-")), "tensor<16xf32>"
    text = program({"x": x, "w": w}, f"  %y = fusion.rms_norm %x, %w dims = [2] : ({x}, {w}) -> {x}", [("y", x)])
    assert comms(text) == []


# ---- reductions and softmaxes over a split dimension -----------------------------------------


@pytest.mark.parametrize(
    "op, result, expected",
    [
        ("mean %x dims = [1]", "tensor<4x16xf32>", [("allreduce", (4, 16))]),
        ("mean %x dims = [1] keepdim = true", "tensor<4x1x16xf32>", [("allreduce", (4, 1, 16))]),
        ("var %x dims = [1]", "tensor<4x16xf32>", [("allreduce", (4, 1, 16)), ("allreduce", (4, 16))]),
        ("var %x dims = [1, 2] correction = 0", "tensor<4xf32>", [("allreduce", (4, 1, 1)), ("allreduce", (4,))]),
        # per-device minima (1x4x16 on each device): x itself is not gathered
        ("min %x dims = [1]", "tensor<4x16xf32>", [("allgather", (1, 4, 16))]),
        ("mean %x dims = [0, 2]", f"tensor<8xf32, {_s('DIDx')}>", []),
    ],
)
def test_reductions_over_split_dims(op: str, result: str, expected: list) -> None:
    x = X3.format(_s("-", "DIDx", "-"))
    text = program({"x": x}, f"  %y = fusion.{op} : ({x}) -> {result}", [("y", result)])
    assert comms(text) == expected


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_split_dim_reduces_max_and_sum(op: str) -> None:
    """Rows split over 4 devices along the softmax dim: per-device maxima
    (8 each) gathered, the sum of exponentials all-reduced; x stays."""
    x = f"tensor<8x64xf32, {_s('-', 'DIDx')}>"
    text = program({"x": x}, f"  %y = fusion.{op} %x dim = 1 : ({x}) -> {x}", [("y", x)])
    assert comms(text) == [("allgather", (1, 8)), ("allreduce", (8, 1))]


# ---- vocabulary-parallel ops ------------------------------------------------------------------


def test_embedding_vocab_split_sums_lookups() -> None:
    """Each device looks its block of rows up (zeros elsewhere): the result
    is reduced (reduce-scattered for a sequence-parallel result), the 32x16
    table never moves, although gathering it would move fewer bytes here."""
    table = f"tensor<32x16xf32, {_s('DIDx', '-')}>"
    ids = f"tensor<4x6xi64, {_s('-', '-')}>"

    def lookup(result: str) -> str:
        return program({"ids": ids, "t": table},
                       f"  %y = fusion.embedding %ids, %t : ({ids}, {table}) -> {result}", [("y", result)])

    assert comms(lookup("tensor<4x6x16xf32>")) == [("allreduce", (4, 6, 16))]
    assert comms(lookup(f"tensor<4x6x16xf32, {_s('DIDx', '-', '-')}>")) == [("reduce_scatter", (4, 6, 16))]


def test_embedding_hidden_split_is_local() -> None:
    table = f"tensor<32x16xf32, {_s('-', 'DIDx')}>"
    res = f"tensor<4x6x16xf32, {_s('-', '-', 'DIDx')}>"
    text = program({"ids": "tensor<4x6xi64>", "t": table},
                   f"  %y = fusion.embedding %ids, %t : (tensor<4x6xi64>, {table}) -> {res}", [("y", res)])
    assert comms(text) == []


@pytest.mark.parametrize(
    "logits, labels",
    [(_s("-", "DIDx"), ""), (_s("DIDx", "-"), _s("DIDx"))],
    ids=["classes-split", "rows-split"],
)
def test_cross_entropy_never_gathers_logits(logits: str, labels: str) -> None:
    """Only per-row statistics and the loss move: no buffer with the 32
    classes (the logits) is ever communicated."""
    lt, yt = f"tensor<8x32xf32, {logits}>", (f"tensor<8xi64, {labels}>" if labels else "tensor<8xi64>")
    text = program({"l": lt, "y": yt}, f"  %z = fusion.cross_entropy %l, %y : ({lt}, {yt}) -> tensor<f32>",
                   [("z", "tensor<f32>")])  # fmt: skip
    moved = comms(text)
    assert moved and all(math.prod(shape) <= 8 for _, shape in moved), moved  # the local logits have 64


@pytest.mark.parametrize(("devices", "axes"), [(1, "-, -"), (4, "-, DIDx")])
def test_cross_entropy_gradient_makes_no_f32_logits(devices: int, axes: str) -> None:
    """The cotangent of bf16 logits: on one device one launch region (the
    cast, the row max and sum, the one-hot and the scale) whose only [rows,
    classes] buffer is the bf16 result (a softmax op, a launch of its own,
    made two f32 ones, each twice the logits' bytes); with the classes
    split, the one-hot is the local block's (no buffer of all the classes)
    and the regions between the max's and the sum's collectives keep at
    most the f32 logits and their shifted values."""
    lt, yt = f"tensor<8x32xbf16, #fusion.sharding<@m, [{axes}]>>", "tensor<8xi64>"
    bwd = derived_backward(devices, f"%l: {lt}, %y: {yt}", f"%z = fusion.cross_entropy %l, %y : ({lt}, {yt}) -> tensor<bf16>", "tensor<bf16>", "autodiff,default")
    local = (8, 32 // devices)
    allocs = [o.results[0].type for o in bwd.walk() if isinstance(o, hir.AllocOp)]
    assert not any(32 in t.get_shape() for t in allocs if devices > 1), allocs
    wide = sorted(str(t.element_type) for t in allocs if tuple(t.get_shape()) == local)
    assert wide == (["bf16"] if devices == 1 else ["bf16", "f32", "f32"]), wide
    if devices == 1:
        launch = next(o for o in bwd.walk() if isinstance(o, hir.LaunchOp) and any(tuple(r.type.get_shape()) == local for r in o.outs))
        assert {"fusion.max", "fusion.sum", "fusion.exp", "fusion.iota"} <= {o.name for o in launch.body.walk()}


# ---- attention -----------------------------------------------------------------------------------


def _sdpa(q: str, kv: str, result: str, kw: str = "causal = true") -> str:
    return program({"q": q, "k": kv, "v": kv}, f"  %o = fusion.sdpa %q, %k, %v {kw} : ({q}, {kv}, {kv}) -> {result}",
                   [("o", result)])  # fmt: skip


def test_sdpa_split_heads_is_local_with_gqa() -> None:
    q = f"tensor<2x8x16x8xf32, {_s('-', 'DIDx', '-', '-')}>"
    kv = f"tensor<2x4x16x8xf32, {_s('-', 'DIDx', '-', '-')}>"
    assert comms(_sdpa(q, kv, q, "scale = 0.25 causal = true")) == []
    loose = _sdpa(q, kv, "tensor<2x8x16x8xf32>")
    assert propagated(loose, "o") == "#fusion.sharding<@m, [-, DIDx, -, -]>"


def test_sdpa_sequence_split_q_is_ring_attention() -> None:
    """q split on its sequence: k and v are cut alike where they lie (no
    traffic) and their blocks pass around the ring; nothing is gathered."""
    q = f"tensor<2x4x16x8xf32, {_s('-', '-', 'DIDx', '-')}>"
    moved = comms(_sdpa(q, "tensor<2x4x16x8xf32>", q))
    assert {name for name, _ in moved} == {"send", "recv"}, moved
    # causal: the ring's blocks in the zigzag layout (two chunks of 2 of the
    # 16 rows), and the half-blocks of the exchange into it
    assert {shape for _, shape in moved} == {(2, 2, 4, 2, 8), (2, 4, 2, 8)}, moved


# ---- local ops --------------------------------------------------------------------------------------


def test_pointwise_broadcasting_iota_dropout_are_local() -> None:
    x = f"tensor<8x16xf32, {_s('DIDx', '-')}>"
    i = f"tensor<8x16xi64, {_s('DIDx', '-')}>"
    body = "\n".join([
        "  %c = fusion.constant 0.5 : () -> tensor<f32>",
        f"  %a = fusion.add %x, %b : ({x}, tensor<16xf32>) -> {x}",
        f"  %p = fusion.pow %a, %c : ({x}, tensor<f32>) -> {x}",
        f"  %m = fusion.lt %p, %r : ({x}, tensor<8x1xf32, {_s('DIDx', '-')}>) -> tensor<8x16xi1, {_s('DIDx', '-')}>",
        f"  %w = fusion.where %m, %p, %c : (tensor<8x16xi1, {_s('DIDx', '-')}>, {x}, tensor<f32>) -> {x}",
        f"  %d = fusion.dropout %w, %s p = 0.5 : ({x}, tensor<i64>) -> {x}",
        f"  %i = fusion.iota dim = 0 : () -> {i}",
    ])  # fmt: skip
    text = program({"x": x, "b": "tensor<16xf32>", "r": f"tensor<8x1xf32, {_s('DIDx', '-')}>", "s": "tensor<i64>"},
                   body, [("d", x), ("i", i)])  # fmt: skip
    assert comms(text) == []


def test_concat_along_a_split_dim_gathers_otherwise_local() -> None:
    a = f"tensor<8x4xf32, {_s('DIDx', '-')}>"
    b = f"tensor<8x8xf32, {_s('DIDx', '-')}>"
    r = f"tensor<8x12xf32, {_s('DIDx', '-')}>"
    assert comms(program({"a": a, "b": b}, f"  %y = fusion.concat %a, %b dim = 1 : ({a}, {b}) -> {r}", [("y", r)])) == []
    r0 = "tensor<16x4xf32>"
    moved = comms(program({"a": a}, f"  %y = fusion.concat %a, %a dim = 0 : ({a}, {a}) -> {r0}", [("y", r0)]))
    assert moved and all(name == "allgather" for name, _ in moved)


@pytest.mark.parametrize(
    ("devices", "table_axes", "ids_axes", "scatter"),
    [(1, "DIDx, -", "-", True), (4, "DIDx, -", "-", False), (4, "-, -", "DIDx", False), (4, "-, -", "-", True)],
)
def test_embedding_gradient_scatters_rows_where_everything_is_local(devices: int, table_axes: str, ids_axes: str, scatter: bool) -> None:
    """The table's gradient is `embedding_grad` (PyTorch's embedding
    backward) where the table and the ids are whole on every device (a mesh
    of one device, or nothing split), and a one-hot GEMM where the
    vocabulary or the tokens are split (its contraction sums the devices'
    rows)."""
    table = f"tensor<32x6xf32, #fusion.sharding<@m, [{table_axes}]>>"
    ids = f"tensor<8xi64, #fusion.sharding<@m, [{ids_axes}]>>"
    bwd = derived_backward(devices, f"%ids: {ids}, %t: {table}", f"%z = fusion.embedding %ids, %t : ({ids}, {table}) -> tensor<8x6xf32>", "tensor<8x6xf32>", "autodiff")
    names = [o.name for o in bwd.walk()]
    assert ("fusion.embedding_grad" in names) == scatter and ("fusion.matmul" in names) != scatter, names

"""The reference evaluator against direct torch calls, for every fusion op and
every element type the op accepts, in the declared dtypes and in float64."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import fusion
from fuserc.ir import parse
from fuserc.runtime.evaluator import reference
from fuserc.dialects.interfaces import element_type, torch_dtype
from fuserc.runtime.evaluator.reference import evaluate, reference_op

Shape = tuple[int, ...]
Tensors = list[torch.Tensor]

# Written out here rather than taken from the module, so the mapping is checked too.
DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f64": torch.float64,
    "i64": torch.int64,
    "i1": torch.bool,
}
FLOATS = ("f32", "f16", "bf16")
BY_KIND = {"float": FLOATS, "num": (*FLOATS, "i64"), "any": (*FLOATS, "i64", "i1")}


def ttype(shape: Shape, elem: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


def one_op_program(name: str, shapes: tuple[Shape, ...], result: Shape, elem: str,
                   result_elem: str, keywords: str = "", attrs: str = "") -> str:
    """`@main` applying one fusion op to its arguments."""
    ins = [ttype(s, elem) for s in shapes]
    out = ttype(result, result_elem)
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(ins))
    operands = ", ".join(f"%a{i}" for i in range(len(ins)))
    tail = "".join(f" {x}" for x in (keywords, attrs) if x)
    return (
        f"func.func @main({params}) -> {out} {{\n"
        f"  %r = fusion.{name} {operands}{tail} : ({', '.join(ins)}) -> {out}\n"
        f"  func.return %r : {out}\n"
        f"}}\n"
    )


def make_input(shape: Shape, elem: str, gen: torch.Generator) -> torch.Tensor:
    if elem == "i64":
        return torch.randint(-6, 7, shape, generator=gen)
    if elem == "i1":
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randn(shape, generator=gen).to(DTYPES[elem])


def upcast(t: torch.Tensor) -> torch.Tensor:
    return t.double() if t.is_floating_point() else t


@dataclass(frozen=True)
class Case:
    """One op on fixed shapes; `expected(args)` is the plain torch computation."""

    id: str
    op: type[fusion.FusionOp]
    shapes: tuple[Shape, ...]
    result: Shape
    expected: Callable[[Tensors], torch.Tensor]
    keywords: str = ""
    attrs: str = ""
    result_elem: str | None = None  # default: the operands'

    @property
    def name(self) -> str:
        return self.op.name.removeprefix("fusion.")

    def program(self, elem: str) -> str:
        return one_op_program(self.name, self.shapes, self.result, elem, self.result_elem or elem,
                              self.keywords, self.attrs)


def _max_one_by_one(x: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    for d in sorted(dims, reverse=True):
        x = torch.max(x, dim=d, keepdim=keepdim).values
    return x


CASES: list[Case] = [
    Case("matmul", fusion.MatmulOp, ((4, 6), (6, 5)), (4, 5), lambda a: torch.matmul(a[0], a[1])),
    Case("matmul-batched", fusion.MatmulOp, ((2, 4, 6), (6, 5)), (2, 4, 5),
         lambda a: torch.matmul(a[0], a[1])),
    Case("matmul-vector", fusion.MatmulOp, ((6,), (6, 5)), (5,), lambda a: torch.matmul(a[0], a[1])),
    Case("linear", fusion.LinearOp, ((4, 6), (5, 6)), (4, 5), lambda a: F.linear(a[0], a[1])),
    Case("linear-bias", fusion.LinearOp, ((3, 4, 6), (5, 6), (5,)), (3, 4, 5),
         lambda a: F.linear(a[0], a[1], a[2])),
    Case("add", fusion.AddOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] + a[1]),
    Case("sub", fusion.SubOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] - a[1]),
    Case("mul", fusion.MulOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] * a[1]),
    Case("div", fusion.DivOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] / a[1]),
    Case("maximum", fusion.MaximumOp, ((4, 6), (4, 6)), (4, 6), lambda a: torch.maximum(a[0], a[1])),
    Case("relu", fusion.ReluOp, ((4, 6),), (4, 6), lambda a: F.relu(a[0])),
    Case("neg", fusion.NegOp, ((4, 6),), (4, 6), lambda a: -a[0]),
    Case("exp", fusion.ExpOp, ((4, 6),), (4, 6), lambda a: torch.exp(a[0])),
    Case("tanh", fusion.TanhOp, ((4, 6),), (4, 6), lambda a: torch.tanh(a[0])),
    Case("sigmoid", fusion.SigmoidOp, ((4, 6),), (4, 6), lambda a: torch.sigmoid(a[0])),
    Case("silu", fusion.SiluOp, ((4, 6),), (4, 6), lambda a: F.silu(a[0])),
    Case("gelu", fusion.GeluOp, ((4, 6),), (4, 6), lambda a: F.gelu(a[0])),
    Case("gelu-tanh", fusion.GeluOp, ((4, 6),), (4, 6), lambda a: F.gelu(a[0], approximate="tanh"),
         attrs='{approximate = "tanh"}'),
    Case("set", fusion.SetOp, ((4, 6),), (4, 6), lambda a: a[0].clone()),
    Case("sum", fusion.SumOp, ((4, 6),), (4,), lambda a: torch.sum(a[0], dim=1), "dims = [1]"),
    Case("sum-neg-dim", fusion.SumOp, ((4, 6),), (4,), lambda a: torch.sum(a[0], dim=1), "dims = [-1]"),
    Case("sum-keepdim", fusion.SumOp, ((3, 4, 5),), (1, 4, 1),
         lambda a: torch.sum(a[0], dim=(0, 2), keepdim=True), "dims = [0, 2] keepdim = true"),
    Case("max", fusion.MaxOp, ((4, 6),), (6,), lambda a: torch.max(a[0], dim=0).values, "dims = [0]"),
    Case("max-two-dims", fusion.MaxOp, ((3, 4, 5),), (4,),
         lambda a: _max_one_by_one(a[0], [0, 2], False), "dims = [0, 2]"),
    Case("max-keepdim", fusion.MaxOp, ((3, 4, 5),), (1, 4, 1),
         lambda a: _max_one_by_one(a[0], [0, 2], True), "dims = [2, 0] keepdim = true"),
    Case("permute", fusion.PermuteOp, ((3, 4, 5),), (5, 3, 4),
         lambda a: torch.movedim(a[0], 2, 0), "dims = [2, 0, 1]"),
    Case("permute-2d", fusion.PermuteOp, ((4, 6),), (6, 4), lambda a: a[0].T, "dims = [1, 0]"),
    Case("reshape", fusion.ReshapeOp, ((4, 6),), (3, 8), lambda a: a[0].reshape(3, 8)),
    Case("reshape-flat", fusion.ReshapeOp, ((2, 3, 4),), (24,), lambda a: a[0].flatten()),
    Case("broadcast_in_dim-rows", fusion.BroadcastInDimOp, ((6,),), (4, 6),
         lambda a: a[0][None, :].repeat(4, 1), "dims = [1]"),
    Case("broadcast_in_dim-cols", fusion.BroadcastInDimOp, ((6,),), (6, 4),
         lambda a: a[0][:, None].repeat(1, 4), "dims = [0]"),
    Case("broadcast_in_dim-unit", fusion.BroadcastInDimOp, ((4, 1),), (4, 3, 5),
         lambda a: a[0][:, None, :].repeat(1, 3, 5), "dims = [0, 2]"),
    Case("slice", fusion.SliceOp, ((6, 8),), (4, 5), lambda a: a[0][1:5, 2:7],
         "starts = [1, 2] limits = [5, 7]"),
    Case("softmax", fusion.SoftmaxOp, ((4, 6),), (4, 6), lambda a: torch.softmax(a[0], dim=1), "dim = 1"),
    Case("softmax-dim0", fusion.SoftmaxOp, ((4, 6),), (4, 6), lambda a: torch.softmax(a[0], dim=0), "dim = 0"),
    # broadcasting, rank 0
    Case("add-broadcast", fusion.AddOp, ((4, 6), (6,)), (4, 6), lambda a: a[0] + a[1]),
    Case("mul-rank0", fusion.MulOp, ((4, 6), ()), (4, 6), lambda a: a[0] * a[1]),
    Case("sub-unit", fusion.SubOp, ((4, 1), (1, 6)), (4, 6), lambda a: a[0] - a[1]),
    Case("minimum", fusion.MinimumOp, ((4, 6), (4, 6)), (4, 6), lambda a: torch.minimum(a[0], a[1])),
    Case("pow", fusion.PowOp, ((4, 6), ()), (4, 6), lambda a: torch.pow(a[0], a[1])),
    Case("rsqrt", fusion.RsqrtOp, ((4, 6),), (4, 6), lambda a: torch.rsqrt(a[0])),
    Case("sqrt", fusion.SqrtOp, ((4, 6),), (4, 6), lambda a: torch.sqrt(a[0])),
    Case("log", fusion.LogOp, ((4, 6),), (4, 6), lambda a: torch.log(a[0])),
    Case("abs", fusion.AbsOp, ((4, 6),), (4, 6), lambda a: torch.abs(a[0])),
    Case("erf", fusion.ErfOp, ((4, 6),), (4, 6), lambda a: torch.erf(a[0])),
    Case("reciprocal", fusion.ReciprocalOp, ((4, 6),), (4, 6), lambda a: torch.reciprocal(a[0])),
    Case("sin", fusion.SinOp, ((4, 6),), (4, 6), lambda a: torch.sin(a[0])),
    Case("cos", fusion.CosOp, ((4, 6),), (4, 6), lambda a: torch.cos(a[0])),
    Case("lt", fusion.LtOp, ((4, 6), (6,)), (4, 6), lambda a: a[0] < a[1], result_elem="i1"),
    Case("le", fusion.LeOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] <= a[1], result_elem="i1"),
    Case("gt", fusion.GtOp, ((4, 6), ()), (4, 6), lambda a: a[0] > a[1], result_elem="i1"),
    Case("ge", fusion.GeOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] >= a[1], result_elem="i1"),
    Case("eq", fusion.EqOp, ((4, 6), (4, 1)), (4, 6), lambda a: a[0] == a[1], result_elem="i1"),
    Case("ne", fusion.NeOp, ((4, 6), (4, 6)), (4, 6), lambda a: a[0] != a[1], result_elem="i1"),
    Case("mean", fusion.MeanOp, ((3, 4, 5),), (4,), lambda a: torch.mean(a[0], dim=(0, 2)), "dims = [0, 2]"),
    Case("min", fusion.MinOp, ((4, 6),), (4, 1), lambda a: torch.amin(a[0], dim=1, keepdim=True),
         "dims = [1] keepdim = true"),
    Case("var", fusion.VarOp, ((4, 6),), (6,), lambda a: torch.var(a[0], dim=0), "dims = [0]"),
    Case("var-correction0", fusion.VarOp, ((4, 6),), (4,), lambda a: torch.var(a[0], dim=1, correction=0),
         "dims = [1] correction = 0"),
    Case("log_softmax", fusion.LogSoftmaxOp, ((4, 6),), (4, 6), lambda a: torch.log_softmax(a[0], dim=1),
         "dim = 1"),
    Case("concat", fusion.ConcatOp, ((4, 6), (2, 6)), (6, 6), lambda a: torch.cat(a, dim=0), "dim = 0"),
    Case("layer_norm", fusion.LayerNormOp, ((2, 3, 8), (8,), (8,)), (2, 3, 8),
         lambda a: F.layer_norm(a[0], [8], a[1], a[2]), "dims = [2]"),
    Case("layer_norm-two-dims", fusion.LayerNormOp, ((2, 3, 8), (3, 8)), (2, 3, 8),
         lambda a: F.layer_norm(a[0], [3, 8], a[1], eps=1e-3), "dims = [1, 2] eps = 1.0e-03"),
    Case("rms_norm", fusion.RmsNormOp, ((2, 3, 8), (8,)), (2, 3, 8),
         lambda a: F.rms_norm(a[0], [8], a[1], eps=1e-6), "dims = [-1] eps = 1.0e-06"),
    Case("sdpa-causal-gqa", fusion.SdpaOp, ((2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)), (2, 4, 6, 8),
         lambda a: F.scaled_dot_product_attention(a[0], a[1], a[2], is_causal=True, enable_gqa=True),
         "causal = true"),
    Case("sdpa-scale", fusion.SdpaOp, ((1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3)), (1, 2, 5, 3),
         lambda a: F.scaled_dot_product_attention(a[0], a[1], a[2], scale=0.5), "scale = 0.5"),
]
"""Ops whose operands have one element type; constant, iota, where,
dropout, embedding, embedding_grad and cross_entropy (several element types) are checked
against torch in test_mixed_type_ops, sdpa_grad (its log-sum-exp in f32)
in tests/unit/test_attention.py."""

MIXED_TYPE_OPS = {fusion.ConstantOp, fusion.IotaOp, fusion.WhereOp, fusion.DropoutOp, fusion.EmbeddingOp,
                  fusion.CrossEntropyOp, fusion.SdpaGradOp, fusion.EmbeddingGradOp}

OP_DTYPE_CASES = [
    pytest.param(case, elem, id=f"{case.id}-{elem}")
    for case in CASES
    for elem in BY_KIND[case.op.ELEMENTS]
]

CAST_PAIRS = [
    pytest.param(src, dst, id=f"cast-{src}-to-{dst}")
    for src, dst in itertools.permutations(("f32", "f16", "bf16", "i64", "i1"), 2)
]


def case_inputs(case: Case, elem: str, seed: int = 0) -> Tensors:
    gen = torch.Generator().manual_seed(seed)
    return [make_input(s, elem, gen) for s in case.shapes]


def check_case(case: Case, elem: str) -> None:
    """Declared-dtype mode must equal the torch call bit for bit."""
    args = case_inputs(case, elem)
    module = parse(case.program(elem))
    (got,) = evaluate(module, args, accumulate=None)
    torch.testing.assert_close(got, case.expected(args), rtol=0, atol=0, equal_nan=True)


def test_every_op_has_cases() -> None:
    from fuserc.dialects import fusion_dispatch, fusion_moe  # checked against torch in tests/unit/test_moe_ops.py

    covered = {case.op for case in CASES} | {fusion.CastOp} | MIXED_TYPE_OPS | set(fusion_moe.OPS) | set(fusion_dispatch.OPS)
    assert covered == set(fusion.TENSOR_OPS)


@pytest.mark.parametrize("case, elem", OP_DTYPE_CASES)
def test_op_in_declared_dtype(case: Case, elem: str) -> None:
    check_case(case, elem)


@pytest.mark.parametrize("case, elem", OP_DTYPE_CASES)
def test_op_in_float64(case: Case, elem: str) -> None:
    args = case_inputs(case, elem)
    (got,) = evaluate(parse(case.program(elem)), args)
    want = case.expected([upcast(a) for a in args])
    if elem in FLOATS and case.result_elem is None:
        assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("src, dst", CAST_PAIRS)
def test_cast(src: str, dst: str) -> None:
    gen = torch.Generator().manual_seed(1)
    x = make_input((4, 6), src, gen)
    if src in FLOATS:  # spread values so float -> int truncation is exercised
        x = x * 3
    module = parse(one_op_program("cast", ((4, 6),), (4, 6), src, dst))
    (got,) = evaluate(module, [x], accumulate=None)
    torch.testing.assert_close(got, x.to(DTYPES[dst]), rtol=0, atol=0)
    # float64 mode: floats stay float64 (no rounding to the target); other
    # targets convert as declared.
    (got64,) = evaluate(module, [x])
    want64 = upcast(x).to(torch.float64 if dst in FLOATS else DTYPES[dst])
    torch.testing.assert_close(got64, want64, rtol=0, atol=0)


# ---- the checks above catch a wrong op --------------------------------------

MUTANTS = {
    "add": (fusion.AddOp, lambda op, a, acc: a[0] - a[1]),
    "div": (fusion.DivOp, lambda op, a, acc: a[1] / a[0]),
    "linear-bias": (fusion.LinearOp, lambda op, a, acc: F.linear(a[0], a[1])),
    "gelu": (fusion.GeluOp, lambda op, a, acc: F.gelu(a[0], approximate="tanh")),
    "max": (fusion.MaxOp, lambda op, a, acc: torch.amin(a[0], dim=op.keyword("dims"))),
    "sum": (fusion.SumOp, lambda op, a, acc: torch.mean(a[0], dim=op.keyword("dims"))),
    "softmax": (fusion.SoftmaxOp, lambda op, a, acc: torch.softmax(a[0], dim=0)),
    "permute-2d": (fusion.PermuteOp, lambda op, a, acc: a[0].reshape(6, 4)),
    "reshape": (fusion.ReshapeOp, lambda op, a, acc: a[0].T.reshape(3, 8)),
    "slice": (fusion.SliceOp, lambda op, a, acc: a[0][0:4, 2:7]),
    "broadcast_in_dim-unit": (fusion.BroadcastInDimOp,
                              lambda op, a, acc: a[0].reshape(4, 1, 1).expand(4, 3, 5).flip(2) * 2),
}


@pytest.mark.parametrize("case_id", sorted(MUTANTS))
def test_wrong_op_is_caught(case_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    op_class, wrong = MUTANTS[case_id]
    monkeypatch.setattr(op_class, "reference", lambda op, a, ctx: wrong(op, a, ctx.accumulate))
    case = next(c for c in CASES if c.id == case_id)
    with pytest.raises(AssertionError):
        check_case(case, "f32")


# ---- programs -------------------------------------------------------------

MLP = """
fusion.mesh @tp shape = [2]
!x = tensor<8x4xELEM, #fusion.sharding<@tp, [DIDx, -]>>
!w1 = tensor<4x6xELEM, #fusion.sharding<@tp, [-, DIDx]>>
!w2 = tensor<6x4xELEM, #fusion.sharding<@tp, [DIDx, -]>>
!h = tensor<8x6xELEM>
!p = tensor<8x4xELEM, #fusion.sharding<@tp, [-, -], partial = DIDx>>
func.func @main(%x: !x, %w1: !w1, %w2: !w2) -> !x {
  %h = fusion.matmul %x, %w1 : (!x, !w1) -> !h
  %g = fusion.gelu %h : (!h) -> !h
  %p = fusion.matmul %g, %w2 : (!h, !w2) -> !p
  %y = fusion.set %p : (!p) -> !x
  func.return %y : !x
}
"""


def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.matmul(F.gelu(torch.matmul(x, w1)), w2)


@pytest.mark.parametrize("elem", FLOATS)
def test_sequence_parallel_mlp_ignores_shardings(elem: str) -> None:
    gen = torch.Generator().manual_seed(2)
    args = [make_input(s, elem, gen) for s in ((8, 4), (4, 6), (6, 4))]
    module = parse(MLP.replace("ELEM", elem))
    (got,) = evaluate(module, args, accumulate=None)
    torch.testing.assert_close(got, mlp(*args), rtol=0, atol=0)
    (ref,) = evaluate(module, args)
    torch.testing.assert_close(ref, mlp(*[a.double() for a in args]), rtol=1e-12, atol=1e-12)
    # The run in its own dtype is near the float64 ground truth.
    tol = {"f32": 1e-5, "f16": 1e-2, "bf16": 5e-2}[elem]
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol)


CALLS = """
func.func @scale(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %m = fusion.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %m : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %s = func.call @scale(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %t = fusion.add %s, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %t, %s : tensor<4xf32>, tensor<4xf32>
}
"""


def test_calls_entry_and_several_results() -> None:
    module = parse(CALLS)
    x, y = torch.randn(4), torch.randn(4)
    t, s = evaluate(module, [x, y], accumulate=None)
    torch.testing.assert_close(s, x * y, rtol=0, atol=0)
    torch.testing.assert_close(t, x * y + x, rtol=0, atol=0)
    (only,) = evaluate(module, [x, y], entry="scale")
    torch.testing.assert_close(only, x.double() * y.double(), rtol=0, atol=0)


def test_call_without_body_is_a_diagnostic() -> None:
    text = """
func.func private @ext(tensor<4xf32>) -> tensor<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = func.call @ext(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""
    with pytest.raises(Diagnostic, match="no function @ext with a body to call") as info:
        evaluate(parse(text, "calls.mlir"), [torch.zeros(4)])
    assert info.value.loc is not None and info.value.loc.line == 4


def test_numpy_inputs_and_bf16_from_float32() -> None:
    text = one_op_program("add", ((3,), (3,)), (3,), "bf16", "bf16")
    a = np.array([1.0, 2.0, 1.0 + 2**-10], dtype=np.float32)  # last rounds to 1.0 in bf16
    (got,) = evaluate(parse(text), [a, a], accumulate=None)
    assert got.dtype == torch.bfloat16
    assert got.tolist() == [2.0, 4.0, 2.0]


# ---- reference_op -----------------------------------------------------------


def test_reference_op_on_local_tensors_and_fresh_results() -> None:
    """The host evaluator reuses reference_op on shards: elementwise ops do
    not care about the declared global shape, and results never alias."""
    module = parse(MLP.replace("ELEM", "f32"))
    gelu = next(op for op in module.walk() if isinstance(op, fusion.GeluOp))
    shard = torch.randn(4, 3)
    torch.testing.assert_close(reference_op(gelu, [shard]), F.gelu(shard), rtol=0, atol=0)
    set_op = next(op for op in module.walk() if isinstance(op, fusion.SetOp))
    x = torch.randn(8, 4)
    copy = reference_op(set_op, [x])
    copy.add_(1)
    assert not torch.equal(copy, x)
    sliced = parse(one_op_program("slice", ((6, 8),), (2, 8), "f32", "f32", "starts = [0, 0] limits = [2, 8]"))
    slice_op = next(op for op in sliced.walk() if isinstance(op, fusion.SliceOp))
    y = torch.randn(6, 8)
    rows = reference_op(slice_op, [y])
    assert rows.is_contiguous()
    assert rows.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()


class _Dispatched(TorchDispatchMode):
    """Records the ops torch dispatches (a host tensor copied to a device by
    torch.tensor is none of them; its move, `aten._to_copy`, is)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_constant_on_a_device_is_filled_there() -> None:
    """fusion.constant's reference on a device (a small program's region run
    op by op with torch on cuda) is a fill on that device, not a host tensor
    copied over (a host copy and a wait inside every run, and no CUDA-graph
    capture): the device's factory op is dispatched (torch.tensor's copy of
    host data is not an op the dispatcher sees)."""
    from fuserc.dialects.interfaces import EvalContext

    module = parse("func.func @main() -> tensor<f32> {\n  %k = fusion.constant -1.5 : () -> tensor<f32>\n  func.return %k : tensor<f32>\n}")
    op = next(op for op in module.walk() if isinstance(op, fusion.ConstantOp))
    with _Dispatched() as ops:
        (k,) = reference.reference_results(op, [], EvalContext(device=torch.device("meta")))
    assert k.device.type == "meta" and k.shape == () and k.dtype == torch.float32
    assert ops.seen == ["aten.full.default"], ops.seen


def test_a_sharded_region_run_with_torch_moves_its_indices_to_the_device_once() -> None:
    """A region run op by op with torch (launch_with_torch, as the cuda
    backend runs a small program's regions) whose op needs the global
    indices of its local block (a sharded iota) gets them on the device at
    its first run; later runs copy nothing more (a host copy and a wait per
    run otherwise), and the values are the block's global indices."""
    from fuserc.dialects import hir
    from fuserc.dialects.interfaces import EvalContext
    from fuserc.runtime.backends.cpu import launch_with_torch

    module = parse(
        "func.func @f(%o: tensor<2x6xi64>) attributes {hir.host} {\n"
        "  hir.launch outs(%o : tensor<2x6xi64>) {\n"
        "    %i = fusion.iota dim = 0 : () -> tensor<2x6xi64>\n"
        "    hir.yield %i : tensor<2x6xi64>\n  }\n  func.return\n}"
    )
    launch = next(op for op in module.walk() if isinstance(op, hir.LaunchOp))
    iota = next(op for op in module.walk() if isinstance(op, fusion.IotaOp))
    contexts = {iota: EvalContext(shapes={-1: (8, 6)}, indices={(-1, 0): torch.tensor([4, 5])})}  # rows 4 and 5 of 8
    runs = []
    for _ in range(3):
        out = torch.empty(2, 6, dtype=torch.int64, device="meta")
        with _Dispatched() as ops:
            launch_with_torch(launch.body.block, [], [out], contexts)
        runs.append(ops.seen)
    assert any("_to_copy" in op for op in runs[0]), runs[0]
    assert not any("_to_copy" in op or "lift_fresh" in op for run in runs[1:] for op in run), runs[1:]
    cpu = torch.empty(2, 6, dtype=torch.int64)
    launch_with_torch(launch.body.block, [], [cpu], contexts)
    assert cpu.tolist() == [[4] * 6, [5] * 6]


def test_a_context_is_pickled_without_its_device_copies() -> None:
    """`EvalContext.on` keeps its device copies for the process that made
    them; a context pickled for a build worker carries its host indices
    only, and the worker's `on` makes its own."""
    import pickle

    from fuserc.dialects.interfaces import EvalContext

    ctx = EvalContext(shapes={-1: (8, 6)}, indices={(-1, 0): torch.tensor([4, 5])})
    placed = ctx.on(torch.device("meta"))
    assert ctx.on(torch.device("meta")) is placed and ctx._placed
    back = pickle.loads(pickle.dumps(ctx))
    assert back._placed == {} and back.indices[(-1, 0)].tolist() == [4, 5] and back.shapes == ctx.shapes
    assert ctx._placed, "the original keeps its copies"
    assert back.on(torch.device("meta")).indices[(-1, 0)].device.type == "meta"


# ---- dtype mapping ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_dtype_mapping(name: str) -> None:
    module = parse(one_op_program("set", ((2,),), (2,), name, name))
    elem = module.body.block.first_op.function_type.inputs.data[0].element_type
    assert torch_dtype(elem) == DTYPES[name]
    assert element_type(DTYPES[name]) == elem


def test_dtype_mapping_refuses_unknown() -> None:
    with pytest.raises(Diagnostic, match="torch.int32"):
        element_type(torch.int32)


# ---- input diagnostics ----------------------------------------------------------

SIG = """
func.func @main(%x: tensor<4x6xf32>, %w: tensor<6x5xf32>) -> tensor<4x5xf32> {
  %y = fusion.matmul %x, %w : (tensor<4x6xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
  func.return %y : tensor<4x5xf32>
}
"""


@pytest.mark.parametrize(
    "inputs, message",
    [
        pytest.param([torch.zeros(4, 6)], r"@main takes 2 inputs, got 1", id="count"),
        pytest.param([torch.zeros(4, 6), torch.zeros(5, 6)],
                     r"argument #1 \(%w\) of @main has shape \[5, 6\], expected \[6, 5\]", id="shape"),
        pytest.param([torch.zeros(4, 6, dtype=torch.float64), torch.zeros(6, 5)],
                     r"argument #0 \(%x\) of @main has dtype f64, expected f32", id="dtype"),
        pytest.param([np.zeros((4, 6), dtype=np.float64), torch.zeros(6, 5)],
                     r"argument #0 \(%x\) of @main has dtype f64, expected f32", id="numpy-dtype"),
        pytest.param([torch.zeros(4, 6), [[0.0] * 5] * 6],
                     r"argument #1 \(%w\) of @main must be a torch tensor or numpy array", id="kind"),
    ],
)
def test_input_mismatch_is_a_located_diagnostic(inputs: list, message: str) -> None:
    with pytest.raises(Diagnostic, match=message) as info:
        evaluate(parse(SIG, "sig.mlir"), inputs)
    assert info.value.loc is not None and (info.value.loc.file, info.value.loc.line) == ("sig.mlir", 2)


def test_missing_entry_is_a_diagnostic() -> None:
    with pytest.raises(Diagnostic, match=r"no function @forward to run \(functions: @main\)"):
        evaluate(parse(SIG), [torch.zeros(4, 6), torch.zeros(6, 5)], entry="forward")


# ---- ops of several element types ----------------------------------------


MIXED = """
func.func @main(%c: tensor<4x6xi1>, %x: tensor<4x6xf32>, %ids: tensor<2x3xi64>, %table: tensor<10x6xf32>,
                %logits: tensor<5x10xf32>, %labels: tensor<5xi64>, %seed: tensor<i64>)
    -> (tensor<4x6xf32>, tensor<4x6xi64>, tensor<2x3x6xf32>, tensor<f32>, tensor<4x6xf32>, tensor<f32>, tensor<10x6xf32>) {
  %k = fusion.constant -1.5 : () -> tensor<f32>
  %w = fusion.where %c, %x, %k : (tensor<4x6xi1>, tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
  %i = fusion.iota dim = 1 : () -> tensor<4x6xi64>
  %e = fusion.embedding %ids, %table : (tensor<2x3xi64>, tensor<10x6xf32>) -> tensor<2x3x6xf32>
  %l = fusion.cross_entropy %logits, %labels : (tensor<5x10xf32>, tensor<5xi64>) -> tensor<f32>
  %d = fusion.dropout %x, %seed p = 0.5 : (tensor<4x6xf32>, tensor<i64>) -> tensor<4x6xf32>
  %n = fusion.constant inf : () -> tensor<f32>
  %eg = fusion.embedding_grad %e, %ids vocab = 10 : (tensor<2x3x6xf32>, tensor<2x3xi64>) -> tensor<10x6xf32>
  func.return %w, %i, %e, %l, %d, %n, %eg : tensor<4x6xf32>, tensor<4x6xi64>, tensor<2x3x6xf32>, tensor<f32>, tensor<4x6xf32>, tensor<f32>, tensor<10x6xf32>
}
"""


def test_mixed_type_ops() -> None:
    gen = torch.Generator().manual_seed(3)
    c = torch.randint(0, 2, (4, 6), generator=gen).bool()
    x = torch.randn(4, 6, generator=gen)
    ids = torch.randint(0, 10, (2, 3), generator=gen)
    table = torch.randn(10, 6, generator=gen)
    logits = torch.randn(5, 10, generator=gen)
    labels = torch.randint(0, 10, (5,), generator=gen)
    seed = torch.tensor(1234)
    w, i, e, loss, d, n, eg = evaluate(parse(MIXED), [c, x, ids, table, logits, labels, seed], accumulate=None)
    torch.testing.assert_close(w, torch.where(c, x, torch.tensor(-1.5)), rtol=0, atol=0)
    torch.testing.assert_close(i, torch.arange(6).expand(4, 6), rtol=0, atol=0)
    torch.testing.assert_close(e, F.embedding(ids, table), rtol=0, atol=0)
    t = table.clone().requires_grad_(True)
    F.embedding(ids, t).backward(e)  # the table's gradient for the cotangent e, by torch's autograd
    torch.testing.assert_close(eg, t.grad, rtol=0, atol=0)
    torch.testing.assert_close(loss, F.cross_entropy(logits, labels), rtol=0, atol=0)
    assert n.item() == float("inf")
    kept = d != 0
    torch.testing.assert_close(d[kept], x[kept] * 2, rtol=0, atol=0)
    assert 0 < kept.sum() < 24  # about half


def test_matmul_batch_dims_of_extent_zero_broadcast_as_torch() -> None:
    """A batch extent of 1 against 0 broadcasts to 0 (not to 1)."""
    from fuserc import shapes

    for a, b in [((0, 2, 8), (1, 8, 3)), ((1, 2, 8), (0, 8, 3)), ((0, 2, 8), (8, 3)), ((2, 1, 2, 8), (0, 8, 3))]:
        assert shapes.matmul(a, b) == tuple(torch.matmul(torch.zeros(a), torch.zeros(b)).shape), (a, b)

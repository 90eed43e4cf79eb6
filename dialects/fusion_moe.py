"""The routing and grouped ops of the fusion dialect, what a mixture of
experts is written with: `topk`, `argsort`, `cumsum`, `bincount`,
`gather`, `scatter_add`, `index_select`, `index_add` and `grouped_matmul`,
with PyTorch's semantics (`torch.topk`, `torch.argsort(stable=True)`,
`torch.cumsum`, `torch.bincount(minlength=length)`, `torch.gather`,
`Tensor.scatter_add`, `torch.index_select`, `Tensor.index_add`,
`torch._grouped_mm`).

A dropless layer sorts its (token, choice) pairs by expert (`argsort`),
counts them per expert (`bincount`), turns the counts into group ends
(`cumsum`), gathers the tokens in that order (`index_select`), runs each
expert's GEMM on its rows only (`grouped_matmul`), and adds the weighted
results back to their tokens (`index_add`).

Their sharding: the dimension an op selects, sorts, scans or scatters
along is gathered (DROP), the others stay split; counts over a split list
of ids are a partial sum; a grouped GEMM's rows and K are gathered (its
groups are given by global offsets) and its N stays split; its experts
split over devices are expert parallelism (each device multiplies the rows
of its own experts: a partial sum; and computes its own experts' weight
gradients), so the experts' weights are never gathered.

Derivatives: indices, counts and offsets are integers and have none; a
selection's derivative is the matching scatter (topk and gather by
scatter_add, index_select by index_add) and the reverse; a cumulative
sum's is the reverse cumulative sum; a grouped GEMM's are grouped GEMMs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, BoolAttr, IntegerAttr, TensorType, UnitAttr, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.diagnostics import Diagnostic, error_at
from fuserc.dialects.fusion import GLOBAL_ATTR, TENSOR, FusionOp, Shape, shape_of
from fuserc.dialects.fusion_grad import zeros
from fuserc.dialects.interfaces import CONTRACT, DROP, MAP, NONE, EvalContext, OpMap, Target, normalized


def _along(rank: int, dim: int, lines_up: bool = True) -> tuple[Target, ...]:
    """Every dimension MAPs to the result's, `dim` is gathered (and lines up
    with the result's `dim` unless the result's comes from an index)."""
    return tuple(Target(DROP, d if lines_up else None) if d == dim else Target(MAP, d) for d in range(rank))


class AlongOp(FusionOp):
    """An op along one dimension `dim` of its first operand (of one operand,
    the result shaped like it but along `dim`)."""

    def axis(self) -> int:
        return normalized([self.keyword("dim")], len(shape_of(self.operands[0])))[0]

    def sharding_map(self) -> OpMap:
        rank = len(shape_of(self.operands[0]))
        return OpMap((_along(rank, self.axis()),), rank, None, NONE, False)


class SelectOp(AlongOp):
    """An op selecting (input, index) or scattering (input, index, source)
    along `dim` by i64 indices into the input's `dim`; `TRANSPOSE` names the
    op of the other kind on the same indices, its derivative."""

    TRANSPOSE: ClassVar[str] = ""

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, shape_of(self.operands[0])[self.axis()]) if i == 1 else None

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """A selection's cotangent scattered into zeros at its indices; a
        scatter's: the cotangent itself for the input, selected at the
        indices for the source."""
        x, idx = self.operands[0], self.operands[1]
        if len(self.operands) == 2:
            return [b.op(self.TRANSPOSE, zeros(b, x), idx, g, dim=self.axis()), None]
        return [g, None, b.op(self.TRANSPOSE, g, idx, dim=self.axis())]


# ---- sorting and scanning ------------------------------------------------------


@irdl_op_definition
class TopkOp(AlongOp):
    """`torch.topk(x, k, dim)`: the k largest values along `dim`, sorted
    from the largest, and their indices (i64) as the second result. Its
    derivative scatters the cotangent of the values back to where they were
    taken from (ties take the lowest index, as the CPU's torch.topk)."""

    name = "fusion.topk"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("k", "int"), ("dim", "int"))
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": -1}
    RESULTS: ClassVar[tuple[str, ...]] = ("values", "indices")
    ELEMENTS: ClassVar[str] = "num"
    input = operand_def(TENSOR)
    values = result_def(TENSOR)
    indices = result_def(TENSOR)
    k = prop_def(IntegerAttr[I64])
    dim = opt_prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        d = shapes.check_dim(s[0], kw["dim"])
        if not 0 < kw["k"] <= s[0][d]:
            raise shapes.ShapeError(f"fusion.topk: k = {kw['k']} must be in [1, {s[0][d]}] (the extent of dim {d})")
        return tuple(kw["k"] if i == d else e for i, e in enumerate(s[0]))

    @classmethod
    def more_results(cls, operands: Any, kw: dict[str, Any], first: TensorType) -> list[tuple[Shape, Attribute]]:
        return [(tuple(first.get_shape()), i64)]

    def more_shardings(self, first: Any) -> list[Any]:
        return [first]

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        x = args[0]
        # a stable sort gives ties the lowest index on every device and dtype
        order = torch.sort(x, dim=self.axis(), descending=True, stable=True).indices.narrow(self.axis(), 0, self.keyword("k"))
        return torch.gather(x, self.axis(), order), order

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return [b.op("scatter_add", zeros(b, self.input), self.indices, g, dim=self.axis())]


@irdl_op_definition
class ArgsortOp(AlongOp):
    """`torch.argsort(x, dim, descending, stable=True)`: the indices (i64)
    that sort `x` along `dim`; equal elements keep their order, so a sort
    of expert ids lists each expert's (token, choice) pairs in token order."""

    name = "fusion.argsort"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"), ("descending", "bool"))
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": -1, "descending": False}
    ELEMENTS: ClassVar[str] = "num"
    input = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = opt_prop_def(IntegerAttr[I64])
    descending = opt_prop_def(BoolAttr)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        shapes.check_dim(s[0], kw["dim"])
        return s[0]

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        return i64

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.argsort(args[0], dim=self.axis(), descending=bool(self.keyword("descending")), stable=True)


@irdl_op_definition
class CumsumOp(AlongOp):
    """`torch.cumsum(x, dim)` in x's type: offsets from counts (i64), or a
    running sum of floats, whose derivative is the reverse running sum."""

    name = "fusion.cumsum"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    ELEMENTS: ClassVar[str] = "num"
    input = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        shapes.check_dim(s[0], kw["dim"])
        return s[0]

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.cumsum(args[0], dim=self.axis(), dtype=args[0].dtype)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """sum_{j >= i} g_j = sum(g) - cumsum(g)_i + g_i along the dim."""
        d = self.axis()
        total = b.op("sum", g, dims=[d], keepdim=True)
        return [b.op("add", b.op("sub", total, b.op("cumsum", g, dim=d)), g)]


@irdl_op_definition
class BincountOp(FusionOp):
    """`torch.bincount(ids, minlength=length)` of ids in [0, length): how
    many times each value occurs (i64, [length]): the tokens routed to each
    expert. Ids split over devices give each device a partial count (a sum
    across them)."""

    name = "fusion.bincount"
    OPERANDS: ClassVar[tuple[str, ...]] = ("ids",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("length", "int"),)
    ELEMENTS: ClassVar[str] = "i64"
    ids = operand_def(TENSOR)
    result = result_def(TENSOR)
    length = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if len(s[0]) != 1:
            raise shapes.ShapeError(f"fusion.bincount: ids must have rank 1, got {list(s[0])}")
        if kw["length"] < 1:
            raise VerifyException(f"length = {kw['length']} must be >= 1")
        return (kw["length"],)

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        return i64

    def sharding_map(self) -> OpMap:
        return OpMap(((Target(CONTRACT),),), 1, None, NONE, True)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, self.keyword("length"))

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        ids = args[0]
        counts = torch.zeros(self.keyword("length"), dtype=torch.int64, device=ids.device)
        # scatter_add rather than bincount: a static shape, which Inductor traces
        return counts.scatter_add_(0, ids, torch.ones_like(ids))


# ---- selection by index -------------------------------------------------------


def _check_index(idx: Shape, x: Shape, d: int, what: str) -> None:
    if len(idx) != len(x) or any(a != b for i, (a, b) in enumerate(zip(idx, x)) if i != d):
        raise shapes.ShapeError(f"fusion.{what}: index {list(idx)} must have the shape of {list(x)} off dim {d}")


@irdl_op_definition
class GatherOp(SelectOp):
    """`torch.gather(x, dim, index)`: out[..i..] = x[..index[..i..]..] along
    `dim`; index (i64) has x's shape off `dim`."""

    name = "fusion.gather"
    TRANSPOSE: ClassVar[str] = "scatter_add"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "index")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64")
    input = operand_def(TENSOR)
    index = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        d = shapes.check_dim(s[0], kw["dim"])
        _check_index(s[1], s[0], d, "gather")
        return s[1]

    def sharding_map(self) -> OpMap:
        rank = len(shape_of(self.input))
        return OpMap((_along(rank, self.axis(), False), tuple(Target(MAP, d) for d in range(rank))), rank, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.gather(args[0], self.axis(), args[1])


@irdl_op_definition
class ScatterAddOp(SelectOp):
    """`x.scatter_add(dim, index, src)`: x with each element of src added
    at its index along `dim`; index (i64) has src's shape, src has x's
    shape off `dim`."""

    name = "fusion.scatter_add"
    TRANSPOSE: ClassVar[str] = "gather"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "index", "source")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64", "num")
    input = operand_def(TENSOR)
    index = operand_def(TENSOR)
    source = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        d = shapes.check_dim(s[0], kw["dim"])
        _check_index(s[2], s[0], d, "scatter_add")
        if tuple(s[1]) != tuple(s[2]):
            raise shapes.ShapeError(f"fusion.scatter_add: index {list(s[1])} and source {list(s[2])} must have one shape")
        return s[0]

    def sharding_map(self) -> OpMap:
        rank = len(shape_of(self.input))
        along = _along(rank, self.axis())
        return OpMap((along, along, along), rank, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        x, idx, src = args
        return x.scatter_add(self.axis(), idx, src)


def _selected(x: Shape, n: int, d: int) -> Shape:
    return tuple(n if i == d else e for i, e in enumerate(x))


@irdl_op_definition
class IndexSelectOp(SelectOp):
    """`torch.index_select(x, dim, index)`: the slices of x along `dim` at
    the indices (a 1-D i64 tensor), in their order: the tokens of each
    expert gathered in sorted order. A split index splits the result."""

    name = "fusion.index_select"
    TRANSPOSE: ClassVar[str] = "index_add"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "index")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": 0}
    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64")
    input = operand_def(TENSOR)
    index = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = opt_prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        d = shapes.check_dim(s[0], kw["dim"])
        if len(s[1]) != 1:
            raise shapes.ShapeError(f"fusion.index_select: index must have rank 1, got {list(s[1])}")
        return _selected(s[0], s[1][0], d)

    def sharding_map(self) -> OpMap:
        d = self.axis()
        rank = len(shape_of(self.input))
        return OpMap((_along(rank, d, False), (Target(MAP, d),)), rank, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.index_select(args[0], self.axis(), args[1])


@irdl_op_definition
class IndexAddOp(SelectOp):
    """`x.index_add(dim, index, source)`: x with source's slice i added to
    x's slice index[i] along `dim` (repeated indices add up; bf16 and f16
    sums are accumulated in f32): the experts' weighted outputs combined
    into their tokens."""

    name = "fusion.index_add"
    TRANSPOSE: ClassVar[str] = "index_select"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "index", "source")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": 0}
    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64", "num")
    input = operand_def(TENSOR)
    index = operand_def(TENSOR)
    source = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = opt_prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        d = shapes.check_dim(s[0], kw["dim"])
        if len(s[1]) != 1:
            raise shapes.ShapeError(f"fusion.index_add: index must have rank 1, got {list(s[1])}")
        if tuple(s[2]) != _selected(s[0], s[1][0], d):
            raise shapes.ShapeError(
                f"fusion.index_add: source {list(s[2])} must have shape {list(_selected(s[0], s[1][0], d))}"
            )
        return s[0]

    def sharding_map(self) -> OpMap:
        d = self.axis()
        rank = len(shape_of(self.input))
        along = _along(rank, d)
        return OpMap((along, (Target(DROP),), along), rank, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        """bf16 and f16 accumulate in f32, rounded once: Inductor then makes
        the combine one kernel of f32 atomic adds with the ops around it (a
        bf16 index_add is left to PyTorch's kernel, whose bf16 atomics took
        0.8 ms for the DeepSeek-like layer's [49152, 2048] rows on an H200,
        and each of the token's k results is rounded once less)."""
        import torch

        x, idx, src = args
        if x.dtype in (torch.bfloat16, torch.float16):
            return x.float().index_add(self.axis(), idx, src.float()).to(x.dtype)
        return x.index_add(self.axis(), idx, src)


# ---- grouped GEMM ----------------------------------------------------------------


FULL_ROWS = "fusion.full_rows"
"""A grouped GEMM's attribute: its last group ends at its last row
(`GroupedMatmulOp.full_rows`)."""


@irdl_op_definition
class GroupedMatmulOp(FusionOp):
    """`torch._grouped_mm(a, b, offs=offsets)`: GEMMs over groups of rows
    given by `offsets` (i64 [E], each group's end, non-decreasing; group e
    is rows offsets[e-1]..offsets[e], the first starts at 0; a group may be
    empty). Two forms:
    - a [T, K], b [E, K, N] -> [T, N]: group e's rows times b[e] (each
      expert's GEMM on the tokens routed to it); rows past the last offset
      are zero;
    - a [K, T], b [T, N] -> [E, K, N]: group e's columns of a times its
      rows of b (the experts' weight gradients);
    - a [E, S, K], b [E, K, N] -> [E, S, N], the third operand each
      expert's row count: the first counts[e] rows of a[e] times b[e], zero
      rows after (the experts' slots that `fusion.dispatch` fills); a
      [E, G, S, K] with counts [E, G] (G token groups, each dispatched on
      its own): the first counts[e, g] rows of a[e, g] times b[e].
    On cuda, bf16 on sm90 or newer, the op is torch._grouped_mm itself;
    elsewhere one GEMM per group. Split experts are expert parallelism:
    each device multiplies the rows routed to its own experts, and the
    results are summed across devices."""

    name = "fusion.grouped_matmul"
    OPERANDS: ClassVar[tuple[str, ...]] = ("lhs", "rhs", "offsets")
    ELEMENTS: ClassVar[tuple[str, ...]] = ("float", "float", "i64")
    WEIGHTS: ClassVar[tuple[int, ...]] = (1,)
    ALONE: ClassVar[bool] = True
    INDEXED: ClassVar[bool] = True
    lhs = operand_def(TENSOR)
    rhs = operand_def(TENSOR)
    offsets = operand_def(TENSOR)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        a, b, offs = s
        if len(a) == 4 and len(b) == 3:
            if a[0] != b[0] or a[3] != b[1] or tuple(offs) != tuple(a[:2]):
                raise shapes.ShapeError(
                    f"fusion.grouped_matmul: [E, G, S, K] x [E, K, N] with [E, G] counts, got {list(a)} x {list(b)} with {list(offs)}"
                )
            return (a[0], a[1], a[2], b[2])
        if len(offs) != 1:
            raise shapes.ShapeError(f"fusion.grouped_matmul: offsets must have rank 1, got {list(offs)}")
        if len(a) == 3 and len(b) == 3:
            if a[0] != b[0] or a[2] != b[1] or offs[0] != a[0]:
                raise shapes.ShapeError(
                    f"fusion.grouped_matmul: [E, S, K] x [E, K, N] with E counts, got {list(a)} x {list(b)} with {offs[0]}"
                )
            return (a[0], a[1], b[2])
        if len(a) == 2 and len(b) == 3:
            if a[1] != b[1] or not b[0] or offs[0] % b[0]:  # (a block of the experts on local types: `verify_`)
                raise shapes.ShapeError(
                    f"fusion.grouped_matmul: [T, K] x [E, K, N] with E offsets, got {list(a)} x {list(b)} with {offs[0]}"
                )
            return (a[0], b[2])
        if len(a) == 2 and len(b) == 2:
            if a[1] != b[0]:
                raise shapes.ShapeError(f"fusion.grouped_matmul: [K, T] x [T, N], got {list(a)} x {list(b)}")
            return (offs[0], a[0], b[1])
        raise shapes.ShapeError(
            f"fusion.grouped_matmul takes [T, K] x [E, K, N], [K, T] x [T, N] or [E, S, K] x [E, K, N], got {list(a)} x {list(b)}"
        )

    def verify_(self) -> None:
        super().verify_()
        e, offs = shape_of(self.rhs)[0], shape_of(self.offsets)[0]
        if self.stacked() and not self.slotted() and e != offs and GLOBAL_ATTR not in self.attributes:
            raise VerifyException(f"fusion.grouped_matmul: {e} experts' weights for {offs} offsets")

    def stacked(self) -> bool:
        """The first form: a stacked [E, K, N] right operand."""
        return len(shape_of(self.rhs)) == 3

    def slotted(self) -> bool:
        """The third form: [E, S, K] (or [E, G, S, K]) slots and each
        expert's (and group's) row count."""
        return len(shape_of(self.lhs)) >= 3

    def sharding_map(self) -> OpMap:
        """[T, K] x [E, K, N]: rows and K gathered; split experts make a
        partial sum (each device multiplies the rows of its experts, zero
        elsewhere), N stays split. [K, T] x [T, N]: K and N stay split, the
        experts of the result are any block a device is asked for (its own
        experts' weight gradients)."""
        if self.slotted():  # [E, (G,) S, K] x [E, K, N]: per expert (and group), like a batched matmul
            g = len(shape_of(self.lhs)) - 3
            groups = (Target(MAP, 1),) * g
            lhs = (Target(MAP, 0), *groups, Target(DROP), Target(CONTRACT))
            ops = (lhs, (Target(MAP, 0), Target(CONTRACT), Target(MAP, 2 + g)), (Target(MAP, 0), *groups))
            return OpMap(ops, 3 + g, (1, 0), NONE, True)
        if self.stacked():
            ops = ((Target(DROP), Target(DROP)), (Target(CONTRACT), Target(DROP), Target(MAP, 1)), (Target(DROP),))
            return OpMap(ops, 2, (1, 0), NONE, True)
        ops = ((Target(MAP, 1), Target(DROP)), (Target(DROP), Target(MAP, 2)), (Target(DROP),))
        return OpMap(ops, 3, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels.grouped_gemm import experts_block

        a, b, offs = args
        if self.slotted():
            from fuserc.runtime.kernels.grouped_gemm import slotted

            try:
                return slotted(a, b, offs)
            except Diagnostic as e:
                raise error_at(self, e.message) from None
        # which block of the experts (the first index read on the host: no wait for the device)
        count = b.shape[0] if self.stacked() else shape_of(self.results[0])[0]
        first = ctx.global_start(1, 0) if self.stacked() else ctx.global_start(-1, 0)
        try:
            return experts_block(a, b, offs, first if count else 0, count, self.full_rows())
        except Diagnostic as e:  # offsets the program was given wrong: said at the op
            raise error_at(self, e.message) from None

    def full_rows(self) -> bool:
        """The first form whose last group ends at the last row (no row of
        the result is past the groups, so none needs zeroing): marked
        `FULL_ROWS` (by `lowered_attributes` and `vjp`), or its offsets are
        `cumsum(bincount(ids))` over as many ids as `lhs` has rows (every id
        is one of the counts, the dropless sort's groups)."""
        if not self.stacked() or self.slotted():
            return False
        if FULL_ROWS in self.attributes:
            return True
        scan = self.offsets.owner
        if not isinstance(scan, CumsumOp) or scan.axis() != 0:
            return False
        count = scan.input.owner
        return isinstance(count, BincountOp) and shape_of(count.ids)[0] == shape_of(self.lhs)[0]

    def lowered_attributes(self) -> dict[str, Attribute]:
        """`FULL_ROWS` where `full_rows` (on local blocks the offsets are a
        region's argument: where they came from is gone)."""
        return {FULL_ROWS: UnitAttr()} if self.full_rows() else {}

    def torch_alone(self) -> bool:
        """Its region runs op by op with PyTorch (runtime/kernels/torch_regions.py):
        a traced kernel would bake in the group ends it reads."""
        return True

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """Grouped GEMMs again: for y = a b per group, a's cotangent is g b^T
        per group and b's is a^T g per group (the other form)."""
        offs = self.offsets
        if self.slotted():  # b's: a^T g over each expert's counted rows only (all its groups')
            a = shape_of(self.lhs)
            ga = b.op("grouped_matmul", g, b.op("permute", self.rhs, dims=[0, 2, 1]), offs)
            slot = b.op("iota", dim=len(a) - 2, shape=[*a[:-1], 1], dtype="i64", placed_as=self.lhs)
            held = b.op("lt", slot, b.op("reshape", offs, shape=[*a[:-2], 1, 1]))
            gheld = b.op("where", held, g, b.constant(0.0, like=g))
            lhs = self.lhs
            if len(a) == 4:  # the groups' rows together: a contraction over them
                lhs = b.op("reshape", lhs, shape=[a[0], a[1] * a[2], a[3]])
                gheld = b.op("reshape", gheld, shape=[a[0], a[1] * a[2], shape_of(g)[-1]])
            return [ga, b.op("matmul", b.op("permute", lhs, dims=[0, 2, 1]), gheld), None]
        if self.stacked():
            ga = b.op("grouped_matmul", g, b.op("permute", self.rhs, dims=[0, 2, 1]), offs)
            if self.full_rows():  # g has the rows of the result: the groups still end at the last
                ga.owner.attributes[FULL_ROWS] = UnitAttr()
            if _transposed(self.rhs):  # (a^T g)^T = g^T a, made in the weight's own layout
                gbt = b.op("grouped_matmul", b.op("permute", g, dims=[1, 0]), self.lhs, offs)
                return [ga, b.op("permute", gbt, dims=[0, 2, 1]), None]
            gb = b.op("grouped_matmul", b.op("permute", self.lhs, dims=[1, 0]), g, offs)
            return [ga, gb, None]
        gat = b.op("grouped_matmul", self.rhs, b.op("permute", g, dims=[0, 2, 1]), offs)
        gb = b.op("grouped_matmul", b.op("permute", self.lhs, dims=[1, 0]), g, offs)
        return [b.op("permute", gat, dims=[1, 0]), gb, None]


def _transposed(w: SSAValue) -> bool:
    """`w` is a weight stacked [E, N, K] read as [E, K, N] (a permute of
    its last two dims, as an nn.Linear-like weight is): its gradient is made
    [E, N, K], so that the permute back is a view (not a transposing copy
    of every expert's gradient)."""
    from fuserc.dialects.fusion_layout import PermuteOp

    op = w.owner
    return isinstance(op, PermuteOp) and list(op.keyword("dims")) == [0, 2, 1]


OPS: tuple[type[FusionOp], ...] = (
    TopkOp, ArgsortOp, CumsumOp, BincountOp, GatherOp, ScatterAddOp, IndexSelectOp, IndexAddOp, GroupedMatmulOp,
)  # fmt: skip

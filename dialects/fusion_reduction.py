"""Reductions of the fusion dialect: `sum`, `max`, `min`, `mean`, `var`.

`dims` lists the reduced dimensions (negative ones count from the end, an
int is one dimension in the builder); `keepdim = true` keeps each as
extent 1. On sharded tensors: a `sum` over a split dimension is a partial
sum on every device (the reduction then communicates); `mean` and `var` over
a split dimension expand into sums (partial, reduced across devices) and
scalings; `max` and `min` over one reduce their local blocks first, then
the (small) per-device results: the tensor itself is never gathered.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, ArrayAttr, BoolAttr, IntegerAttr, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def

from fuserc import shapes
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, shape_of
from fuserc.dialects.fusion_grad import broadcast_to, count, expand_reduced
from fuserc.dialects.interfaces import ALL, CONTRACT, MAP, NONE, STAT, EvalContext, OpMap, Target, normalized


class ReductionOp(FusionOp):
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"), ("keepdim", "bool"))
    DEFAULTS: ClassVar[dict[str, Any]] = {"keepdim": False}
    ELEMENTS: ClassVar[str] = "num"
    input = operand_def(TENSOR)
    result = result_def(TENSOR)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])
    keepdim = opt_prop_def(BoolAttr)

    REDUCED: ClassVar[str] = STAT
    """The Target kind of a reduced dimension."""
    CARRIES: ClassVar[str] = NONE

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.reduce(s[0], kw["dims"], bool(kw.get("keepdim")))

    def reduced(self) -> list[int]:
        return normalized(self.keyword("dims"), len(shape_of(self.input)))

    def sharding_map(self) -> OpMap:
        shape = shape_of(self.input)
        reduced = set(self.reduced())
        keep = bool(self.keyword("keepdim"))
        targets: list[Target] = []
        r = 0
        for d in range(len(shape)):
            if d in reduced:
                targets.append(Target(self.REDUCED))
                r += keep
            else:
                targets.append(Target(MAP, r))
                r += 1
        return OpMap((tuple(targets),), len(shape_of(self.results[0])), (0,), self.CARRIES, self.REDUCED == CONTRACT)

    def torch_args(self) -> dict[str, Any]:
        return {"dim": tuple(self.keyword("dims")), "keepdim": bool(self.keyword("keepdim"))}

    def split_reduced(self, b: Any) -> list[int]:
        """Reduced dimensions the input is split on (device splits)."""
        s = b.sharding(self.input)
        if s is None:
            return []
        placed = s.placement()
        return [d for d in self.reduced() if placed.dims[d]]

    def expanded(self, b: Any, g: SSAValue) -> SSAValue:
        """A cotangent of the result broadcast back to the input's shape."""
        return expand_reduced(b, g, shape_of(self.input), self.reduced(), bool(self.keyword("keepdim")))


@irdl_op_definition
class SumOp(ReductionOp):
    """`torch.sum` over `dims` (`keepdim` keeps them as size 1). Over a split
    dimension each device sums its block: the result is `partial`."""

    name = "fusion.sum"
    REDUCED: ClassVar[str] = CONTRACT
    CARRIES: ClassVar[str] = ALL

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.sum(args[0], **self.torch_args())

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return [self.expanded(b, g)]


class ExtremumOp(ReductionOp):
    """max or min: over a split dimension, each device reduces its block,
    then the per-device results are gathered and reduced. Over a dimension
    of extent 0 there is no value: refused, as torch.amax/amin do."""

    TORCH: ClassVar[str] = ""

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        out = super().result_shape(s, kw, result)
        for d in normalized(kw["dims"], len(s[0])):
            if s[0][d] == 0:
                raise shapes.ShapeError(f"dimension {d} of extent 0 is reduced: {cls.name} of no elements is undefined")
        return out

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return getattr(torch, self.TORCH)(args[0], **self.torch_args())

    def expand(self, b: Any) -> Any:
        x = self.input
        shape = shape_of(x)
        s = b.sharding(x)
        placed = s.placement() if s is not None else None
        mesh = b.mesh(placed.mesh) if placed is not None else None
        # Dimensions whose device blocks hold more than one element: with one
        # (the second level of this very expansion) the gather is the cheap way.
        split = [
            d for d in self.split_reduced(b)
            if 1 < math.prod(sp.size(mesh) for sp in placed.dims[d]) < shape[d]  # type: ignore[union-attr]
        ]
        if not split:
            return None
        assert placed is not None and mesh is not None
        inner: list[int] = []  # reduced dimensions of the reshaped tensor
        outer: list[int] = []  # the device-block dimensions, reduced second
        new_shape: list[int] = []
        for d, extent in enumerate(shape):
            if d in split:
                f = math.prod(sp.size(mesh) for sp in placed.dims[d])
                outer.append(len(new_shape))
                new_shape += [f, extent // f]
                inner.append(len(new_shape) - 1)
            else:
                if d in self.reduced():
                    inner.append(len(new_shape))
                new_shape.append(extent)
        blocks = b.op(self.name.removeprefix("fusion."), b.op("reshape", x, shape=new_shape), dims=inner)
        kept = [k for k in range(len(new_shape)) if k not in inner]
        last = [kept.index(k) for k in outer]
        y = b.op(self.name.removeprefix("fusion."), blocks, dims=last)
        if self.keyword("keepdim"):
            y = b.op("reshape", y, shape=shape_of(self.results[0]))
        return y

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """To the elements equal to the extremum, shared evenly among ties
        (as PyTorch's amax/amin)."""
        x = self.input
        hit = b.op("eq", x, self.expanded(b, self.results[0]))
        ties = b.op("sum", b.op("cast", hit, dtype=x.type.element_type), dims=self.reduced(), keepdim=True)  # type: ignore[attr-defined]
        share = b.op("div", self.expanded(b, g), broadcast_to(b, ties, shape_of(x)))
        return [b.op("where", hit, share, 0.0)]


@irdl_op_definition
class MaxOp(ExtremumOp):
    """`torch.amax` over `dims` (`keepdim` keeps them as size 1); over an
    empty dimension it is refused, as PyTorch does."""

    name = "fusion.max"
    TORCH: ClassVar[str] = "amax"


@irdl_op_definition
class MinOp(ExtremumOp):
    """`torch.amin` over `dims` (`keepdim` keeps them as size 1); over an
    empty dimension it is refused, as PyTorch does."""

    name = "fusion.min"
    TORCH: ClassVar[str] = "amin"


@irdl_op_definition
class MeanOp(ReductionOp):
    """`torch.mean` over `dims` (`keepdim` keeps them as size 1)."""

    name = "fusion.mean"
    ELEMENTS: ClassVar[str] = "float"

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.mean(args[0], **self.torch_args())

    def count(self) -> int:
        shape = shape_of(self.input)
        return math.prod(shape[d] for d in self.reduced())

    def expand(self, b: Any) -> Any:
        if not self.split_reduced(b):
            return None
        x = b.stat(self.input)
        total = b.op("sum", x, dims=self.keyword("dims"), keepdim=self.keyword("keepdim"))
        return b.unstat(b.op("div", total, b.constant(self.count(), like=x)), self.input)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return [b.op("div", self.expanded(b, g), float(count(shape_of(self.input), self.reduced())))]


@irdl_op_definition
class VarOp(ReductionOp):
    """`torch.var` with `correction` (default 1, Bessel's)."""

    name = "fusion.var"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"), ("correction", "int"), ("keepdim", "bool"))
    DEFAULTS: ClassVar[dict[str, Any]] = {"keepdim": False, "correction": 1}
    ELEMENTS: ClassVar[str] = "float"
    correction = opt_prop_def(IntegerAttr[I64])

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.var(args[0], correction=self.keyword("correction"), **self.torch_args())

    def expand(self, b: Any) -> Any:
        """Two passes, as torch: the mean (reduced across devices), then the
        sum of squared deviations (reduced across devices)."""
        if not self.split_reduced(b):
            return None
        x = b.stat(self.input)
        dims = self.keyword("dims")
        n = math.prod(shape_of(self.input)[d] for d in self.reduced())
        mean = b.op("div", b.op("sum", x, dims=dims, keepdim=True), b.constant(n, like=x))
        dev = b.op("sub", x, mean)
        ss = b.op("sum", b.op("mul", dev, dev), dims=dims, keepdim=self.keyword("keepdim"))
        denom = max(0, n - self.keyword("correction"))
        return b.unstat(b.op("div", ss, b.constant(denom, like=x)), self.input)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """2 (x - mean) / (N - correction) times the cotangent, divided at
        run time as PyTorch's backward does: where N - correction is 0 the
        gradient is NaN (x at its mean: 0/0) or +-inf, where it is negative
        it is finite (PyTorch's forward clamps it at 0, its backward not)."""
        x, dims = self.input, self.reduced()
        n = count(shape_of(x), dims) - self.keyword("correction")
        centered = b.op("sub", x, b.op("mean", x, dims=dims, keepdim=True))
        return [b.op("mul", self.expanded(b, g), b.op("div", b.op("mul", centered, 2.0), float(n)))]


OPS: tuple[type[FusionOp], ...] = (SumOp, MaxOp, MinOp, MeanOp, VarOp)

"""Layout ops of the fusion dialect: `permute`, `reshape`,
`broadcast_in_dim`, `slice`, `concat` and `set` (a copy; with another
sharding on its result, a reshard).

A split moves with its dimension through permute and reshape (through a
reshape that merges or splits dimensions, as far as each device's block
stays one contiguous range); a sliced or concatenated dimension, or one of
extent 1 broadcast, cannot stay split.
"""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, ArrayAttr, IntegerAttr, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, var_operand_def

from fuserc import shapes
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, shape_of, sharding_of
from fuserc.dialects.fusion_grad import zeros
from fuserc.dialects.interfaces import ALL, DROP, MAP, RESHAPE, EvalContext, OpMap, Target, identity, normalized


class LayoutOp(FusionOp):
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    ELEMENTS: ClassVar[str] = "any"
    input = operand_def(TENSOR)
    result = result_def(TENSOR)


@irdl_op_definition
class PermuteOp(LayoutOp):
    """`torch.permute`: result dim i is operand dim dims[i]; a split moves
    with its dimension."""

    name = "fusion.permute"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"),)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.permute(s[0], kw["dims"])

    def sharding_map(self) -> OpMap:
        rr = len(shape_of(self.results[0]))
        perm = normalized(self.keyword("dims"), rr)
        inverse = {d: r for r, d in enumerate(perm)}
        return OpMap((tuple(Target(MAP, inverse[d]) for d in range(rr)),), rr, (0,), ALL, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        return args[0].permute(self.keyword("dims"))

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        perm = normalized(self.keyword("dims"), len(shape_of(g)))
        inverse = [perm.index(d) for d in range(len(perm))]
        made = g.owner
        if isinstance(made, PermuteOp) and normalized(made.keyword("dims"), len(perm)) == perm:
            return [made.input]  # a cotangent made permuted so (a grouped GEMM's weight gradient): itself
        return [b.op("permute", g, dims=inverse)]


@irdl_op_definition
class ReshapeOp(LayoutOp):
    """`torch.reshape` to the result's shape: the same elements in row-major
    order."""

    name = "fusion.reshape"
    RESULT: ClassVar[str] = "shape"

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if result is None:
            raise shapes.ShapeError("fusion.reshape needs its result shape")
        return shapes.reshape(s[0], tuple(result.get_shape()))

    def sharding_map(self) -> str:
        return RESHAPE

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        return args[0].reshape(shape_of(self.results[0]))

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return [b.op("reshape", g, shape=list(shape_of(self.input)))]


@irdl_op_definition
class BroadcastInDimOp(LayoutOp):
    """Operand dim i becomes result dim dims[i] (equal extent, or 1 expanded)."""

    name = "fusion.broadcast_in_dim"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"),)
    RESULT: ClassVar[str] = "shape"
    PY_ARGS: ClassVar[tuple[str, ...] | None] = ("shape", "dims")
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if result is None:
            raise shapes.ShapeError("fusion.broadcast_in_dim needs its result shape")
        return shapes.broadcast_in_dim(s[0], tuple(result.get_shape()), kw["dims"])

    def sharding_map(self) -> OpMap:
        shape, res = shape_of(self.input), shape_of(self.results[0])
        dims = self.keyword("dims")
        ts = tuple(
            Target(MAP, dims[i]) if shape[i] == res[dims[i]] else Target(DROP)
            for i in range(len(shape))
        )
        return OpMap((ts,), len(res), (0,), ALL, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        out_shape = shape_of(self.results[0])
        view = [1] * len(out_shape)
        for i, d in enumerate(self.keyword("dims")):
            view[d] = args[0].shape[i]
        return args[0].reshape(view).expand(out_shape)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """Summed over the new dimensions and the expanded ones."""
        x, dims = shape_of(self.input), list(self.keyword("dims"))
        r = shape_of(g)
        summed = [d for d in range(len(r)) if d not in dims or (x[dims.index(d)] == 1 and r[d] != 1)]
        out = b.op("sum", g, dims=summed) if summed else g
        return [out if shape_of(out) == x else b.op("reshape", out, shape=list(x))]


@irdl_op_definition
class SliceOp(LayoutOp):
    """`x[starts[0]:limits[0], ...]`: the elements from `starts` (included) to
    `limits` (excluded) in every dimension."""

    name = "fusion.slice"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("starts", "ints"), ("limits", "ints"))
    starts = prop_def(ArrayAttr[IntegerAttr[I64]])
    limits = prop_def(ArrayAttr[IntegerAttr[I64]])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.slice_(s[0], kw["starts"], kw["limits"])

    def sharding_map(self) -> OpMap:
        shape = shape_of(self.input)
        starts, limits = self.keyword("starts"), self.keyword("limits")
        ts = tuple(
            Target(MAP, d) if (starts[d], limits[d]) == (0, shape[d]) else Target(DROP, d)
            for d in range(len(shape))
        )
        return OpMap((ts,), len(shape), (0,), ALL, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        index = tuple(slice(s, l) for s, l in zip(self.keyword("starts"), self.keyword("limits")))
        return args[0][index]

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """The cotangent placed back between zeros, dimension by dimension."""
        shape = list(shape_of(g))
        for d, (lo, hi, e) in enumerate(zip(self.keyword("starts"), self.keyword("limits"), shape_of(self.input))):
            parts = []
            if lo:
                parts.append(zeros(b, g, [*shape[:d], lo, *shape[d + 1 :]]))
            parts.append(g)
            if e - hi:
                parts.append(zeros(b, g, [*shape[:d], e - hi, *shape[d + 1 :]]))
            if len(parts) > 1:
                g = b.op("concat", *parts, dim=d)
                shape[d] = e
        return [g]


@irdl_op_definition
class ConcatOp(FusionOp):
    """`torch.cat` along `dim`; the operands agree in every other extent."""

    name = "fusion.concat"
    OPERANDS: ClassVar[tuple[str, ...]] = ("*inputs",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    ELEMENTS: ClassVar[str] = "any"
    inputs = var_operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.concat(s, kw["dim"])

    def sharding_map(self) -> OpMap:
        rr = len(shape_of(self.results[0]))
        cd = normalized([self.keyword("dim")], rr)[0]
        ts = tuple(Target(DROP, d) if d == cd else Target(MAP, d) for d in range(rr))
        return OpMap(tuple(ts for _ in self.operands), rr, None, ALL, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.cat(args, dim=self.keyword("dim"))

    def torch_alone(self) -> bool:
        """Always: it moves data and computes nothing, so `torch.cat` (one
        launch) is as fast as a generated kernel, and Inductor's kernel for
        a concat of many inputs (the bucket of a model's norm and bias
        gradients, one input per parameter) took 16-22 s to build at 24
        layers on an H200 host, and anew for every layer count."""
        return True

    def torch_out(self, args: list[Any], out: Any) -> None:
        import torch

        torch.cat(args, dim=self.keyword("dim"), out=out)

    def torch_fits(self, args: list[Any], out: Any) -> bool:
        return all(a.dtype == out.dtype for a in args)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        shape = list(shape_of(g))
        d = normalized([self.keyword("dim")], len(shape))[0]
        out, at = [], 0
        for v in self.operands:
            e = shape_of(v)[d]
            starts = [at if i == d else 0 for i in range(len(shape))]
            limits = [at + e if i == d else n for i, n in enumerate(shape)]
            out.append(b.op("slice", g, starts=starts, limits=limits))
            at += e
        return out


@irdl_op_definition
class SetOp(LayoutOp):
    """A copy; a different sharding on the result is a reshard."""

    name = "fusion.set"

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return s[0]

    def sharding_map(self) -> OpMap:
        rr = len(shape_of(self.results[0]))
        return OpMap((identity(rr),), rr, (0,), ALL, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        return args[0]

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """The cotangent itself; moved back to the operand's mesh where the
        set moves between meshes (its transpose), since no other op reads
        tensors of two meshes."""
        src, dst = sharding_of(self.input), sharding_of(self.results[0])
        if src is not None and dst is not None and src.mesh != dst.mesh:
            return [b.op("set", g, placed_as=self.input)]
        return [g]


VIEW_OPS: tuple[type[FusionOp], ...] = (PermuteOp, BroadcastInDimOp, ReshapeOp, SetOp)
"""Layout ops a kernel reads as a re-indexing of its input (no compute)."""

MOVES_ELEMENTS: tuple[type[FusionOp], ...] = (*VIEW_OPS, SliceOp, ConcatOp)
"""Layout ops whose result elements are operand elements."""

OPS: tuple[type[FusionOp], ...] = (PermuteOp, ReshapeOp, BroadcastInDimOp, SliceOp, ConcatOp, SetOp)

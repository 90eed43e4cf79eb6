"""Pointwise ops of the fusion dialect: arithmetic, math functions,
comparisons, `where`, `cast`, and the ops that make values from nothing or
from an element's position (`constant`, `iota`, `dropout`).

Operands broadcast as in PyTorch: shapes align from the right, extents of 1
and rank-0 tensors expand. On sharded tensors a pointwise op is local where
its operands' splits agree on the result's dimensions; a dimension of extent
1 expanded cannot stay split (DROP). Each op's `kernel` formula is what the
fused kernels compute; `reference` is PyTorch itself.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, FloatAttr, IntegerAttr, StringAttr, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_attr_def, prop_def, result_def
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, elem_ok, is_float, shape_of
from fuserc.dialects.fusion_grad import unbroadcast
from fuserc.dialects.interfaces import (
    ALL,
    NONE,
    ONE,
    EvalContext,
    Math,
    OpMap,
    Target,
    broadcast_targets,
    keep_threshold,
    uniform_bits,
)


POSITIVE = (0.25, 4.0)
"""Where random inputs of log, sqrt, rsqrt and reciprocal are drawn."""


class PointwiseOp(FusionOp):
    """Base of the broadcasting pointwise ops."""

    POINTWISE: ClassVar[bool] = True
    CARRIES: ClassVar[str] = NONE
    """How partial operands pass to the result (interfaces.OpMap.carries)."""

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.broadcast(*s)

    def sharding_map(self) -> OpMap:
        res = self.results[0].type
        assert isinstance(res, TensorType)
        rshape = tuple(res.get_shape())
        targets = tuple(broadcast_targets(tuple(v.type.get_shape()), rshape) for v in self.operands)  # type: ignore[attr-defined]
        return OpMap(targets, len(rshape), None, self.CARRIES, False)


# ---- unary --------------------------------------------------------------------


class UnaryOp(PointwiseOp):
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    input = operand_def(TENSOR)
    result = result_def(TENSOR)

    TORCH: ClassVar[str] = ""
    """The torch function computing the op (`torch.<TORCH>`)."""
    DOMAIN: ClassVar[tuple[float, float] | None] = None
    """Where the operand must lie for the op to be defined (random inputs)."""

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return self.DOMAIN

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return getattr(torch, self.TORCH)(args[0])

    def kernel(self, m: Math, a: Any) -> Any:
        return getattr(m, self.TORCH)(a)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return [self.derivative(b, self.operands[0], self.results[0], g)]

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        """The cotangent of x from g, the cotangent of y = op(x)."""
        return FusionOp.vjp(self, b, g)[0]  # type: ignore[return-value]  (raises: no rule)


@irdl_op_definition
class ReluOp(UnaryOp):
    """`torch.relu`: max(x, 0); NaN stays NaN."""

    name = "fusion.relu"
    ELEMENTS: ClassVar[str] = "num"
    TORCH: ClassVar[str] = "relu"

    def kernel(self, m: Math, a: Any) -> Any:  # NaN stays NaN, as torch.relu
        return m.where(m.lt(a, m.const(0)), m.const(0), a)

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("where", b.op("gt", x, 0.0), g, 0.0)


@irdl_op_definition
class NegOp(UnaryOp):
    """`torch.neg`: -x."""

    name = "fusion.neg"
    ELEMENTS: ClassVar[str] = "num"
    TORCH: ClassVar[str] = "neg"
    CARRIES: ClassVar[str] = ALL

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("neg", g)


@irdl_op_definition
class AbsOp(UnaryOp):
    """`torch.abs`: |x|."""

    name = "fusion.abs"
    ELEMENTS: ClassVar[str] = "num"
    TORCH: ClassVar[str] = "abs"

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("where", b.op("gt", x, 0.0), g, b.op("where", b.op("lt", x, 0.0), b.op("neg", g), 0.0))


@irdl_op_definition
class ExpOp(UnaryOp):
    """`torch.exp`: e**x."""

    name = "fusion.exp"
    TORCH: ClassVar[str] = "exp"

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("mul", g, y)


@irdl_op_definition
class LogOp(UnaryOp):
    """`torch.log`: the natural logarithm; random inputs draw x positive."""

    name = "fusion.log"
    TORCH: ClassVar[str] = "log"
    DOMAIN: ClassVar[tuple[float, float] | None] = POSITIVE

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("div", g, x)


@irdl_op_definition
class TanhOp(UnaryOp):
    """`torch.tanh`."""

    name = "fusion.tanh"
    TORCH: ClassVar[str] = "tanh"

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("mul", g, b.op("sub", 1.0, b.op("mul", y, y)))


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """`torch.sigmoid`: 1 / (1 + e**-x)."""

    name = "fusion.sigmoid"
    TORCH: ClassVar[str] = "sigmoid"

    def kernel(self, m: Math, a: Any) -> Any:
        return m.div(m.const(1), m.add(m.const(1), m.exp(m.neg(a))))

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("mul", g, b.op("mul", y, b.op("sub", 1.0, y)))


@irdl_op_definition
class SiluOp(UnaryOp):
    """`torch.nn.functional.silu`: x * sigmoid(x)."""

    name = "fusion.silu"

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch.nn.functional as F

        return F.silu(args[0])

    def kernel(self, m: Math, a: Any) -> Any:
        return m.div(a, m.add(m.const(1), m.exp(m.neg(a))))

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        s = b.op("sigmoid", x)
        return b.op("mul", g, b.op("mul", s, b.op("add", 1.0, b.op("mul", x, b.op("sub", 1.0, s)))))


@irdl_op_definition
class GeluOp(UnaryOp):
    """Erf form by default; `{approximate = "tanh"}` selects the tanh form."""

    name = "fusion.gelu"
    ATTRS: ClassVar[tuple[str, ...]] = ("approximate",)
    approximate = opt_attr_def(StringAttr)

    @property
    def form(self) -> str:
        return self.approximate.data if self.approximate is not None else "none"

    def verify_(self) -> None:
        if self.form not in ("none", "tanh"):
            raise VerifyException(f'approximate must be "none" or "tanh", got "{self.form}"')
        super().verify_()

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch.nn.functional as F

        return F.gelu(args[0], approximate=self.form)

    def torch_alone(self) -> bool:
        """The erf form: PyTorch's vectorized kernel took 45.9 us for
        [8192, 4096] bf16 on an H200, Inductor's (torch.compile's too)
        71.8 us (its erf in f32 per element bounds it, not memory)."""
        return self.form == "none"

    def torch_out(self, args: list[Any], out: Any) -> None:
        import torch

        torch.ops.aten.gelu.out(args[0], approximate=self.form, out=out)

    def kernel(self, m: Math, a: Any) -> Any:
        half, one = m.const(0.5), m.const(1)
        if self.form == "tanh":
            cube = m.mul(m.mul(m.mul(m.const(0.044715), a), a), a)
            inner = m.mul(m.const(math.sqrt(2 / math.pi)), m.add(a, cube))
            return m.mul(m.mul(half, a), m.add(one, m.tanh(inner)))
        return m.mul(m.mul(half, a), m.add(one, m.erf(m.mul(a, m.const(math.sqrt(0.5))))))

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        """In f32 for 16-bit types (as PyTorch's gelu_backward): one
        elementwise chain that a kernel computes without rounding between."""
        want = g
        x, g = b.stat(x), b.stat(g)
        if self.form == "tanh":  # d/dx 0.5 x (1 + tanh(u)), u = c (x + k x^3)
            c, k = math.sqrt(2 / math.pi), 0.044715
            t = b.op("tanh", b.op("mul", c, b.op("add", x, b.op("mul", k, b.op("mul", x, b.op("mul", x, x))))))
            du = b.op("mul", c, b.op("add", 1.0, b.op("mul", 3 * k, b.op("mul", x, x))))
            inner = b.op("mul", b.op("mul", 0.5, x), b.op("mul", b.op("sub", 1.0, b.op("mul", t, t)), du))
            d = b.op("add", b.op("mul", 0.5, b.op("add", 1.0, t)), inner)
        else:  # Phi(x) + x phi(x)
            cdf = b.op("mul", 0.5, b.op("add", 1.0, b.op("erf", b.op("mul", x, math.sqrt(0.5)))))
            pdf = b.op("mul", 1 / math.sqrt(2 * math.pi), b.op("exp", b.op("mul", -0.5, b.op("mul", x, x))))
            d = b.op("add", cdf, b.op("mul", x, pdf))
        return b.unstat(b.op("mul", g, d), want)


@irdl_op_definition
class RsqrtOp(UnaryOp):
    """`torch.rsqrt`: 1 / sqrt(x); random inputs draw x positive."""

    name = "fusion.rsqrt"
    TORCH: ClassVar[str] = "rsqrt"
    DOMAIN: ClassVar[tuple[float, float] | None] = POSITIVE

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("mul", g, b.op("mul", -0.5, b.op("mul", y, b.op("mul", y, y))))


@irdl_op_definition
class SqrtOp(UnaryOp):
    """`torch.sqrt`; random inputs draw x positive."""

    name = "fusion.sqrt"
    TORCH: ClassVar[str] = "sqrt"
    DOMAIN: ClassVar[tuple[float, float] | None] = POSITIVE

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("div", b.op("mul", g, 0.5), y)


@irdl_op_definition
class ErfOp(UnaryOp):
    """`torch.erf`: the error function."""

    name = "fusion.erf"
    TORCH: ClassVar[str] = "erf"

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("mul", g, b.op("mul", 2.0 / math.sqrt(math.pi), b.op("exp", b.op("neg", b.op("mul", x, x)))))


@irdl_op_definition
class ReciprocalOp(UnaryOp):
    """`torch.reciprocal`: 1 / x; random inputs draw x away from 0."""

    name = "fusion.reciprocal"
    TORCH: ClassVar[str] = "reciprocal"

    def kernel(self, m: Math, a: Any) -> Any:
        return m.div(m.const(1), a)
    DOMAIN: ClassVar[tuple[float, float] | None] = POSITIVE

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("neg", b.op("mul", g, b.op("mul", y, y)))


@irdl_op_definition
class SinOp(UnaryOp):
    """`torch.sin`."""

    name = "fusion.sin"
    TORCH: ClassVar[str] = "sin"

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("mul", g, b.op("cos", x))


@irdl_op_definition
class CosOp(UnaryOp):
    """`torch.cos`."""

    name = "fusion.cos"
    TORCH: ClassVar[str] = "cos"

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("neg", b.op("mul", g, b.op("sin", x)))


@irdl_op_definition
class CastOp(UnaryOp):
    """Conversion to the result's element type (`Tensor.to`)."""

    name = "fusion.cast"
    ELEMENTS: ClassVar[str] = "any"
    RESULT: ClassVar[str] = "dtype"
    CARRIES: ClassVar[str] = ALL

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        if result is None:
            raise VerifyException("fusion.cast needs its result element type")
        if not elem_ok(result.element_type, "any"):
            raise VerifyException(f"cannot cast to element type {result.element_type}")
        return result.element_type

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        res = self.results[0].type
        assert isinstance(res, TensorType)
        return args[0].to(ctx.dtype(res.element_type))

    def kernel(self, m: Math, a: Any) -> Any:
        from fuserc.dialects.interfaces import torch_dtype

        res = self.results[0].type
        assert isinstance(res, TensorType)
        return m.cast(a, torch_dtype(res.element_type))

    def derivative(self, b: Any, x: SSAValue, y: SSAValue, g: SSAValue) -> SSAValue:
        return b.op("cast", g, dtype=x.type.element_type)  # type: ignore[attr-defined]


# ---- binary -------------------------------------------------------------------


class BinaryOp(PointwiseOp):
    OPERANDS: ClassVar[tuple[str, ...]] = ("lhs", "rhs")
    ELEMENTS: ClassVar[str] = "num"
    lhs = operand_def(TENSOR)
    rhs = operand_def(TENSOR)
    result = result_def(TENSOR)

    TORCH: ClassVar[str] = ""

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return getattr(torch, self.TORCH)(args[0], args[1])

    def kernel(self, m: Math, a: Any, b: Any) -> Any:
        return getattr(m, self.TORCH)(a, b)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        a, c = self.operands
        ga, gc = self.derivatives(b, a, c, self.results[0], g)
        return [unbroadcast(b, ga, shape_of(a)), unbroadcast(b, gc, shape_of(c))]

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        """The cotangents of a and c (at y's shape) from g, that of y = op(a, c)."""
        return FusionOp.vjp(self, b, g)  # type: ignore[return-value]  (raises: no rule)


@irdl_op_definition
class AddOp(BinaryOp):
    """`torch.add`: lhs + rhs, broadcast as PyTorch does (shapes align from
    the right; size-1 and rank-0 operands expand)."""

    name = "fusion.add"
    TORCH: ClassVar[str] = "add"
    CARRIES: ClassVar[str] = ALL

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        return g, g


@irdl_op_definition
class SubOp(BinaryOp):
    """`torch.sub`: lhs - rhs, broadcast as `add`."""

    name = "fusion.sub"
    TORCH: ClassVar[str] = "sub"
    CARRIES: ClassVar[str] = ALL

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        return g, b.op("neg", g)


@irdl_op_definition
class MulOp(BinaryOp):
    """`torch.mul`: lhs * rhs, broadcast as `add`."""

    name = "fusion.mul"
    TORCH: ClassVar[str] = "mul"
    CARRIES: ClassVar[str] = ONE

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        return b.op("mul", g, c), b.op("mul", g, a)


@irdl_op_definition
class DivOp(BinaryOp):
    """`torch.div`: lhs / rhs (true division of floats), broadcast as `add`."""

    name = "fusion.div"
    ELEMENTS: ClassVar[str] = "float"
    TORCH: ClassVar[str] = "div"

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        q = b.op("div", g, c)
        return q, b.op("neg", b.op("mul", q, y))


@irdl_op_definition
class PowOp(BinaryOp):
    """`torch.pow`; random inputs draw the base positive (a negative base to
    a fractional power is NaN, which would make a checked run meaningless)."""

    name = "fusion.pow"
    ELEMENTS: ClassVar[str] = "float"
    TORCH: ClassVar[str] = "pow"

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        ga = b.op("mul", g, b.op("mul", c, b.op("pow", a, b.op("sub", c, 1.0))))
        return ga, b.op("mul", g, b.op("mul", y, b.op("log", a)))

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return POSITIVE if i == 0 else None


@irdl_op_definition
class MaximumOp(BinaryOp):
    """`torch.maximum`: the larger of lhs and rhs, elementwise (NaN if either
    is); at a tie the gradient is shared equally."""

    name = "fusion.maximum"
    TORCH: ClassVar[str] = "maximum"

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        return _select_grads(b, b.op("gt", a, c), b.op("eq", a, c), g)


@irdl_op_definition
class MinimumOp(BinaryOp):
    """`torch.minimum`: the smaller of lhs and rhs, elementwise (NaN if either
    is); at a tie the gradient is shared equally."""

    name = "fusion.minimum"
    TORCH: ClassVar[str] = "minimum"

    def derivatives(self, b: Any, a: SSAValue, c: SSAValue, y: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
        return _select_grads(b, b.op("lt", a, c), b.op("eq", a, c), g)


class CompareOp(BinaryOp):
    """A comparison: an i1 result."""

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        from xdsl.dialects.builtin import i1

        return i1


@irdl_op_definition
class LtOp(CompareOp):
    """`torch.lt`: lhs < rhs, an i1 tensor, broadcast as `add`."""

    name = "fusion.lt"
    TORCH: ClassVar[str] = "lt"


@irdl_op_definition
class LeOp(CompareOp):
    """`torch.le`: lhs <= rhs, an i1 tensor, broadcast as `add`."""

    name = "fusion.le"
    TORCH: ClassVar[str] = "le"


@irdl_op_definition
class GtOp(CompareOp):
    """`torch.gt`: lhs > rhs, an i1 tensor, broadcast as `add`."""

    name = "fusion.gt"
    TORCH: ClassVar[str] = "gt"


@irdl_op_definition
class GeOp(CompareOp):
    """`torch.ge`: lhs >= rhs, an i1 tensor, broadcast as `add`."""

    name = "fusion.ge"
    TORCH: ClassVar[str] = "ge"


@irdl_op_definition
class EqOp(CompareOp):
    """`torch.eq`: lhs == rhs, an i1 tensor, broadcast as `add`."""

    name = "fusion.eq"
    TORCH: ClassVar[str] = "eq"


@irdl_op_definition
class NeOp(CompareOp):
    """`torch.ne`: lhs != rhs, an i1 tensor, broadcast as `add`."""

    name = "fusion.ne"
    TORCH: ClassVar[str] = "ne"


@irdl_op_definition
class WhereOp(PointwiseOp):
    """`torch.where(condition, a, b)`; the condition is i1."""

    name = "fusion.where"
    OPERANDS: ClassVar[tuple[str, ...]] = ("condition", "lhs", "rhs")
    ELEMENTS: ClassVar[tuple[str, ...]] = ("i1", "any", "any")
    condition = operand_def(TENSOR)
    lhs = operand_def(TENSOR)
    rhs = operand_def(TENSOR)
    result = result_def(TENSOR)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.where(args[0], args[1], args[2])

    def kernel(self, m: Math, c: Any, a: Any, b: Any) -> Any:
        return m.where(c, a, b)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        cond, a, c = self.operands
        return [None, unbroadcast(b, b.op("where", cond, g, 0.0), shape_of(a)), unbroadcast(b, b.op("where", cond, 0.0, g), shape_of(c))]


# ---- values from nothing or from positions ---------------------------------------


@irdl_op_definition
class ConstantOp(PointwiseOp):
    """`fusion.constant 0.125 : () -> tensor<f32>`: a rank-0 tensor holding
    the value (rounded to the element type; `inf`, `-inf` and `nan` are
    spelled so). Its rank-0 result broadcasts in any pointwise op."""

    name = "fusion.constant"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("value", "float"),)
    LEADING: ClassVar[str | None] = "value"
    RESULT: ClassVar[str] = "dtype"
    value = prop_def(FloatAttr)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if result is not None and tuple(result.get_shape()) != ():
            raise shapes.ShapeError("fusion.constant makes a rank-0 tensor (broadcasting expands it)")
        return ()

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        if result is None:
            raise VerifyException("fusion.constant needs its element type")
        if not elem_ok(result.element_type, "any"):
            raise VerifyException(f"fusion.constant cannot make element type {result.element_type}")
        v = kw.get("value")
        if v is not None and not is_float(result.element_type) and (v != v or v in (math.inf, -math.inf) or v != int(v)):
            raise VerifyException(f"{result.element_type} constant {v} is not an integer")
        return result.element_type

    def sharding_map(self) -> OpMap:
        return OpMap((), 0, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        res = self.results[0].type
        assert isinstance(res, TensorType)
        dtype = ctx.dtype(res.element_type)
        v = self.keyword("value")
        # filled on the device: torch.tensor(v, device=...) copies from the host and waits for it
        return torch.full((), v if dtype.is_floating_point else int(v), dtype=dtype, device=ctx.device)

    def kernel(self, m: Math) -> Any:
        from fuserc.dialects.interfaces import torch_dtype

        res = self.results[0].type
        assert isinstance(res, TensorType)
        return m.cast(m.const(self.keyword("value")), torch_dtype(res.element_type))

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return []  # no operands: nothing to differentiate


@irdl_op_definition
class IotaOp(FusionOp):
    """`fusion.iota dim = 1 : () -> tensor<8x16xi64>`: each element's index
    along `dim` (i64, or a float type holding the index)."""

    name = "fusion.iota"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    RESULT: ClassVar[str] = "shape,dtype"
    PY_ARGS: ClassVar[tuple[str, ...] | None] = ("shape", "dim", "dtype")
    DEFAULT_DTYPE: ClassVar[str | None] = "i64"
    INDEXED: ClassVar[bool] = True
    dim = prop_def(IntegerAttr[I64])
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if result is None:
            raise VerifyException("fusion.iota needs its result type")
        shape = tuple(result.get_shape())
        if not shape:
            raise shapes.ShapeError("fusion.iota needs a result of rank >= 1")
        shapes.check_dim(shape, kw["dim"])
        return shape

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        assert result is not None
        if not elem_ok(result.element_type, "num"):
            raise VerifyException(f"fusion.iota makes i64 or a float type, not {result.element_type}")
        return result.element_type

    def sharding_map(self) -> OpMap:
        return OpMap((), len(self.results[0].type.get_shape()), None, NONE, False)  # type: ignore[attr-defined]

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        res = self.results[0].type
        assert isinstance(res, TensorType)
        shape = tuple(res.get_shape())
        d = shapes.check_dim(shape, self.keyword("dim"))
        idx = ctx.global_index(-1, d, shape[d])
        view = [1] * len(shape)
        view[d] = shape[d]
        return idx.reshape(view).expand(shape).to(ctx.dtype(res.element_type))

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return []  # no operands: nothing to differentiate


@irdl_op_definition
class DropoutOp(FusionOp):
    """`fusion.dropout %x, %seed p = 0.1`: each element zeroed with
    probability p, the others scaled by 1/(1-p). The mask is a counter-based
    random function of (seed, the element's index in the global tensor,
    row-major; `interfaces.uniform_bits`), so it is the same whatever the
    sharding and on every backend."""

    name = "fusion.dropout"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "seed")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("p", "float"),)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("float", "i64")
    INDEXED: ClassVar[bool] = True
    input = operand_def(TENSOR)
    seed = operand_def(TENSOR)
    p = prop_def(FloatAttr)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        p = kw.get("p")
        if p is None or not 0.0 <= p < 1.0:
            raise VerifyException(f"dropout probability p = {p} must be in [0, 1)")
        if s[1] != ():
            raise shapes.ShapeError(f"the dropout seed must be a rank-0 i64 tensor, got shape {list(s[1])}")
        return s[0]

    def sharding_map(self) -> OpMap:
        from fuserc.dialects.interfaces import identity

        rank = len(self.results[0].type.get_shape())  # type: ignore[attr-defined]
        return OpMap((identity(rank), ()), rank, (0,), NONE, False)

    def keep_mask(self, x: Any, seed: Any, ctx: EvalContext) -> Any:
        """Which local elements are kept (a bool tensor of x's shape)."""
        import torch

        shape = tuple(x.shape)
        gshape = ctx.global_shape(-1, shape)
        index = torch.zeros((), dtype=torch.int64, device=x.device)
        stride = 1
        for d in range(len(shape) - 1, -1, -1):
            view = [1] * len(shape)
            view[d] = shape[d]
            index = index + ctx.global_index(-1, d, shape[d]).to(x.device).reshape(view) * stride
            stride *= gshape[d]
        bits = uniform_bits(seed.to(torch.int64), index)
        return (bits >= keep_threshold(self.keyword("p"))).expand(shape)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        x, seed = args
        p = self.keyword("p")
        if p == 0.0:
            return x.clone()
        keep = self.keep_mask(x, seed, ctx)
        return torch.where(keep, x * (1.0 / (1.0 - p)), torch.zeros((), dtype=x.dtype, device=x.device))

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """The same mask (same seed, same global indices), the same scale."""
        return [b.op("dropout", g, self.seed, p=self.keyword("p")), None]


def _select_grads(b: Any, first: SSAValue, tie: SSAValue, g: SSAValue) -> tuple[SSAValue, SSAValue]:
    """maximum/minimum: the cotangent goes to the operand chosen, halved on
    ties (as PyTorch)."""
    half = b.op("mul", g, 0.5)
    ga = b.op("where", first, g, b.op("where", tie, half, 0.0))
    gc = b.op("where", first, 0.0, b.op("where", tie, half, g))
    return ga, gc


POINTWISE_OPS: tuple[type[FusionOp], ...] = (
    ReluOp, NegOp, AbsOp, ExpOp, LogOp, TanhOp, SigmoidOp, SiluOp, GeluOp, RsqrtOp, SqrtOp, ErfOp,
    ReciprocalOp, SinOp, CosOp, CastOp,
    AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp,
    LtOp, LeOp, GtOp, GeOp, EqOp, NeOp, WhereOp, ConstantOp,
)  # fmt: skip

OPS: tuple[type[FusionOp], ...] = (*POINTWISE_OPS, IotaOp, DropoutOp)

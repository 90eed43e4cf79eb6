"""The neural-network ops of the fusion dialect: `softmax`, `log_softmax`,
`layer_norm`, `rms_norm`, `sdpa`, `embedding` and `cross_entropy`, with
PyTorch's semantics (`torch.nn.functional`).

Their sharding: batch-like dimensions map to the result; a normalized (or
softmax) dimension may stay split, and the op then expands into reductions
whose partial sums are reduced across devices, so the tensor is never
gathered (`expand`); attention is local over batch and heads; an embedding
table split over its vocabulary makes a partial sum (each device looks up
the ids of its rows, others give zero), and cross_entropy over a split
vocabulary reduces per-device maxima and sums of exponentials.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, ArrayAttr, BoolAttr, FloatAttr, IntegerAttr, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, opt_result_def, prop_def, result_def, var_result_def
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.diagnostics import error_at
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, shape_of, stat_type
from fuserc.dialects.fusion_grad import label_column, one_hot
from fuserc.dialects.interfaces import (
    CONTRACT,
    DROP,
    MAP,
    NONE,
    STAT,
    EvalContext,
    OpMap,
    Target,
    normalized,
    torch_dtype,
)

# ---- softmax -------------------------------------------------------------------


class SoftmaxLikeOp(FusionOp):
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    input = operand_def(TENSOR)
    result = result_def(TENSOR)
    dim = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        shapes.check_dim(s[0], kw["dim"])
        return s[0]

    def axis(self) -> int:
        return normalized([self.keyword("dim")], len(shape_of(self.input)))[0]

    def sharding_map(self) -> OpMap:
        rr = len(shape_of(self.results[0]))
        sd = self.axis()
        ts = tuple(Target(STAT, d) if d == sd else Target(MAP, d) for d in range(rr))
        return OpMap((ts,), rr, (0,), NONE, False)

    def split_axis(self, b: Any) -> bool:
        s = b.sharding(self.input)
        return s is not None and bool(s.placement().dims[self.axis()])

    def shifted(self, b: Any) -> tuple[Any, Any]:
        """(x - max(x), log(sum(exp(x - max(x))))) along the axis, in f32 for
        16-bit inputs: max and sum reduce across devices when it is split."""
        x = b.stat(self.input)
        d = self.keyword("dim")
        xs = b.op("sub", x, b.op("max", x, dims=[d], keepdim=True))
        lse = b.op("log", b.op("sum", b.op("exp", xs), dims=[d], keepdim=True))
        return xs, lse


@irdl_op_definition
class SoftmaxOp(SoftmaxLikeOp):
    """`torch.softmax` along `dim`."""

    name = "fusion.softmax"
    ROWWISE: ClassVar[str | None] = "softmax"

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.softmax(args[0], dim=self.keyword("dim"))

    def expand(self, b: Any) -> Any:
        if not self.split_axis(b):
            return None
        xs, lse = self.shifted(b)
        return b.unstat(b.op("exp", b.op("sub", xs, lse)), self.input)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """y (g - sum(g y)) along the axis, in f32 for 16-bit types."""
        y, gs = b.stat(self.results[0]), b.stat(g)
        inner = b.op("sum", b.op("mul", gs, y), dims=[self.keyword("dim")], keepdim=True)
        return [b.unstat(b.op("mul", y, b.op("sub", gs, inner)), self.input)]


@irdl_op_definition
class LogSoftmaxOp(SoftmaxLikeOp):
    """`torch.log_softmax` along `dim`."""

    name = "fusion.log_softmax"
    ROWWISE: ClassVar[str | None] = "log_softmax"

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.log_softmax(args[0], dim=self.keyword("dim"))

    def expand(self, b: Any) -> Any:
        if not self.split_axis(b):
            return None
        xs, lse = self.shifted(b)
        return b.unstat(b.op("sub", xs, lse), self.input)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """g - exp(y) sum(g) along the axis."""
        y, gs = b.stat(self.results[0]), b.stat(g)
        total = b.op("sum", gs, dims=[self.keyword("dim")], keepdim=True)
        return [b.unstat(b.op("sub", gs, b.op("mul", b.op("exp", y), total)), self.input)]


# ---- normalizations --------------------------------------------------------------


class NormOp(FusionOp):
    """Normalization over the trailing `dims`; the weight (and bias) have
    those dimensions' shape. Optional results after the first are the
    statistics the normalization used (`STATS`: layer_norm's mean and rstd,
    rms_norm's rstd), as `torch.native_layer_norm` returns them: the input's
    shape with the normalized dims of extent 1, in the statistics type (f32
    for 16-bit inputs). autodiff asks for them (`for_derivative`), so that
    the backward reads what the forward computed instead of reducing the
    saved input again."""

    ELEMENTS: ClassVar[str] = "float"
    STATS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        x = s[0]
        norm = shapes.trailing_dims(x, kw["dims"])
        want = tuple(x[d] for d in norm)
        for name, shape in zip(cls.OPERANDS[1:], s[1:]):
            if tuple(shape) != want:  # the op is named by whoever reports it (the verifier, the builder)
                raise shapes.ShapeError(
                    f"{name.rstrip('?')} has shape {list(shape)}, expected {list(want)} "
                    f"(the normalized dimensions' extents)"
                )
        eps = kw.get("eps")
        if eps is not None and not eps >= 0:
            raise VerifyException(f"eps = {eps} must be >= 0")
        return x

    @classmethod
    def more_results(cls, operands: Any, kw: dict[str, Any], first: TensorType) -> list[tuple[Shape, Any]]:
        x = tuple(first.get_shape())
        norm = set(shapes.trailing_dims(x, kw["dims"]))
        shape = tuple(1 if d in norm else n for d, n in enumerate(x))
        return [(shape, stat_type(operands[0].element_type)) for _ in cls.STATS]

    def more_shardings(self, first: Any) -> list[Any]:
        """The statistics lie as the result's rows; a normalized dim (of
        extent 1 there) is whole."""
        p = first.placement()
        norm = set(self.normalized_dims())
        stats = p.with_dims([() if d in norm else ds for d, ds in enumerate(p.dims)])
        return [stats for _ in self.STATS]

    def statistics(self, x: Any) -> list[Any]:
        """The `STATS` of torch tensor `x` over the normalized dims, in f32
        for 16-bit inputs (the reference's extra results)."""
        raise NotImplementedError(f"{self.name} has no statistics")

    def with_statistics(self, y: Any, args: list[Any]) -> Any:
        """The reference's value: `y`, then the statistics asked for."""
        return (y, *self.statistics(args[0])[: len(self.results) - 1]) if len(self.results) > 1 else y

    def for_derivative(self) -> FusionOp | None:
        """This norm with all its statistics as results, which the
        derivative reads."""
        return None if len(self.results) == 1 + len(self.STATS) else self.with_results(1 + len(self.STATS))

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        """A weight near one and a bias near zero (PyTorch initializes them
        to exactly that), so random programs stay well conditioned."""
        return {1: (0.5, 1.5), 2: (-0.5, 0.5)}.get(i)

    def normalized_dims(self) -> list[int]:
        x = shape_of(self.operands[0])
        return sorted(normalized(self.keyword("dims"), len(x)))

    def normalized_shape(self) -> list[int]:
        x = shape_of(self.operands[0])
        return [x[d] for d in self.normalized_dims()]

    def sharding_map(self) -> OpMap:
        rr = len(shape_of(self.results[0]))
        norm = self.normalized_dims()
        tx = tuple(Target(STAT, d) if d in norm else Target(MAP, d) for d in range(rr))
        tw = tuple(Target(MAP, d) for d in norm)
        return OpMap((tx, *(tw for _ in self.operands[1:])), rr, (0,), NONE, False)

    def split_normalized(self, b: Any) -> bool:
        s = b.sharding(self.operands[0])
        return s is not None and any(s.placement().dims[d] for d in self.normalized_dims())

    def epsilon(self) -> float:
        eps = self.keyword("eps")
        if eps is None:  # as torch: the machine epsilon of the input's dtype
            import torch

            return torch.finfo(torch_dtype(self.operands[0].type.element_type)).eps  # type: ignore[attr-defined]
        return eps

    def affine(self, b: Any, y: Any, weight: Any, bias: Any) -> Any:
        """y * weight (+ bias) in y's type, cast back to the input's."""
        y = b.op("mul", y, b.stat(weight))
        if bias is not None:
            y = b.op("add", y, b.stat(bias))
        return b.unstat(y, self.operands[0])

    def norm_vjp(self, b: Any, g: SSAValue, centered: bool) -> list[SSAValue | None]:
        """The cotangents of x, the weight (and the bias) of
        y = xhat * w (+ bias), xhat = (x - mean) * rstd (layer_norm) or
        x * rstd (rms_norm), statistics over the normalized dims."""
        dims = self.normalized_dims()
        x, gs = b.stat(self.operands[0]), b.stat(g)
        stats = list(self.results[1:])
        if len(stats) == len(self.STATS):  # the forward's statistics (for_derivative)
            if centered:
                x = b.op("sub", x, stats[0])
            rstd = stats[-1]
        else:
            if centered:
                x = b.op("sub", x, b.op("mean", x, dims=dims, keepdim=True))
            ms = b.op("mean", b.op("mul", x, x), dims=dims, keepdim=True)
            rstd = b.op("rsqrt", b.op("add", ms, b.constant(self.epsilon(), like=x)))
        xhat = b.op("mul", x, rstd)
        gxhat = b.op("mul", gs, b.stat(self.operands[1]))
        proj = b.op("mean", b.op("mul", gxhat, xhat), dims=dims, keepdim=True)
        inner = b.op("sub", gxhat, b.op("mul", xhat, proj))
        if centered:
            inner = b.op("sub", inner, b.op("mean", gxhat, dims=dims, keepdim=True))
        lead = [d for d in range(len(shape_of(x))) if d not in dims]
        gw = b.op("sum", b.op("mul", gs, xhat), dims=lead) if lead else b.op("mul", gs, xhat)
        grads = [b.unstat(b.op("mul", inner, rstd), self.operands[0]), b.unstat(gw, self.operands[1])]
        if len(self.operands) > 2:
            gb = b.op("sum", gs, dims=lead) if lead else gs
            grads.append(b.unstat(gb, self.operands[2]))
        return grads


@irdl_op_definition
class LayerNormOp(NormOp):
    """`torch.nn.functional.layer_norm` over the trailing `dims`, with a
    weight and an optional bias of those dims' shape; `eps` defaults to
    1e-5, as PyTorch's. Optional results: the mean and rstd it used
    (`native_layer_norm`'s; `mean=True, rstd=True` in Python)."""

    name = "fusion.layer_norm"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "weight", "bias?")
    RESULTS: ClassVar[tuple[str, ...]] = ("result", "mean?", "rstd?")
    STATS: ClassVar[tuple[str, ...]] = ("mean", "rstd")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"), ("eps", "float"))
    DEFAULTS: ClassVar[dict[str, Any]] = {"eps": 1e-5}
    input = operand_def(TENSOR)
    weight = operand_def(TENSOR)
    bias = opt_operand_def(TENSOR)
    result = result_def(TENSOR)
    stats = var_result_def(TENSOR)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])
    eps = opt_prop_def(FloatAttr)

    @classmethod
    def group_results(cls, types: Any) -> list:
        """The result, then the statistics (one variadic definition: IRDL
        allows only one without segment sizes)."""
        return [types[0], list(types[1:])]

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        """torch's layer norm; with statistics, `native_layer_norm`'s (one
        reduction where Inductor compiles it), in f32 for 16-bit inputs
        where torch's cpu kernel gives them in the input's type."""
        import torch

        bias = args[2] if len(args) > 2 else None
        y, mean, rstd = torch.native_layer_norm(args[0], self.normalized_shape(), args[1], bias, self.epsilon())
        if len(self.results) == 1:
            return y
        if mean.dtype != torch.promote_types(args[0].dtype, torch.float32):
            return self.with_statistics(y, args)
        return (y, mean, rstd)[: len(self.results)]

    def statistics(self, x: Any) -> list[Any]:
        import torch

        xs = x.to(torch.promote_types(x.dtype, torch.float32))
        var, mean = torch.var_mean(xs, dim=self.normalized_dims(), correction=0, keepdim=True)
        return [mean, torch.rsqrt(var + self.epsilon())]

    def expand(self, b: Any) -> Any:
        if not self.split_normalized(b):
            return None
        dims = self.keyword("dims")
        x = b.stat(self.input)
        mean = b.op("mean", x, dims=dims, keepdim=True)
        centered = b.op("sub", x, mean)
        var = b.op("mean", b.op("mul", centered, centered), dims=dims, keepdim=True)
        rstd = b.op("rsqrt", b.op("add", var, b.constant(self.epsilon(), like=x)))
        y = self.affine(b, b.op("mul", centered, rstd), self.weight, self.bias)
        return y if len(self.results) == 1 else (y, mean, rstd)[: len(self.results)]

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return self.norm_vjp(b, g, centered=True)


@irdl_op_definition
class RmsNormOp(NormOp):
    """`torch.nn.functional.rms_norm`; without `eps`, torch's default (the
    machine epsilon of the input's element type). Optional result: the
    rstd it used (`rstd=True` in Python)."""

    name = "fusion.rms_norm"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "weight")
    RESULTS: ClassVar[tuple[str, ...]] = ("result", "rstd?")
    STATS: ClassVar[tuple[str, ...]] = ("rstd",)
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"), ("eps", "float"))
    input = operand_def(TENSOR)
    weight = operand_def(TENSOR)
    result = result_def(TENSOR)
    rstd = opt_result_def(TENSOR)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])
    eps = opt_prop_def(FloatAttr)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch.nn.functional as F

        return self.with_statistics(F.rms_norm(args[0], self.normalized_shape(), args[1], self.epsilon()), args)

    def statistics(self, x: Any) -> list[Any]:
        import torch

        xs = x.to(torch.promote_types(x.dtype, torch.float32))
        return [torch.rsqrt(xs.square().mean(dim=self.normalized_dims(), keepdim=True) + self.epsilon())]

    def expand(self, b: Any) -> Any:
        if not self.split_normalized(b):
            return None
        x = b.stat(self.input)
        ms = b.op("mean", b.op("mul", x, x), dims=self.keyword("dims"), keepdim=True)
        rstd = b.op("rsqrt", b.op("add", ms, b.constant(self.epsilon(), like=x)))
        y = self.affine(b, b.op("mul", x, rstd), self.weight, None)
        return y if len(self.results) == 1 else (y, rstd)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        return self.norm_vjp(b, g, centered=False)


# ---- attention ---------------------------------------------------------------------


class AttentionOp(FusionOp):
    """What sdpa and its derivative share: q, k, v, `scale`, `causal`; a
    launch of its own, run by PyTorch's attention kernels (`ALONE`,
    runtime/kernels/attention.py)."""

    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("scale", "float"), ("causal", "bool"))
    DEFAULTS: ClassVar[dict[str, Any]] = {"causal": False}
    ALONE: ClassVar[bool] = True
    query = operand_def(TENSOR)
    key = operand_def(TENSOR)
    value = operand_def(TENSOR)
    scale = opt_prop_def(FloatAttr)
    causal = opt_prop_def(BoolAttr)

    def options(self) -> tuple[bool, float | None]:
        """(causal, scale) as the attention kernels take them."""
        return bool(self.keyword("causal")), self.keyword("scale")

    MATMULS: ClassVar[tuple[int, int]] = (1, 1)
    """(products over head_dim of q and k, over head_dim of v) per
    (query, key) pair: the forward's q k^T and p v."""

    def flops(self) -> int:
        """Floating-point operations of the matrix products on this op's
        shapes, 2 per multiply-add, over the (query, key) pairs the mask
        keeps (PyTorch's top-left causal mask: row i sees keys 0..i)."""
        b, h, sq, d = shape_of(self.operands[0])
        sk, dv = shape_of(self.operands[1])[2], shape_of(self.operands[2])[3]
        seen = min(sq, sk)  # causal: rows 0..seen-1 see i + 1 keys, the rest all sk
        pairs = seen * (seen + 1) // 2 + (sq - seen) * sk if self.options()[0] else sq * sk
        a, c = self.MATMULS
        return 2 * b * h * pairs * (a * d + c * dv)


def _heads_map(rank: int) -> tuple[Target, ...]:
    """Batch, heads and sequence MAP, head_dim (the rest) whole."""
    return (*(Target(MAP, d) for d in range(min(rank, 3))), *(Target(DROP) for _ in range(rank - 3)))


def _as_heads(s: Any, rank: int) -> Any:
    """A sharding laid out as `s` on batch, heads and sequence, whole elsewhere."""
    p = s.placement()
    return p.with_dims([*p.dims[:3], *(() for _ in range(rank - 3))])


@irdl_op_definition
class SdpaOp(AttentionOp):
    """`scaled_dot_product_attention` on [batch, heads, seq, head_dim];
    `scale` defaults to 1/sqrt(head_dim); grouped-query attention when the
    heads of k and v divide the heads of q. An optional second result is
    the log-sum-exp of each query row's scores, [batch, heads, seq_q] in
    f32 (f64 for f64 inputs), what the derivative reads. Local when batch
    or heads are split (k and v heads split like q's); a sequence split
    over a mesh axis (q, k and v alike) is ring attention
    (passes/ring_attention.py); a split head_dim is gathered first."""

    name = "fusion.sdpa"
    OPERANDS: ClassVar[tuple[str, ...]] = ("query", "key", "value")
    RESULTS: ClassVar[tuple[str, ...]] = ("result", "lse?")
    result = result_def(TENSOR)
    lse = opt_result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.sdpa(s[0], s[1], s[2])

    @classmethod
    def more_results(cls, operands: Any, kw: dict[str, Any], first: TensorType) -> list[tuple[Shape, Any]]:
        return [(tuple(first.get_shape())[:3], stat_type(operands[0].element_type))]

    def more_shardings(self, first: Any) -> list[Any]:
        return [first.placement().with_dims(list(first.placement().dims[:3]))]

    def sharding_map(self) -> OpMap:
        """Batch and heads map; the sequence of q, k and v maps to the
        result's (a split sequence is ring attention,
        passes/ring_attention.py: k and v split like q); head_dim whole."""
        q = (Target(MAP, 0), Target(MAP, 1), Target(MAP, 2), Target(DROP))
        k = (Target(MAP, 0), Target(MAP, 1), Target(MAP, 2), Target(DROP))
        v = (Target(MAP, 0), Target(MAP, 1), Target(MAP, 2), Target(MAP, 3))
        return OpMap((q, k, v), 4, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels import attention

        out, lse = attention.forward(*args, *self.options())
        return (out, lse) if len(self.results) > 1 else out

    def for_derivative(self) -> FusionOp | None:
        """This sdpa with its log-sum-exp as a second result (typed and
        sharded from the first), which the derivative reads instead of
        computing the forward again."""
        return None if len(self.results) > 1 else self.with_results(2)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """`fusion.sdpa_grad` from q, k, v, the output, its log-sum-exp and
        the output's cotangent: PyTorch's attention backward, no forward
        computed again."""
        if len(self.results) < 2:
            raise error_at(self, "the derivative of fusion.sdpa reads its log-sum-exp (the op's second result)")
        causal, scale = self.options()
        kw = {"scale": scale, "causal": causal or None}
        return list(b.op_results("sdpa_grad", self.query, self.key, self.value, self.results[0], self.results[1], g, **kw))


@irdl_op_definition
class SdpaGradOp(AttentionOp):
    """The derivative of `fusion.sdpa` (written by autodiff): from q, k, v,
    the output, its log-sum-exp (sdpa's second result) and the output's
    cotangent, the cotangents of q, k and v (three results, typed as q, k
    and v). It reads the saved statistics and computes no forward: on a
    GPU PyTorch's fused attention backward (flash, memory-efficient or
    cuDNN, as scaled_dot_product_attention chooses). Local when batch or
    heads are split; a split sequence is the ring backward."""

    name = "fusion.sdpa_grad"
    MATMULS: ClassVar[tuple[int, int]] = (3, 2)
    """q k^T again, dq and dk over head_dim; dv and g v^T over v's."""
    OPERANDS: ClassVar[tuple[str, ...]] = ("query", "key", "value", "out", "lse", "grad")
    RESULTS: ClassVar[tuple[str, ...]] = ("grad_query", "grad_key", "grad_value")
    out = operand_def(TENSOR)
    lse = operand_def(TENSOR)
    grad = operand_def(TENSOR)
    grad_query = result_def(TENSOR)
    grad_key = result_def(TENSOR)
    grad_value = result_def(TENSOR)

    @classmethod
    def check_elements(cls, elems: list[Any], kw: dict[str, Any]) -> None:
        """q, k, v, out and grad share one element type; lse is in that
        type's statistics type (f32, or f64 for f64)."""
        tensors = [e for i, e in enumerate(elems) if i != 4]
        if len(set(tensors)) > 1:
            raise VerifyException("q, k, v, out and grad must have one element type, got " + ", ".join(str(e) for e in tensors))
        if len(elems) > 4 and elems[4] != stat_type(elems[0]):
            raise VerifyException(f"lse has element type {elems[4]}; it must be {stat_type(elems[0])}")

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        out = shapes.sdpa(s[0], s[1], s[2])
        for name, shape, want in (("out", s[3], out), ("grad", s[5], out), ("lse", s[4], out[:3])):
            if tuple(shape) != tuple(want):
                raise shapes.ShapeError(f"sdpa_grad: {name} {list(shape)} must have shape {list(want)}")
        return s[0]

    @classmethod
    def more_results(cls, operands: Any, kw: dict[str, Any], first: TensorType) -> list[tuple[Shape, Any]]:
        return [(tuple(t.get_shape()), t.element_type) for t in operands[1:3]]

    def more_shardings(self, first: Any) -> list[Any]:
        return [_as_heads(first, 4), _as_heads(first, 4)]

    def sharding_map(self) -> OpMap:
        """As sdpa's: batch, heads and sequence map (a split sequence is
        the ring backward), head_dim whole."""
        four = _heads_map(4)
        return OpMap((four, four, four, four, _heads_map(3), four), 4, None, NONE, False)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels import attention

        q, k, v, out, lse, g = args
        return attention.backward(g, q, k, v, out, lse, *self.options())


# ---- vocabulary-parallel ops ---------------------------------------------------------


@irdl_op_definition
class EmbeddingOp(FusionOp):
    """`torch.nn.functional.embedding(ids, table)`: rows of `table` looked up
    by `ids`. A table split over its vocabulary (dimension 0) makes a partial
    sum: each device looks up the ids in its block of rows, zeros elsewhere."""

    name = "fusion.embedding"
    OPERANDS: ClassVar[tuple[str, ...]] = ("ids", "table")
    WEIGHTS: ClassVar[tuple[int, ...]] = (1,)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("i64", "float")
    INDEXED: ClassVar[bool] = True
    ids = operand_def(TENSOR)
    table = operand_def(TENSOR)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.embedding(s[0], s[1])

    def sharding_map(self) -> OpMap:
        ni = len(shape_of(self.ids))
        ids = tuple(Target(MAP, d) for d in range(ni))
        table = (Target(CONTRACT), Target(MAP, ni))
        return OpMap((ids, table), ni + 1, (1, 0), NONE, True)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, shape_of(self.table)[0]) if i == 0 else None

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch
        import torch.nn.functional as F

        ids, table = args
        if ctx.is_whole(1):
            return F.embedding(ids, table)
        rows = ctx.global_index(1, 0, table.shape[0]).to(ids.device)  # vocabulary ids of the local rows
        pos = torch.searchsorted(rows, ids).clamp(max=max(0, rows.numel() - 1))
        mine = rows[pos] == ids if rows.numel() else torch.zeros_like(ids, dtype=torch.bool)
        out = F.embedding(pos, table)
        return torch.where(mine.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """The scatter-add of the cotangent's rows into the table. Where the
        table and the ids are whole on every device, `fusion.embedding_grad`
        (PyTorch's embedding backward, where a one-hot GEMM of a
        32768-entry vocabulary took 1.6 ms of an H200's step);
        elsewhere one-hot rows of the ids (an iota against them, whose
        vocabulary dimension each device makes for its own block of the
        table) times the cotangent, one GEMM whose contraction over the
        tokens sums a split sequence's rows."""
        vocab, dim = shape_of(self.table)
        rows = math.prod(shape_of(self.ids))
        ids = b.op("reshape", self.ids, shape=[rows])
        g2 = b.op("reshape", g, shape=[rows, dim])
        if b.local(self.ids, self.table, g):
            return [None, b.op("embedding_grad", g2, ids, vocab=vocab)]
        hot = one_hot(b, ids, vocab, like=g)
        return [None, b.op("matmul", b.op("permute", hot, dims=[1, 0]), g2)]


@irdl_op_definition
class EmbeddingGradOp(FusionOp):
    """`torch.ops.aten.embedding_dense_backward(grad, ids, vocab, -1, False)`:
    the gradient of an embedding's [vocab, dim] table, each row of `grad`
    ([*ids.shape, dim]) added into the row its id names; repeated ids add
    up (bf16 and f16 in f32, rounded once). A launch of its own run by
    PyTorch's kernel (`ALONE`), which sums each id's rows after sorting the
    ids: no [vocab, dim] accumulator in f32 (512 MiB for a 32768 x 4096
    table), as a traced index_add would allocate. The ids, `grad`'s rows and
    the vocabulary are whole on each device (a split `dim` stays split)."""

    name = "fusion.embedding_grad"
    OPERANDS: ClassVar[tuple[str, ...]] = ("grad", "ids")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("vocab", "int"),)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("float", "i64")
    ALONE: ClassVar[bool] = True
    grad = operand_def(TENSOR)
    ids = operand_def(TENSOR)
    result = result_def(TENSOR)
    vocab = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.embedding_grad(s[0], s[1], kw["vocab"])

    def sharding_map(self) -> OpMap:
        rows = len(shape_of(self.ids))
        grad = (*(Target(DROP) for _ in range(rows)), Target(MAP, 1))
        return OpMap((grad, tuple(Target(DROP) for _ in range(rows))), 2, None, NONE, False)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, self.keyword("vocab")) if i == 1 else None

    def torch_alone(self) -> bool:
        return True

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        grad, ids = args
        dim = grad.shape[-1]
        grad, ids = grad.reshape(-1, dim), ids.reshape(-1)
        return torch.ops.aten.embedding_dense_backward(grad, ids, self.keyword("vocab"), -1, False)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """The cotangent's rows looked up at the ids."""
        return [b.op("embedding", self.ids, g), None]


@irdl_op_definition
class CrossEntropyOp(FusionOp):
    """`torch.nn.functional.cross_entropy(logits, labels)`: the mean over
    rows of -log_softmax(logits)[label]; labels in [0, classes). Split rows
    or classes expand into local log-sum-exps and label picks whose partial
    sums are reduced across devices (the logits are never gathered)."""

    name = "fusion.cross_entropy"
    ROWWISE: ClassVar[str | None] = "cross_entropy"
    OPERANDS: ClassVar[tuple[str, ...]] = ("logits", "labels")
    ELEMENTS: ClassVar[tuple[str, ...]] = ("float", "i64")
    logits = operand_def(TENSOR)
    labels = operand_def(TENSOR)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.cross_entropy(s[0], s[1])

    def sharding_map(self) -> OpMap:
        return OpMap(((Target(STAT), Target(STAT)), (Target(STAT),)), 0, None, NONE, False)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, shape_of(self.logits)[1]) if i == 1 else None

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch.nn.functional as F

        return F.cross_entropy(args[0], args[1])

    def expand(self, b: Any) -> Any:
        s = b.sharding(self.logits)
        if s is None or not any(s.placement().dims):
            return None
        n, c = shape_of(self.logits)
        x = b.stat(self.logits)
        m = b.op("max", x, dims=[1], keepdim=True)
        lse = b.op("add", b.op("log", b.op("sum", b.op("exp", b.op("sub", x, m)), dims=[1], keepdim=True)), m)
        classes = b.op("iota", dim=1, shape=[n, c], dtype="i64", placed_as=self.logits)
        hit = b.op("eq", classes, b.op("reshape", self.labels, shape=[n, 1]))
        picked = b.op("sum", b.op("where", hit, x, b.constant(0, like=x)), dims=[1], keepdim=True)
        total = b.op("sum", b.op("sub", lse, picked), dims=[0, 1])
        return b.unstat(b.op("div", total, b.constant(n, like=x)), self.logits)

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """(softmax(logits) - one_hot(labels)) g / rows, the softmax as
        exp(x - max - log(sum(exp(x - max)))): elementwise ops and two row
        reductions that fuse with the cast, the one-hot and the scale into
        one launch region, whose only [rows, classes] array is the result in
        the logits' type. Split classes, the max and the sum reduce across
        devices between regions (a softmax op would be a launch of its own,
        reading and making an f32 [rows, classes] array, each twice the
        bytes of 16-bit logits: 1 GiB at 8192 x 32768)."""
        n, c = shape_of(self.logits)
        column = label_column(b, self.labels)  # first: a layout op between would end the region
        x = b.stat(self.logits)
        xs = b.op("sub", x, b.op("max", x, dims=[1], keepdim=True))
        p = b.op("exp", b.op("sub", xs, b.op("log", b.op("sum", b.op("exp", xs), dims=[1], keepdim=True))))
        diff = b.op("sub", p, one_hot(b, self.labels, c, like=x, placed_as=self.logits, column=column))
        scale = b.op("div", b.stat(g), float(n))
        return [b.unstat(b.op("mul", diff, scale), self.logits), None]


OPS: tuple[type[FusionOp], ...] = (
    SoftmaxOp, LogSoftmaxOp, LayerNormOp, RmsNormOp, SdpaOp, EmbeddingOp, EmbeddingGradOp, CrossEntropyOp, SdpaGradOp,
)  # fmt: skip

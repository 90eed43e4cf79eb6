"""Contractions of the fusion dialect: `matmul` and `linear`, the GEMMs.

A split of the contracted dimension on both operands makes each device's
result a partial sum (`partial = DIDx`); a linear with a bias and a split
contraction expands into the linear without bias (partial), the reduction,
and the bias added once after it.
"""

from __future__ import annotations

import math

from typing import Any, ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, result_def

from fuserc import shapes
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, shape_of
from fuserc.dialects.interfaces import CONTRACT, DROP, MAP, NONE, ONE, EvalContext, OpMap, Target


def matmul_targets(a: Shape, b: Shape, r: Shape) -> tuple[tuple[Target, ...], tuple[Target, ...]]:
    """torch.matmul: a[..., M, K] @ b[..., K, N] (1-D operands have no M / N)."""
    ra, rb, rr = len(a), len(b), len(r)
    nbatch = rr - (ra >= 2) - (rb >= 2)

    def side(shape: Shape, is_lhs: bool) -> tuple[Target, ...]:
        n = len(shape)
        if n == 1:
            return (Target(CONTRACT),)
        out: list[Target] = []
        for j in range(n - 2):  # batch dims align right with the result's
            rd = nbatch - (n - 2) + j
            out.append(Target(MAP, rd) if shape[j] == r[rd] else Target(DROP))
        if is_lhs:
            out += [Target(MAP, rr - 2 if rb >= 2 else rr - 1), Target(CONTRACT)]
        else:
            out += [Target(CONTRACT), Target(MAP, rr - 1)]
        return tuple(out)

    return side(a, True), side(b, False)


def weight_domain(fan_in: int) -> tuple[float, float]:
    """Random weights as `torch.nn.Linear` initializes them, uniform in
    +-1/sqrt(fan_in): a random program's activations stay of order one
    (standard normal weights grow them by sqrt(fan_in) per GEMM, and
    saturate the softmax of attention)."""
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    return (-bound, bound)


@irdl_op_definition
class MatmulOp(FusionOp):
    """`torch.matmul`: 1-D and N-D operands with broadcast batch dims."""

    name = "fusion.matmul"
    OPERANDS: ClassVar[tuple[str, ...]] = ("lhs", "rhs")
    lhs = operand_def(TENSOR)
    rhs = operand_def(TENSOR)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.matmul(s[0], s[1])

    def sharding_map(self) -> OpMap:
        r = shape_of(self.results[0])
        ta, tb = matmul_targets(shape_of(self.lhs), shape_of(self.rhs), r)
        return OpMap((ta, tb), len(r), (1, 0), ONE, True)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch

        return torch.matmul(args[0], args[1])

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return weight_domain(shape_of(self.lhs)[-1]) if i == 1 else None


@irdl_op_definition
class LinearOp(FusionOp):
    """`torch.nn.functional.linear`: x @ w^T (+ bias), w is [out, in]."""

    name = "fusion.linear"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "weight", "bias?")
    input = operand_def(TENSOR)
    weight = operand_def(TENSOR)
    bias = opt_operand_def(TENSOR)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        return shapes.linear(s[0], s[1], s[2] if len(s) > 2 else None)

    def sharding_map(self) -> OpMap:
        x, w = shape_of(self.input), shape_of(self.weight)
        rr = len(shape_of(self.results[0]))
        tx = (*(Target(MAP, d) for d in range(len(x) - 1)), Target(CONTRACT))
        tw = (Target(MAP, rr - 1), Target(CONTRACT)) if len(w) == 2 else (Target(CONTRACT),)
        if self.bias is not None:
            tbias = (Target(MAP, rr - 1),) if len(shape_of(self.bias)) == 1 else ()
            # A partial sum with a bias would add the bias once per device.
            return OpMap((tx, tw, tbias), rr, (1, 2, 0), NONE, False)
        return OpMap((tx, tw), rr, (1, 0), ONE, True)

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        import torch.nn.functional as F

        return F.linear(args[0], args[1], args[2] if len(args) > 2 else None)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return weight_domain(shape_of(self.weight)[-1]) if i in (1, 2) else None

    def expand(self, b: Any) -> Any:
        """With a bias and its contraction split: the linear without bias (a
        partial sum), then the bias added, once, after the reduction."""
        if self.bias is None:
            return None
        sx, sw = b.sharding(self.input), b.sharding(self.weight)
        if sx is None or sw is None or not sx.dims[-1] or sx.dims[-1] != sw.dims[-1]:
            return None
        res = b.sharding(self.results[0])
        if res is not None and res.partial:
            return None
        y = b.op("linear", self.input, self.weight, hint="nobias")
        return b.op("add", y, self.bias)


OPS: tuple[type[FusionOp], ...] = (MatmulOp, LinearOp)

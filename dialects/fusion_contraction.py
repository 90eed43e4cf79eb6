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
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, result_def

from fuserc import shapes
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, shape_of, sharding_of
from fuserc.dialects.fusion_grad import unbroadcast
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


def transposed(b: Any, v: SSAValue) -> SSAValue:
    """`v` with its last two dimensions swapped."""
    r = len(shape_of(v))
    return b.op("permute", v, dims=[*range(r - 2), r - 1, r - 2])


def weight_grad(b: Any, rows0: SSAValue, rows1: SSAValue, w: SSAValue) -> SSAValue:
    """The gradient of a weight w [D0, D1]: rows0^T @ rows1 summed over the
    rows (rows0 [T, D0], rows1 [T, D1]), made where w lives. GEMM placement
    keeps the right operand in place, so the operand that holds w's split
    dimension goes on the right: the other one's rows are then gathered
    (an allgather of the smaller, saved tensor) instead of a split moved
    by an alltoall; with w split along D0 that is (rows1^T @ rows0)^T."""
    s = sharding_of(w)
    dims = s.placement().dims if s is not None else ((), ())
    if dims[0] and not dims[1]:
        return b.op("permute", b.op("matmul", transposed(b, rows1), rows0), dims=[1, 0], placed_as=w)
    return b.op("matmul", transposed(b, rows0), rows1, placed_as=w)


@irdl_op_definition
class MatmulOp(FusionOp):
    """`torch.matmul`: 1-D and N-D operands with broadcast batch dims."""

    name = "fusion.matmul"
    OPERANDS: ClassVar[tuple[str, ...]] = ("lhs", "rhs")
    WEIGHTS: ClassVar[tuple[int, ...]] = (1,)
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

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        a, c = self.lhs, self.rhs
        sa, sc = shape_of(a), shape_of(c)
        if len(sa) == 1 and len(sc) == 1:  # a dot product
            return [b.op("mul", g, c), b.op("mul", g, a)]
        if len(sa) == 1:  # [K] @ [..., K, N] -> [..., N]
            ga = b.op("matmul", c, b.op("reshape", g, shape=[*shape_of(g), 1]))
            gc = b.op("mul", b.op("reshape", a, shape=[sa[0], 1]), b.op("reshape", g, shape=[*shape_of(g)[:-1], 1, sc[-1]]))
            return [unbroadcast(b, b.op("reshape", ga, shape=list(shape_of(ga)[:-1])), sa), unbroadcast(b, gc, sc)]
        if len(sc) == 1:  # [..., M, K] @ [K] -> [..., M]
            g1 = b.op("reshape", g, shape=[*shape_of(g), 1])
            ga = b.op("mul", g1, c)
            gc = b.op("mul", g1, a)
            return [ga, unbroadcast(b, gc, sc)]
        ga = b.op("matmul", g, transposed(b, c))
        if len(sc) == 2:  # rows of every batch against one matrix: one GEMM over all rows
            rows = math.prod(sa[:-1])
            a2 = b.op("reshape", a, shape=[rows, sa[-1]]) if len(sa) > 2 else a
            g2 = b.op("reshape", g, shape=[rows, sc[-1]]) if len(sa) > 2 else g
            return [ga, weight_grad(b, a2, g2, c)]
        return [unbroadcast(b, ga, sa), unbroadcast(b, b.op("matmul", transposed(b, a), g), sc)]


@irdl_op_definition
class LinearOp(FusionOp):
    """`torch.nn.functional.linear`: x @ w^T (+ bias), w is [out, in]."""

    name = "fusion.linear"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "weight", "bias?")
    WEIGHTS: ClassVar[tuple[int, ...]] = (1,)
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

    def vjp(self, b: Any, g: SSAValue) -> list[SSAValue | None]:
        """x: g @ w; w: g^T @ x over every row (one GEMM, `weight_grad`);
        bias: g summed over the rows."""
        x, w = self.input, self.weight
        sx, sw = shape_of(x), shape_of(w)
        if len(sw) == 1:  # [..., in] . [in] -> [...]
            g1 = b.op("reshape", g, shape=[*shape_of(g), 1])
            grads = [b.op("mul", g1, w), unbroadcast(b, b.op("mul", g1, x), sw)]
        else:
            gx = b.op("matmul", g, w)
            if len(sx) == 1:
                gw = b.op("mul", b.op("reshape", g, shape=[sw[0], 1]), b.op("reshape", x, shape=[1, sw[1]]))
            else:
                rows = math.prod(sx[:-1])
                g2 = b.op("reshape", g, shape=[rows, sw[0]]) if len(sx) > 2 else g
                x2 = b.op("reshape", x, shape=[rows, sw[1]]) if len(sx) > 2 else x
                gw = weight_grad(b, g2, x2, w)
            grads = [gx, gw]
        if self.bias is not None:
            grads.append(unbroadcast(b, g, shape_of(self.bias)))
        return grads


OPS: tuple[type[FusionOp], ...] = (MatmulOp, LinearOp)

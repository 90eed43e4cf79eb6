"""Memory orders of local values, chosen by lower-to-host-ir before it lowers
a function, so that permutes cost no copy where the ops around them can
read or write any memory order.

A value's buffer order is its producer's `alloc_order` (dialects/fusion.py);
a permute whose result's order undoes it is a relabelling of its operand's
buffer, no op at all. Ops lowered to a `hir.launch` (elementwise chains,
reductions, norms, attention) read their operands in any order (the
region permutes a buffer back to the logical order as a view: a generated
kernel reads it strided, attention's kernels take the heads of a
[B, S, H, D] buffer as PyTorch's do) and write their results in any order
(the region's store is permuted). So:

- a permute whose every use is such an op lays its result out as its
  operand's buffer is: the heads `[B, H, S, D]` of a projection's output
  `[B, S, H, D]` are a view handed to sdpa;
- such an op whose results of one rank are used only by permutes with the
  same dims writes them in that order: sdpa's output (and sdpa_grad's
  gradients) land as `[B, S, H, D]`, and the permute back to `[B, S, H,
  D]` and the reshape to `[B*S, H*D]` for the next GEMM are views.

A GEMM of 2-D matrices (`fusion.matmul`) reads an operand in either order
and writes its result in either (cuBLAS's transpose flags on
`hir.transpose` views, and C^T = B^T A^T), so the transposes of a weight
gradient, `x^T` read and `(g^T x)^T` written, are no copies either. Linear
ops, reshards, reshapes and the function's results keep row-major
operands; a value split into Stream chunks keeps its order. Orders a
pass before chose (make-resharding-contiguous, for communicated buffers)
are kept.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

from fuserc.dialects.fusion import (
    ALLOC_ORDER,
    FusionOp,
    LinearOp,
    MatmulOp,
    PermuteOp,
    ReshapeOp,
    SetOp,
    alloc_order_attr,
    alloc_order_of,
    lookup_mesh,
    shape_of,
    sharding_of,
)
from fuserc.ir import walk


def launched(op: Operation) -> bool:
    """`op` is lowered to a `hir.launch` (any memory order in and out)."""
    return isinstance(op, FusionOp) and not isinstance(op, (SetOp, PermuteOp, ReshapeOp, MatmulOp, LinearOp))


def _streamed(v: SSAValue) -> bool:
    s = sharding_of(v)
    return s is not None and s.stream_dim() is not None


def _identity(order: tuple[int, ...] | list[int]) -> bool:
    return tuple(order) == tuple(range(len(order)))


def transposable(op: Operation) -> bool:
    """A GEMM of 2-D operands and result, which reads either operand and
    writes its result in either order (`hir.transpose` views: cuBLAS's
    transpose flags, and C^T = B^T A^T)."""
    return isinstance(op, MatmulOp) and all(len(shape_of(v)) == 2 for v in (*op.operands, op.results[0]))


def _any_order(op: Operation) -> bool:
    return launched(op) or transposable(op)


def choose(func: FuncOp) -> None:
    """Give `alloc_order`s to the function's local values (module docstring)."""
    for op in walk(func.body):
        if _any_order(op) and ALLOC_ORDER not in op.attributes:
            _written_permuted(op)
        elif isinstance(op, PermuteOp) and ALLOC_ORDER not in op.attributes:
            _read_as_view(op)


def _written_permuted(op: Operation) -> None:
    """Results of one rank, each used only by permutes with the same dims,
    are written in that order."""
    if not op.results or not isinstance(op.results[0].type, TensorType):
        return
    rank = len(shape_of(op.results[0]))
    dims: set[tuple[int, ...]] = set()
    for r in op.results:
        if not isinstance(r.type, TensorType) or len(shape_of(r)) != rank:
            continue
        users = [u.operation for u in r.uses]
        if not users or _streamed(r) or not all(isinstance(u, PermuteOp) for u in users):
            return
        dims |= {tuple(u.keyword("dims")) for u in users}  # type: ignore[union-attr]
    if len(dims) == 1 and not _identity(order := next(iter(dims))):
        op.attributes[ALLOC_ORDER] = alloc_order_attr(order)


def _whole(v: SSAValue) -> bool:
    """Every device of `v`'s mesh holds all of it (a mesh of one device)."""
    s = sharding_of(v)
    mesh = lookup_mesh(v.owner if isinstance(v.owner, Operation) else v.owner.parent_op(), s.mesh) if s else None  # type: ignore[union-attr]
    return mesh is not None and s is not None and not s.partial and tuple(s.local_shape(shape_of(v), mesh)) == shape_of(v)


def _only_unit_dims(x: SSAValue, perm: list[int]) -> bool:
    """Permuting x's buffer by `perm` moves only dimensions of local extent
    1: a `hir.view` already, contiguous for every reader."""
    s = sharding_of(x)
    mesh = lookup_mesh(x.owner if isinstance(x.owner, Operation) else x.owner.parent_op(), s.mesh) if s else None  # type: ignore[union-attr]
    if s is None or mesh is None:
        return False
    local = s.local_shape(shape_of(x), mesh)
    buffer = [local[d] for d in alloc_order_of(x)]
    big = [d for d in perm if buffer[d] != 1]
    return big == sorted(big)


def _passes_through(s: Operation) -> bool:
    """A set that moves nothing (whole on both sides) read only by ops that
    take any order: it can keep its operand's buffer order."""
    return (
        isinstance(s, SetOp) and ALLOC_ORDER not in s.attributes and _whole(s.operands[0]) and _whole(s.results[0])
        and sharding_of(s.operands[0]).mesh == sharding_of(s.results[0]).mesh  # type: ignore[union-attr]
        and all(_any_order(u.operation) for u in s.results[0].uses)
    )


def _viewed(u: Operation) -> bool:
    """`u` reads its operand in any order: an op that takes any order, a set
    that moves nothing, or a permute read only by such ops (a view in turn:
    the backward's permute of a permuted weight, permute(permute(w)), is the
    weight itself, not two copies)."""
    if _any_order(u) or _passes_through(u):
        return True
    if not isinstance(u, PermuteOp) or _streamed(u.results[0]) or ALLOC_ORDER in u.attributes:
        return False
    users = [w.operation for w in u.results[0].uses]
    return bool(users) and all(_any_order(w) or _passes_through(w) for w in users)


def _read_as_view(p: PermuteOp) -> None:
    """A permute read only by launched ops (or 2-D GEMMs, also through a
    set that moves nothing, or through a permute read so) is a relabelling
    of its operand."""
    r, x = p.results[0], p.operands[0]
    users = [u.operation for u in r.uses]
    if not users or _streamed(r) or _streamed(x) or not all(_viewed(u) for u in users):
        return
    dims = p.keyword("dims")
    order = [dims.index(d) for d in alloc_order_of(x)]
    ox = alloc_order_of(x)
    relayout = [ox.index(dims[k]) for k in range(len(dims))]  # lower_permute's copy, row-major result
    if not _identity(order) and not _only_unit_dims(x, relayout):
        p.attributes[ALLOC_ORDER] = alloc_order_attr(order)
        for u in users:
            if isinstance(u, SetOp):
                u.attributes[ALLOC_ORDER] = alloc_order_attr(order)

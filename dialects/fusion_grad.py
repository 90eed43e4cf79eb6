"""Helpers the derivative rules (`FusionOp.vjp`) share: undoing a
broadcast, expanding a reduced cotangent back, zeros, one-hot rows. Each
builds fusion ops with a `FusionBuilder` at global shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.ir import SSAValue

from fuserc.dialects.fusion import shape_of

Shape = tuple[int, ...]


def unbroadcast(b: Any, g: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`g` summed down to `shape`, the shape of an operand it was broadcast
    from (PyTorch's rules: leading dims added, size-1 dims expanded)."""
    gshape = shape_of(g)
    shape = tuple(shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    dims = [d for d in range(len(gshape)) if d < lead or (shape[d - lead] == 1 and gshape[d] != 1)]
    if dims:
        g = b.op("sum", g, dims=dims)
    return g if shape_of(g) == shape else b.op("reshape", g, shape=list(shape))


def expand_reduced(b: Any, g: SSAValue, shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> SSAValue:
    """A cotangent of a reduction over `dims` of a `shape` tensor, broadcast
    back to `shape`."""
    shape = tuple(shape)
    if not keepdim:
        kept = tuple(1 if d in dims else e for d, e in enumerate(shape))
        g = b.op("reshape", g, shape=list(kept))
    return broadcast_to(b, g, shape)


def broadcast_to(b: Any, g: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`g` of the same rank as `shape` (size-1 dims to expand) at `shape`."""
    if shape_of(g) == tuple(shape):
        return g
    return b.op("broadcast_in_dim", g, dims=list(range(len(shape))), shape=list(shape))


def zeros(b: Any, like: SSAValue, shape: Sequence[int] | None = None) -> SSAValue:
    """Zeros of `like`'s element type, at `shape` (default `like`'s)."""
    shape = tuple(shape_of(like) if shape is None else shape)
    z = b.constant(0.0, like=like)
    return z if not shape else b.op("broadcast_in_dim", z, dims=[], shape=list(shape))


def label_column(b: Any, labels: SSAValue) -> SSAValue:
    """The labels as a `[..., 1]` column, as `one_hot` compares them. A
    layout op, which ends a launch region: a rule whose one-hot is to share
    a region with the ops before it makes the column first and hands it to
    `one_hot`."""
    return b.op("reshape", labels, shape=[*shape_of(labels), 1])


def one_hot(
    b: Any, labels: SSAValue, classes: int, like: SSAValue, placed_as: SSAValue | None = None, column: SSAValue | None = None
) -> SSAValue:
    """`[..., classes]` rows with a one at each label, in `like`'s element
    type (an iota compared with the labels' `column`: the class dim may be
    sharded)."""
    shape = (*shape_of(labels), classes)
    lab = label_column(b, labels) if column is None else column  # before the iota: its region is its users' (never a [rows, classes] buffer)
    iota = b.op("iota", dim=len(shape) - 1, shape=list(shape), dtype="i64", placed_as=placed_as)
    hit = b.op("eq", iota, lab)
    return b.op("cast", hit, dtype=like.type.element_type)  # type: ignore[attr-defined]


def count(shape: Sequence[int], dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= shape[d]
    return n

"""Shape rules of the fusion ops (PyTorch semantics), shared by the dialect's
verifiers, the passes and the evaluators."""

from __future__ import annotations

import math
from typing import Sequence

Shape = tuple[int, ...]


class ShapeError(ValueError):
    """A shape that the op's PyTorch semantics do not allow."""


def same(a: Shape, b: Shape) -> Shape:
    if tuple(a) != tuple(b):
        raise ShapeError(f"operand shapes {list(a)} and {list(b)} differ (use broadcast_in_dim)")
    return tuple(a)


def broadcast_batch(a: Shape, b: Shape) -> Shape:
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x != y and 1 not in (x, y):
            raise ShapeError(f"batch dimensions {list(a)} and {list(b)} do not broadcast")
        out.append(y if x == 1 else x)  # (1 against 0 is 0, as in torch)
    return tuple(reversed(out))


def matmul(a: Shape, b: Shape) -> Shape:
    """torch.matmul."""
    if not a or not b:
        raise ShapeError("matmul operands must have rank >= 1")
    if len(a) == 1 and len(b) == 1:
        if a[0] != b[0]:
            raise ShapeError(f"contracted extents {a[0]} and {b[0]} differ")
        return ()
    ka = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    if ka != kb:
        raise ShapeError(f"contracted extents differ: {list(a)} @ {list(b)} ({ka} vs {kb})")
    if len(b) == 1:
        return tuple(a[:-1])
    if len(a) == 1:
        return tuple(b[:-2]) + (b[-1],)
    return broadcast_batch(tuple(a[:-2]), tuple(b[:-2])) + (a[-2], b[-1])


def linear(x: Shape, w: Shape, bias: Shape | None) -> Shape:
    """torch.nn.functional.linear: w is [out, in] (or [in])."""
    if not x:
        raise ShapeError("linear input must have rank >= 1")
    if len(w) not in (1, 2):
        raise ShapeError(f"linear weight must have rank 1 or 2, got {list(w)}")
    if x[-1] != w[-1]:
        raise ShapeError(f"input features {x[-1]} do not match weight {list(w)}")
    out = tuple(x[:-1]) + ((w[0],) if len(w) == 2 else ())
    if bias is not None:
        want = (w[0],) if len(w) == 2 else ()
        if tuple(bias) != want:
            raise ShapeError(f"bias shape {list(bias)} must be {list(want)}")
    return out


def check_dim(shape: Shape, dim: int) -> int:
    if not -len(shape) <= dim < max(1, len(shape)):
        raise ShapeError(f"dimension {dim} out of range for rank {len(shape)}")
    return dim % max(1, len(shape))


def reduce(shape: Shape, dims: Sequence[int], keepdim: bool) -> Shape:
    # PyTorch reads an empty dim list as "reduce everything" in some ops and
    # as "nothing" in others; fuserc refuses it rather than guess.
    norm = check_dims(shape, dims)
    if keepdim:
        return tuple(1 if i in norm else e for i, e in enumerate(shape))
    return tuple(e for i, e in enumerate(shape) if i not in norm)


def permute(shape: Shape, dims: Sequence[int]) -> Shape:
    norm = [check_dim(shape, d) for d in dims] if len(dims) == len(shape) else None
    if norm is None or sorted(norm) != list(range(len(shape))):
        raise ShapeError(f"dims = {list(dims)} is not a permutation of {len(shape)} dimensions")
    return tuple(shape[d] for d in norm)


def reshape(shape: Shape, result: Shape) -> Shape:
    if math.prod(shape) != math.prod(result):
        raise ShapeError(
            f"cannot reshape {list(shape)} ({math.prod(shape)} elements) to "
            f"{list(result)} ({math.prod(result)} elements)"
        )
    return tuple(result)


def broadcast_in_dim(shape: Shape, result: Shape, dims: Sequence[int]) -> Shape:
    if len(dims) != len(shape):
        raise ShapeError(f"dims = {list(dims)} must have one entry per operand dimension ({len(shape)})")
    if any(not 0 <= d < len(result) for d in dims) or list(dims) != sorted(set(dims)):
        raise ShapeError(f"dims = {list(dims)} must be increasing result dimensions < {len(result)}")
    for i, d in enumerate(dims):
        if shape[i] not in (1, result[d]):
            raise ShapeError(
                f"operand dimension {i} of extent {shape[i]} cannot broadcast to result "
                f"dimension {d} of extent {result[d]}"
            )
    return tuple(result)


def slice_(shape: Shape, starts: Sequence[int], limits: Sequence[int]) -> Shape:
    if len(starts) != len(shape) or len(limits) != len(shape):
        raise ShapeError(f"starts and limits must have {len(shape)} entries")
    for i, (s, l, e) in enumerate(zip(starts, limits, shape)):
        if not 0 <= s <= l <= e:
            raise ShapeError(f"slice [{s}, {l}) of dimension {i} is out of bounds for extent {e}")
    return tuple(l - s for s, l in zip(starts, limits))


def broadcast(*shapes_: Shape) -> Shape:
    """PyTorch broadcasting: shapes align from the right; an extent of 1 (or
    a missing dimension) expands to the other's."""
    rank = max((len(s) for s in shapes_), default=0)
    out = []
    for i in range(rank):
        extents = {s[len(s) - rank + i] for s in shapes_ if len(s) - rank + i >= 0}
        big = extents - {1}
        if len(big) > 1:
            listing = " and ".join(str(list(s)) for s in shapes_)
            raise ShapeError(f"operand shapes {listing} do not broadcast (dimension {i - rank} differs)")
        out.append(big.pop() if big else 1)
    return tuple(out)


def check_dims(shape: Shape, dims: Sequence[int]) -> list[int]:
    """Dimensions normalized (negative ones count from the end), distinct."""
    if not dims:
        raise ShapeError("dims = [] is ambiguous: list the dimensions")
    norm = [check_dim(shape, d) for d in dims]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"repeated dimension in dims = {list(dims)}")
    return norm


def trailing_dims(shape: Shape, dims: Sequence[int]) -> list[int]:
    """`dims` normalized; they must be the last len(dims) dimensions (as a
    normalization's `normalized_shape`)."""
    norm = sorted(check_dims(shape, dims))
    if norm != list(range(len(shape) - len(norm), len(shape))):
        raise ShapeError(
            f"normalizes trailing dimensions: dims = {list(dims)} must be the last "
            f"{len(norm)} of rank {len(shape)} (e.g. {list(range(len(shape) - len(norm), len(shape)))})"
        )
    return norm


def concat(shapes_: Sequence[Shape], dim: int) -> Shape:
    """torch.cat: equal ranks and extents but along `dim`."""
    if not shapes_:
        raise ShapeError("concat needs at least one operand")
    first = shapes_[0]
    d = check_dim(first, dim) if first else None
    if d is None:
        raise ShapeError("concat operands must have rank >= 1")
    for s in shapes_[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != d):
            raise ShapeError(
                f"concat operands {list(first)} and {list(s)} must agree except in dimension {dim}"
            )
    return tuple(sum(s[d] for s in shapes_) if i == d else e for i, e in enumerate(first))


def sdpa(q: Shape, k: Shape, v: Shape) -> Shape:
    """scaled_dot_product_attention on [batch, heads, seq, head_dim]; the
    heads of k and v divide q's (grouped-query attention)."""
    for name, s in (("q", q), ("k", k), ("v", v)):
        if len(s) != 4:
            raise ShapeError(f"sdpa: {name} must be [batch, heads, seq, head_dim], got {list(s)}")
    if k[:3] != v[:3]:
        raise ShapeError(f"sdpa: k {list(k)} and v {list(v)} must agree in batch, heads and seq")
    if q[0] != k[0]:
        raise ShapeError(f"sdpa: batch of q ({q[0]}) and k ({k[0]}) differ")
    if q[3] != k[3]:
        raise ShapeError(f"sdpa: head_dim of q ({q[3]}) and k ({k[3]}) differ")
    if k[1] == 0 or q[1] % k[1]:
        raise ShapeError(
            f"sdpa: the heads of k and v ({k[1]}) must divide the heads of q ({q[1]}) (grouped-query attention)"
        )
    return (q[0], q[1], q[2], v[3])


def embedding(ids: Shape, table: Shape) -> Shape:
    if len(table) != 2:
        raise ShapeError(f"embedding table must be [vocab, dim], got {list(table)}")
    return tuple(ids) + (table[1],)


def embedding_grad(grad: Shape, ids: Shape, vocab: int) -> Shape:
    if not grad or tuple(grad[:-1]) != tuple(ids):
        raise ShapeError(f"embedding_grad: grad {list(grad)} must be the ids' shape {list(ids)} and one more (the row) dimension")
    if vocab < 1:
        raise ShapeError(f"embedding_grad: vocab must be positive, got {vocab}")
    return (vocab, grad[-1])


def cross_entropy(logits: Shape, labels: Shape) -> Shape:
    if len(logits) != 2:
        raise ShapeError(f"cross_entropy logits must be [rows, classes], got {list(logits)}")
    if tuple(labels) != (logits[0],):
        raise ShapeError(f"cross_entropy labels must be [{logits[0]}] (one per row), got {list(labels)}")
    return ()

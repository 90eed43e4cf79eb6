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
        out.append(max(x, y))
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
    if not dims:
        raise ShapeError("dims = [] is ambiguous: list the dimensions to reduce")
    norm = [check_dim(shape, d) for d in dims]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"repeated dimension in dims = {list(dims)}")
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

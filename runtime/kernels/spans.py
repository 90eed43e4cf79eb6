"""Which memory a tensor (or a view) may touch: the one home of the
aliasing checks the backends make before a GEMM, a fused kernel or a
communication writes a buffer that might also be read."""

from __future__ import annotations

import torch


def span(t: torch.Tensor) -> tuple[int, int] | None:
    """The byte range a tensor may touch; None when it is empty. A
    contiguous one spans its elements exactly, found without walking its
    strides (this runs before every GEMM and collective is enqueued)."""
    n = t.numel()
    if n == 0:
        return None
    start, size = t.data_ptr(), t.element_size()
    if t.is_contiguous():
        return start, start + n * size
    extent = 1
    for d, s in zip(t.shape, t.stride()):
        extent += (d - 1) * s
    return start, start + extent * size


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' byte ranges intersect."""
    sa, sb = span(a), span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are the very same elements (memory, shape,
    strides, dtype): an elementwise op may then read and write both."""
    return (
        a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
    )

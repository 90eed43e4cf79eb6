"""The cuda backend's aliasing checks before a GEMM or a collective
(`overlaps`, `direct_out`), on CPU tensors: the contiguous shortcut gives
the very answers of the byte-range walk over strides, for every kind of
view (slices, steps, transposes, broadcasts, reinterpreted dtypes, empty)."""

from __future__ import annotations

import itertools

import torch

from fuserc.runtime.kernels.cuda_gemm import direct_out
from fuserc.runtime.kernels.spans import overlaps


def _walk_overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The byte ranges by their strides, for every tensor."""
    if a.numel() == 0 or b.numel() == 0:
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        return t.data_ptr(), t.data_ptr() + extent * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _views() -> list[torch.Tensor]:
    base = torch.zeros(6, 8, dtype=torch.float32)
    other = torch.zeros(4, 4, dtype=torch.bfloat16)
    return [
        base,
        base[1:3],
        base[3:],
        base[:, 2:4],
        base[:, 4:],
        base[::2],
        base.t(),
        base[2].view(2, 4),
        base[2:3, :],
        base[2, 7:8],  # the last element of base[1:3]: no byte to spare at either end
        base[0, 7:],
        base[5:5],  # empty
        base.view(torch.bfloat16)[1, 3:9],  # another element size
        base[1, 1:2].expand(3, 1),  # a broadcast (stride 0)
        base.as_strided((2, 3), (1, 1), 9),  # overlapping elements
        base.unsqueeze(1)[4:6],  # a dim of size one with any stride
        other,
        other[1:, ::3],
    ]


def test_overlaps_matches_the_stride_walk() -> None:
    views = _views()
    for a, b in itertools.product(views, views):
        assert overlaps(a, b) == _walk_overlaps(a, b), (a.shape, a.stride(), b.shape, b.stride())


def test_direct_out_matches_the_stride_walk() -> None:
    views = _views()
    for out, a, b in itertools.product(views, views, views[:6]):
        want = out.is_contiguous() and not (_walk_overlaps(out, a) or _walk_overlaps(out, b))
        assert direct_out(out, a, b) == want
    assert direct_out(views[0]) is True

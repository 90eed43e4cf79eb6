"""Zeroing the rows past a grouped GEMM's last group, on the device.

torch._grouped_mm leaves the rows of a [T, N] result past the last group
end unwritten; where the program cannot know that the groups end at the
last row (`GroupedMatmulOp.full_rows`), they are zeroed. The end is a
device value (the last offset), so the host cannot slice the tail off; a
masked pass over the whole result (`masked_fill`: every row read and
written) cost 0.27 ms of the Mixtral-like layer's 2.7 ms first expert
GEMM on an H200. This kernel stores zeros into the tail rows only, on a
grid of at most `PROGRAMS` programs (not one per block of the result: a
launch of 57,344 programs that found no tail cost 36 us beside that GEMM):
each reads the end and strides over the blocks of rows from it, so a
result whose groups fill it (the usual case: dropless routing) costs one
load per program.

With `TRITON_INTERPRET=1` set before this module is imported, the kernel
runs on CPU tensors in Triton's interpreter (how the tests check it on a
machine without a GPU).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BLOCK_ROWS = 32
BLOCK_COLS = 128
PROGRAMS = 512


@triton.jit
def _zero_tail(y_ptr, offs_ptr, last, rows, cols, stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    end = tl.load(offs_ptr + last)
    first = end + tl.program_id(0) * BLOCK_R
    step = tl.num_programs(0) * BLOCK_R
    zero = tl.zeros((BLOCK_R, BLOCK_C), dtype=y_ptr.dtype.element_ty)
    for r0 in range(first, rows, step):
        r = r0 + tl.arange(0, BLOCK_R)
        for c0 in range(0, cols, BLOCK_C):
            c = c0 + tl.arange(0, BLOCK_C)
            keep = (r[:, None] < rows) & (c[None, :] < cols)
            tl.store(y_ptr + r[:, None].to(tl.int64) * stride + c[None, :], zero, mask=keep)


def zero_tail(y: torch.Tensor, offs: torch.Tensor) -> bool:
    """Zero the rows of `y` ([T, N], rows contiguous) from `offs[-1]` on, in
    place; False (nothing done) for a layout the kernel does not take, or
    tensors off the GPU (but under Triton's interpreter)."""
    if y.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return False
    if y.dim() != 2 or y.stride(1) != 1 or offs.dim() != 1 or offs.numel() == 0 or not offs.is_contiguous():
        return False
    rows, cols = y.shape
    if rows and cols:
        grid = (min(triton.cdiv(rows, BLOCK_ROWS), PROGRAMS),)
        _zero_tail[grid](y, offs, offs.numel() - 1, rows, cols, y.stride(0), BLOCK_R=BLOCK_ROWS, BLOCK_C=BLOCK_COLS)
    return True

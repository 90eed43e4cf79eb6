"""The grouped GEMM (`fusion.grouped_matmul`) on both backends.

- On cuda, bf16 operands on sm90 or newer whose rows are 16-byte aligned:
  `torch._grouped_mm` itself (one launch for every group, the offsets read
  on the device: nothing waits for the host, so it is captured in CUDA
  graphs).
- Elsewhere (the CPU, other dtypes, float64 in the reference evaluator):
  one GEMM per group, the group ends read on the host.

Both give zero rows past the last offset ([T, K] x [E, K, N]) and zero
blocks for empty groups ([K, T] x [T, N]), as a loop over experts does.

`experts_block` computes the groups of one block of experts only (the
experts a device holds when the expert dimension is split): their rows
([T, K] x [E/d, K, N], zero elsewhere: a partial sum over the devices) or
their blocks ([K, T] x [T, N] -> [E/d, K, N]). Where the block's rows
begin is data (the routing); on the torch._grouped_mm path it is used on
the device, so that the block waits for nothing on the host either.
"""

from __future__ import annotations

import torch

from fuserc.diagnostics import Diagnostic


def check_offsets(offs: torch.Tensor, rows: int) -> list[int]:
    """The group ends on the host; a Diagnostic (the program's input is
    wrong, not fuserc) where they are not non-decreasing within [0, rows]."""
    ends = [int(e) for e in offs.tolist()]
    if any(e < 0 or e > rows for e in ends) or any(b < a for a, b in zip(ends, ends[1:])):
        raise Diagnostic(f"fusion.grouped_matmul: offsets {ends} must be non-decreasing within [0, {rows}]")
    return ends


def fast_path(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether torch._grouped_mm runs these operands: bf16 on a GPU of
    compute capability 9.0 or more, each matrix row- or column-major with
    16-byte aligned strides (a transposed weight is read in place)."""
    if a.device.type != "cuda" or a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        return False
    if not hasattr(torch, "_grouped_mm") or torch.cuda.get_device_capability(a.device)[0] < 9:
        return False
    return _aligned(a) and _aligned(b)


def _aligned(t: torch.Tensor) -> bool:
    """One of the last two strides is 1, the others multiples of 8
    elements (16 bytes of bf16), the start 16-byte aligned."""
    inner, outer = t.stride()[-1], t.stride()[-2]
    major = (inner == 1 and outer % 8 == 0) or (outer == 1 and inner % 8 == 0)
    return major and all(s % 8 == 0 for s in t.stride()[:-2]) and t.data_ptr() % 16 == 0


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, full_rows: bool = False) -> torch.Tensor:
    """`torch._grouped_mm(a, b, offs=offs)` (the op's docstring). `full_rows`:
    the last offset is a's row count (`GroupedMatmulOp.full_rows`), so no
    row past the groups needs zeroing (a pass over the whole result saved)."""
    stacked = b.dim() == 3
    if fast_path(a, b):
        y = torch._grouped_mm(a, b, offs=offs.to(torch.int32))
        if stacked and not full_rows:  # rows past the last group are left unwritten by the kernel
            _zero_tail(y, offs)
        return y
    ends = check_offsets(offs, a.shape[0] if stacked else a.shape[1])
    starts = [0, *ends[:-1]]
    if stacked:
        tail = a.new_zeros(a.shape[0] - (ends[-1] if ends else 0), b.shape[2])
        return torch.cat([*(a[s:e] @ b[i] for i, (s, e) in enumerate(zip(starts, ends))), tail])
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])


def _zero_tail(y: torch.Tensor, offs: torch.Tensor) -> None:
    """Zero the rows of y from offs[-1] on: the tail rows only
    (runtime/kernels/grouped_tail.py) where Triton runs, else a masked pass."""
    try:
        from fuserc.runtime.kernels.grouped_tail import zero_tail
    except ImportError:  # no Triton
        zero_tail = None
    if zero_tail is None or not zero_tail(y, offs):
        rows = torch.arange(y.shape[0], device=y.device).unsqueeze(1)
        y.masked_fill_(rows >= offs[-1], 0)


def slotted(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """[E, S, K] x [E, K, N] -> [E, S, N]: the first counts[e] rows of a[e]
    times b[e], zero rows after (the third form of fusion.grouped_matmul);
    [E, G, S, K] with counts [E, G]: the first counts[e, g] rows of a[e, g].
    On the fast path one batched torch._grouped_mm, masked after (no wait
    for the host); elsewhere one GEMM per expert (and group) on its rows only."""
    experts, rows = a.shape[0], a.shape[-2]
    flat = a.reshape(experts, -1, a.shape[-1])
    if fast_path(flat, b):
        y = torch._grouped_mm(flat, b).view(*a.shape[:-1], b.shape[2])
        held = torch.arange(rows, device=a.device) < counts.unsqueeze(-1)
        return y.masked_fill(~held.unsqueeze(-1), 0)
    held = counts.view(experts, -1).tolist()
    if any(c < 0 or c > rows for row in held for c in row):
        raise Diagnostic(f"fusion.grouped_matmul: row counts {counts.tolist()} must lie within [0, {rows}]")
    y = a.new_zeros(*a.shape[:-1], b.shape[2])
    ys, xs = y.view(experts, -1, rows, b.shape[2]), a.reshape(experts, -1, rows, a.shape[-1])
    for e, row in enumerate(held):
        for g, c in enumerate(row):
            if c:
                ys[e, g, :c] = xs[e, g, :c] @ b[e]
    return y


def experts_block(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, first: int, count: int, full_rows: bool = False
) -> torch.Tensor:
    """The grouped GEMM of experts first..first+count-1 of the global group
    ends `offs`: with a stacked b (those experts' weights), their rows of
    the [T, N] result, zero elsewhere; else their [count, K, N] blocks.
    `full_rows`: the global groups end at the last row (so does the last
    block's)."""
    last = first + count == offs.shape[0]
    if first == 0 and last:
        return grouped_matmul(a, b, offs, full_rows)
    if first and fast_path(a, b):
        return _block_on_device(a, b, offs, first, count)
    start = int(offs[first - 1]) if first > 0 else 0  # where the block's rows begin (read on the host)
    local = offs[first : first + count] - start
    if b.dim() == 3:
        y = a.new_zeros(a.shape[0], b.shape[2])
        y[start:] = grouped_matmul(a[start:], b, local, full_rows and last)
        return y
    return grouped_matmul(a[:, start:], b[start:], local)


def _block_on_device(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, first: int, count: int) -> torch.Tensor:
    """`experts_block` of a block after the first without reading where its
    rows begin on the host: the rows rotated on the device so that the
    block's come first (a gather), its groups multiplied from there (rows
    past its last group zero, the ones rotated to the end included), and
    the result rotated back."""
    rows = a.shape[0] if b.dim() == 3 else a.shape[1]
    start = offs[first - 1]
    index = torch.arange(rows, device=a.device)
    ahead = (index + start) % rows
    local = offs[first : first + count] - start
    if b.dim() == 3:
        y = grouped_matmul(a.index_select(0, ahead), b, local)
        return y.index_select(0, (index - start) % rows)
    return grouped_matmul(a.index_select(1, ahead), b.index_select(0, ahead), local)

"""Row kernels: softmax, log_softmax and cross_entropy over the last dim in
one pass of a hand-written Triton kernel, for a launch region that is one
such op (the op's `ROWWISE` fact).

Why not Inductor's kernel for these: for a row of a few thousand 16-bit
elements, Inductor's reduction reads the row more than once (a looped
reduction, then the normalizing pass), and reaches about 0.6 of a copy's
bandwidth on an H100 for a bf16 softmax of 8192 columns; a persistent
kernel that holds the row in registers (one program per row, the row read
once, the result written once) reaches the copy's bandwidth. Rows longer
than `MAX_COLS` (which would spill registers) and layouts other than
contiguous rows stay with Inductor (runtime/cuda_regions.py).

With `TRITON_INTERPRET=1` set before this module is imported, the kernels
run on CPU tensors in Triton's interpreter: how the tests check them on a
machine without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl
from xdsl.ir import Block, BlockArgument

from fuserc.dialects.fusion import FusionOp

MAX_COLS = 16384
"""The longest row a program holds in registers (16 warps, 32 values a thread)."""

MODES = {"softmax": 0, "log_softmax": 1, "cross_entropy": 2}
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _rows_kernel(x_ptr, y_ptr, labels_ptr, n_cols, MODE: tl.constexpr, BLOCK: tl.constexpr):
    """One program per row: the row in registers (f32), its max and sum of
    exponentials, then softmax, log_softmax or the row's loss
    logsumexp - x[label] (cross_entropy; into an f32 vector of rows)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    v = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(v, 0)
    e = tl.exp(v - m)
    s = tl.sum(e, 0)
    if MODE == 0:
        tl.store(y_ptr + row * n_cols + offs, (e / s).to(y_ptr.dtype.element_ty), mask=mask)
    elif MODE == 1:
        tl.store(y_ptr + row * n_cols + offs, (v - m - tl.log(s)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        label = tl.load(labels_ptr + row)
        picked = tl.sum(tl.where(offs == label, v, 0.0), 0)
        tl.store(y_ptr + row, m + tl.log(s) - picked)


def _warps(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


def rows(mode: str, x: torch.Tensor, out: torch.Tensor, labels: torch.Tensor | None = None) -> bool:
    """`mode` of contiguous `x` along its last dim into `out` (the 0-d mean
    loss for cross_entropy); False (nothing run) when the kernel does not
    apply to these tensors."""
    cols = x.shape[-1] if x.dim() else 0
    if not (0 < cols <= MAX_COLS and x.dtype in DTYPES and x.is_contiguous() and out.is_contiguous()):
        return False
    n = x.numel() // cols
    block = triton.next_power_of_2(cols)
    if mode == "cross_entropy":
        if labels is None or x.dim() != 2 or not labels.is_contiguous() or n == 0:
            return False
        losses = torch.empty(n, dtype=torch.float32, device=x.device)
        _rows_kernel[(n,)](x, losses, labels, cols, MODE=2, BLOCK=block, num_warps=_warps(block))
        out.copy_(losses.mean())
        return True
    if n:
        _rows_kernel[(n,)](x, out, x, cols, MODE=MODES[mode], BLOCK=block, num_warps=_warps(block))
    return True


@dataclass(frozen=True)
class RowPlan:
    mode: str
    inputs: tuple[int, ...]  # the block arguments the op reads (x, then labels)


_PLANS: dict[Block, RowPlan | None] = {}


def plan_of(body: Block) -> RowPlan | None:
    """The row kernel of a region that is one ROWWISE op along its last dim
    on the region's arguments, yielded as the region's only result."""
    if body not in _PLANS:
        _PLANS[body] = _find(body)
    return _PLANS[body]


def _find(body: Block) -> RowPlan | None:
    ops = list(body.ops)
    if len(ops) != 2 or len(ops[1].operands) != 1 or ops[1].operands[0] is not ops[0].results[0]:
        return None
    op: Any = ops[0]
    mode = op.rowwise() if isinstance(op, FusionOp) else None
    if mode is None or not all(isinstance(v, BlockArgument) for v in op.operands):
        return None
    return RowPlan(mode, tuple(v.index for v in op.operands))


def run_rows(body: Block, ins: Any, outs: Any) -> bool:
    """Run the region with its row kernel; False when it has none."""
    plan = plan_of(body)
    if plan is None:
        return False
    labels = ins[plan.inputs[1]] if plan.mode == "cross_entropy" else None
    return rows(plan.mode, ins[plan.inputs[0]], outs[0], labels)

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
contiguous rows stay with Inductor (runtime/kernels/cuda_regions.py).

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
from fuserc.runtime.kernels.cuda_regions import Layout, layout_of

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


def applies(mode: str, x: torch.Tensor, out: torch.Tensor, labels: torch.Tensor | None = None) -> bool:
    """Whether the row kernel runs `mode` of `x` into `out` (contiguous rows
    of at most `MAX_COLS` elements of a 16- or 32-bit float type)."""
    cols = x.shape[-1] if x.dim() else 0
    if not (0 < cols <= MAX_COLS and x.dtype in DTYPES and x.is_contiguous() and out.is_contiguous()):
        return False
    if mode == "cross_entropy":
        return labels is not None and x.dim() == 2 and labels.is_contiguous() and x.shape[0] > 0
    return True


def rows(mode: str, x: torch.Tensor, out: torch.Tensor, labels: torch.Tensor | None = None) -> bool:
    """`mode` of contiguous `x` along its last dim into `out` (the 0-d mean
    loss for cross_entropy); False (nothing run) when the kernel does not
    apply to these tensors."""
    if not applies(mode, x, out, labels):
        return False
    _launch(mode, x, out, labels)
    return True


def _launch(mode: str, x: torch.Tensor, out: torch.Tensor, labels: torch.Tensor | None) -> None:
    cols = x.shape[-1]
    n = x.numel() // cols
    block = triton.next_power_of_2(cols)
    if mode == "cross_entropy":
        losses = torch.empty(n, dtype=torch.float32, device=x.device)
        _rows_kernel[(n,)](x, losses, labels, cols, MODE=2, BLOCK=block, num_warps=_warps(block))
        out.copy_(losses.mean())
    elif n:
        _rows_kernel[(n,)](x, out, x, cols, MODE=MODES[mode], BLOCK=block, num_warps=_warps(block))


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


def _found(body: Block, ins: Any, outs: Any) -> tuple[str, tuple[Any, Any, Any], tuple[Layout, ...]] | None:
    """The row kernel's mode, operands (x, out, labels or None) and their
    layouts for a launch of `body`; None when it runs none."""
    plan = plan_of(body)
    if plan is None:
        return None
    x, out = ins[plan.inputs[0]], outs[0]
    labels = ins[plan.inputs[1]] if plan.mode == "cross_entropy" else None
    if not applies(plan.mode, x, out, labels):
        return None
    return plan.mode, (x, out, labels), tuple(layout_of(t) for t in (x, out, labels) if t is not None)


def rows_job(body: Block, ins: Any, outs: Any, device: torch.device) -> RowsJob | None:
    """The row kernel a launch of `body` on these operands (tensors, or
    meta tensors of the same layouts) runs; None when it runs none."""
    found = _found(body, ins, outs)
    return None if found is None else RowsJob(found[0], found[2], device)


def run_rows(body: Block, ins: Any, outs: Any) -> bool | None:
    """Run the region with its row kernel; False when it has none, None
    when its kernel is being built in the background. The first launch of
    each mode and layouts in this process goes through the kernel cache
    (runtime/kernels/kernel_builds.py): one process of the machine compiles the
    kernel into the cache's Triton folder, the others load it from there."""
    found = _found(body, ins, outs)
    if found is None:
        return False
    mode, (x, out, labels), layouts = found
    ready_key = (mode, layouts)
    ready = _READY.get(ready_key)
    if ready is None:
        from fuserc.runtime.kernels.kernel_builds import building, first_launch

        if building(ready_key):
            return None

        ready = _READY[ready_key] = first_launch(RowsJob(mode, layouts, x.device), lambda: _launch(mode, x, out, labels))
        return ready
    if ready:
        _launch(mode, x, out, labels)
    return ready


_READY: dict[tuple[str, tuple[Layout, ...]], bool] = {}
"""Row launches (mode, layouts of x, out and labels) this process has made
(False: their kernel could not be built; Inductor's runs instead)."""


@dataclass
class RowsJob:
    """The row kernel of one mode at one set of layouts, for the kernel
    cache: its entry only marks that the kernel is in the cache's Triton
    folder (Triton's own cache, keyed by the kernel and the GPU's
    architecture, holds the binary), so it is the same for every GPU of a
    machine."""

    mode: str
    layouts: tuple[Layout, ...]
    device: torch.device

    kind = "rows"

    @property
    def key(self) -> Any:
        from fuserc.runtime.kernels.kernel_builds import device_id, layout_fields
        from fuserc.runtime.kernels.kernel_cache import kernel_key

        fields = {"mode": self.mode, "layouts": layout_fields(self.layouts)}
        return kernel_key(self.kind, fields, device_id(self.device, index=False))

    def describe(self) -> str:
        return f"the {self.mode} row kernel"

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": self.mode, "layouts": self.layouts}

    def build(self) -> tuple[dict[str, bytes], bool]:
        return build_spec(self.spec(), self.device)

    def load(self, sections: dict[str, bytes]) -> bool:
        return True  # Triton finds the binary in the cache's folder at the first launch

    @property
    def ident(self) -> tuple[str, tuple[Layout, ...]]:
        return (self.mode, self.layouts)

    def install(self, value: Any) -> None:
        pass  # the first launch itself marks the layouts ready (`run_rows`)

    def installed(self) -> bool:
        return self.ident in _READY


def build_spec(spec: dict[str, Any], device: torch.device) -> tuple[dict[str, bytes], bool]:
    """Compile the row kernel of a `RowsJob.spec()`: one launch on zero
    tensors of its layouts (Triton compiles at a kernel's first launch)."""
    x, out, *labels = (
        torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_() for shape, stride, dtype in spec["layouts"]
    )
    _launch(spec["mode"], x, out, labels[0] if labels else None)
    return {"built": b""}, True


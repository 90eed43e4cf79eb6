"""GEMMs on the cuda backend at cuBLAS speed: torch or CuPy, per shape.

Both torch (`torch.matmul(..., out=)`, cuBLAS/cuBLASLt) and CuPy
(`cupy.matmul(..., out=)`, cuBLAS) write straight into the destination
buffer, sharing its memory without copies. Which is faster depends on the
shape and layout, so the first GEMM of each (shapes, strides, dtype) is
timed both ways with CUDA events on a private stream, into a scratch
output, and the faster one is kept for every later call. That timing is
the only host wait the backend makes inside a run, once per shape (in the
warm-up run). `FUSERC_CUDA_GEMM=torch|cupy` fixes the choice instead.
CuPy takes f32, f16 and f64 (it has no bf16 GEMM); bf16 runs on torch.

A GEMM with an accumulator (`out = a @ b + acc`) always runs on torch, with
`acc` in cuBLAS's epilogue (beta = 1) where torch has one GEMM for the shape
(`addmm`, `baddbmm`), so that a running sum needs no separate add kernel.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from fuserc.runtime.kernels.cuda_fusion import as_cupy
from fuserc.runtime.kernels.spans import overlaps, same_view, span

GEMM_ENV = "FUSERC_CUDA_GEMM"
GEMM_CHOICES = ("auto", "torch", "cupy")
_CUPY_GEMM_DTYPES = (torch.float32, torch.float16, torch.float64)
_TUNE_REPS = 3

Gemm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


def direct_out(out: torch.Tensor, *ins: torch.Tensor) -> bool:
    """Whether a GEMM may write `out` directly (contiguous, no overlap)."""
    if not out.is_contiguous():
        return False
    so = span(out)
    if so is None:
        return True
    for t in ins:
        st = span(t)
        if st is not None and so[0] < st[1] and st[0] < so[1]:
            return False
    return True


def _readable_acc(acc: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`acc` as a GEMM writing `out` may read it in its epilogue: `out`
    itself when they are the same elements (cuBLAS reads each element
    before writing it, and torch skips the copy of `acc` into `out`), `acc`
    when disjoint, a copy when the two partly overlap."""
    if same_view(acc, out):
        return out
    return acc.clone() if overlaps(acc, out) else acc


def gemm_acc(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, acc: torch.Tensor) -> None:
    """`torch.matmul(a, b) + acc` into `out` (acc has out's shape and dtype).
    One GEMM with beta = 1 for 2-D operands (addmm), equal batches of 3-D
    ones (baddbmm) and a batched lhs on a 2-D rhs (addmm on rows); otherwise
    matmul then an add. Any aliasing reads every input before `out` is
    written."""
    if not direct_out(out, a, b):
        out.copy_(torch.matmul(a, b).add_(acc))
        return
    acc = _readable_acc(acc, out)
    if a.dim() == 2 and b.dim() == 2:
        torch.addmm(acc, a, b, out=out)
    elif a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]:
        torch.baddbmm(acc, a, b, out=out)
    elif a.dim() > 2 and b.dim() == 2:  # rows of a batched lhs, as matmul folds them
        out2 = out.view(-1, out.shape[-1])
        acc2 = out2 if acc is out else acc.reshape(out2.shape)
        torch.addmm(acc2, a.reshape(-1, a.shape[-1]), b, out=out2)
    elif acc is out:
        out.add_(torch.matmul(a, b))
    elif a.dim() >= 2 and b.dim() >= 2:  # (matmul resizes an `out=` of a vector product)
        torch.matmul(a, b, out=out)
        out.add_(acc)
    else:
        torch.add(torch.matmul(a, b), acc, out=out)


def linear_acc(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, acc: torch.Tensor
) -> None:
    """`F.linear(x, w, bias) + acc` into `out`: x @ w^T with `acc` in the
    GEMM's epilogue, then the bias added (a bias that overlaps `out` is
    read before `out` is written: the sum is then made aside)."""
    if bias is not None and overlaps(out, bias):
        out.copy_(torch.nn.functional.linear(x, w, bias).add_(acc))
        return
    gemm_acc(x, w.t(), out, acc)
    if bias is not None:
        out.add_(bias)


def torch_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    if direct_out(out, a, b):
        torch.matmul(a, b, out=out)
    else:
        out.copy_(torch.matmul(a, b))


def cupy_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    import cupy

    cupy.matmul(as_cupy(a), as_cupy(b), out=as_cupy(out))


class GemmChooser:
    """The faster GEMM per shape, chosen once."""

    def __init__(self, mode: str | None = None):
        mode = (mode or os.environ.get(GEMM_ENV) or "auto").strip().lower()
        if mode not in GEMM_CHOICES:
            raise RuntimeError(f"{GEMM_ENV}={mode!r}: expected one of {', '.join(GEMM_CHOICES)}")
        self.mode = mode
        self.choices: dict[tuple[Any, ...], str] = {}
        self._stream: Any = None

    def candidates(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> list[str]:
        names = ["torch"]
        if a.dtype in _CUPY_GEMM_DTYPES and direct_out(out, a, b):
            names.append("cupy")
        if self.mode != "auto":
            names = [n for n in names if n == self.mode] or ["torch"]
        return names

    def matmul(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, tune: bool = True) -> None:
        """`torch.matmul(a, b)` into `out` on the current stream. Without
        `tune` (in a graph capture, where the host may not wait for the GPU
        and CuPy's workspace would not outlive the capture) torch runs it."""
        if not tune:
            torch_gemm(a, b, out)
            return
        key = (tuple(a.shape), a.stride(), tuple(b.shape), b.stride(), tuple(out.shape), out.stride(), a.dtype)
        name = self.choices.get(key)
        if name is None:
            names = self.candidates(a, b, out)
            name = names[0] if len(names) == 1 else self._fastest(names, a, b, out)
            self.choices[key] = name
        (cupy_gemm if name == "cupy" else torch_gemm)(a, b, out)

    def _fastest(self, names: list[str], a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> str:
        """Time each candidate on a private stream into a scratch output
        (the inputs are only read, whatever their state)."""
        import cupy

        if self._stream is None:
            self._stream = cupy.cuda.Stream(non_blocking=True)
        stream = self._stream
        ext = torch.cuda.ExternalStream(stream.ptr, device=out.device)
        best, best_ms = names[0], float("inf")
        prev_cupy, prev_torch = cupy.cuda.get_current_stream(), torch.cuda.current_stream()
        stream.use()  # not `with stream:`, which restores CuPy's stack, not the stream in use
        torch.cuda.set_stream(ext)
        try:
            scratch = torch.empty(out.shape, dtype=out.dtype, device=out.device)
            for name in names:
                fn = cupy_gemm if name == "cupy" else torch_gemm
                fn(a, b, scratch)  # warm-up (and cuBLAS handle/workspace setup)
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                for _ in range(_TUNE_REPS):
                    fn(a, b, scratch)
                end.record(stream)
                end.synchronize()
                ms = cupy.cuda.get_elapsed_time(start, end)
                if ms < best_ms:
                    best, best_ms = name, ms
            del scratch
        finally:
            prev_cupy.use()
            torch.cuda.set_stream(prev_torch)
        return best

"""The cuda backend's row kernels (runtime/kernels/cuda_rows.py): softmax,
log_softmax and cross_entropy in one pass, against PyTorch at odd shapes
(rows not a power of two, one-element rows, the longest row a program
holds), f32 and bf16; on a machine without a GPU in Triton's interpreter.
And which launch regions get a row kernel."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

GPU = torch.cuda.is_available()
if not GPU:  # before Triton is imported: its kernels then run in its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
SHAPES = [(37, 129), (1, 257), (300, 1), (3, 16384), (2, 3, 40)]


@pytest.fixture(scope="module")
def rows_mod() -> ModuleType:
    """The module, its kernels interpreted on the CPU where there is no GPU
    (imported again if it was imported before the interpreter was asked for)."""
    from fuserc.runtime.kernels import cuda_rows

    if not GPU and type(cuda_rows._rows_kernel).__name__ != "InterpretedFunction":
        cuda_rows = importlib.reload(cuda_rows)
    return cuda_rows


def _want(mode: str, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    xd = x.double()
    if mode == "softmax":
        return torch.softmax(xd, -1)
    if mode == "log_softmax":
        return torch.log_softmax(xd, -1)
    return F.cross_entropy(xd, labels)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mode", ["softmax", "log_softmax", "cross_entropy"])
def test_row_kernels_match_torch(rows_mod: ModuleType, mode: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    if mode == "cross_entropy" and len(shape) != 2:
        pytest.skip("cross_entropy takes [rows, classes] logits")
    dev = "cuda" if GPU else "cpu"
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3).to(dtype).to(dev)
    labels = torch.randint(0, shape[-1], shape[:1], generator=g).to(dev)
    out = torch.empty((), dtype=dtype, device=dev) if mode == "cross_entropy" else torch.empty_like(x)
    assert rows_mod.rows(mode, x, out, labels if mode == "cross_entropy" else None)
    want = _want(mode, x.cpu(), labels.cpu())
    tol = 2e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.cpu().double(), want, rtol=tol, atol=tol)


def test_what_the_row_kernels_leave_to_inductor(rows_mod: ModuleType) -> None:
    x = torch.randn(4, rows_mod.MAX_COLS + 1)
    assert not rows_mod.rows("softmax", x, torch.empty_like(x))  # a row too long to hold
    y = torch.randn(8, 6)
    assert not rows_mod.rows("softmax", y.t(), torch.empty(6, 8))  # not contiguous rows
    assert not rows_mod.rows("softmax", y.to(torch.float64), torch.empty(8, 6, dtype=torch.float64))


def test_which_regions_get_a_row_kernel(rows_mod: ModuleType) -> None:
    from fuserc.dialects import hir
    from fuserc.ir import make_context, parse
    from fuserc.pipeline import run_pipeline

    text = """
func.func @main(%x: tensor<16x24xf32>, %l: tensor<16xi64>) -> (tensor<16x24xf32>, tensor<16x24xf32>, tensor<f32>, tensor<16x24xf32>) {
  %a = fusion.softmax %x dim = 1 : (tensor<16x24xf32>) -> tensor<16x24xf32>
  %b = fusion.softmax %x dim = 0 : (tensor<16x24xf32>) -> tensor<16x24xf32>
  %c = fusion.cross_entropy %x, %l : (tensor<16x24xf32>, tensor<16xi64>) -> tensor<f32>
  %d = fusion.mul %x, %x : (tensor<16x24xf32>, tensor<16x24xf32>) -> tensor<16x24xf32>
  %e = fusion.log_softmax %d dim = 1 : (tensor<16x24xf32>) -> tensor<16x24xf32>
  func.return %a, %b, %c, %e : tensor<16x24xf32>, tensor<16x24xf32>, tensor<f32>, tensor<16x24xf32>
}
"""
    ctx = make_context()
    module = run_pipeline(parse(text, "rows.mlir", ctx), "default", ctx)
    plans = [rows_mod.plan_of(op.body.block) for op in module.walk() if isinstance(op, hir.LaunchOp)]
    # each row-wise op is a region of its own (the mul before the log_softmax too)
    assert [p.mode if p else None for p in plans] == ["softmax", None, "cross_entropy", None, "log_softmax"]


def test_row_kernels_go_through_the_kernel_cache(rows_mod: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row kernel's first launch in a process is fetched from the kernel
    cache (built into it the first time); a launch planned ahead is a row
    kernel job, keyed without the GPU's index (Triton's kernels are not
    tied to one GPU)."""
    from fuserc.dialects import hir
    from fuserc.ir import make_context, parse
    from fuserc.pipeline import run_pipeline
    from fuserc.runtime.kernels import kernel_builds
    from fuserc.runtime.kernels.kernel_cache import KernelCache
    from fuserc.runtime.job.startup import KERNELS

    monkeypatch.setenv("FUSERC_CACHE_DIR", str(tmp_path))
    text = """
func.func @main(%x: tensor<16x24xf32>) -> tensor<16x24xf32> {
  %a = fusion.softmax %x dim = 1 : (tensor<16x24xf32>) -> tensor<16x24xf32>
  func.return %a : tensor<16x24xf32>
}
"""
    ctx = make_context()
    (launch,) = [op for op in run_pipeline(parse(text, "rows.mlir", ctx), "default", ctx).walk() if isinstance(op, hir.LaunchOp)]
    body = launch.body.block
    dev = "cuda" if GPU else "cpu"
    x = torch.randn(16, 24, device=dev)
    out = torch.empty_like(x)
    for how in ("built", "loaded"):
        rows_mod._READY.clear()  # as in a new process
        before = KERNELS.copy()
        assert rows_mod.run_rows(body, [x], [out])
        assert getattr(KERNELS.since(before), how) == 1
        torch.testing.assert_close(out.cpu(), torch.softmax(x.cpu(), 1))
    before = KERNELS.copy()
    assert rows_mod.run_rows(body, [x], [out]) and KERNELS.since(before).total == 0  # ready in this process
    (entry,) = KernelCache().entries()
    rows_mod._READY.clear()  # (planning leaves out kernels this process has)
    (group,) = kernel_builds.group_jobs([(body, (x.to("meta"),), (out.to("meta"),), None)], x.device)
    assert group[0].kind == "rows" and KernelCache().entry_path(group[0].key) == entry
    assert "cuda:" not in group[0].key.doc["device"]

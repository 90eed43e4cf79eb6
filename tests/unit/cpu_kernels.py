"""The fused elementwise kernels' generated CUDA C code built for the CPU
with g++ (CUDA's device math functions shimmed by the C library), so that
tests run the very code the cuda backend compiles and compare it with
torch, without a GPU."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from fuserc.runtime.kernels.cuda_fusion import PREAMBLE, FusedPlan, apply_steps

_C_TYPES = {"float32": "float", "float64": "double", "uint16": "unsigned short", "int64": "long long", "bool": "bool"}
SHIMS = r"""
#include <cmath>
#include <cstring>
#define __device__
#define __forceinline__ inline
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
#include <cstdlib>
using std::exp; using std::tanh; using std::erf; using std::log; using std::sqrt; using std::sin; using std::cos;
using std::pow; using std::fabs; using std::llabs;
static inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
"""
"""The CUDA device functions the generated code calls, for a CPU build."""

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _params(decl: str) -> list[tuple[str, str]]:
    return [tuple(p.split()) for p in decl.split(", ")] if decl else []  # type: ignore[misc]


def compile_plan(plan: FusedPlan, tmp_path: Path) -> ctypes.CDLL:
    """The plan's kernel as a CPU loop over contiguous arrays."""
    ins, outs = _params(plan.in_params), _params(plan.out_params)
    sig = [f"const {_C_TYPES[t]}* p_{n}" for t, n in ins] + [f"{_C_TYPES[t]}* p_{n}" for t, n in outs]
    loads = "".join(f"const {_C_TYPES[t]} {n} = p_{n}[i];\n" for t, n in ins)
    decls = "".join(f"{_C_TYPES[t]} {n};\n" for t, n in outs)
    stores = "".join(f"p_{n}[i] = {n};\n" for _, n in outs)
    src = (
        f"{SHIMS}{PREAMBLE}\nextern \"C\" void run(long n, {', '.join(sig)}) {{\n"
        f"for (long i = 0; i < n; ++i) {{\n{loads}{decls}{{\n{plan.operation}\n}}\n{stores}}}\n}}\n"
    )
    (tmp_path / "k.cpp").write_text(src)
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.cpp")], check=True)
    return ctypes.CDLL(str(tmp_path / "k.so"))


def words(t: torch.Tensor) -> np.ndarray:
    t = t.contiguous()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def run_on_cpu(plan: FusedPlan, lib: ctypes.CDLL, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
    """What `run_plan` does on the GPU, with the CPU build of the kernel."""
    in_views = [apply_steps(ins[v.arg], v.steps) for v in plan.inputs]
    out_views = [apply_steps(outs[v.out], v.steps, writable=True) for v in plan.outputs]
    # CuPy's ElementwiseKernel runs at its inputs' broadcast shape (a rank-0
    # input is read at every element), and refuses an output of any other
    # shape ("Out shape is mismatched")
    shape = torch.broadcast_shapes(*(t.shape for t in in_views)) if in_views else out_views[0].shape
    assert all(o.shape == shape for o in out_views), f"{plan.name}: outputs {[tuple(o.shape) for o in out_views]} at shape {tuple(shape)}"
    in_views = [t.expand(shape).contiguous() for t in in_views]
    n = out_views[0].numel()
    in_arrays = [np.ascontiguousarray(words(t)) for t in in_views]
    out_tensors = [torch.empty(o.shape, dtype=o.dtype) for o in out_views]
    out_arrays = [words(t) for t in out_tensors]
    for t, a in zip(out_tensors, out_arrays):  # the arrays share the tensors' memory
        assert a.ctypes.data == t.data_ptr()
    lib.run(ctypes.c_long(n), *[ctypes.c_void_p(a.ctypes.data) for a in in_arrays + out_arrays])
    for view, result in zip(out_views, out_tensors):
        view.copy_(result)

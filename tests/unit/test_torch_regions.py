"""Launch regions run by PyTorch's own kernels (runtime/kernels/torch_regions.py):
which regions (a lone op with the `torch_alone` fact, attention), and the
lone erf gelu written into its output buffer, against torch's gelu (on CPU
tensors here; the cuda backend launches the same aten kernel on the GPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fuserc.dialects import hir
from fuserc.ir import parse
from fuserc.runtime.kernels import torch_regions

T = "tensor<8x16xbf16>"


def _region(body: str, ins: int = 1, outs: int = 1, out_type: str = T) -> object:
    args = ", ".join(f"%a{i}: {T}" for i in range(ins))
    names = ", ".join(f"%a{i}" for i in range(ins))
    bargs = ", ".join(f"%b{i}: {T}" for i in range(ins))
    outs_decl = "\n".join(f'  %o{j} = hir.alloc "o{j}" : {out_type}' for j in range(outs))
    onames = ", ".join(f"%o{j}" for j in range(outs))
    text = f"""func.func @main({args}) attributes {{hir.host}} {{
{outs_decl}
  hir.launch ins({names} : {", ".join([T] * ins)}) outs({onames} : {", ".join([out_type] * outs)}) {{
  ^bb0({bargs}):
{body}
  }}
  func.return
}}
"""
    module = parse(text)
    return next(op for op in module.walk() if isinstance(op, hir.LaunchOp)).body.block


LONE_GELU = f"""    %g = fusion.gelu %b0 : ({T}) -> {T}
    hir.yield %g : {T}"""


def test_a_lone_erf_gelu_runs_pytorchs_kernel_into_its_buffer() -> None:
    body = _region(LONE_GELU)
    assert torch_regions.runs_region(body)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    for arg in (x, x.t().contiguous().t()):  # any strides in
        out = torch.empty(8, 16, dtype=torch.bfloat16)
        assert torch_regions.run_region(body, [arg], [out])
        assert torch.equal(out, F.gelu(x))
    transposed = torch.zeros(16, 8, dtype=torch.bfloat16).t()  # (Inductor's kernel writes those)
    assert not torch_regions.run_region(body, [x], [transposed]) and not transposed.any()


@pytest.mark.parametrize(
    "body, ins, out_type",
    [
        (f"""    %g = fusion.gelu %b0 {{approximate = "tanh"}} : ({T}) -> {T}
    hir.yield %g : {T}""", 1, T),  # Inductor's tanh gelu: not measured slower
        (f"""    %g = fusion.gelu %b0 : ({T}) -> {T}
    %s = fusion.add %g, %b1 : ({T}, {T}) -> {T}
    hir.yield %s : {T}""", 2, T),  # more than the op: one generated kernel
        (f"""    %s = fusion.add %b0, %b1 : ({T}, {T}) -> {T}
    hir.yield %s : {T}""", 2, T),
    ],
    ids=["tanh", "gelu-then-add", "add"],
)
def test_other_regions_get_generated_kernels(body: str, ins: int, out_type: str) -> None:
    block = _region(body, ins, out_type=out_type)
    assert not torch_regions.runs_region(block)
    xs = [torch.randn(8, 16).to(torch.bfloat16) for _ in range(ins)]
    out = torch.zeros(8, 16, dtype=torch.bfloat16)
    assert not torch_regions.run_region(block, xs, [out])
    assert not out.any()


def test_a_lone_gelu_into_a_buffer_of_another_dtype_is_not_run() -> None:
    body = _region(LONE_GELU)
    out = torch.zeros(8, 16, dtype=torch.float32)
    assert not torch_regions.run_region(body, [torch.randn(8, 16).to(torch.bfloat16)], [out])

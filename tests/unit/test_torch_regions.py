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


def test_a_lone_concat_runs_torch_cat_into_its_buffer() -> None:
    """The bucket of a model's small gradients: data movement only, run by
    torch.cat (no generated kernel to build for every input count)."""
    v = "tensor<128xbf16>"
    text = f"""func.func @main(%a0: {v}, %a1: {v}, %a2: {v}) attributes {{hir.host}} {{
  %o = hir.alloc "o" : tensor<384xbf16>
  hir.launch ins(%a0, %a1, %a2 : {v}, {v}, {v}) outs(%o : tensor<384xbf16>) {{
  ^bb0(%b0: {v}, %b1: {v}, %b2: {v}):
    %c = fusion.concat %b0, %b1, %b2 dim = 0 : ({v}, {v}, {v}) -> tensor<384xbf16>
    hir.yield %c : tensor<384xbf16>
  }}
  func.return
}}
"""
    body = next(op for op in parse(text).walk() if isinstance(op, hir.LaunchOp)).body.block
    assert torch_regions.runs_region(body)
    xs = [torch.randn(128, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16) for i in range(3)]
    out = torch.zeros(384, dtype=torch.bfloat16)
    assert torch_regions.run_region(body, xs, [out])
    assert torch.equal(out, torch.cat(xs))
    assert not torch_regions.run_region(body, xs, [torch.zeros(384, dtype=torch.float32)])

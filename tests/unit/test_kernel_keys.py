"""A region's kernel is keyed by what it computes, not by where it sits
(runtime/kernels/cuda_regions.py `region_text`): identical layers share their
kernels, so an L-layer model builds about as many as a 1-layer one. The
keys are computed on the CPU from the dry run's launches, without building."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fuserc.ir import make_context
from fuserc.runtime.kernels import kernel_builds, torch_regions
from fuserc.runtime.backends.backend import shared_backend
from fuserc.runtime.backends.cpu import launch_with_torch
from fuserc.runtime.kernels.cuda_regions import RegionJob, region_text
from fuserc.runtime.evaluator.evaluator import Program
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.runtime.evaluator.program import compile_module

ROOT = Path(__file__).parents[2]
CPU = torch.device("cpu")


def _region(text: str) -> Any:
    from xdsl.parser import Parser

    return Parser(make_context(), text).parse_region().block


NORM = """{{
^bb0(%{a}: tensor<8x16xbf16>, %{b}: tensor<8x16xbf16>, %{w}: tensor<16xbf16>):
  %{s} = fusion.add %{a}, %{b} : (tensor<8x16xbf16>, tensor<8x16xbf16>) -> tensor<8x16xbf16>
  %{n} = fusion.layer_norm %{s}, %{w} dims = [1] : (tensor<8x16xbf16>, tensor<16xbf16>) -> tensor<8x16xbf16>
  hir.yield %{s}, %{n} : tensor<8x16xbf16>, tensor<8x16xbf16>
}}"""


def _job(body: Any) -> RegionJob:
    layout = ((8, 16), (16, 1), torch.bfloat16)
    layouts = (layout, layout, ((16,), (1,), torch.bfloat16), layout, layout)
    return RegionJob(body, layouts, tuple(range(5)), 3, None, CPU)


def test_a_regions_key_does_not_depend_on_its_values_names() -> None:
    first = _region(NORM.format(a="t1", b="t15", w="0", s="t16", n="t17"))
    later = _region(NORM.format(a="t16", b="t20", w="ln2_w", s="x_layer3", n="t22"))
    assert region_text(first) == region_text(later)
    assert "t16" not in region_text(later) and "ln2_w" not in region_text(later)
    assert _job(first).key.digest == _job(later).key.digest
    other = _region(NORM.format(a="t1", b="t15", w="0", s="t16", n="t17").replace("fusion.add", "fusion.sub"))
    assert _job(other).key.digest != _job(first).key.digest


def _model_kernels(layers: int) -> tuple[int, int]:
    """(launches, distinct kernels) of train_gpt's model's forward and backward at d = 1, bf16."""
    launches = _model_launches(layers)
    return len(launches), len(kernel_builds.group_jobs(launches, CPU))


def _model_launches(layers: int) -> list[Any]:
    """The launches of train_gpt's model's forward and backward at d = 1, bf16."""
    sys.path.insert(0, str(ROOT / "examples" / "python"))
    try:
        from train_gpt import build
    finally:
        sys.path.pop(0)
    a = argparse.Namespace(layers=layers, hidden=64, tokens=32, heads=2, ffn=256, vocab=128, dtype="bf16", dropout=0.0)
    fd, _ = build(a, 1)
    backend = shared_backend("cpu", mpi_env())
    compiled = compile_module(fd.to_mlir(), "<gpt>", f"{fd.name}_fwd", f"autodiff{{entry={fd.name}}},default", ranks=1)
    programs = [Program.load(compiled.host, f"{fd.name}_{part}", backend) for part in ("fwd", "bwd")]
    return [launch for p in programs for launch in kernel_builds.needed_launches(p)]


def test_identical_layers_share_their_kernels() -> None:
    """A layer adds no kernel; the regions at the model's ends that pack the
    small gradients into one buffer may differ with the count of layers.
    (Keyed by their values' names, with a kernel for each layer's slices
    of that buffer, 1, 2 and 4 layers built 17, 23 and 35 kernels.)"""
    (l1, k1), (l2, k2), (l4, k4) = (_model_kernels(n) for n in (1, 2, 4))
    assert l1 < l2 < l4  # more layers, more launches
    assert max(k2, k4) <= k1 + 2, (k1, k2, k4)


SLICES = """{
^bb0(%g: tensor<12xf32>, %h: tensor<3x4xf32>):
  %a = fusion.slice %g starts = [0] limits = [4] : (tensor<12xf32>) -> tensor<4xf32>
  %b = fusion.slice %g starts = [4] limits = [12] : (tensor<12xf32>) -> tensor<8xf32>
  %c = fusion.slice %h starts = [1, 0] limits = [3, 2] : (tensor<3x4xf32>) -> tensor<2x2xf32>
  hir.yield %b, %a, %c : tensor<8xf32>, tensor<4xf32>, tensor<2x2xf32>
}"""


def test_a_region_of_slices_is_copied_without_a_kernel() -> None:
    body = _region(SLICES)
    assert torch_regions.runs_region(body)
    g, h = torch.randn(12), torch.randn(3, 4)
    outs = [torch.empty(8), torch.empty(4), torch.empty(2, 2)]
    assert torch_regions.run_region(body, [g, h], outs)
    for got, want in zip(outs, (g[4:12], g[0:4], h[1:3, 0:2]), strict=True):
        assert torch.equal(got, want)
    launch = (body, (g, h), tuple(torch.empty_like(o) for o in outs), None)
    assert kernel_builds.group_jobs([launch], CPU) == []
    computed = _region(SLICES.replace("%c = fusion.slice %h", "%e = fusion.exp %h : (tensor<3x4xf32>) -> tensor<3x4xf32>\n  %c = fusion.slice %e"))
    assert not torch_regions.runs_region(computed)
    assert not torch_regions.run_region(computed, [g, h], outs)


def test_slices_into_an_overlapping_output_run_op_by_op() -> None:
    body = _region(SLICES)
    g, h = torch.randn(12), torch.randn(3, 4)
    outs = [g[4:12], torch.empty(4), torch.empty(2, 2)]  # the first output is its own slice's source
    assert not torch_regions.run_region(body, [g, h], outs)
    want = [t.clone() for t in outs]
    launch_with_torch(body, [g.clone(), h], want)
    assert torch.equal(want[0], g[4:12])


def test_kernels_are_built_costliest_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The kernels whose launches cost a step most while they are not in
    (the most elements times ops over all their sites) are built first:
    the MLP's backward (gelu's derivative) of every layer comes first."""
    monkeypatch.setenv("FUSERC_CACHE_DIR", str(tmp_path))
    groups = kernel_builds.group_jobs(_model_launches(2), CPU)
    queued: list[Any] = []
    monkeypatch.setattr(kernel_builds, "_build", lambda pending, *args, **kw: queued.extend(pending))
    kernel_builds.build_all(groups, CPU, workers=0)
    costs = [kernel_builds.fallback_cost(g) for g in queued]
    assert len(queued) == len(groups) and costs == sorted(costs, reverse=True) and costs[0] > costs[-1]
    assert len(queued[0]) == 2 and "fusion.erf" in {op.name for op in queued[0][0].body.ops}


def test_a_block_that_is_the_whole_tensor_needs_no_global_indices() -> None:
    """At d = 1 the embedding's table is one block, the whole vocabulary: its
    region traces to a plain lookup, with no search of the block's global
    indices and no constant (which torch 2.11's standalone_compile failed
    on: the embedding region then ran op by op, and kept its program from
    being replayed as a CUDA graph)."""
    from fuserc.runtime.kernels.cuda_regions import _on, trace_region

    launches = [launch for launch in _model_launches(1) if "fusion.embedding" in {op.name for op in launch[0].ops}]
    assert launches
    body, ins, outs, contexts = launches[0]
    assert all(c.is_whole(1) for c in contexts.values())
    graph = trace_region(body, [t.clone() for t in ins], [t.clone() for t in outs], _on(contexts, CPU))
    targets = {str(n.target) for n in graph.graph.nodes}
    assert not any("searchsorted" in t for t in targets) and not [n for n in graph.graph.nodes if n.op == "get_attr"]

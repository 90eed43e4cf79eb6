"""tools/bench_layer_graphs.py: what GraphCount finds in the graphs Inductor
hands its post-grad custom pass (graphs built here with the ops async TP
and the functional collectives leave in them), per role and mode."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed._symmetric_memory  # noqa: F401 - registers torch.ops.symm_mem
import torch.fx

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from bench_layer_graphs import GraphCount, collectives_text, fused_text  # noqa: E402

F = torch.ops._c10d_functional
S = torch.ops.symm_mem


def graph(placeholders: list[str], targets: list[object]) -> torch.fx.Graph:
    g = torch.fx.Graph()
    args = [g.placeholder(n) for n in placeholders]
    for t in targets:
        g.call_function(t, (args[0],))
    g.call_function(torch.ops.aten.mm.default, (args[0], args[0]))
    g.output(None)
    return g


def test_roles_and_modes() -> None:
    count = GraphCount()
    assert count.uuid() is None  # no cached graph skips the pass
    count(graph(["primals_1", "primals_2"], [S.fused_all_gather_matmul.default, F.all_gather_into_tensor.default, F.reduce_scatter_tensor.default]))
    assert count.mode("fwdbwd") is None  # no backward yet
    count(graph(["primals_1", "tangents_1"], [S.fused_matmul_reduce_scatter.default, S.fused_all_gather_matmul.default, F.all_reduce.default]))
    count(graph(["arg0_1"], [F.all_gather_into_tensor.default, F.all_gather_into_tensor.default, F.reduce_scatter_tensor.default]))
    step = count.mode("fwdbwd")
    assert step == {"ag_matmul": 2, "matmul_rs": 1, "all_gather": 1, "reduce_scatter": 1, "all_reduce": 1, "all_to_all": 0}
    assert fused_text(step) == "2 AG+matmul, 1 matmul+RS fused (1 AG, 1 RS, 1 AR left)"
    fwd = count.mode("fwd")
    assert fwd is not None and fwd["ag_matmul"] == fwd["matmul_rs"] == 0
    assert fused_text(fwd) == "nothing fused (2 AG, 1 RS left)" and collectives_text(fwd) == "2 AG, 1 RS"
    assert fused_text(None) == collectives_text(None) == "n/a"


def test_a_recompiled_role_replaces_the_earlier_graph() -> None:
    count = GraphCount()
    count(graph(["arg0_1"], [F.all_gather_into_tensor.default]))
    count(graph(["arg0_1"], [S.fused_all_gather_matmul.default]))
    assert count.mode("fwd") == {"ag_matmul": 1, "matmul_rs": 0, "all_gather": 0, "reduce_scatter": 0, "all_reduce": 0, "all_to_all": 0}
    assert collectives_text(count.mode("fwd")) == "none"

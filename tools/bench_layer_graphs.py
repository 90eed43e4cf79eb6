"""What torch.compile made of the GPT layer's collectives (tools/bench_layer.py).

Async TP (`torch._inductor.config._micro_pipeline_tp`) rewrites an
all-gather feeding matmuls into one `symm_mem.fused_all_gather_matmul`
call and a matmul feeding a reduce-scatter into
`symm_mem.fused_matmul_reduce_scatter` (torch/_inductor/fx_passes/
micro_pipeline_tp.py), in Inductor's post-grad passes, and records
nothing when it finds no pattern but a log warning. So `GraphCount`, run
as Inductor's `post_grad_custom_post_pass` (right after micro-pipeline
TP), counts those fused calls and the functional collectives left in each
graph it compiles: the forward and backward graphs of a training step
(the backward's placeholders include its tangents), and the inference
graph of a forward under no_grad. Its `uuid()` is None, so Inductor
compiles every graph again rather than loading it from its cache, where
no pass would run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch._inductor.custom_graph_pass import CustomGraphPass

CALLS = {
    "symm_mem.fused_all_gather_matmul": "ag_matmul",
    "symm_mem.fused_all_gather_scaled_matmul": "ag_matmul",
    "symm_mem.fused_matmul_reduce_scatter": "matmul_rs",
    "symm_mem.fused_scaled_matmul_reduce_scatter": "matmul_rs",
    "_c10d_functional.all_gather_into_tensor": "all_gather",
    "_c10d_functional.reduce_scatter_tensor": "reduce_scatter",
    "_c10d_functional.all_reduce": "all_reduce",
    "_c10d_functional.all_to_all_single": "all_to_all",
}
"""Ops of a post-grad graph counted, by their name without the overload."""

KINDS = ("ag_matmul", "matmul_rs", "all_gather", "reduce_scatter", "all_reduce", "all_to_all")
GRAPHS = {"fwd": ("inference",), "fwdbwd": ("forward", "backward")}
"""The graphs a mode of bench_layer runs (a forward under no_grad is an inference graph)."""


class GraphCount(CustomGraphPass):
    """Counts the fused and the unfused collectives of each graph Inductor
    compiles, by the graph's role (forward, backward, inference); the last
    graph of a role replaces earlier ones (a recompile)."""

    def __init__(self) -> None:
        self.graphs: dict[str, Counter[str]] = {}

    def __call__(self, graph: Any) -> None:
        names = [n.name for n in graph.nodes if n.op == "placeholder"]
        if any(n.startswith("tangents") for n in names):
            role = "backward"
        elif any(n.startswith("primals") for n in names):
            role = "forward"
        else:
            role = "inference"
        seen: Counter[str] = Counter()
        for n in graph.nodes:
            if n.op == "call_function":
                kind = CALLS.get(str(n.target).rsplit(".", 1)[0])
                if kind:
                    seen[kind] += 1
        self.graphs[role] = seen

    def uuid(self) -> None:
        return None  # no cached graph: every graph passes through __call__

    def mode(self, mode: str) -> dict[str, int] | None:
        """The counts of the graphs `mode` runs, summed (None when one of
        them was not compiled)."""
        roles = GRAPHS[mode]
        if not all(r in self.graphs for r in roles):
            return None
        return {k: sum(self.graphs[r][k] for r in roles) for k in KINDS}


def collectives_text(c: dict[str, int] | None) -> str:
    """`2 all-gathers, 2 reduce-scatters` (the unfused ones)."""
    if c is None:
        return "n/a"
    parts = [f"{c[k]} {name}" for k, name in (("all_gather", "AG"), ("reduce_scatter", "RS"), ("all_reduce", "AR"), ("all_to_all", "A2A")) if c[k]]
    return ", ".join(parts) or "none"


def fused_text(c: dict[str, int] | None) -> str:
    """`2 AG+matmul, 2 matmul+RS fused (0 AG, 0 RS left)` or `nothing fused (4 AG, 4 RS left)`."""
    if c is None:
        return "n/a"
    fused = [f"{c['ag_matmul']} AG+matmul" if c["ag_matmul"] else "", f"{c['matmul_rs']} matmul+RS" if c["matmul_rs"] else ""]
    head = ", ".join(p for p in fused if p) + " fused" if any(fused) else "nothing fused"
    return f"{head} ({collectives_text(c)} left)"

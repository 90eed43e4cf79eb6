"""Ring attention (sdpa over a sequence split on every rank) at 1, 2, 4
and 8 ranks: outputs and gradients through `fuserc.torch.function`
against float64 PyTorch sdpa and autograd (ring_attention_worker.py), one
mpiexec launch per rank count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import BACKEND
from test_torch_function import launch

HERE = Path(__file__).parent
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
ALL = "plain,causal,gqa_causal,odd_head_dim,bf16_gqa_causal,heads_x_sequence"
JOBS = [(1, ALL), (2, ALL), (4, ALL), (8, "gqa_causal,bf16_gqa_causal,heads_x_sequence")]


@pytest.mark.parametrize("n,cases", JOBS, ids=[f"n{n}" for n, _ in JOBS])
def test_ring_attention_against_pytorch(n: int, cases: str) -> None:
    proc = launch("mpiexec", n, HERE / "ring_attention_worker.py", ["--device", DEVICE, "--cases", cases])
    found = re.findall(r"^CASE (\S+) (ok|FAILED.*)$", proc.stdout, re.M)
    failed = [f"{name}: {what}" for name, what in found if what != "ok"]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr[-3000:]
    assert [name for name, _ in found] == cases.split(",") and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

"""Ring attention (sdpa over a sequence split on every rank) at 1, 2, 4
and 8 ranks: outputs and gradients through `fuserc.torch.function`
against float64 PyTorch sdpa and autograd (ring_attention_worker.py), one
mpiexec launch per rank count (with a training step around it); and the
examples that use it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import BACKEND
from test_torch_function import launch

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
ALL = "plain,causal,gqa_causal,odd_head_dim,bf16_gqa_causal,heads_x_sequence,train_step"
JOBS = [(1, ALL), (2, ALL), (4, ALL), (8, "gqa_causal,bf16_gqa_causal,heads_x_sequence")]


@pytest.mark.parametrize("n,cases", JOBS, ids=[f"n{n}" for n, _ in JOBS])
def test_ring_attention_against_pytorch(n: int, cases: str) -> None:
    proc = launch("mpiexec", n, HERE / "ring_attention_worker.py", ["--device", DEVICE, "--cases", cases])
    found = re.findall(r"^CASE (\S+) (ok|FAILED.*)$", proc.stdout, re.M)
    failed = [f"{name}: {what}" for name, what in found if what != "ok"]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr[-3000:]
    assert [name for name, _ in found] == cases.split(",") and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


LONG_CONTEXT_SMALL = (("x32x", "x4x"), ("x8x", "x2x"), ("x128x", "x16x"), ("131072", "256"), ("4096", "64"), ("1024", "32"))
"""examples/long_context.mlir at 256 tokens, hidden 64 (4 query heads, 2
key/value heads of 16): the same program, small enough for the cpu."""


def test_examples_with_ring_attention(tmp_path: Path) -> None:
    """examples/long_context.mlir (at a small size) and
    examples/gpt_layer_cp.mlir against the float64 reference on 4 ranks, in
    one job of tools/check_examples.py, which skips the full-size
    long_context on the cpu backend and says so."""
    text = (ROOT / "examples" / "long_context.mlir").read_text()
    for a, b in LONG_CONTEXT_SMALL:
        text = text.replace(a, b)
    small = tmp_path / "long_context_small.mlir"
    small.write_text(text)
    files = [str(small), str(ROOT / "examples" / "gpt_layer_cp.mlir")]
    if DEVICE == "cpu":
        files.append(str(ROOT / "examples" / "long_context.mlir"))
    proc = launch("mpiexec", 4, ROOT / "tools" / "check_examples.py", ["--backend", BACKEND, *files])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ok: long_context_small.mlir" in proc.stdout and "ok: gpt_layer_cp.mlir" in proc.stdout, proc.stdout
    if DEVICE == "cpu":
        assert "skipped on the cpu backend: 1.1 GiB of inputs" in proc.stdout, proc.stdout

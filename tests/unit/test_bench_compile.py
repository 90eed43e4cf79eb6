"""tools/bench_compile.py at 1,000 ops, as CI's smoke test of compile time:
the generated program compiles with `-p default`, the report has a line
per size and the per-pass split (no timing is asserted: CI machines vary)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).parents[2] / "tools" / "bench_compile.py"


def test_thousand_ops(tmp_path: Path) -> None:
    out = tmp_path / "compile.json"
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--ops", "1000", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "fuserc opt -p default, CPU time" in proc.stdout
    for phase in ("parse+verify", "propagate-shardings", "make-resharding-contiguous", "lower-to-host-ir", "stream-pipeline", "print"):
        assert phase in proc.stdout, proc.stdout
    data = json.loads(out.read_text())
    assert [r["ops"] for r in data] == [996]
    for r in data:
        assert r["total"] > 0 and abs(sum(r["phases"].values()) - r["total"]) < 1e-9
        assert r["per_op_us"] == r["total"] / r["ops"] * 1e6


def test_generated_program_sizes() -> None:
    """The generator makes blocks of 12 fusion ops: GEMMs, elementwise
    chains and reshards."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        from bench_compile import generate
    finally:
        sys.path.pop(0)
    text = generate(1000)
    assert text.count("fusion.matmul") == 2 * 83 and text.count("fusion.set") == 2 * 83
    assert text.count(" = fusion.") == 996


def test_model_mode(tmp_path: Path) -> None:
    """The model mode on a small GPT (1 to 3 layers at d = 2): a row per
    layer count with the report's bytes beside the linear expectation and
    the time of every pass; the plan is linear (3 layers = 1 + 2 x the
    second layer's extra)."""
    out = tmp_path / "model.json"
    small = ["--tokens", "32", "--hidden", "64", "--heads", "4", "--ffn", "128", "--vocab", "256"]
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--model-layers", "1,2,3", "--ranks", "2", *small, "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "autodiff,default of the GPT model (hidden 64, tokens 32, bf16) at d = 2" in proc.stdout
    rows = json.loads(out.read_text())
    assert [(r["layers"], r["ranks"]) for r in rows] == [(1, 2), (2, 2), (3, 2)]
    one, two, three = (r["total"] for r in rows)
    assert one > 0 and three == one + 2 * (two - one)
    for r in rows:
        assert r["process_cpu"] > 0 and {"autodiff", "propagate-shardings", "plan-memory"} <= set(r["phases"])

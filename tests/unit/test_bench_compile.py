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
        assert r["process_cpu"] > 0  # fuserc opt as a process, imports included
    row = next(line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["996"])
    assert row[-2:] == ["<", "1"], row  # the 1,000-op program's target beside its process time


def test_targets() -> None:
    """The targets printed beside the figures: the 1,000-op program under
    -p default (996 ops counts as 1,000), the 12- and 48-layer model at
    d = 4; no target elsewhere."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        from bench_compile import target
    finally:
        sys.path.pop(0)
    assert target(("blocks", "default", 996)) == "< 1"
    assert target(("blocks", "default", 4000)) == "-" and target(("chain", "default", 1000)) == "-"
    assert target(("blocks", "autodiff,default", 1000)) == "-"
    assert target(("model", 12, 4)) == "< 3" and target(("model", 48, 4)) == "< 10"
    assert target(("model", 12, 2)) == "-"


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


def test_chain_under_autodiff(tmp_path: Path) -> None:
    """The chain program under `autodiff,default`: the autodiff pass is a
    phase of its own, and each phase's growth per op is printed."""
    out = tmp_path / "chain.json"
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--ops", "100,200", "--program", "chain", "--pipeline", "autodiff,default", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "fuserc opt -p autodiff,default, CPU time" in proc.stdout and "program chain" in proc.stdout
    growth = proc.stdout.split("time per op of each phase over the smallest size's:")[1]
    for phase in ("autodiff", "propagate-shardings", "lower-to-host-ir", "stream-pipeline", "plan-memory"):
        assert phase in growth, proc.stdout
    assert [r["ops"] for r in json.loads(out.read_text())] == [100, 200]


def test_chain_program() -> None:
    """A GEMM every tenth op, the others elementwise, each using the one
    before, then the loss."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        from bench_compile import chain
    finally:
        sys.path.pop(0)
    text = chain(1000)
    assert text.count(" = fusion.") == 1000 and text.count("fusion.matmul") == 100 and text.count("fusion.sum") == 1
    lines = [line for line in text.splitlines() if " = fusion." in line]
    assert all(f"%v{i - 1}" in lines[i] for i in range(1, 999))


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
        assert r["process_cpu"] > 0 and r["process_cpu_report"] > 0 and {"autodiff", "propagate-shardings", "plan-memory"} <= set(r["phases"])

"""The mutation fuzzer of `fuserc opt` (tools/fuzz.py): a small fixed
budget in CI, where any traceback or timeout fails the build, and checks
that its classification sees each kind of result."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import fuzz  # noqa: E402

CI_MUTANTS = 300


def test_fuzz_budget() -> None:
    """300 mutants of the examples and lit inputs through `fuserc opt -p
    default`: every one ends in IR or a diagnostic."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fuzz.py"), "--mutants", str(CI_MUTANTS), "--seed", "0", "--jobs", "2", "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"fuzzed {CI_MUTANTS} mutants" in proc.stdout


def test_mutants_are_reproducible() -> None:
    seeds = fuzz.corpus()
    assert len(seeds) > 50  # examples and the chunks of the lit inputs
    assert fuzz.mutant(seeds, 3, 17) == fuzz.mutant(seeds, 3, 17)
    assert len({fuzz.mutant(seeds, 3, i) for i in range(20)}) > 15


@dataclass(frozen=True)
class _Crash(ModulePass):
    name = "test-crash"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise ZeroDivisionError("an internal error")


@dataclass(frozen=True)
class _Hang(ModulePass):
    name = "test-hang"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        time.sleep(30)


@pytest.fixture
def test_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    from fuserc import pipeline

    monkeypatch.setitem(pipeline.PASSES, "test-crash", pipeline.PassEntry(__name__, "_Crash"))
    monkeypatch.setitem(pipeline.PASSES, "test-hang", pipeline.PassEntry(__name__, "_Hang"))


PROGRAM = (ROOT / "examples" / "sp_mlp.mlir").read_text()


@pytest.mark.parametrize(
    "text, pipeline, cls",
    [
        (PROGRAM, "default", "ok"),
        (PROGRAM.replace("fusion.gelu", "fusion.nope"), "default", "diagnostic"),
        (PROGRAM, "no-such-pass", "diagnostic"),  # a usage error (exit 2) is a diagnostic too
        (PROGRAM, "test-crash", "traceback"),
        (PROGRAM, "test-hang", "timeout"),
    ],
    ids=["ok", "bad-op", "bad-pass", "crash", "hang"],
)
def test_classification(text: str, pipeline: str, cls: str, tmp_path: Path, test_passes: None) -> None:
    r = fuzz.run_one(0, text, pipeline, 1.0, tmp_path)
    assert r.cls == cls, r
    if cls == "traceback":
        # where: the innermost frame of fuserc's own code
        assert r.detail == "ZeroDivisionError: an internal error" and r.where.startswith("fuserc/pipeline.py:")
    if cls == "diagnostic" and pipeline == "default":
        assert r.located

"""The mutation fuzzer of `fuserc opt` (tools/fuzz.py): a small fixed
budget in CI through `default` and `autodiff,default`, where any traceback
or timeout fails the build, checks that its classification sees each kind
of result, and that each class of mutation it makes is refused by name."""

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


PIPELINES = ("default", "autodiff,default")


def test_fuzz_budget() -> None:
    """300 mutants of the examples, lit inputs and generated programs through
    `fuserc opt -p default` and `-p autodiff,default`: every one ends in IR
    or a diagnostic."""
    pipelines = [w for p in PIPELINES for w in ("--pipeline", p)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fuzz.py"), "--mutants", str(CI_MUTANTS), "--seed", "0", "--jobs", "2", "--timeout", "30", *pipelines],
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"fuzzed {CI_MUTANTS} mutants through 2 pipelines" in proc.stdout


def test_mutants_are_reproducible() -> None:
    seeds = fuzz.corpus()
    assert len(seeds) > 50 + fuzz.GENERATED  # examples, the chunks of the lit inputs, generated programs
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
    from fuserc import pipeline as pl

    pl.build("default")  # passes imported before the clock runs, as the fuzzer's workers do
    r = fuzz.run_one(0, text, pipeline, 1.0, tmp_path)
    assert r.cls == cls, r
    if cls == "traceback":
        # where: the innermost frame of fuserc's own code
        assert r.detail == "ZeroDivisionError: an internal error" and r.where.startswith("fuserc/pipeline.py:")
    if cls == "diagnostic" and pipeline == "default":
        assert r.located


HOST = """fusion.mesh @tp shape = [2]
func.func @main(%a: tensor<8x4xf32> {hir.global = tensor<16x4xf32, #fusion.sharding<@tp, [DIDx, -]>>}, %w: tensor<4x4xf32> {hir.global = tensor<4x4xf32, #fusion.sharding<@tp, [-, -]>>}) -> (tensor<16x4xf32> {hir.global = tensor<16x4xf32, #fusion.sharding<@tp, [-, -]>>}) attributes {hir.host} {
  %g = hir.alloc "main/0/g" : tensor<16x4xf32>
  %t = hir.allgather %a, %g team = [0, 1] backend = nccl : (tensor<8x4xf32>, tensor<16x4xf32>) -> !hir.token
  hir.wait %t : !hir.token
  %y = hir.alloc "main/1/y" : tensor<16x4xf32>
  hir.matmul %g, %w, %y : tensor<16x4xf32>, tensor<4x4xf32>, tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}
"""


@pytest.mark.parametrize(
    "mutation, seed, error",
    [
        (fuzz._unicode_digit, PROGRAM, "digit that is not 0-9"),
        (fuzz._zero_chunks, HOST, "hir.stream = [0, "),
        (fuzz._host_ir_outside_host, HOST, "is host IR in @main, which is not a host program"),
        (fuzz._host_ir_outside_host, PROGRAM, "is host IR in @main, which is not a host program"),
        (fuzz._second_block, PROGRAM, "has 2 blocks; a function is one block"),
        (fuzz._huge_integer, PROGRAM, "integer literal of 5000 characters"),
    ],
    ids=["unicode-digit", "zero-chunks", "unmarked-host", "hir-in-fusion", "two-blocks", "huge-integer"],
)
def test_each_mutation_class_is_a_located_diagnostic(mutation, seed: str, error: str, tmp_path: Path) -> None:
    """Mutants of each class the fuzzer added for the reliability pass (they
    were tracebacks: a ValueError of the lexer, a division by zero in
    stream-pipeline, a KeyError in propagate-shardings, xDSL's ValueError in
    autodiff) are located diagnostics through both pipelines."""
    import random

    rng = random.Random(0)
    for _ in range(40):
        text = mutation(seed, rng, [seed])
        results = [fuzz.run_one(0, text, p, 60.0, tmp_path) for p in PIPELINES]
        details = [r.detail for r in results]
        if any(error in d for d in details):
            assert all(r.cls == "diagnostic" and r.located for r in results), results
            return
    pytest.fail(f"no mutant of {mutation.__name__} gave '{error}'")


def test_special_files_are_read_written_or_refused(tmp_path: Path) -> None:
    """Each way of giving `fuserc opt` a file that is not a regular one ends
    in one line (a named pipe nobody writes too); a pipe with a writer is
    read, and `-o` onto the input replaces it."""
    results = {fuzz.SPECIAL_FILES[i]: fuzz.run_special(i, PROGRAM, 60.0, tmp_path) for i in range(len(fuzz.SPECIAL_FILES))}
    assert all(r.cls in ("ok", "diagnostic") for r in results.values()), results
    assert results["fifo with a writer"].cls == "ok" and results["output onto the input"].cls == "ok"
    assert "nothing was written to it for 0.5 s" in results["fifo without a writer"].detail
    assert "No space left on device" in results["output to a full device"].detail


def test_runtime_classes() -> None:
    """Each attack on the kernel cache once (by a second uid when the tests
    run as root: a planted folder, key or entry, a folder others can write,
    an unsigned entry, special files as entries and locks) and one job whose
    launcher is killed: nothing planted runs, no traceback, no hang, no rank
    left running."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fuzz.py"), "--cache-attacks", str(len(fuzz.ATTACKS)), "--launcher-kills", "1", "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"cache attacks: {len(fuzz.ATTACKS)} " in proc.stdout and f"refused {len(fuzz.ATTACKS)}," in proc.stdout
    assert "launcher kills: 1; ended 1, orphaned 0" in proc.stdout

"""What a user sees of a job under `mpiexec`: a program read from standard
input and shared with every rank, one copy of each diagnostic (and no MPI
abort banner after it), notes on the backend and on idle ranks, a summary
of what ran, and the watchdog ending a job whose rank does not arrive."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import BACKEND, mpirun, ok

PROGRAM = """\
fusion.mesh @tp shape = [2]
func.func @main(%x: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.relu %x : (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>>
}
"""
BANNERS = ("Abort(", "BAD TERMINATION", "Traceback")


def _clean(stderr: str) -> None:
    for banner in BANNERS:
        assert banner not in stderr, stderr


def test_program_from_stdin_with_an_idle_rank(tmp_path: Path) -> None:
    """`cat prog | mpiexec -n 3 fuserc run -`: rank 0 reads standard input
    and shares it (the others never read it, so nothing waits for it); the
    program needs 2 ranks, so rank 2 gets a note; the run says what ran."""
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    proc = ok(mpirun(3, ["-", "--backend", "cpu", "-i", tmp_path / "x.npy", "--check", "--save-outputs", out], stdin=PROGRAM))
    np.testing.assert_array_equal(np.load(out / "out0.npy"), np.maximum(x, 0))
    assert "output 0: max rel error 0.000e+00 <= 1e-04 (f32 tolerance): ok" in proc.stdout
    assert f"ran @main of <stdin> on 3 ranks (backend {BACKEND}): 1 result" in proc.stdout
    assert f"saved as {out / 'out0.npy'}" in proc.stdout
    assert proc.stderr.count("note: the program uses 2 of the job's 3 ranks; rank 2 has nothing to do") == 1
    assert "note: running on the cpu backend" not in proc.stderr  # cpu was asked for


def test_one_diagnostic_per_job() -> None:
    """A bad program (from standard input) fails identically on every rank:
    one copy of the located diagnostic, exit 1, no MPI abort banner; auto
    falling back to the cpu backend is noted once."""
    proc = mpirun(3, ["-", "--backend", "auto"], stdin=PROGRAM.replace("fusion.relu", "fusion.relux"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert "<stdin>:3:8: error: unknown op 'fusion.relux' (did you mean 'fusion.relu'?)" in proc.stderr
    _clean(proc.stderr + proc.stdout)
    if not torch.cuda.is_available():
        assert proc.stderr.count("note: running on the cpu backend") <= 1


def test_usage_error_once(tmp_path: Path) -> None:
    (tmp_path / "p.mlir").write_text(PROGRAM)
    proc = mpirun(2, [tmp_path / "p.mlir", "--warmup", "2"])
    assert proc.returncode == 2
    assert proc.stderr.count("Error: --warmup needs --iters") == 1, proc.stderr
    _clean(proc.stderr + proc.stdout)


def test_bad_input_file_once(tmp_path: Path) -> None:
    """A truncated .npy: checked against its header before any allocation;
    one line naming the argument and the file, from one rank."""
    (tmp_path / "p.mlir").write_text(PROGRAM)
    np.save(tmp_path / "x.npy", np.zeros((8, 4), np.float32))
    (tmp_path / "x.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:-8])
    proc = mpirun(2, [tmp_path / "p.mlir", "--backend", "cpu", "-i", tmp_path / "x.npy"])
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("note:")]
    assert lines == [
        f"error: argument #0 (%x) ({tmp_path / 'x.npy'}): the file is truncated: its header announces "
        "128 bytes of data (float32 [8, 4]), the file holds 120"
    ], proc.stderr
    _clean(proc.stderr + proc.stdout)


@pytest.mark.parametrize("fault, reason", [
    ("hang", "rank 1 did not arrive: not at allgather on team [0, 1] #1 of run 1 of @main, where rank 0 is"),
    ("stop", "rank 1 did not arrive: no heartbeat for"),
])  # fmt: skip
def test_watchdog_names_the_rank_that_does_not_arrive(fault: str, reason: str, tmp_path: Path) -> None:
    """Rank 1 never reaches the run's first collective (it sleeps, or is
    stopped with SIGSTOP): the job ends once the watchdog's 3 s are over,
    with one message naming rank 1 and where the others wait."""
    (tmp_path / "p.mlir").write_text(PROGRAM)
    start = time.monotonic()
    proc = mpirun(2, [tmp_path / "p.mlir", "--backend", "cpu", "--watchdog", "3"], env={"FUSERC_FAULT": f"1:{fault}"}, timeout=80)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    assert elapsed < 75  # the watchdog ended it, not the harness's timeout
    assert proc.stderr.count("error: watchdog: run 1 of @main did not complete within 3 s") == 1, proc.stderr
    assert reason in proc.stderr, proc.stderr
    _clean(proc.stderr + proc.stdout)


def test_program_from_a_pipe_nobody_writes(tmp_path: Path) -> None:
    """A named pipe as the program is read by rank 0 alone inside the
    watchdog (an input file that is one is refused at once:
    test_evaluator_io.py, test_torchrun.py): nobody writes it, the watchdog
    ends the job naming rank 0."""
    os.mkfifo(tmp_path / "p.fifo")
    proc = mpirun(2, [tmp_path / "p.fifo", "--backend", "cpu", "--watchdog", "3"], timeout=80)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: watchdog: reading the program from {tmp_path / 'p.fifo'} (a named pipe) did not complete within 3 s"), proc.stderr
    assert "  rank 0 did not arrive: it does this step alone and has not finished it\n  rank 1 waits for it" in proc.stderr
    _clean(proc.stderr + proc.stdout)

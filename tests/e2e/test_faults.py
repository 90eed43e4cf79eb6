"""tools/faults.py under both launchers, on 2 ranks with a short watchdog:
a rank that exits or crashes is named by fuserc's own line with how it
ended, never blamed on a survivor (under torchrun, and under MPICH's
mpiexec -disable-auto-cleanup); a stopped rank ends the job within the
watchdog's time plus 5 s under either launcher (torchrun cannot end a
stopped process itself: the watchdog does)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import MPI_ENV

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
import faults  # noqa: E402 - tools/ is not a package

CASES = [
    ("torchrun", "external-stop"),
    ("torchrun", "exit"),
    ("torchrun", "segv"),
    ("mpiexec", "external-stop"),
    ("mpiexec-keep", "exit"),
]
"""A rank killed (SIGKILL) takes the same path as one that exits or crashes
(tests/unit/test_watchdog.py has it with a real process). Plain mpiexec
(MPICH's Hydra) kills the other ranks before they can say anything when one
exits; with -disable-auto-cleanup fuserc names it."""


@pytest.mark.parametrize("launcher, kind", CASES, ids=[f"{launcher}-{kind}" for launcher, kind in CASES])
def test_fault(launcher: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in MPI_ENV.items():
        monkeypatch.setenv(k, v)
    args = faults.options(["-n", "2", "--watchdog", "3"])
    if launcher.startswith("mpiexec") and args.mpiexec is None:
        pytest.skip("mpiexec is not installed")
    outcome = faults.scenario(kind, launcher, args)
    assert outcome.ok, f"{outcome.problems}: {outcome.seconds:.1f} s, exit {outcome.code}\n" + "\n".join(outcome.lines)
    assert outcome.named
    assert not any("internal error" in line for line in outcome.lines), outcome.lines

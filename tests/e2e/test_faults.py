"""tools/faults.py under both launchers, on 2 ranks with a short watchdog:
a rank that exits, crashes or is killed is named by fuserc's own line with
how it ended, never blamed on a survivor (under torchrun, and under MPICH's
mpiexec, whose cleanup kills the other ranks at once: the node's sentinel
says it); a stopped rank ends the job within the watchdog's time plus 5 s
under either launcher (torchrun cannot end a stopped process itself: the
watchdog does); a launcher killed (SIGKILL) leaves no rank running."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness import MPI_ENV, mpirun_python

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
import faults  # noqa: E402 - tools/ is not a package

CASES = [
    ("torchrun", "external-stop"),
    ("torchrun", "exit"),
    ("torchrun", "segv"),
    ("torchrun", "launcher-kill"),
    ("mpiexec", "external-stop"),
    ("mpiexec", "kill"),
    ("mpiexec", "launcher-kill"),
    ("mpiexec-keep", "exit"),
]
"""A rank killed (SIGKILL) takes the same path as one that exits or crashes
under torchrun (tests/unit/test_watchdog.py has it with a real process).
Plain mpiexec (MPICH's Hydra) kills the other ranks before they can say
anything when one ends: the node's sentinel names it."""


@pytest.mark.parametrize("launcher, kind", CASES, ids=[f"{launcher}-{kind}" for launcher, kind in CASES])
def test_fault(launcher: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in MPI_ENV.items():
        monkeypatch.setenv(k, v)
    args = faults.options(["-n", "2", "--watchdog", "3"])
    if launcher.startswith("mpiexec") and args.mpiexec is None:
        pytest.skip("mpiexec is not installed")
    outcome = faults.scenario(kind, launcher, args)
    assert outcome.ok, f"{outcome.problems}: {outcome.seconds:.1f} s, exit {outcome.code}\n" + "\n".join(outcome.lines)
    assert outcome.named or kind in faults.UNNAMED.get(launcher, ())
    assert not any("internal error" in line for line in outcome.lines), outcome.lines


HEARTBEAT = """\
import sys, threading, time
from fuserc.runtime.job.mpi_env import mpi_env
env = mpi_env()
beats = []
def beat():
    while True:
        beats.append(time.monotonic())
        time.sleep(0.05)
threading.Thread(target=beat, daemon=True).start()
time.sleep(0.3)
if env.rank == 0:
    time.sleep(2.0)  # the others wait for it in the reductions
start = time.monotonic()
total = env.comm.allreduce(env.rank + 1, op=env.reduce_op("sum"))
least = env.node_comm.allreduce(env.rank, op=env.reduce_op("min"))
times = [*beats, time.monotonic()]
gap = max(b - a for a, b in zip(times, times[1:]) if b > start)
print(f"rank {env.rank}: {total} {least} gap {gap:.2f}", flush=True)
"""


def test_waiting_in_a_reduction_keeps_the_heartbeat(tmp_path: Path) -> None:
    """A rank waiting in the job's object allreduce (the timing of runs,
    the node's leader) lets its watchdog's thread run: mpi4py's own holds
    Python's lock while it waits, so the watchdog would take a rank waiting
    for a stopped one for stopped too, and name it."""
    script = tmp_path / "heartbeat.py"
    script.write_text(HEARTBEAT)
    proc = mpirun_python(2, script, [])
    assert proc.returncode == 0, proc.stderr
    # searched, not matched by line: the two ranks' lines may be interleaved in mpiexec's stdout
    got = re.search(r"rank 1: (\d+) (\d+) gap (\d+\.\d+)", proc.stdout)
    assert got is not None, proc.stdout + proc.stderr[-2000:]
    assert got.group(1, 2) == ("3", "0"), proc.stdout
    assert float(got.group(3)) < 1.0, proc.stdout

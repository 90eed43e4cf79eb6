"""Where the time to a first result goes (runtime/job/startup.py): the report's
phases, the job's figures from every rank's, and
`fuserc.torch.function(..., time=True)` on its first call and backward.
`fuserc run --time` is in tests/e2e/test_run.py."""

from __future__ import annotations

import os
import re

import pytest
import torch

from fuserc.runtime.job.startup import PHASES, KernelCounts, Startup, combined, process_age


def test_the_report_and_the_jobs_figures() -> None:
    a, b = Startup(), Startup()
    for i, phase in enumerate(PHASES):
        a.add(phase, 0.5 * i)
        b.add(phase, 1.0 if phase == "passes" else 0.1)
    a.kernels, b.kernels = KernelCounts(loaded=3, built=1), KernelCounts(waited=1, built=3)
    job = combined([a, b])
    assert job.seconds["passes"] == 1.0 and job.seconds["kernels"] == 2.0
    assert (job.kernels.loaded, job.kernels.built, job.kernels.waited) == (3, 4, 1)
    text = job.report("startup of @main", ranks=2)
    assert text.startswith("startup of @main (slowest of 2 ranks per phase):\n")
    assert "  kernels            2.000 s  8 kernels: 3 from the cache, 4 built, 1 built by another process over the ranks" in text
    first = sum(job.seconds[p] for p in PHASES if p != "steady run")
    assert f"  to first result {first:8.3f} s\n" in text
    assert Startup().report() == "startup:\n  to first result    0.000 s\n"
    age = process_age()
    assert age is None or 0 < age < 1e6


def test_function_reports_its_first_call(capsys: pytest.CaptureFixture[str]) -> None:
    import fuserc.torch
    from fuserc.api import FusionDefinition

    fd = FusionDefinition()
    x = fd.define_tensor([8, 16])
    w = fd.define_tensor([16, 4])
    fd.add_output(fd.ops.sum(fd.ops.tanh(x @ w), dims=[0, 1]))
    f = fuserc.torch.function(fd, backend="cpu", time=True)
    xt, wt = torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    f(xt, wt).backward()
    err = capsys.readouterr().err
    assert "fuserc.torch.function: startup to the first run of @main_fwd:" in err
    assert "fuserc.torch.function: startup to the first run of @main_bwd:" in err
    for phase in ("passes", "backend", "communicators", "kernels", "first run"):
        assert re.search(rf"^  {phase} +\d+\.\d{{3}} s", err, re.M), phase
        assert phase in f.startup.seconds
    f(xt, wt)
    assert "startup" not in capsys.readouterr().err  # once
    assert wt.grad is not None


QUICK_EXIT_SCRIPT = """
import atexit, os, sys, threading, time
from mpi4py import MPI
from fuserc.runtime.job import mpi_env
from fuserc.runtime.job.mpi_env import quick_exit
real_end = mpi_env._end_process
def end(code, c_exit):  # what quick_exit left done when the process ends
    sys.__stderr__.write(f"finalized={MPI.Is_finalized()} worker_done={done}\\n"); sys.__stderr__.flush()
    real_end(code, c_exit)
mpi_env._end_process = end
done = []
threading.Thread(target=lambda: (time.sleep(0.3), done.append(1))).start()
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(2)  # its idle workers stop when told to (threading's exit hooks)
assert pool.submit(lambda: 1).result() == 1
atexit.register(lambda: print("atexit ran"))
print("buffered", end=" ")
quick_exit(3)
"""


def test_quick_exit_keeps_what_a_normal_exit_does(tmp_path) -> None:
    """The `fuserc` command ends with `quick_exit`: buffered output still
    comes out, atexit handlers and non-daemon threads still finish, MPI is
    finalized (Open MPI's launcher reports a rank that exits without it),
    and the code is the process's."""
    import subprocess
    import sys

    pytest.importorskip("mpi4py")
    script = tmp_path / "quick.py"
    script.write_text(QUICK_EXIT_SCRIPT)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    assert p.stdout == "buffered atexit ran\n"
    assert "finalized=True worker_done=[1]" in p.stderr


RANKS_EXIT_SCRIPT = """
from mpi4py import MPI
from fuserc.runtime.job.mpi_env import quick_exit
MPI.COMM_WORLD.Barrier()
quick_exit(0)
"""


def test_ranks_that_end_with_quick_exit_end_the_job_cleanly(tmp_path) -> None:
    """Four ranks under mpiexec ending with `quick_exit` end the job with
    code 0, every time: under MPICH, ranks that ended with `_exit` right
    after MPI_Finalize had Hydra kill the others (exit 9, nothing said)
    about one job in three, as e2e tests of 4 ranks saw in CI."""
    import subprocess
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from harness import MPI_ENV, MPIEXEC

    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_EXIT_SCRIPT)
    env = {**os.environ, **MPI_ENV}
    codes = [
        subprocess.run(["timeout", "-k", "5", "60", MPIEXEC, "-n", "4", sys.executable, str(script)], capture_output=True, text=True, env=env).returncode
        for _ in range(8)
    ]
    assert codes == [0] * 8


def test_the_command_ends_quickly_with_its_results_and_code() -> None:
    """`python -m fuserc` (the console script's `entry`): results on a
    pipe, exit codes 0 and 1, the diagnostic intact."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "gpt_layer.mlir"
    ok = subprocess.run(
        [sys.executable, "-m", "fuserc", "run", str(example), "--mesh", "tp=1", "--backend", "cpu", "--check"],
        capture_output=True, text=True, timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    assert "output 0: max rel error" in ok.stdout and ok.stdout.rstrip().endswith(".npy")
    bad = subprocess.run([sys.executable, "-m", "fuserc", "run", str(example), "--backend", "cpu"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1
    assert "error: the program needs 4 ranks" in bad.stderr and "Traceback" not in bad.stderr


def test_quick_exit_ends_a_process_whose_exit_steps_never_return(tmp_path) -> None:
    """An atexit handler (or MPI_Finalize waiting for a peer) that never
    returns does not keep the process: it ends after the grace, with its
    code and a line that says at which step, with every thread's stack."""
    import subprocess
    import sys

    script = tmp_path / "stuck.py"
    script.write_text(
        "import atexit, threading\n"
        "from fuserc.runtime.job import mpi_env\n"
        "mpi_env.EXIT_GRACE_S = 1.0\n"
        "def stuck_handler():\n"
        "    threading.Event().wait()\n"
        "atexit.register(stuck_handler)\n"
        "mpi_env.quick_exit(4)\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 4
    assert "exit steps took over 1 s (stuck in atexit handlers); it ends now" in p.stderr
    assert "stuck_handler" in p.stderr  # where the main thread waited

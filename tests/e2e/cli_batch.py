"""Many `fuserc run` command lines (or Python scripts) run one after
another in ONE job:

    mpiexec -n N python tests/e2e/cli_batch.py RUNS.json

(`mpirun_many` writes RUNS.json, starts such jobs and reads what they
leave; a test marked `@launches(spec)` gets its runs from the `ran`
fixture, tests/e2e/conftest.py.) RUNS.json is a list of `{"dir": ...,
"argv": [...], "env": {...}, "timeout": S}`, with `"script": PATH` for a
script. For each run every rank calls the `fuserc` command itself
(fuserc.cli.main, as `python -m fuserc ARGV` does) or runs the script as
`__main__` with ARGV, with `env` added to its environment for that run, and
its file descriptors 1 and 2 sent to DIR/rank<r>.out and DIR/rank<r>.err;
its exit status then goes to DIR/rank<r>.code. So a test reads each run as
if `mpiexec -n N fuserc run ...` (or `mpiexec -n N python SCRIPT ...`) had
run alone, and the job pays the start-up of MPI, Python and torch once.

A run that ends the job (a failure while running aborts every rank) or
hangs past its timeout (faulthandler ends the rank, the launcher the job)
leaves no .code files: the driver reports it from what it wrote and runs
the ones after it in another job.
"""

from __future__ import annotations

import faulthandler
import json
import os
import runpy
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------
# The driver's side: launching jobs and reading what their runs left
# --------------------------------------------------------------------------

PER_RUN_ENV = ("FUSERC_LINKS",)
"""Variables read afresh at every compile (passes/cost_model.load_machine),
so runs of one launch may differ in them. Runs differing in any other
variable go to different launches: a job keeps what it read of them
(MpiEnv.nodes keeps $FUSERC_GPUS_PER_NODE's grouping, say)."""

RUN_TIMEOUT_S = 90
"""A run longer than this ends its job (harness.TIMEOUT_S, a launch's)."""


@dataclass(frozen=True)
class CliRun:
    """`mpiexec -n N fuserc run ARGS` (with `script`: `mpiexec -n N python
    SCRIPT ARGS`) with `env` added, to be run by `mpirun_many` among others."""

    n: int
    args: Sequence[object]
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = RUN_TIMEOUT_S
    script: Path | None = None

    def command(self) -> list[str]:
        """The command line it stands for."""
        from harness import with_backend

        head = ["fuserc", "run"] if self.script is None else ["python", str(self.script)]
        return ["mpiexec", "-n", str(self.n), *head, *with_backend(self.args)]


@dataclass
class Ran:
    """What a test's runs left: each one's process by name (`proc` when it
    has one run) and the directory its files went to."""

    dir: Path
    procs: dict[str, subprocess.CompletedProcess[str]]

    @property
    def proc(self) -> subprocess.CompletedProcess[str]:
        (only,) = self.procs.values()
        return only


def launches(spec: Callable[..., CliRun | dict[str, CliRun]]) -> Callable[[Any], Any]:
    """Marks a test whose runs are `spec(directory, **its parameters)` (one
    CliRun, or several by name): the `ran` fixture gives their outcome, run
    with those of every other selected test of the module in shared
    launches (`mpirun_many`)."""

    def mark(test: Any) -> Any:
        test.cli_runs = spec
        return test

    return mark


def mpirun_many(runs: dict[Any, CliRun], directory: Path) -> dict[Any, subprocess.CompletedProcess[str]]:
    """Each run as `harness.mpirun` (or `mpirun_python`, for a script)
    returns it: every rank's output, rank by rank, and the highest exit
    status of the ranks. One launch runs all the runs of one job size and
    launch environment, so that MPI, Python and torch start once for them.
    A run that ends its launch (a crash, a hang) gets the launch's exit
    status and output as well as its own; the runs after it go on in a
    new launch."""
    import pytest
    from harness import MPIEXEC

    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    groups: dict[tuple[int, tuple[tuple[str, str], ...]], list[Any]] = {}
    for key, run in runs.items():
        shared = tuple(sorted((k, v) for k, v in run.env.items() if k not in PER_RUN_ENV))
        groups.setdefault((run.n, shared), []).append(key)
    dirs = {key: directory / f"run{i}" for i, key in enumerate(runs)}
    results: dict[Any, subprocess.CompletedProcess[str]] = {}
    for (n, shared), keys in groups.items():
        while keys:
            keys = _launch(n, dict(shared), {k: runs[k] for k in keys}, dirs, directory, results)
    return results


def _read(d: Path, n: int) -> tuple[list[int | None], str, str]:
    """(each rank's exit status or None, the ranks' stdout, their stderr)."""

    def text(name: str) -> str:
        path = d / name
        return path.read_text(errors="replace") if path.exists() else ""

    codes = [int(text(f"rank{r}.code")) if (d / f"rank{r}.code").exists() else None for r in range(n)]
    return codes, "".join(text(f"rank{r}.out") for r in range(n)), "".join(text(f"rank{r}.err") for r in range(n))


def _launch(
    n: int, shared: dict[str, str], runs: dict[Any, CliRun], dirs: dict[Any, Path], directory: Path,
    results: dict[Any, subprocess.CompletedProcess[str]],
) -> list[Any]:
    """One job of `runs` (in order) on n ranks; their results into
    `results`. Returns the keys of the runs left for another job."""
    import shutil

    from harness import MPI_ENV, MPIEXEC, with_backend

    listing = []
    for key, run in runs.items():
        d = dirs[key]
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("rank*"):
            old.unlink()
        entry: dict[str, Any] = {"dir": str(d), "env": {k: v for k, v in run.env.items() if k in PER_RUN_ENV}, "timeout": run.timeout}
        if run.script is None:
            entry["argv"] = ["run", *with_backend(run.args)]
        else:
            entry.update(argv=with_backend(run.args), script=str(run.script))
        listing.append(entry)
    spec = directory / f"runs-{len(list(directory.glob('runs-*.json')))}.json"
    spec.write_text(json.dumps(listing))
    total = sum(run.timeout for run in runs.values()) + 30
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, str(Path(__file__)), str(spec)]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "5", str(total), *cmd]
    job = subprocess.run(
        cmd, check=False, capture_output=True, text=True, env={**os.environ, **MPI_ENV, **shared}, stdin=subprocess.DEVNULL,
        timeout=total + 15,
    )
    keys = list(runs)
    for i, key in enumerate(keys):
        codes, out, err = _read(dirs[key], n)
        if None not in codes:
            results[key] = subprocess.CompletedProcess(runs[key].command(), max(c or 0 for c in codes), out, err)
            continue
        why = f"\n--- this run ended its launch (exit {job.returncode}); the launch's output:\n"
        results[key] = subprocess.CompletedProcess(runs[key].command(), job.returncode or 1, out + why + job.stdout, err + why + job.stderr)
        return keys[i + 1 :]
    return []


# --------------------------------------------------------------------------
# The job's side (under mpiexec)
# --------------------------------------------------------------------------


def call(argv: list[str], script: str | None) -> None:
    """`fuserc ARGV`, or `python SCRIPT ARGV`, in this process."""
    if script is None:
        from fuserc.cli import main

        main(argv, prog_name="python -m fuserc")
        return
    saved = sys.argv, sys.path[:]
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).parent))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved


def run_one(argv: list[str], script: str | None, env: dict[str, str], timeout: float, out: Path, err: Path) -> int:
    """One run in this process, its output in `out` and `err`."""
    before = {k: os.environ.get(k) for k in env}
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "w") as o, open(err, "w") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
    os.environ.update(env)
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        call(argv, script)
        code = 0
    except SystemExit as e:
        from fuserc.cli import exit_status

        code = exit_status(e)
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a process
        traceback.print_exc()
        code = 1
    finally:
        faulthandler.cancel_dump_traceback_later()
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code


def main() -> int:
    from fuserc.runtime.job.job import launcher_rank

    rank = launcher_rank() or 0
    for run in json.loads(Path(sys.argv[1]).read_text()):
        d = Path(run["dir"])
        code = run_one(run["argv"], run.get("script"), run["env"], run["timeout"], d / f"rank{rank}.out", d / f"rank{rank}.err")
        (d / f"rank{rank}.code").write_text(str(code))
    return 0


if __name__ == "__main__":
    sys.exit(main())

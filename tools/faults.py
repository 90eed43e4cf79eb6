#!/usr/bin/env python
"""Fault injection: how `fuserc run` ends when one rank fails.

    python tools/faults.py [-n 4] [--watchdog 10] [--program FILE] [--rank 1]

Runs the program under `mpiexec -n N fuserc run` once per way a rank can
fail (raises, exits, segfaults, is killed, is stopped with SIGSTOP from
outside, never reaches a collective) and prints, for each, the time from
the failure to the end of the job, the exit code and what the user saw.
The failures come from `$FUSERC_FAULT` (runtime/watchdog.py), at the
rank's first communication, except the external SIGSTOP, sent by this
script to the rank's process once the run has started.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "HYDRA_LAUNCHER": "fork",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}
SCENARIOS = [
    ("rank raises", "raise"),
    ("rank exits (code 3)", "exit"),
    ("rank segfaults", "segv"),
    ("rank killed (SIGKILL)", "kill"),
    ("rank stopped (SIGSTOP, from outside)", "external-stop"),
    ("rank stops itself (SIGSTOP)", "stop"),
    ("rank never reaches a collective", "hang"),
]


def _pid_of_rank(marker: str, rank: int) -> int | None:
    """The process of `rank` in the job whose environment holds `marker`."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"FAULTS_MARK={marker}".encode() in env and f"PMI_RANK={rank}".encode() in env:
            return int(d.name)
    return None


def scenario(kind: str, args: argparse.Namespace, mpiexec: str) -> tuple[float, int, str]:
    """(seconds from the failure to the job's end, exit code, stderr)."""
    marker = uuid.uuid4().hex
    env = {**os.environ, **MPI_ENV, "FAULTS_MARK": marker}
    if kind != "external-stop":
        env["FUSERC_FAULT"] = f"{args.rank}:{kind}"
    cmd = [mpiexec, "-n", str(args.n), sys.executable, "-m", "fuserc", "run", str(args.program),
           "--backend", "cpu", "--watchdog", str(args.watchdog), "--iters", "1000", "--warmup", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    struck = None
    if kind == "external-stop":  # once the ranks run (a record on the job's board says so), stop one
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            pid = _pid_of_rank(marker, args.rank)
            records = list(Path(tempfile.gettempdir()).glob(f"fuserc-job-*/rank{args.rank}.json"))
            if pid and any(_running(r, pid) for r in records):
                os.kill(pid, signal.SIGSTOP)
                struck = time.time()
                break
            time.sleep(0.05)
    try:
        out, err = proc.communicate(timeout=args.watchdog * 3 + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return float("inf"), -1, err + "\n(killed by this script: the job did not end)"
    launcher = [line.strip() for line in out.splitlines() if "EXIT STRING" in line or "EXIT CODE" in line]
    err += "".join(f"\n(mpiexec) {line}" for line in launcher)
    end = time.time()
    m = re.search(r"FUSERC_FAULT: \w+ before .* \(at (\d+\.\d+)\)", err)
    if m:
        struck = float(m.group(1))
    return (end - struck) if struck else float("nan"), proc.returncode, err


def _running(record: Path, pid: int) -> bool:
    """Whether the board's record is of process `pid`, in a run."""
    try:
        text = record.read_text()
    except OSError:
        return False
    return f'"pid": {pid},' in text and '"label": "run' in text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--rank", type=int, default=1, help="the failing rank (default 1)")
    p.add_argument("--watchdog", type=float, default=10.0, help="the watchdog's time (default 10 s)")
    p.add_argument("--program", type=Path, default=ROOT / "examples" / "sp_mlp.mlir")
    args = p.parse_args(argv)
    mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
    if mpiexec is None:
        print("error: mpiexec is not installed", file=sys.stderr)
        return 1
    print(f"{'scenario':<40}{'ends after':>12}{'exit':>6}  message")
    for name, kind in SCENARIOS:
        seconds, code, err = scenario(kind, args, mpiexec)
        lines = [line for line in err.strip().splitlines() if not line.startswith(("note:", "FUSERC_FAULT:"))]
        shown = " | ".join(lines)[:300]
        print(f"{name:<40}{seconds:>11.1f}s{code:>6}  {shown}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

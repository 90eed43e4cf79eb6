#!/usr/bin/env python
"""Fault injection: how `fuserc run` ends when one rank fails, under each launcher.

    python tools/faults.py [--launcher mpiexec|mpiexec-keep|torchrun|both|all] [-n 4]
        [--watchdog 10] [--rank 1] [--kinds exit,segv,...] [--repeat K] [--program FILE]
        [--backend cpu|cuda]

Runs the program (by default examples/sp_mlp.mlir on a mesh of N) under
`mpiexec -n N fuserc run` and `torchrun --nproc-per-node N -m fuserc run`
(and MPICH's `mpiexec -disable-auto-cleanup`, with `--launcher all`) once
per way a rank can fail (raises, exits, segfaults, is killed, is
stopped with SIGSTOP from outside or stops itself, never reaches a
collective), and with its launcher killed (SIGKILL) once the ranks run,
and prints, for each, the time from the failure to the end of
the job, the exit code, whether fuserc's own line named the failing rank,
and what the user saw (fuserc's lines; the launcher's report after them is
left out). The failures come from `$FUSERC_FAULT` (runtime/job/watchdog.py), at
the rank's first communication, except the external SIGSTOP, sent by this
script to the rank's process once its run has started.

Each outcome is checked (exit 1 when one fails its check): the job ends
(its last rank's process is gone; torchrun takes one to a few seconds more
to print its report and exit) within the watchdog's time plus 5 s of the
fault, and fuserc says why within 5 s of a rank's end; the exit code is
not 0; fuserc's line names the
failing rank (and how it ended) and blames no other (under MPICH's Hydra,
which kills the other ranks at once, the node's sentinel says it); with the
launcher killed, no rank outlives it by more than that time (MPICH's proxy
kills its ranks before they can say anything: fuserc's line is asked for
under torchrun only; docs/runtime.md, Failure handling).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from fuserc.runtime.job.peers import alive

ROOT = Path(__file__).resolve().parents[1]
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "HYDRA_LAUNCHER": "fork",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}
SCENARIOS = {
    "raise": "rank raises",
    "exit": "rank exits (code 3)",
    "segv": "rank segfaults",
    "kill": "rank killed (SIGKILL)",
    "external-stop": "rank stopped (SIGSTOP, from outside)",
    "stop": "rank stops itself (SIGSTOP)",
    "hang": "rank never reaches a collective",
    "launcher-kill": "launcher killed (SIGKILL)",
}
EXTERNAL = ("external-stop", "launcher-kill")
"""Faults this script makes from outside, once the rank runs."""
ENDS = ("raise", "exit", "segv", "kill")
"""Faults where the rank's process ends: fuserc says why within SLACK_S."""
SLACK_S = 5.0
HOW = {"exit": "exit code 3", "segv": "SIGSEGV", "kill": "SIGKILL"}
"""What fuserc's line says of how the rank ended."""
UNNAMED = {"mpiexec": ("launcher-kill",), "mpiexec-keep": ("launcher-kill",)}
"""Faults fuserc need not name: MPICH's proxy kills the ranks (SIGKILL) as
soon as mpiexec dies, before they can say anything."""
LAUNCHER_LINE = re.compile(r"^([WEIDC]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ |=+$|\s*=|\*+$|YOUR APPLICATION|This typically|Please see the FAQ)")
"""Lines of the launchers' own reports (torch's logging, MPICH's banner)."""


@dataclass
class Outcome:
    """How one job ended, and whether that is as it should be."""

    kind: str
    launcher: str
    said: float  # from the fault to fuserc's first line
    seconds: float  # from the fault to the end of the job (its last rank's end)
    code: int
    lines: list[str]  # what fuserc said
    named: bool  # fuserc's line named the failing rank (and how it ended)
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _ranks_of(marker: str) -> dict[int, int]:
    """rank -> process of the ranks of the job whose environment holds
    `marker` (mpiexec gives a rank PMI_RANK, torchrun RANK)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = dict(e.split(b"=", 1) for e in (d / "environ").read_bytes().split(b"\0") if b"=" in e)
        except OSError:
            continue
        rank = env.get(b"PMI_RANK", env.get(b"RANK"))
        if env.get(b"FAULTS_MARK") == marker.encode() and rank is not None and rank.isdigit():
            found[int(rank)] = int(d.name)
    return found


class _Ranks(threading.Thread):
    """Watches the job's rank processes: when the last one ended (the job's
    end, before the launcher's own report and exit)."""

    def __init__(self, marker: str, n: int, proc: subprocess.Popen[str]):
        super().__init__(daemon=True)
        self.marker, self.n, self.proc = marker, n, proc
        self.pids: dict[int, int] = {}
        self.ended: float | None = None

    def run(self) -> None:
        while self.proc.poll() is None:
            if len(self.pids) < self.n:
                self.pids.update(_ranks_of(self.marker))
            elif not any(alive(pid) for pid in self.pids.values()):
                self.ended = time.time()
                return
            time.sleep(0.05)


def _running(record: Path, pid: int) -> bool:
    """Whether the board's record is of process `pid`, in a run."""
    try:
        text = record.read_text()
    except OSError:
        return False
    return f'"pid": {pid},' in text and '"label": "run' in text


LAUNCHERS = {
    "mpiexec": "mpiexec -n N",
    "mpiexec-keep": "MPICH's mpiexec -disable-auto-cleanup -n N (after a rank's exit the others live on until fuserc ends the job)",
    "torchrun": "torchrun --standalone --nproc-per-node N",
}


def command(launcher: str, args: argparse.Namespace, iters: int = 1000) -> list[str]:
    """`fuserc run` of the program on N ranks under `launcher`, `iters`
    timed runs (a fault from outside needs a job that is still running
    when the rank's record says so: more than a loaded machine finishes
    before the record is read)."""
    if launcher == "torchrun":
        start = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.n), "-m", "fuserc"]
    else:
        keep = ["-disable-auto-cleanup"] if launcher == "mpiexec-keep" else []
        start = [args.mpiexec, *keep, "-n", str(args.n), sys.executable, "-m", "fuserc"]
    mesh = ["--mesh", f"tp={args.n}"] if args.program == DEFAULT_PROGRAM else []
    return [*start, "run", str(args.program), *mesh, "--backend", args.backend, "--watchdog", str(args.watchdog),
            "--iters", str(iters), "--warmup", "0"]  # fmt: skip


def scenario(kind: str, launcher: str, args: argparse.Namespace) -> Outcome:
    """Run one fault under one launcher and judge how the job ended."""
    marker = uuid.uuid4().hex
    env = {**os.environ, **MPI_ENV, "FAULTS_MARK": marker}
    if kind not in EXTERNAL:
        env["FUSERC_FAULT"] = f"{args.rank}:{kind}"
    proc = subprocess.Popen(command(launcher, args, 100_000 if kind in EXTERNAL else 1000), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[tuple[float, str]] = []  # (when, line) of stderr
    reader = threading.Thread(target=lambda: lines.extend((time.time(), line.rstrip("\n")) for line in proc.stderr), daemon=True)
    reader.start()
    ranks = _Ranks(marker, args.n, proc)
    ranks.start()
    struck = None
    if kind in EXTERNAL:  # once the rank runs (its record on the job's board says so), stop it or kill the launcher
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            pid = ranks.pids.get(args.rank)
            records = list(Path(tempfile.gettempdir()).glob(f"fuserc-job-*/rank{args.rank}.json"))
            if pid and any(_running(r, pid) for r in records):
                os.kill(proc.pid if kind == "launcher-kill" else pid, signal.SIGKILL if kind == "launcher-kill" else signal.SIGSTOP)
                struck = time.time()
                break
            time.sleep(0.05)
    limit = args.watchdog * 3 + 120
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(timeout=10)
        return Outcome(kind, launcher, float("inf"), float("inf"), -1, [t for _, t in lines], False, ["the job did not end (killed by this script)"])
    end = time.time()
    if kind == "launcher-kill":  # the launcher is gone at once: the job ends when its ranks do
        pids = list(ranks.pids.values())
        while any(alive(p) for p in pids) and time.time() - end < limit:
            time.sleep(0.02)
        if any(alive(p) for p in pids):
            for p in pids:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            return Outcome(kind, launcher, float("inf"), float("inf"), proc.returncode, [t for _, t in lines], False, ["the ranks outlived their launcher (killed by this script)"])
        end = time.time()
    reader.join(timeout=10)
    ranks.join(timeout=10)
    end = min(end, ranks.ended or end)
    stderr = "\n".join(t for _, t in lines)
    m = re.search(r"FUSERC_FAULT: \w+ before .* \(at (\d+\.\d+)\)", stderr)
    if m:
        struck = float(m.group(1))
    words = fuserc_lines(stderr)
    first = next((when for when, t in lines if words and t == words[0]), float("nan"))
    if struck is None:
        return Outcome(kind, launcher, float("nan"), float("nan"), proc.returncode, words, False, ["the fault did not happen"])
    return judge(kind, launcher, args, first - struck, end - struck, proc.returncode, stderr)


def fuserc_lines(stderr: str) -> list[str]:
    """What fuserc said: stderr without notes, the fault hook's lines and
    the launcher's own report (torchrun's ChildFailedError traceback)."""
    lines, in_report = [], False
    for line in stderr.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            in_report = True  # torchrun's ChildFailedError: to the end of its report
        if in_report or not line.strip() or LAUNCHER_LINE.match(line) or line.startswith(("note:", "FUSERC_FAULT:")):
            continue
        lines.append(line)
    return lines


def judge(kind: str, launcher: str, args: argparse.Namespace, said: float, seconds: float, code: int, stderr: str) -> Outcome:
    """The outcome of one job and what is wrong with it: `said` and
    `seconds` are the times from the fault to fuserc's first line and to
    the end of the job."""
    lines = fuserc_lines(stderr)
    text = "\n".join(lines)
    r = args.rank
    others = [q for q in range(args.n) if q != r]
    if kind == "raise":
        named = f"[rank {r}]" in text and "injected failure" in text
    elif kind == "launcher-kill":
        named = "error: the job's launcher" in text
    elif kind in HOW:
        named = bool(re.search(rf"error: rank {r} ended: .*{HOW[kind]}", text))
    else:
        named = f"rank {r} did not arrive" in text
    problems = []
    limit = args.watchdog + SLACK_S
    if kind in ENDS and lines and not said <= SLACK_S:
        problems.append(f"said why {said:.1f} s after the fault (limit {SLACK_S:g} s)")
    if not seconds <= limit:
        problems.append(f"ended {seconds:.1f} s after the fault (limit {limit:g} s)")
    if code == 0:
        problems.append("exit code 0")
    if not named and not (kind in UNNAMED.get(launcher, ())):
        problems.append(f"rank {r} is not named as it should be")
    blamed = [q for q in others if f"rank {q} did not arrive" in text or f"[rank {q}]" in text or f"rank {q} ended" in text]
    if blamed:
        problems.append(f"innocent rank{'s' if len(blamed) > 1 else ''} {', '.join(map(str, blamed))} named")
    if "Traceback" in text:
        problems.append("a Python traceback from fuserc")
    return Outcome(kind, launcher, said, seconds, code, lines, named, problems)


DEFAULT_PROGRAM = ROOT / "examples" / "sp_mlp.mlir"


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (the tests build theirs with this)."""
    p = parser()
    args = p.parse_args(argv)
    args.mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
    return args


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--launcher", choices=[*LAUNCHERS, "both", "all"], default="both",
        help="; ".join(f"{k}: {v}" for k, v in LAUNCHERS.items()) + "; both: mpiexec and torchrun (default); all: the three",
    )  # fmt: skip
    p.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--rank", type=int, default=1, help="the failing rank (default 1)")
    p.add_argument("--watchdog", type=float, default=10.0, help="the watchdog's time (default 10 s)")
    p.add_argument("--kinds", default=",".join(SCENARIOS), help=f"faults to inject (default all: {','.join(SCENARIOS)})")
    p.add_argument("--repeat", type=int, default=1, help="runs of each fault (default 1)")
    p.add_argument("--program", type=Path, default=DEFAULT_PROGRAM, help="default: examples/sp_mlp.mlir on a mesh of N")
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cpu", help="the backend of the runs (default cpu)")
    return p


def _secs(x: float) -> str:
    return "-" if x != x else f"{x:.1f}s"


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = options(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in SCENARIOS]
    if unknown:
        p.error(f"unknown fault {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    launchers = {"both": ["mpiexec", "torchrun"], "all": list(LAUNCHERS)}.get(args.launcher, [args.launcher])
    if any(launcher.startswith("mpiexec") for launcher in launchers) and args.mpiexec is None:
        print("error: mpiexec is not installed (pip install 'fuserc[mpi]')", file=sys.stderr)
        return 1
    print(f"{'launcher':<13}{'scenario':<38}{'said after':>11}{'ends after':>11}{'exit':>6}{'named':>7}  message")
    failed = 0
    for launcher in launchers:
        for kind in kinds:
            for _ in range(args.repeat):
                o = scenario(kind, launcher, args)
                shown = " | ".join(o.lines)[:300]
                print(f"{launcher:<13}{SCENARIOS[kind]:<38}{_secs(o.said):>11}{_secs(o.seconds):>11}{o.code:>6}{'yes' if o.named else 'no':>7}  {shown}", flush=True)
                for problem in o.problems:
                    print(f"{'':<13}  FAILED: {problem}", flush=True)
                failed += not o.ok
    if failed:
        print(f"{failed} run{'s' if failed > 1 else ''} failed {'their' if failed > 1 else 'its'} check", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

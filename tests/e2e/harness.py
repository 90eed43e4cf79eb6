"""Helpers of the end-to-end tests: `fuserc run` under `mpiexec -n N`.

Programs in programs/*.mlir.in are templates for a team of N ranks: each
`${expr}` is a Python expression of N, LAST (= N - 1) and TEAM (the list
`[0, ..., N-1]`), replaced by its value.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
BACKEND = os.environ.get("FUSERC_TEST_BACKEND", "cpu")
"""The backend the e2e suite runs on: cpu (CI), or cuda on a GPU machine
(`FUSERC_TEST_BACKEND=cuda pytest tests/e2e`). Tests write `--backend cpu`
or `backend="cpu"`; `with_backend` puts this one in its place."""
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpirun")
TORCHRUN = shutil.which("torchrun")
TIMEOUT_S = 90

# Safe defaults for Open MPI and MPICH on a small CI machine: oversubscribe
# cores, allow root in containers, launch locally without ssh, one thread
# per rank so that N ranks share 2 cores without thrashing.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "HYDRA_LAUNCHER": "fork",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}


def too_few_gpus(n: int) -> str | None:
    """Why a job of `n` ranks cannot run on this machine's backend: the
    cuda backend takes one GPU per rank (None: it can)."""
    if BACKEND != "cuda":
        return None
    import torch

    have = torch.cuda.device_count()
    return f"{n} ranks need {n} GPUs; this machine has {have}" if n > have else None


def expand(template: str, n: int) -> str:
    """The program of a template for a team of `n` ranks."""
    team = "[" + ", ".join(str(i) for i in range(n)) + "]"
    names = {"N": n, "LAST": n - 1, "TEAM": team}
    return re.sub(r"\$\{([^}]+)\}", lambda m: str(eval(m.group(1), {}, names)), template)


def program(name: str, n: int, directory: Path) -> Path:
    """Write the program `name` (a template or a plain .mlir) for n ranks."""
    src = PROGRAMS / name
    text = src.read_text()
    if src.suffix == ".in":
        text = expand(text, n)
    out = directory / f"{src.name.removesuffix('.in').removesuffix('.mlir')}_n{n}.mlir"
    out.write_text(text)
    return out


def with_backend(args: Sequence[object]) -> list[str]:
    """`args` with `--backend cpu` replaced by the suite's BACKEND."""
    out = [str(a) for a in args]
    for i in range(len(out) - 1):
        if out[i] == "--backend" and out[i + 1] == "cpu":
            out[i + 1] = BACKEND
    return out


def launcher(name: str, n: int) -> list[str]:
    """The command that starts n ranks: mpiexec, or torchrun (on a free
    port, so that parallel jobs do not meet)."""
    if name == "torchrun":
        if TORCHRUN is None:
            pytest.fail("torchrun is not installed (it comes with torch)")
        return [TORCHRUN, "--standalone", "--nproc-per-node", str(n)]
    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    return [MPIEXEC, "-n", str(n)]


def mpirun(
    n: int,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: int = TIMEOUT_S,
    stdin: str = "",
    launch: str = "mpiexec",
) -> subprocess.CompletedProcess[str]:
    """`mpiexec -n n fuserc run ARGS` (or under torchrun) within `timeout`,
    output captured, `stdin` on its standard input."""
    full_env = {**os.environ, **MPI_ENV, **(env or {})}
    python = [sys.executable] if launch == "mpiexec" else []  # torchrun starts Python itself
    cmd = [*launcher(launch, n), *python, "-m", "fuserc", "run", *with_backend(args)]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "5", str(timeout), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout + 15, input=stdin)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def mpirun_python(
    n: int, script: Path, args: Sequence[str], env: dict[str, str] | None = None, timeout: int = TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """`mpiexec -n n python SCRIPT ARGS` under `timeout` (Python API tests)."""
    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    full_env = {**os.environ, **MPI_ENV, **(env or {})}
    cmd = [MPIEXEC, "-n", str(n), sys.executable, str(script), *with_backend(args)]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "5", str(timeout), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout + 15)

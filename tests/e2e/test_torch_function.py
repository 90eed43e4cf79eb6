"""fuserc inside a PyTorch training step, on 1, 2 and 4 ranks under both
launchers: `fuserc.torch.function`'s outputs and gradients against
torch.autograd (torch_function_worker.py), and examples/python/train_gpt.py's
loss curve against the same model in plain PyTorch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import BACKEND, MPI_ENV, launcher

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
JOBS = [("mpiexec", 1), ("mpiexec", 2), ("mpiexec", 4), ("torchrun", 1), ("torchrun", 2), ("torchrun", 4)]
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"


def launch(how: str, n: int, script: Path, args: list[str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    python = [sys.executable] if how == "mpiexec" else []  # torchrun starts Python itself
    cmd = [*launcher(how, n), *python, str(script), *args]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "5", str(timeout), *cmd]
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout + 30)


@pytest.mark.parametrize("how,n", JOBS, ids=[f"{h}-n{n}" for h, n in JOBS])
def test_function_against_autograd(how: str, n: int) -> None:
    proc = launch(how, n, HERE / "torch_function_worker.py", ["--device", DEVICE])
    cases = re.findall(r"^CASE (\S+) (ok|FAILED.*)$", proc.stdout, re.M)
    failed = [f"{name}: {what}" for name, what in cases if what != "ok"]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr[-3000:]
    assert len(cases) >= 6 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


TRAIN_JOBS = [("mpiexec", 2), ("torchrun", 4)]


@pytest.mark.parametrize("how,n", TRAIN_JOBS, ids=[f"{h}-n{n}" for h, n in TRAIN_JOBS])
def test_train_gpt_matches_pytorch(how: str, n: int, tmp_path: Path) -> None:
    """The loss curve of 8 AdamW steps equals plain PyTorch's (the example
    fails itself beyond its tolerance); the curve is plotted."""
    png = tmp_path / "loss.png"
    args = ["--steps", "8", "--layers", "1", "--tokens", "32", "--vocab", "64", "--device", DEVICE, "--plot", str(png)]
    proc = launch(how, n, ROOT / "examples" / "python" / "train_gpt.py", args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = re.findall(r"^step +\d+/8 +loss ([\d.]+) +\(PyTorch ([\d.]+)", proc.stdout, re.M)
    assert len(steps) == 8, proc.stdout
    assert all(abs(float(a) - float(b)) <= 1e-3 * float(b) for a, b in steps), steps
    assert re.search(rf"trained 8 steps on {n} rank\(s\) \({how}, {DEVICE}\).*: ok$", proc.stdout, re.M), proc.stdout
    assert png.stat().st_size > 1000


def test_train_gpt_alone_and_its_usage_errors(tmp_path: Path) -> None:
    """Started alone it says so (no launcher), here in bf16 (its curve
    against PyTorch's in f32, within bf16's tolerance); --plot without
    matplotlib and --device cuda without CUDA are refused before training,
    once."""
    script = ROOT / "examples" / "python" / "train_gpt.py"
    env = {**os.environ, **MPI_ENV}
    small = ["--steps", "2", "--layers", "1", "--tokens", "16", "--vocab", "32", "--hidden", "32", "--ffn", "64"]
    proc = subprocess.run([sys.executable, script, *small, "--dtype", "bf16", "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"trained 2 steps on 1 rank\(s\) \(one process, cpu\).*\(tolerance 0.05\): ok$", proc.stdout, re.M), proc.stdout
    blocker = tmp_path / "no_matplotlib.py"
    blocker.write_text(
        "import runpy, sys\nsys.modules['matplotlib'] = None  # as if not installed\n"
        f"sys.argv = sys.argv[1:]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    proc = subprocess.run([sys.executable, blocker, script, "--plot", str(tmp_path / "l.png")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "--plot needs matplotlib" in proc.stderr and "step" not in proc.stdout, proc.stderr
    if not torch_has_cuda():
        proc = launch("mpiexec", 2, script, ["--device", "cuda"], timeout=120)
        assert proc.returncode == 2 and proc.stderr.count("--device cuda: this torch") == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()

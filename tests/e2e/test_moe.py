"""The dropless mixture-of-experts layer (examples/python/moe_layer.py)
through `fuserc.torch.function`, forward and backward, against a PyTorch
loop over experts in float64 (moe_worker.py): top-1 and top-2, softmax
and sigmoid routers, skewed routing with experts that get no tokens, a
shared expert, bf16; all cases in one job per job size. On 2 and 4 ranks
the tokens are split over the ranks and so are the experts' weights
(`[DIDx, -, -]`): expert parallelism by dispatch and combine, all-to-alls
forward and backward. On one rank the layer sorts its pairs, and two cases
(`slots-*`) take the dispatch/combine form (in bf16, torch._grouped_mm's
batched form on a GPU). On 4 ranks one case runs on a mesh [2, 2]: the
tokens over both axes, the experts over the second, each dp slice's
tokens dispatched within its ep team."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import BACKEND, MPI_ENV, launcher
from test_torch_function import launch

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"


SPLIT_CASES = "sigmoid-shared,skewed-top1-empty,bf16-shared-top2,chunked-skewed-top2,chunked4-sigmoid-shared"
"""The cases run on several ranks (a shared expert, top-1 and top-2, empty
experts, bf16, the tokens in two and in four chunks whose all-to-alls
overlap the other chunks' GEMMs, cut by the pass chunk-experts forward and
backward), to keep the jobs short."""
MESH_CASES = {4: ",dp2-skewed-top2-shared"}
"""Cases of a 2-D mesh: on 4 ranks [dp, ep] = [2, 2], the tokens in two
groups, each dispatched within its ep team (on one rank the grouped form
runs locally)."""
CASES = {1: 10, 2: 5, 4: 6}


@pytest.mark.parametrize("n", [1, 2, 4], ids=["n1", "n2", "n4"])
def test_layer_against_the_pytorch_loop(n: int) -> None:
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    start = launcher("mpiexec", n) if n > 1 else []
    only = ["--only", SPLIT_CASES + MESH_CASES.get(n, "")] if n > 1 else []
    cmd = ["timeout", "-k", "5", "600", *start, sys.executable, str(HERE / "moe_worker.py"), "--device", DEVICE, *only]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=630)
    cases = re.findall(r"^CASE (\S+) (ok|FAILED.*)$", proc.stdout, re.M)
    failed = [f"{name}: {what}" for name, what in cases if what != "ok"]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr[-3000:]
    assert len(cases) == CASES[n] and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


TRAIN_JOBS = [("mpiexec", 2), ("torchrun", 2)]


@pytest.mark.parametrize("how,n", TRAIN_JOBS, ids=[f"{h}-n{n}" for h, n in TRAIN_JOBS])
def test_train_moe_matches_pytorch(how: str, n: int) -> None:
    """The loss curve of 5 AdamW steps of a small MoE GPT equals plain
    PyTorch's (the example fails itself beyond its tolerance)."""
    args = ["--steps", "5", "--layers", "1", "--tokens", "16", "--hidden", "16", "--ffn", "16", "--vocab", "32", "--device", DEVICE]
    proc = launch(how, n, ROOT / "examples" / "python" / "train_moe.py", args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = re.findall(r"^step +\d+/5 +loss ([\d.]+) +\(PyTorch ([\d.]+)", proc.stdout, re.M)
    assert len(steps) == 5 and float(steps[-1][0]) < float(steps[0][0]), proc.stdout
    assert re.search(rf"trained 5 steps on {n} rank\(s\) \({how}, {DEVICE}\).*: ok$", proc.stdout, re.M), proc.stdout

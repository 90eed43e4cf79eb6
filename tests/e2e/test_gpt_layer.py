"""examples/gpt_layer.mlir and examples/python/gpt_layer.py: a sequence +
tensor parallel GPT layer on 1, 2 and 4 ranks against PyTorch, and the
`--mesh` option that resizes its mesh."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import mpirun, mpirun_python, ok

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpt_layer.mlir"
SCRIPT = ROOT / "examples" / "python" / "gpt_layer.py"


def _example_module():
    spec = importlib.util.spec_from_file_location("gpt_layer_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [1, 2, 4])
def test_gpt_layer_mlir_matches_pytorch(n: int, tmp_path: Path) -> None:
    """The file's layer, its mesh resized to the job, on the inputs of the
    Python example: the gathered result equals PyTorch's layer; the
    sharded program gathers twice and reduce-scatters twice (Megatron's
    sequence parallelism), whatever n."""
    ex = _example_module()
    glob = ex.inputs(64, 64, 256)
    files = []
    for i, t in enumerate(glob):
        files += ["-i", str(tmp_path / f"a{i}.npy")]
        np.save(tmp_path / f"a{i}.npy", t.to(torch.float32).numpy())
    ok(mpirun(n, [str(EXAMPLE), "--mesh", f"tp={n}", *files, "--save-outputs", str(tmp_path), "--backend", "cpu"]))
    got = torch.from_numpy(np.load(tmp_path / "out0.npy")).double()
    want = ex.reference([t.to(torch.float32).double() for t in glob], heads=8)
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-5


def test_gpt_layer_communication() -> None:
    """Two allgathers (before the QKV and first MLP GEMMs: q, k and v share
    one gathered input) and two reduce-scatters; no allreduce, no alltoall."""
    out = subprocess.run(
        [sys.executable, "-m", "fuserc", "opt", str(EXAMPLE), "-p", "default"], capture_output=True, text=True, check=True
    ).stdout
    counts = {k: out.count(f"hir.{k} ") for k in ("allgather", "reduce_scatter", "allreduce", "alltoall")}
    assert counts == {"allgather": 2, "reduce_scatter": 2, "allreduce": 0, "alltoall": 0}, counts


def test_gpt_layer_python_bf16() -> None:
    """The Python example on 2 ranks in bf16 checks itself against PyTorch."""
    proc = ok(mpirun_python(2, SCRIPT, ["--dtype", "bf16", "--backend", "cpu"]))
    assert "GPT layer on 2 rank(s), bf16" in proc.stdout and ": ok" in proc.stdout


@pytest.mark.parametrize(
    "mesh, code, message",
    [
        ("tp=3", 1, "gpt_layer.mlir:"),  # located: 64 tokens do not divide by 3
        ("xx=2", 1, "the program declares no mesh @xx (it declares @tp)"),
        ("tp=a", 2, "expected NAME=SHAPE"),
        ("tp=0", 2, "at least one device per axis"),
    ],
)
def test_mesh_option_diagnostics(mesh: str, code: int, message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fuserc", "opt", str(EXAMPLE), "--mesh", mesh], capture_output=True, text=True
    )
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if mesh == "tp=3":
        assert "not divisible by 3 (DIDx on @tp of shape [3])" in proc.stderr

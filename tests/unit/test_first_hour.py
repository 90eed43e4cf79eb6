"""What a new user meets in a first hour, without a GPU: an MPI library
that cannot be loaded, tools started for the GPU, the Python API's names.
Each is one clear line, never a traceback or a silent wrong."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuserc.api import FusionDefinition, shard_tensor
from fuserc.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sp_mlp.mlir"


def _has_gpu() -> bool:
    from fuserc.runtime.backends.backend import cuda_unavailable

    return cuda_unavailable() is None


def test_mpi4py_without_its_library(tmp_path: Path) -> None:
    env = {**os.environ, "MPI4PY_LIBMPI": str(tmp_path / "no-libmpi.so")}
    proc = subprocess.run([sys.executable, "-m", "fuserc", "run", str(EXAMPLE), "--mesh", "tp=1"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: mpi4py is installed, but cannot load MPI library (")
    assert "pip install mpich" in proc.stderr


@pytest.mark.skipif(not hasattr(socket, "AF_INET"), reason="needs sockets")
def test_bench_defaults_to_cuda_without_a_gpu() -> None:
    """tools/bench.py as torchrun starts a rank (its environment), without
    --backend cpu on a machine without a GPU: one line, exit 1."""
    if _has_gpu():
        pytest.skip("a GPU is here")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONSAFEPATH": "1"}  # fmt: skip
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "--small"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "error: the cuda backend cannot run here (" in proc.stderr and "--backend cpu" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gpu_check_without_a_gpu(tmp_path: Path) -> None:
    """tools/gpu_check.sh stops at once where there is no GPU; its MPI
    launch command suits the MPI installed (MPICH refuses Open MPI's -x)."""
    if _has_gpu():
        pytest.skip("a GPU is here")
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "info"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no GPU or CuPy here" in proc.stdout, proc.stdout + proc.stderr
    assert "PASS" not in proc.stdout
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--print-mpirun"], env=env, capture_output=True, text=True, timeout=60)
    flavour, command = proc.stdout.strip().split(": ", 1)
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=60).stdout
    assert flavour == ("openmpi" if "Open MPI" in version or "open-rte" in version.lower() else "mpich"), version
    launched = subprocess.run(
        [*command.split(), "-n", "2", sys.executable, "-c", "import os; print(os.environ['GPU_CHECK_BACKEND'])"],
        env={**env, "GPU_CHECK_BACKEND": "cuda", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "HYDRA_LAUNCHER": "fork"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    # (the launcher may interleave the two ranks' lines: "cudacuda\n\n")
    assert launched.returncode == 0 and launched.stdout.count("cuda") == 2, launched.stdout + launched.stderr


def test_shard_tensor_refuses_another_global_shape() -> None:
    fd = FusionDefinition()
    x = fd.define_tensor([4, 6], "f32")
    fd.add_output(fd.ops.relu(x))
    mesh = fd.sched.mesh("tp", [2])
    fd.sched.shard(x, "tp", ["-", "DIDx"])
    full = torch.arange(24.0).reshape(4, 6)
    torch.testing.assert_close(shard_tensor(full, x, mesh, 1), full[:, 3:])
    with pytest.raises(Diagnostic, match=r"has shape \[4, 7\], but Tensor\(%\w+: tensor<4x6xf32.*is declared \[4, 6\]"):
        shard_tensor(torch.ones(4, 7), x, mesh, 1)
    with pytest.raises(AttributeError, match="fd.sched has no 'shard_tensor'; it is fuserc.api.shard_tensor"):
        fd.sched.shard_tensor(full, x, mesh, 1)
    with pytest.raises(AttributeError, match="fd.sched has no 'shrad'; it has mesh, shard and parallelize"):
        fd.sched.shrad  # noqa: B018


def test_sdpa_log_sum_exp_from_python() -> None:
    """`fd.ops.sdpa(q, k, v, lse=True)` returns the log-sum-exp too,
    against PyTorch's in float64."""
    fd = FusionDefinition()
    q, k, v = (fd.define_tensor([1, 2, 8, 4], "f32") for _ in range(3))
    out, lse = fd.ops.sdpa(q, k, v, causal=True, lse=True)
    assert lse.shape == (1, 2, 8) and lse.dtype == "f32"
    fd.add_output(out)
    fd.add_output(lse)
    prog = fd.compile(backend="cpu")
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(1, 2, 8, 4, generator=gen) for _ in range(3)]
    got_out, got_lse = (torch.as_tensor(t).double() for t in prog.execute(inputs))
    qd, kd, vd = (t.double() for t in inputs)
    scores = (qd @ kd.transpose(-1, -2)) / 2.0 + torch.full((8, 8), float("-inf"), dtype=torch.float64).triu(1)
    torch.testing.assert_close(got_lse, torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_out, torch.softmax(scores, -1) @ vd, rtol=1e-5, atol=1e-5)
    prog.close()


def test_norm_statistics_from_python() -> None:
    """`fd.ops.layer_norm(..., mean=True, rstd=True)` and
    `fd.ops.rms_norm(..., rstd=True)` return the statistics too (f32 for
    bf16 inputs, the normalized dim of extent 1), against PyTorch's in
    float64."""
    fd = FusionDefinition()
    x, w = fd.define_tensor([6, 16], "bf16"), fd.define_tensor([16], "bf16")
    y, mean, rstd = fd.ops.layer_norm(x, w, dims=1, mean=True, rstd=True)
    _, rms = fd.ops.rms_norm(x, w, dims=1, eps=1e-6, rstd=True)
    assert mean.shape == rstd.shape == rms.shape == (6, 1) and mean.dtype == rstd.dtype == "f32"
    for t in (y, mean, rstd, rms):
        fd.add_output(t)
    prog = fd.compile(backend="cpu")
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(6, 16, generator=gen).bfloat16(), torch.rand(16, generator=gen).bfloat16() + 0.5]
    got = [torch.as_tensor(t).double() for t in prog.execute(inputs)]
    xd, wd = (t.double() for t in inputs)
    var, m = torch.var_mean(xd, dim=1, correction=0, keepdim=True)
    torch.testing.assert_close(got[0], torch.nn.functional.layer_norm(xd, [16], wd), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got[1], m, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[2], torch.rsqrt(var + 1e-5), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[3], torch.rsqrt(xd.square().mean(1, keepdim=True) + 1e-6), rtol=1e-5, atol=1e-6)
    prog.close()


def test_compile_in_one_process_for_a_mesh_of_four() -> None:
    """The hint of a Python script is how to launch the script, not the CLI's."""
    fd = FusionDefinition()
    x = fd.define_tensor([8, 4], "f32")
    fd.add_output(fd.ops.relu(x))
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["DIDx", "-"])
    with pytest.raises(Diagnostic) as e:
        fd.compile(backend="cpu")
    message = str(e.value)
    assert "launch the script with 4 processes (mpiexec -n 4 python SCRIPT.py, or torchrun --nproc-per-node 4 SCRIPT.py)" in message
    assert "fd.sched.mesh('tp', [1])" in message and "fuserc run" not in message


def test_train_gpt_default_run_shows_learning() -> None:
    """examples/python/train_gpt.py's default run: its loss curve (the
    plain PyTorch twin, which fuserc's curve matches step by step) ends
    more than halfway from where it starts to the data's entropy floor."""
    import argparse
    import importlib.util
    import re

    path = ROOT / "examples" / "python" / "train_gpt.py"
    source = path.read_text()
    defaults = {
        name: float(value)
        for name, value in re.findall(r'add_argument\("--(\w+)", type=(?:int|float), default=([\d.e-]+)\)', source)
    }
    spec = importlib.util.spec_from_file_location("train_gpt", path)
    example = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(example)
    a = argparse.Namespace(**{k: int(v) if float(v).is_integer() and k != "lr" else v for k, v in defaults.items()}, device="cpu", dtype="f32")
    torch.manual_seed(0)
    params = [torch.nn.Parameter(w.clone()) for w in example.initial_weights(a)]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    data = example.Data(a)
    curve = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model: threads only contend
    try:
        for step in range(a.steps):
            ids, labels = data.batch(step)
            loss = example.reference_loss(ids, labels, params, a)
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(float(loss.detach()))
    finally:
        torch.set_num_threads(threads)
    start, end, floor = sum(curve[:10]) / 10, sum(curve[-10:]) / 10, example.entropy(data)
    assert end < (start + floor) / 2, (start, end, floor, a.steps, a.lr)

"""Python API programs run under mpiexec by test_api.py: each case builds a
FusionDefinition, shards it, executes it on the CPU backend and compares
every rank's results with torch on the global tensors."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from fuserc.api import FusionDefinition, shard_tensor

torch.manual_seed(0)
BACKEND = os.environ.get("FUSERC_TEST_BACKEND", "cpu")


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64).to(torch.float32)


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    got = torch.as_tensor(got).to(torch.float64)
    err = (got - want.to(torch.float64)).abs().max().item()
    scale = want.abs().max().item() or 1.0
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert err <= 1e-4 * scale, f"{what}: max error {err} (scale {scale})"


def pointwise_allgather() -> None:
    fd = FusionDefinition()
    x = fd.define_tensor([16, 8])
    y = fd.ops.relu(x)
    fd.add_output(y)
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["DIDx", "-"])
    fd.sched.shard(y, "tp", ["-", "-"])
    assert "fusion.relu" in fd.to_mlir()
    xs = rand(16, 8)
    (out,) = fd.execute([xs], backend=BACKEND)
    close(out, torch.relu(xs), "relu")
    # NumPy in, NumPy out
    (out_np,) = fd.execute([xs.numpy()], backend=BACKEND)
    assert isinstance(out_np, np.ndarray)
    close(torch.from_numpy(out_np), torch.relu(xs), "relu numpy")


def column_parallel_linear() -> None:
    fd = FusionDefinition()
    x, w, b = fd.define_tensor([8, 16]), fd.define_tensor([32, 16]), fd.define_tensor([32])
    y = fd.ops.linear(x, w, b)
    fd.add_output(y)
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["-", "-"])
    fd.sched.shard(w, "tp", ["DIDx", "-"])
    fd.sched.shard(b, "tp", ["DIDx"])
    fd.sched.shard(y, "tp", ["-", "DIDx"])
    xs, ws, bs = rand(8, 16), rand(32, 16), rand(32)
    program = fd.compile(backend=BACKEND)
    (out,) = program.execute([xs, ws, bs])
    close(out, F.linear(xs, ws, bs), "column-parallel linear")
    # local shards in, local shards out
    rank = program.env.rank
    mesh = fd._meshes["tp"]
    local = [shard_tensor(t, s, mesh, rank) for t, s in zip((xs, ws, bs), fd.inputs)]
    (shard,) = program.execute(local, local=True, gather=False)
    close(shard, shard_tensor(F.linear(xs, ws, bs), y, mesh, rank), "local shard")


def row_parallel_linear() -> None:
    fd = FusionDefinition()
    x, w, b = fd.define_tensor([8, 32]), fd.define_tensor([16, 32]), fd.define_tensor([16])
    y = fd.ops.linear(x, w, b)
    fd.add_output(y)
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["-", "DIDx"])
    fd.sched.shard(w, "tp", ["-", "DIDx"])
    fd.sched.shard(b, "tp", ["-"])
    fd.sched.shard(y, "tp", ["-", "-"])
    xs, ws, bs = rand(8, 32), rand(16, 32), rand(16)
    (out,) = fd.execute([xs, ws, bs], backend=BACKEND)
    close(out, F.linear(xs, ws, bs), "row-parallel linear")


def sequence_parallel_linear() -> None:
    fd = FusionDefinition()
    x, w = fd.define_tensor([16, 8]), fd.define_tensor([12, 8])
    y = fd.ops.linear(x, w)
    fd.add_output(y)
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["DIDx", "-"])
    fd.sched.shard(w, "tp", ["DIDx", "-"])
    fd.sched.shard(y, "tp", ["-", "DIDx"])
    xs, ws = rand(16, 8), rand(12, 8)
    (out,) = fd.execute([xs, ws], backend=BACKEND)
    close(out, F.linear(xs, ws), "sequence-parallel linear")


def overlapped_allgather_linear() -> None:
    """nvFuser's overlapped AllGather+linear: x laid out [S, d, M/(S*d), K]
    with d on DIDx, the output stream-parallel on S."""
    s, d, m, k, n = 2, 4, 3, 8, 5
    fd = FusionDefinition()
    x, w, b = fd.define_tensor([s, d, m, k]), fd.define_tensor([n, k]), fd.define_tensor([n])
    y = fd.ops.linear(x, w, b)
    fd.add_output(y)
    fd.sched.mesh("tp", [d])
    fd.sched.shard(x, "tp", ["-", "DIDx", "-", "-"])
    fd.sched.shard(w, "tp", ["-", "-"])
    fd.sched.shard(b, "tp", ["-"])
    fd.sched.shard(y, "tp", [f"Stream({s})", "-", "-", "-"])
    xs, ws, bs = rand(s, d, m, k), rand(n, k), rand(n)
    for algorithm in ("collective", "ring"):
        (out,) = fd.execute([xs, ws, bs], backend=BACKEND, algorithm=algorithm)
        close(out, F.linear(xs, ws, bs), f"overlapped allgather+linear ({algorithm})")


def matmul_reduce_scatter() -> None:
    fd = FusionDefinition()
    x, w = fd.define_tensor([16, 32]), fd.define_tensor([32, 8])
    y = fd.ops.matmul(x, w)
    fd.add_output(y)
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["-", "DIDx"])
    fd.sched.shard(w, "tp", ["DIDx", "-"])
    fd.sched.shard(y, "tp", ["DIDx", "-"])
    xs, ws = rand(16, 32), rand(32, 8)
    (out,) = fd.execute([xs, ws], backend=BACKEND)
    close(out, xs @ ws, "reduce-scatter")


def matmul_allreduce() -> None:
    fd = FusionDefinition()
    x, w = fd.define_tensor([16, 32]), fd.define_tensor([32, 8])
    y = fd.ops.matmul(x, w)
    fd.add_output(y)
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["-", "DIDx"])
    fd.sched.shard(w, "tp", ["DIDx", "-"])
    fd.sched.shard(y, "tp", ["-", "-"])
    xs, ws = rand(16, 32), rand(32, 8)
    (out,) = fd.execute([torch.clone(xs), ws], backend=BACKEND)
    close(out, xs @ ws, "allreduce")


def mesh2d_mlp() -> None:
    """Data parallel on DIDy (batch), tensor parallel on DIDx (features)."""
    fd = FusionDefinition()
    x, w1, w2 = fd.define_tensor([8, 16]), fd.define_tensor([16, 32]), fd.define_tensor([32, 16])
    h = fd.ops.gelu(fd.ops.matmul(x, w1))
    y = fd.ops.matmul(h, w2)
    fd.add_output(y)
    fd.sched.mesh("dp_tp", [2, 2])
    fd.sched.shard(x, "dp_tp", ["DIDy", "-"])
    fd.sched.shard(w1, "dp_tp", ["-", "DIDx"])
    fd.sched.shard(w2, "dp_tp", ["DIDx", "-"])
    fd.sched.shard(y, "dp_tp", ["DIDy", "-"])
    xs, w1s, w2s = rand(8, 16), rand(16, 32), rand(32, 16)
    (out,) = fd.execute([xs, w1s, w2s], backend=BACKEND)
    close(out, F.gelu(xs @ w1s) @ w2s, "2-D mesh MLP")


def round_trip() -> None:
    fd = FusionDefinition()
    x = fd.define_tensor([16, 8])
    fd.add_output(fd.ops.exp(x))
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["DIDx", "-"])
    again = FusionDefinition.from_mlir(fd.to_mlir())
    assert again.to_mlir() == fd.to_mlir()
    xs = rand(16, 8)
    (out,) = again.execute([xs], backend=BACKEND)
    close(out, torch.exp(xs), "round trip")


CASES = {f.__name__: f for f in (
    pointwise_allgather, column_parallel_linear, row_parallel_linear, sequence_parallel_linear,
    overlapped_allgather_linear, matmul_reduce_scatter, matmul_allreduce, mesh2d_mlp, round_trip,
)}  # fmt: skip

if __name__ == "__main__":
    CASES[sys.argv[1]]()
    print(f"OK {sys.argv[1]}")

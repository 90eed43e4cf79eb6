"""Programs launched by torchrun on the cpu backend: rank, size and the
collectives come from torch.distributed (gloo), no MPI involved. The
collective programs and the sequence-parallel MLP run in one torchrun job
per job size, checked against the float64 reference as under mpiexec
(test_pipeline.py); `fuserc run` itself and a failing rank under torchrun."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness import BACKEND, mpirun, ok, program
from batch import launch_batches
from test_pipeline import CASES, Case

RANKS = (2, 4)
CHOSEN = re.compile(r"(rt_(allgather|allreduce|alltoall|broadcast|gather|reduce|reduce_scatter|scatter|sendrecv)|case_sp_mlp|case_mesh2d|example_sp_mlp)-n\d-(f32|own)$")
"""Every kind of collective (gloo moves the bytes; reductions in float),
the sequence-parallel MLP end to end, and a 2-D mesh (collectives whose
teams have translates: a group per slice, made by every rank)."""
TORCH_CASES = [c for c in CASES if c.n in RANKS and CHOSEN.match(c.ident)]


@pytest.fixture(scope="module")
def torchrun_batch(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache: dict[int, dict[str, Any]] = {}

    def results(n: int) -> dict[str, Any]:
        if n not in cache:
            directory = tmp_path_factory.mktemp(f"torchrun_n{n}")
            cases = [c for c in TORCH_CASES if c.n == n]
            work = [(c.ident, c.text(), {"default": "default"}) for c in cases]
            cache[n] = launch_batches(n, work, directory, BACKEND, launch="torchrun")
        return cache[n]

    return results


def test_cases_chosen() -> None:
    assert {c.n for c in TORCH_CASES} == set(RANKS)
    assert len(TORCH_CASES) >= 2 * 10


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c.ident for c in TORCH_CASES])
def test_program_under_torchrun(case: Case, torchrun_batch: Any) -> None:
    outcome = torchrun_batch(case.n).get(f"{case.ident}/default")
    assert outcome is not None, "the torchrun batch reported nothing for this case"
    assert outcome.status == "ok", f"{outcome.status}:\n{outcome.detail}\n\n{case.text()}"


def test_fuserc_run_under_torchrun() -> None:
    example = Path(__file__).parents[2] / "examples" / "sp_mlp.mlir"
    proc = ok(mpirun(4, [example, "--check"], launch="torchrun", timeout=180))
    assert re.search(r"output 0: .*: ok", proc.stdout), proc.stdout


def test_rank_failure_ends_the_torchrun_job(tmp_path: Path) -> None:
    """Rank 1 raises at its first op while rank 0 blocks in a collective:
    the job ends non-zero with rank 1's message, promptly (no hang)."""
    prog = program("collectives.mlir.in", 2, tmp_path)
    start = time.monotonic()
    proc = mpirun(2, [prog, "-p", "", "--seed", "1"], env={"FUSERC_FAIL_RANK": "1"}, launch="torchrun", timeout=90)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    assert "[rank 1]" in proc.stderr and "injected failure" in proc.stderr, proc.stderr[-3000:]


def test_peer_copies_need_mpi_under_torchrun(tmp_path: Path) -> None:
    """The cpu backend's peer copies (MPI windows) say what to use instead,
    at the first copy of a host program that shares a buffer."""
    prog = program("collectives.mlir.in", 2, tmp_path)
    proc = mpirun(2, [prog, "-p", "", "--seed", "1"], launch="torchrun", timeout=120)
    assert proc.returncode == 1
    assert "on the cpu backend: peer copies need MPI one-sided windows" in proc.stderr, proc.stderr[-3000:]
    assert "internal error" not in proc.stderr


JOIN = """
import os
import sys

import torch
import torch.distributed as dist

from fuserc.api import FusionDefinition
from fuserc.runtime.job.job import launcher_rank, launcher_size
from fuserc.runtime.job.mpi_env import TorchEnv, mpi_env

if sys.argv[1] == "torchrun":
    dist.init_process_group("gloo")  # from torchrun's variables
else:  # under mpiexec, a world of the caller's own, with no torchrun variables
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=launcher_rank(), world_size=launcher_size())
world = dist.group.WORLD
fd = FusionDefinition()
x = fd.define_tensor([8, 4], "f32")
fd.add_output(fd.ops.relu(x))
fd.sched.mesh("tp", [2])
fd.sched.shard(x, "tp", ["DIDx", "-"])
xs = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
(out,) = fd.compile(backend="cpu").execute([xs])
env = mpi_env()
assert isinstance(env, TorchEnv) and env.size == 2, env
assert dist.is_initialized() and dist.group.WORLD is world and dist.get_world_size() == 2
dist.barrier()  # the caller's world still works
assert torch.equal(out, xs.relu())
print(f"joined {env.launched_by}")
"""


@pytest.mark.parametrize("how", ["torchrun", "mpiexec"])
def test_fuserc_joins_the_callers_world(how: str, tmp_path: Path) -> None:
    """A script that started torch.distributed itself: fuserc joins that
    world (never starts a second one), under either launcher."""
    import socket

    from harness import MPI_ENV, launcher

    script = tmp_path / "join.py"
    script.write_text(JOIN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    python = [sys.executable] if how == "mpiexec" else []
    env = {**os.environ, **MPI_ENV}
    proc = subprocess.run([*launcher(how, 2), *python, str(script), how, port], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    want = "torchrun" if how == "torchrun" else "torch.distributed"
    assert proc.stdout.count(f"joined {want}") == 2, proc.stdout


def test_usage_error_under_torchrun(tmp_path: Path) -> None:
    """Bad usage: printed once, and the ranks exit 2 (torchrun's report
    says so of the first; torchrun itself exits 1 for any failed worker)."""
    (tmp_path / "p.mlir").write_text("fusion.mesh @tp shape = [2]\n")
    proc = mpirun(2, [tmp_path / "p.mlir", "--warmup", "2"], launch="torchrun", timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count("Error: --warmup needs --iters") == 1, proc.stderr
    root = proc.stderr.split("Root Cause (first observed failure):")[-1]
    assert re.search(r"exitcode\s*: 2 ", root), proc.stderr


RELU = """\
fusion.mesh @tp shape = [2]
func.func @main(%x: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>> {
  %y = fusion.relu %x : (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %y : tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>>
}
"""


def test_input_that_is_not_a_regular_file_under_torchrun(tmp_path: Path) -> None:
    """A named pipe with no writer given to -i: refused at once (opening it
    would wait forever), one line."""
    prog = tmp_path / "p.mlir"
    prog.write_text(RELU)
    os.mkfifo(tmp_path / "x.npy")
    proc = mpirun(2, [prog, "--backend", "cpu", "-i", tmp_path / "x.npy", "--watchdog", "30"], launch="torchrun", timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count(f"({tmp_path / 'x.npy'}): it is a named pipe, not a regular file") == 1, proc.stderr

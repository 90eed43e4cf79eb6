"""Programs without a mesh run on one device, through every entry point:
`fuserc run --check` in one process and under `mpiexec -n 1`, a job of two
ranks (rank 0 computes, rank 1 idles), `fuserc opt -p default`, and the
Python API (a FusionDefinition without a mesh, `compile_text`). Results are
compared with PyTorch. (tests/e2e/programs/pipeline/case_no_mesh.mlir and
case_team_of_one.mlir run in the batches of test_pipeline.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from harness import BACKEND, MPI_ENV, mpirun, mpirun_python, ok, with_backend

PROGRAM = """func.func @main(%x: tensor<8x12xf32>, %w: tensor<12x16xf32>) -> (tensor<8x16xf32>, tensor<8xf32>) {
  %y = fusion.matmul %x, %w : (tensor<8x12xf32>, tensor<12x16xf32>) -> tensor<8x16xf32>
  %g = fusion.gelu %y : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = fusion.sum %g dims = [1] : (tensor<8x16xf32>) -> tensor<8xf32>
  func.return %g, %s : tensor<8x16xf32>, tensor<8xf32>
}
"""

RNG = np.random.default_rng(17)
X = RNG.standard_normal((8, 12)).astype(np.float32)
W = RNG.standard_normal((12, 16)).astype(np.float32)


def _expected() -> list[np.ndarray]:
    g = torch.nn.functional.gelu(torch.from_numpy(X).double() @ torch.from_numpy(W).double())
    return [g.numpy(), g.sum(dim=1).numpy()]


def _files(tmp_path: Path) -> tuple[Path, list[str]]:
    prog = tmp_path / "plain.mlir"
    prog.write_text(PROGRAM)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "w.npy", W)
    return prog, ["-i", str(tmp_path / "x.npy"), "-i", str(tmp_path / "w.npy")]


def _check_outputs(directory: Path) -> None:
    for i, want in enumerate(_expected()):
        np.testing.assert_allclose(np.load(directory / f"out{i}.npy"), want, rtol=1e-4, atol=1e-5)


def test_run_in_one_process(tmp_path: Path) -> None:
    """`fuserc run --check` without a launcher: one rank, the implicit mesh."""
    prog, inputs = _files(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fuserc", "run", *with_backend([str(prog), "--backend", "cpu", "--check", *inputs, "--save-outputs", str(out)])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **MPI_ENV})
    ok(proc)
    assert proc.stdout.count(": ok") == 2, proc.stdout
    assert "#fusion.sharding<@implicit, [-, -]>" in proc.stdout
    _check_outputs(out)


def test_run_under_mpiexec_one_and_two_ranks(tmp_path: Path) -> None:
    """Under `mpiexec -n 1` the same; on two ranks rank 0 computes the whole
    program and rank 1 has nothing to do (a note, not an error)."""
    prog, inputs = _files(tmp_path)
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        proc = ok(mpirun(n, [prog, "--backend", "cpu", "--check", *inputs, "--save-outputs", out]))
        assert proc.stdout.count(": ok") == 2, proc.stdout
        _check_outputs(out)
        idle = "note: the program uses 1 of the job's 2 ranks; rank 1 has nothing to do"
        assert (idle in proc.stderr) == (n == 2), proc.stderr


def test_opt_default_declares_the_implicit_mesh(tmp_path: Path) -> None:
    prog, _ = _files(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fuserc", "opt", "-p", "default", str(prog)], capture_output=True, text=True, timeout=120
    )
    ok(proc)
    assert "fusion.mesh @implicit shape = [1]" in proc.stdout
    assert "hir.host" in proc.stdout and "hir.if_rank [0]" in proc.stdout
    for comm in ("allgather", "allreduce", "reduce_scatter", "alltoall", "broadcast", "send"):
        assert f"hir.{comm}" not in proc.stdout, proc.stdout


def test_python_api_without_a_mesh() -> None:
    """A FusionDefinition with no mesh, and `compile_text` of an unsharded
    program, compile and run on this one process."""
    from fuserc.api import FusionDefinition
    from fuserc.runtime.evaluator.program import compile_text

    fd = FusionDefinition()
    x = fd.define_tensor([8, 12], "f32")
    w = fd.define_tensor([12, 16], "f32")
    g = fd.ops.gelu(fd.ops.matmul(x, w))
    fd.add_output(g)
    fd.add_output(fd.ops.sum(g, [1]))
    want = _expected()
    for program in (fd.compile(backend=BACKEND), compile_text(PROGRAM, backend=BACKEND)):
        got = program.execute([X, W])
        assert len(got) == 2
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)


API_SCRIPT = """import sys
import numpy as np
from fuserc.api import FusionDefinition
from fuserc.runtime.job.mpi_env import mpi_env

fd = FusionDefinition()
x = fd.define_tensor([8, 12], "f32")
w = fd.define_tensor([12, 16], "f32")
fd.add_output(fd.ops.gelu(fd.ops.matmul(x, w)))
out = fd.compile(backend=sys.argv[1]).execute([np.load(sys.argv[2]), np.load(sys.argv[3])])
np.save(sys.argv[4] + f"/rank{mpi_env().rank}.npy", np.asarray(out[0]))
"""


def test_python_api_without_a_mesh_on_two_ranks(tmp_path: Path) -> None:
    """Under `mpiexec -n 2`, rank 0 computes and both ranks get the result."""
    _, inputs = _files(tmp_path)
    script = tmp_path / "api.py"
    script.write_text(API_SCRIPT)
    ok(mpirun_python(2, script, [BACKEND, inputs[1], inputs[3], str(tmp_path)]))
    for rank in (0, 1):
        np.testing.assert_allclose(np.load(tmp_path / f"rank{rank}.npy"), _expected()[0], rtol=1e-4, atol=1e-5)

"""`fuserc run` end to end: hand-written host programs under `mpiexec -n N`
on the cpu backend, results checked against NumPy.

A test marked `@launches(spec)` checks the runs `spec` makes; those of the
whole module share one launch per job size (cli_batch.mpirun_many). Tests
of what a launch itself does (a rank ending the job, the mpi4py check, the
start-up times of a process) launch on their own."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from cli_batch import CliRun, Ran, launches
from harness import BACKEND, PROGRAMS, mpirun, mpirun_python, ok, program

ROOT = Path(__file__).resolve().parents[2]

RNG = np.random.default_rng(1234)


def _save(directory: Path, name: str, array: np.ndarray) -> Path:
    path = directory / f"{name}.npy"
    np.save(path, array)
    return path


def _outputs(directory: Path, count: int) -> list[np.ndarray]:
    return [np.load(directory / f"out{i}.npy") for i in range(count)]


def _gelu(x: np.ndarray) -> np.ndarray:
    return torch.nn.functional.gelu(torch.from_numpy(x)).numpy()


def _bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()


def collectives_expected(n: int, x: np.ndarray, w: np.ndarray, wl: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """What programs/collectives.mlir.in returns, op by op."""
    r = 2 * n
    blocks = [x[r * i : r * (i + 1)] for i in range(n)]
    alltoall = np.concatenate([np.concatenate([blocks[i][2 * j : 2 * j + 2] for i in range(n)]) for j in range(n)])
    y = x @ w
    return [
        x,  # allgather
        sum(blocks),  # allreduce
        n * x,  # reduce_scatter of the gathered X
        blocks[n - 1],  # broadcast from the last
        x,  # scatter
        x,  # gather to 0
        np.max(np.stack(blocks), axis=0),  # reduce max to the last
        alltoall,
        np.concatenate([blocks[(i - 1) % n] for i in range(n)]),  # send/recv ring
        np.concatenate([blocks[(i - 1) % n] for i in range(n)]),  # put
        np.concatenate([blocks[(i - 2) % n] for i in range(n)]),  # get
        sum(blocks),  # partial output summed
        y,  # chunks on streams
        x,  # broadcast pipeline
        _gelu(x[0]) * x[0],  # select + launch
        y.reshape(-1),  # view
        x @ wl.T + b,  # linear with bias
        x @ wl.T,  # linear
        _bf16(x),  # copy to bf16
        x,  # allgather in place
        x,  # gather in place, scattered back
    ]


def _collectives_inputs(n: int, tmp_path: Path) -> tuple[list[np.ndarray], list[Path]]:
    arrays = [
        RNG.standard_normal((2 * n * n, 3)).astype(np.float32),
        RNG.standard_normal((3, 4)).astype(np.float32),
        RNG.standard_normal((4, 3)).astype(np.float32),
        RNG.standard_normal((4,)).astype(np.float32),
    ]
    return arrays, [_save(tmp_path, name, a) for name, a in zip(("x", "w", "wl", "b"), arrays)]


def collectives_run(d: Path, n: int) -> CliRun:
    """programs/collectives.mlir.in on random inputs, its results saved."""
    args = [program("collectives.mlir.in", n, d), "-p", "", "--backend", "cpu", "--save-outputs", d / "out"]
    for p in _collectives_inputs(n, d)[1]:
        args += ["-i", p]
    if n == 4:
        args += ["--warmup", "1", "--iters", "1"]
    return CliRun(n, args)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@launches(collectives_run)
def test_collectives(n: int, ran: Ran) -> None:
    """Every communication op, views, streams, if_rank, launch, matmul and
    linear; with 4 ranks the results come from a third run of the program
    (timing first), so reused cached buffers and shared handles are tested."""
    proc = ok(ran.proc)
    arrays = [np.load(ran.dir / f"{name}.npy") for name in ("x", "w", "wl", "b")]
    expected = collectives_expected(n, *arrays)
    got = _outputs(ran.dir / "out", len(expected))
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"output {i}"
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    assert got[18].dtype == np.float32  # bf16 saved as float32
    if n == 4:
        assert f"FLOP/s per {'GPU' if BACKEND == 'cuda' else 'rank'} (" in proc.stdout and "median" in proc.stdout


def bf16_run(d: Path, n: int) -> CliRun:
    """programs/bf16.mlir.in on random float32 files, its results saved."""
    x = _save(d, "x", RNG.standard_normal((2 * n * n, 8)).astype(np.float32))
    w = _save(d, "w", RNG.standard_normal((8, 4)).astype(np.float32))
    return CliRun(n, [program("bf16.mlir.in", n, d), "-p", "", "-i", x, "-i", w, "--save-outputs", d / "out"])


@pytest.mark.parametrize("n", [2, 4])
@launches(bf16_run)
def test_bf16(n: int, ran: Ran) -> None:
    ok(ran.proc)
    x, w, out = np.load(ran.dir / "x.npy"), np.load(ran.dir / "w.npy"), ran.dir / "out"
    xb, wb = _bf16(x), _bf16(w)  # bf16 arguments take float32 files, rounded
    r = 2 * n
    blocks = [xb[r * i : r * (i + 1)] for i in range(n)]
    alltoall = np.concatenate([np.concatenate([blocks[i][2 * j : 2 * j + 2] for i in range(n)]) for j in range(n)])
    silu = torch.nn.functional.silu(torch.from_numpy(xb).to(torch.bfloat16)).float().numpy()
    expected = [xb @ wb, sum(blocks), n * xb, alltoall, silu]
    got = _outputs(out, len(expected))
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=2e-2, atol=2e-2, err_msg=f"output {i}")
    np.testing.assert_array_equal(got[3], alltoall)  # moved bit for bit


@launches(lambda d: CliRun(4, [PROGRAMS / "mesh2d.mlir", "-p", "", "-i", _save(d, "x", RNG.standard_normal((4, 6)).astype(np.float32)), "--save-outputs", d / "out"]))
def test_mesh2d(ran: Ran) -> None:
    """Teams of a 2-D mesh; outputs replicated along one axis and partial
    along another are assembled from one replica each and summed."""
    ok(ran.proc)
    x = np.load(ran.dir / "x.npy")
    got = _outputs(ran.dir / "out", 3)
    np.testing.assert_allclose(got[0], x[:, :3] + x[:, 3:], rtol=1e-6)
    np.testing.assert_array_equal(got[1], x)
    np.testing.assert_allclose(got[2], x[:2] + x[2:], rtol=1e-6)


def seed_runs(d: Path) -> dict[str, CliRun]:
    """Two runs of one program on the inputs of seed 7."""
    prog = program("collectives.mlir.in", 2, d)
    return {
        "a": CliRun(2, [prog, "-p", "", "--seed", "7", "--save-outputs", d / "a", "--print-host-ir"]),
        "b": CliRun(2, [prog, "-p", "", "--seed", "7", "--save-outputs", d / "b"]),
    }


@launches(seed_runs)
def test_seed_is_deterministic(ran: Ran) -> None:
    """--seed draws the same global arguments on every rank and every run,
    and each rank holds its shard of them; --print-host-ir prints once."""
    from fuserc.ir import parse
    from fuserc.runtime.evaluator.evaluator import find_host_program, signature
    from fuserc.runtime.job.io import random_inputs

    prog = ran.dir / "collectives_n2.mlir"
    first = ok(ran.procs["a"])
    assert first.stdout.count("attributes {hir.host}") == 1  # printed by rank 0 only
    assert "hir.allgather" in first.stdout
    ok(ran.procs["b"])
    a, b = _outputs(ran.dir / "a", 21), _outputs(ran.dir / "b", 21)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    module = parse(prog.read_text(), str(prog))
    params, _ = signature(module, find_host_program(module, "main"))
    drawn = [t.numpy() for t in random_inputs(params, 7)]
    expected = collectives_expected(2, *drawn)
    for i, (g, e) in enumerate(zip(a, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    other = [t.numpy() for t in random_inputs(params, 8)]
    assert not np.array_equal(other[0], drawn[0])


# ---- failures ------------------------------------------------------------------


@launches(lambda d: CliRun(2, [program("collectives.mlir.in", 4, d), "-p", ""]))
def test_too_few_ranks(ran: Ran) -> None:
    proc = ran.proc
    assert proc.returncode == 1, proc.stderr
    assert "needs 4 ranks" in proc.stderr
    assert "Traceback" not in proc.stderr


@launches(lambda d: CliRun(2, [ROOT / "examples" / "sp_mlp.mlir"]))
def test_too_few_ranks_says_how_to_fit_the_mesh(ran: Ran) -> None:
    """The launchers that can start a job large enough, and `--mesh` to fit
    the program to this one."""
    proc = ran.proc
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert "needs 4 ranks (mesh @tp uses device 3) but the job has 2; run it with mpiexec -n 4 fuserc run ... or " in proc.stderr
    assert "--nproc-per-node 4 -m fuserc run ..." in proc.stderr
    assert "fit @tp to this job with fuserc run --mesh tp=2" in proc.stderr


def test_mpiexec_without_mpi4py(tmp_path: Path) -> None:
    """mpiexec starts processes that cannot join one job without mpi4py:
    said once, with how to add it, not that the job has one rank."""
    script = tmp_path / "fuserc_without_mpi4py.py"
    script.write_text("import sys\nsys.modules['mpi4py'] = None  # as if not installed\nfrom fuserc.cli import main\nmain()\n")
    proc = mpirun_python(2, script, ["run", str(ROOT / "examples" / "sp_mlp.mlir"), "--mesh", "tp=2"])
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert "mpiexec started a job of 2 ranks, but mpi4py is not installed" in proc.stderr
    assert "pip install 'fuserc[mpi]'" in proc.stderr and "torchrun --nproc-per-node 2" in proc.stderr
    assert "needs" not in proc.stderr and "Traceback" not in proc.stderr


def _relu_program(path: Path, mesh: str, shape: str, axes: str) -> Path:
    t = f"tensor<{shape}xf32, #fusion.sharding<@m, {axes}>>"
    path.write_text(
        f"fusion.mesh @m shape = {mesh}\n"
        f"func.func @main(%x: {t}) -> {t} {{\n  %y = fusion.relu %x : ({t}) -> {t}\n  func.return %y : {t}\n}}\n"
    )
    return path


@launches(lambda d: CliRun(2, [_relu_program(d / "big.mlir", "[1000, 1000]", "1000x1000", "[DIDy, DIDx]")]))
def test_mesh_larger_than_the_job_is_refused_before_compiling(ran: Ran) -> None:
    """A mesh of a million devices on 2 ranks: refused at the mesh, with the
    number of ranks it needs, right after parsing (lowering it would take
    seconds; nothing of its size is built)."""
    prog, proc = ran.dir / "big.mlir", ran.proc
    assert proc.returncode == 1, proc.stderr
    assert f"{prog}:1:1: error: the program needs 1000000 ranks (mesh @m uses device 999999) but the job has 2" in proc.stderr
    assert "Traceback" not in proc.stderr


@launches(lambda d: CliRun(2, [_relu_program(d / "huge.mlir", "[2]", "1000000x1000000", "[DIDx, -]")]))
def test_random_inputs_too_large_for_memory(ran: Ran) -> None:
    """10^12 elements of random input: a diagnostic with the bytes needed
    and available, not an allocator traceback."""
    proc = ran.proc
    assert proc.returncode == 1, proc.stderr
    assert "error: the random inputs need 4000000000000 bytes (3.6 TiB) of host memory on each rank" in proc.stderr
    assert "are available" in proc.stderr and "Traceback" not in proc.stderr


def wrong_input_run(d: Path) -> CliRun:
    """programs/collectives.mlir.in given a 3x4 array for its 4x3 %wl."""
    paths = _collectives_inputs(2, d)[1]
    paths[2] = _save(d, "bad", np.zeros((3, 4), np.float32))  # %wl is 4x3
    args: list[object] = [program("collectives.mlir.in", 2, d), "-p", ""]
    for p in paths:
        args += ["-i", p]
    return CliRun(2, args)


@launches(wrong_input_run)
def test_wrong_input_shape(ran: Ran) -> None:
    proc = ran.proc
    assert proc.returncode == 1, proc.stderr
    assert "argument #2 (%wl)" in proc.stderr and "[4, 3]" in proc.stderr and "[3, 4]" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rank_failure_ends_the_job(tmp_path: Path) -> None:
    """Rank 1 raises at its first op while rank 0 blocks in a collective:
    the job ends non-zero with rank 1's message, promptly."""
    prog = program("collectives.mlir.in", 2, tmp_path)
    start = time.monotonic()
    proc = mpirun(2, [prog, "-p", "", "--seed", "1"], env={"FUSERC_FAIL_RANK": "1"}, timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - start < 30
    assert "[rank 1] internal error: InjectedFailure: FUSERC_FAIL_RANK=1: injected failure at" in proc.stderr
    assert "Traceback" not in proc.stderr and "Abort(" not in proc.stderr
    assert proc.stderr.count("injected failure") == 1  # one line, from rank 1


@launches(lambda d: {} if torch.cuda.is_available() else CliRun(1, [program("bf16.mlir.in", 1, d), "-p", "", "--backend", "cuda"]))
def test_cuda_backend_unavailable_is_clean(ran: Ran) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = ran.proc
    assert proc.returncode == 1
    assert "cuda backend cannot run here" in proc.stderr and "Traceback" not in proc.stderr




@launches(lambda d: CliRun(1, [program("bf16.mlir.in", 1, d), "-p", "", "--check"]))
def test_check_needs_a_fusion_function(ran: Ran) -> None:
    proc = ran.proc
    assert proc.returncode == 1
    assert "--check" in proc.stderr and "host program" in proc.stderr


EXAMPLES = Path(__file__).parents[2] / "examples"
LOWERING = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"


@launches(lambda d: CliRun(4, [EXAMPLES / "sp_mlp.mlir", "-p", LOWERING, "--check", "--iters", "2", "--save-outputs", d]))
def test_check_against_the_reference(ran: Ran) -> None:
    """A fusion program compiled by the passes, checked against the
    unsharded float64 reference, and timed (FLOPs of the global program)."""
    proc = ok(ran.proc)
    assert "output 0: max rel error" in proc.stdout and "<= 1e-04 (f32 tolerance): ok" in proc.stdout
    flops = 2 * 128 * 64 * 256 * 2  # two matmuls of the global program
    assert f"{flops} flops on 4 devices" in proc.stdout
    assert np.load(ran.dir / "out0.npy").shape == (128, 64)


def test_time_prints_the_startup_phases() -> None:
    """`--time`: where the time to the first result went, the slowest rank's
    per phase, and a steady run's time."""
    import re

    proc = mpirun(2, [EXAMPLES / "gpt_layer.mlir", "--mesh", "tp=2", "--time", "--check"])
    ok(proc)
    assert "startup of @main (slowest of 2 ranks per phase):" in proc.stderr
    for phase in ("imports", "passes", "backend", "communicators", "kernels", "first run", "steady run", "to first result"):
        assert re.search(rf"^  {phase} +\d+\.\d{{3}} s", proc.stderr, re.M), phase
    assert "<= 1e-04 (f32 tolerance): ok" in proc.stdout


def nonfinite_run(d: Path) -> CliRun:
    """A relu of 4 elements, NaN and -Inf among them, checked."""
    prog = _relu_program(d / "relu.mlir", "[2]", "4", "[DIDx]")
    np.save(d / "x.npy", np.array([np.nan, 1.0, -np.inf, -2.0], np.float32))
    return CliRun(2, [prog, "-i", d / "x.npy", "--check"])


@launches(nonfinite_run)
def test_check_with_nonfinite_inputs(ran: Ran) -> None:
    """Inputs holding NaN or infinities are said; an output holding NaN
    where the reference does passes, as does one that matches it finite."""
    proc = ok(ran.proc)
    assert "input 0 (%x): 1 NaN, 1 -Inf (of 4 values); the reference computes with them too" in proc.stdout
    assert "output 0: 1 NaN (of 4 values) as in the reference; max rel error 0.000e+00 <= 1e-04 (f32 tolerance): ok" in proc.stdout

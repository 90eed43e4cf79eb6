"""stream-pipeline end to end on the cpu backend: every algorithm of every
pipeline (AllGather + GEMM, GEMM + ReduceScatter, an AllGather per chunk,
local Stream splits) under `mpiexec -n 2/4 fuserc run ... --check`, auto's
choices, repeated runs over cached shared buffers, refusals, and the
example programs through the default pipeline.

Each test's `fuserc run`s are made by the function named in its
`@launches`; those of the whole module share a few launches (one per job
size and nodes setting, cli_batch.mpirun_many), and each test checks its own
runs' outcome (the `ran` fixture)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_batch import CliRun, Ran, launches
from harness import BACKEND, mpirun, ok

from fuserc.ir import to_text
from fuserc.runtime.backends.cuda_comm import FENCE_ENV, FENCE_FORMS
from fuserc.runtime.evaluator.program import compile_module

LOWERING = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"
EXAMPLES = Path(__file__).parents[2] / "examples"
RNG = np.random.default_rng(7)


def pipeline(**options: object) -> str:
    opts = " ".join(f"{k.replace('_', '-')}={v}" for k, v in options.items())
    return f"{LOWERING},stream-pipeline{{{opts}}}" if opts else f"{LOWERING},stream-pipeline"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    return path


def checked(n: int, program: Path, pipe: str, *extra: object, env: dict[str, str] | None = None) -> CliRun:
    """A run with --check (and the host IR printed)."""
    return CliRun(n, [program, "-p", pipe, "--backend", "cpu", "--check", "--print-host-ir", *extra], env or {})


def check(proc: Any) -> str:
    """The output of a `checked` run, which passed its check."""
    ok(proc)
    assert "FAILED" not in proc.stdout
    assert proc.stdout.count(": ok") >= 1, proc.stdout
    return proc.stdout


def pipelines(host_ir: str) -> list[dict[str, str]]:
    """The hir.pipeline attributes of a printed host program."""
    return [
        dict(re.findall(r'(\w+) = "?([^", }]*)', m))
        for m in re.findall(r"hir\.pipeline = \{([^}]*)\}", host_ir)
    ]


def links_file(tmp_path: Path, **values: object) -> dict[str, str]:
    """An environment naming a links file with `values` (the rest defaults)."""
    path = tmp_path / "links.json"
    path.write_text(json.dumps(values))
    return {"FUSERC_LINKS": str(path)}


DEFAULT_LINKS = {"copy_engine_gbps": 350}
GEMM_BOUND = {
    "copy_engine_gbps": 350,
    "ipc_fence_us": 10,
    "nccl_busbw_gbps": 0.001,
    "nccl_sm_slowdown": 0,
    "chunk_us": 0,
    "launch_us": 0,
    "gemm_half_gflop": 0,
    "gemm_tflops": {"f32": 1e-6, "bf16": 1e-6},
}
"""A node so slow at these tiny programs' GEMMs and collectives that they
pay for a pipeline (with the default links auto leaves them unpipelined)."""
COMM_BOUND = {"nccl_busbw_gbps": 0.01, "nccl_latency_us": 0, "copy_engine_gbps": 100, "copy_engine_latency_us": 0, "ipc_fence_us": 0, "launch_us": 0}
SLOW_COPY = {"copy_engine_gbps": 0.001, "copy_engine_latency_us": 1000, "ipc_fence_us": 1000}


# --------------------------------------------------------------------------
# Programs, for a team of n devices
# --------------------------------------------------------------------------


def allgather_matmul(n: int, k: int = 1, made: bool = False) -> str:
    """x [DIDx, -] @ w [-, -] -> y [Stream(k n), -] in f32; with `made`,
    gelu(x) @ w: the gathered shard is made by the program."""
    m = 8 * n * k
    x = f"tensor<{m}x12xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    w = "tensor<12x5xf32, #fusion.sharding<@tp, [-, -]>>"
    y = f"tensor<{m}x5xf32, #fusion.sharding<@tp, [Stream({k * n}), -]>>"
    shard = f"  %g = fusion.gelu %x : ({x}) -> {x}\n" if made else ""
    return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: {x}, %w: {w}) -> {y} {{
{shard}  %y = fusion.matmul {"%g" if made else "%x"}, %w : ({x}, {w}) -> {y}
  func.return %y : {y}
}}
"""


def allgather_linear_bias(n: int, k: int = 2) -> str:
    """x [DIDx, -], torch.nn.Linear weight and bias -> y [Stream(k n), -], bf16."""
    m = 4 * n * k
    x = f"tensor<{m}x16xbf16, #fusion.sharding<@tp, [DIDx, -]>>"
    w = "tensor<8x16xbf16, #fusion.sharding<@tp, [-, -]>>"
    b = "tensor<8xbf16, #fusion.sharding<@tp, [-]>>"
    y = f"tensor<{m}x8xbf16, #fusion.sharding<@tp, [Stream({k * n}), -]>>"
    return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: {x}, %w: {w}, %b: {b}) -> {y} {{
  %y = fusion.linear %x, %w, %b : ({x}, {w}, {b}) -> {y}
  func.return %y : {y}
}}
"""


def matmul_reduce_scatter(n: int, k: int = 1, linear: bool = False, residual: bool = False) -> str:
    """x [-, DIDx] @ w [DIDx, -]: the partial product [Stream(k n), -] is
    reduce-scattered to [DIDx, -] (then, with `residual`, a residual r
    [DIDx, -] added and the rows normalized)."""
    m = 4 * n * k
    x = f"tensor<{m}x{4 * n}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    p = f"tensor<{m}x6xf32, #fusion.sharding<@tp, [Stream({k * n}), -], partial = DIDx>>"
    y = f"tensor<{m}x6xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    if linear:
        w = f"tensor<6x{4 * n}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
        op = "fusion.linear"
    else:
        w = f"tensor<{4 * n}x6xf32, #fusion.sharding<@tp, [DIDx, -]>>"
        op = "fusion.matmul"
    if residual:
        g = "tensor<6xf32, #fusion.sharding<@tp, [-]>>"
        return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: {x}, %w: {w}, %r: {y}, %g: {g}) -> {y} {{
  %p = {op} %x, %w : ({x}, {w}) -> {p}
  %y = fusion.set %p : ({p}) -> {y}
  %h = fusion.add %r, %y : ({y}, {y}) -> {y}
  %z = fusion.layer_norm %h, %g dims = [1] : ({y}, {g}) -> {y}
  func.return %z : {y}
}}
"""
    return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %p = {op} %x, %w : ({x}, {w}) -> {p}
  %y = fusion.set %p : ({p}) -> {y}
  func.return %y : {y}
}}
"""


def outer_fusion(n: int, s: int) -> str:
    """x [Stream(s)*DIDx, -] @ w -> y [Stream(s), -]: an Allgather per chunk."""
    m = 4 * n * s
    x = f"tensor<{m}x8xf32, #fusion.sharding<@tp, [Stream({s})*DIDx, -]>>"
    w = "tensor<8x3xf32, #fusion.sharding<@tp, [-, -]>>"
    y = f"tensor<{m}x3xf32, #fusion.sharding<@tp, [Stream({s}), -]>>"
    return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %y = fusion.matmul %x, %w : ({x}, {w}) -> {y}
  func.return %y : {y}
}}
"""


def outer_host(n: int, s: int) -> str:
    """The host program of `outer_fusion` before stream-pipeline: the
    per-chunk gathers, then the GEMM marked with the Stream split."""
    m, r = 4 * n * s, 4 * s
    team = "[" + ", ".join(map(str, range(n))) + "]"
    return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: tensor<{r}x8xf32> {{hir.global = tensor<{m}x8xf32, #fusion.sharding<@tp, [Stream({s})*DIDx, -]>>}},
                %w: tensor<8x3xf32> {{hir.global = tensor<8x3xf32, #fusion.sharding<@tp, [-, -]>>}})
    -> (tensor<{m}x3xf32> {{hir.global = tensor<{m}x3xf32, #fusion.sharding<@tp, [Stream({s}), -]>>}}) attributes {{hir.host}} {{
  %xg = hir.alloc "main/0/0" : tensor<{m}x8xf32>
  hir.for %c = 0 to {s} {{
    %a = hir.chunk %x [%c] dim = 0 chunks = {s} : (tensor<{r}x8xf32>, index) -> tensor<4x8xf32>
    %b = hir.chunk %xg [%c] dim = 0 chunks = {s} : (tensor<{m}x8xf32>, index) -> tensor<{4 * n}x8xf32>
    %t = hir.allgather %a, %b team = {team} backend = nccl {{hir.reshard = "DIDx->Stream", hir.stream = [0, {s}]}} : (tensor<4x8xf32>, tensor<{4 * n}x8xf32>) -> !hir.token
    hir.wait %t : !hir.token
  }}
  %y = hir.alloc "main/1/0" : tensor<{m}x3xf32>
  hir.matmul %xg, %w, %y {{hir.stream = [0, {s}]}} : tensor<{m}x8xf32>, tensor<8x3xf32>, tensor<{m}x3xf32>
  hir.dealloc %xg : tensor<{m}x8xf32>
  func.return %y : tensor<{m}x3xf32>
}}
"""


# --------------------------------------------------------------------------
# AllGather + GEMM
# --------------------------------------------------------------------------

ALGORITHMS = ["collective", "ring", "auto"]


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@launches(lambda d, n, algorithm: checked(n, write(d, "ag", allgather_matmul(n)), pipeline(algorithm=algorithm), env=links_file(d, **GEMM_BOUND)))
def test_allgather_matmul(n: int, algorithm: str, ran: Ran) -> None:
    """DIDx to Stream(n): chunk i from device i; copy engines make auto
    choose the ring where pipelining pays."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert p["algorithm"] == ("ring" if algorithm == "auto" else algorithm)
    assert p["chunks"] == str(n)
    assert "hir.allgather" not in out


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algorithm", ["collective", "ring"])
@launches(lambda d, n, algorithm: checked(n, write(d, "agl", allgather_linear_bias(n)), pipeline(algorithm=algorithm, num_streams=3)))
def test_allgather_linear_bias_two_chunks_per_device(n: int, algorithm: str, ran: Ran) -> None:
    """Linear with bias in bf16, Stream(2n): two chunks from each device."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["chunks"], p["streams"]) == (algorithm, str(2 * n), "3")
    assert "hir.div" in out


def qkv(n: int) -> str:
    """Three column-parallel linears (q, k, v) of one sequence-sharded input:
    one gather feeds three GEMMs; their results summed (so all are used)."""
    m = 4 * n
    x = f"tensor<{m}x16xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    w = f"tensor<{2 * n}x16xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    b = f"tensor<{2 * n}xf32, #fusion.sharding<@tp, [DIDx]>>"
    y = f"tensor<{m}x{2 * n}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    return f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: {x}, %wq: {w}, %bq: {b}, %wk: {w}, %bk: {b}, %wv: {w}, %bv: {b}) -> {y} {{
  %q = fusion.linear %x, %wq, %bq : ({x}, {w}, {b}) -> {y}
  %k = fusion.linear %x, %wk, %bk : ({x}, {w}, {b}) -> {y}
  %v = fusion.linear %x, %wv, %bv : ({x}, {w}, {b}) -> {y}
  %s = fusion.add %q, %k : ({y}, {y}) -> {y}
  %t = fusion.mul %s, %v : ({y}, {y}) -> {y}
  func.return %t : {y}
}}
"""


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algorithm", ["collective", "ring"])
@launches(lambda d, n, algorithm: checked(n, write(d, "qkv", qkv(n)), pipeline(algorithm=algorithm)))
def test_allgather_feeding_three_gemms(n: int, algorithm: str, ran: Ran) -> None:
    """One gathered input of three GEMMs (attention's q, k and v) is one
    site: each chunk feeds the three GEMMs, no gather left whole."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert p["algorithm"] == algorithm
    assert "hir.allgather" not in out
    assert out.count("hir.linear") == (6 if algorithm == "ring" else 3)  # (the ring: own chunk, then peers')


@pytest.mark.parametrize("fence", FENCE_FORMS)
@launches(
    lambda d, fence: checked(
        4, write(d, "ag", allgather_matmul(4)), pipeline(algorithm="ring", num_streams=2), "--warmup", "1", "--iters", "2",
        env={FENCE_ENV: fence},
    )
)  # fmt: skip
def test_allgather_repeated_runs(fence: str, ran: Ran) -> None:
    """The ring's shared buffer is cached and shared once; the fences keep
    later runs from overwriting it while a peer reads: the checked result
    comes from the fourth run. On cuda, with either form of fence (its
    kernel, or stream memory operations)."""
    out = check(ran.proc)
    assert "median" in out


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("k", [1, 2])
@launches(lambda d, n, k: checked(n, write(d, "made", allgather_matmul(n, k, made=True)), pipeline(algorithm="ring"), "--warmup", "1", "--iters", "2"))
def test_allgather_ring_of_a_shard_made_in_place(n: int, k: int, ran: Ran) -> None:
    """A shard the program makes is written into its block of the gathered
    buffer, and peers pull the gathered buffer's blocks (block peer * k +
    sub of S): no copy of the shard; right on every rank, over repeated
    runs of the cached shared buffer."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["chunks"]) == ("ring", str(k * n))
    assert "hir.copy" not in out
    assert re.search(rf"hir\.get %h, %\w+, %\w+ block %\w+ of {k * n} backend = cuda_ipc", out), out


# --------------------------------------------------------------------------
# GEMM + ReduceScatter
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@launches(
    lambda d, n, algorithm: checked(
        n, write(d, "rs", matmul_reduce_scatter(n)), pipeline(algorithm=algorithm), "--warmup", "1", "--iters", "1",
        env=links_file(d, **GEMM_BOUND),
    )
)  # fmt: skip
def test_matmul_reduce_scatter(n: int, algorithm: str, ran: Ran) -> None:
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert p["chunks"] == str(n)
    if algorithm != "auto":
        assert p["algorithm"] == algorithm
    assert "hir.reduce_scatter" not in out


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("form", ["sum", "pull"])
@launches(lambda d, n, form: checked(n, write(d, "rsf", matmul_reduce_scatter(n)), pipeline(algorithm="ring", ring_form=form)))
def test_reduce_scatter_ring_forms(n: int, form: str, ran: Ran) -> None:
    """Both forms of the GEMM+ReduceScatter ring, one chunk per device. The
    sum form puts running sums into the peers' partial buffers and, at step
    d - 2, straight into their outputs; the pull form pulls each device's
    partial blocks into a local buffer and adds them after its own GEMM."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["chunks"], p["form"]) == ("ring", str(n), form)
    assert ("hir.launch" in out) == (form == "pull")  # the pull form's final add
    assert ("hir.get %" in out, "hir.put %" in out) == (form == "pull", form == "sum")


@pytest.mark.parametrize("n", [2, 4])
@launches(lambda d, n: checked(n, write(d, "rsn", matmul_reduce_scatter(n, residual=True)), pipeline(algorithm="ring", ring_form="pull"), "--warmup", "1", "--iters", "1"))
def test_reduce_scatter_pull_adds_in_its_reader(n: int, ran: Ran) -> None:
    """The pull form's final add folded into the launch after it (the
    residual add and the norm): one launch reads the own block and the
    n - 1 pulled ones, and the result passes --check on a second run."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["form"]) == ("ring", "pull")
    launches_ = re.findall(r"hir\.launch ins\(([^:]*):", out)
    assert len(launches_) == 1, launches_
    assert len(launches_[0].split(",")) == n + 2  # the residual, the own block, n - 1 pulled, the weight
    assert out.count("fusion.add") == n and "fusion.layer_norm" in out


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("form", ["sum", "pull"])
@pytest.mark.parametrize("fence", FENCE_FORMS)
@launches(
    lambda d, n, form, fence: checked(
        n, write(d, "rsr", matmul_reduce_scatter(n, k=2)), pipeline(algorithm="ring", num_streams=3, ring_form=form),
        "--warmup", "1", "--iters", "2", env={FENCE_ENV: fence},
    )
)  # fmt: skip
def test_reduce_scatter_ring_repeated_runs(n: int, form: str, fence: str, ran: Ran) -> None:
    """The ring's shared buffers (the partial products, and the outputs in
    the sum form) are cached and shared once; later runs must not overwrite
    a sum, a partial or an output a peer still reads: the checked result
    comes from the fourth run, with two sub-rings, under either form of
    fence on cuda."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["chunks"], p["form"]) == ("ring", str(2 * n), form)
    assert "median" in out


def linear_bias_reduce_scatter() -> str:
    """torch.nn.Linear (with bias) row-parallel on 4 devices, the result
    written [DIDx*Stream(2), -]."""
    x = "tensor<64x32xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    w = "tensor<16x32xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    b = "tensor<16xf32, #fusion.sharding<@tp, [-]>>"
    y = "tensor<64x16xf32, #fusion.sharding<@tp, [DIDx*Stream(2), -]>>"
    text = f"""fusion.mesh @tp shape = [4]
func.func @main(%x: {x}, %w: {w}, %b: {b}) -> {y} {{
  %y = fusion.linear %x, %w, %b : ({x}, {w}, {b}) -> {y}
  func.return %y : {y}
}}
"""
    return text


@launches(lambda d: checked(4, write(d, "rsb", linear_bias_reduce_scatter()), pipeline(), env=links_file(d, **GEMM_BOUND)))
def test_linear_bias_reduce_scatter_two_chunks_per_device(ran: Ran) -> None:
    """torch.nn.Linear (with bias) row-parallel, the result written
    [DIDx*Stream(2), -]: S = 2d, chunk c reduced to device c / 2; the bias
    is added once, after the reduction; auto runs the ring (two sub-rings)."""
    out = check(ran.proc)
    (p,) = [p for p in pipelines(out) if p["algorithm"] != "local"]  # (the bias add runs in chunks too)
    assert (p["algorithm"], p["chunks"]) == ("ring", "8")
    assert "fusion.add" in out


@launches(lambda d: checked(4, write(d, "rsl", matmul_reduce_scatter(4, k=2, linear=True)), pipeline(), env=links_file(d, **GEMM_BOUND)))
def test_linear_reduce_scatter_two_chunks_per_device(ran: Ran) -> None:
    """S = 2d written on the partial product of a linear without bias."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["chunks"]) == ("ring", "8")


# --------------------------------------------------------------------------
# An AllGather per chunk: [Stream(S)*DIDx, -] to [Stream(S), -]
# --------------------------------------------------------------------------


def per_chunk_run(d: Path, n: int, algorithm: str, s: int = 3) -> CliRun:
    """`outer_host(n, s)` through stream-pipeline on random inputs, saved."""
    prog = write(d, "outer", outer_host(n, s))
    np.save(d / "x.npy", RNG.standard_normal((4 * n * s, 8)).astype(np.float32))
    np.save(d / "w.npy", RNG.standard_normal((8, 3)).astype(np.float32))
    args = [prog, "-p", f"stream-pipeline{{algorithm={algorithm}}}", "--backend", "cpu", "--print-host-ir"]
    args += ["-i", d / "x.npy", "-i", d / "w.npy", "--save-outputs", d / "out"]
    return CliRun(n, [*args, "--warmup", "1", "--iters", "1"])


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("algorithm", ["none", "collective", "ring"])
@launches(per_chunk_run)
def test_allgather_per_chunk(n: int, algorithm: str, ran: Ran) -> None:
    """The host program as lower-to-host-ir makes it, pipelined, against
    NumPy (each device holds one block of every chunk)."""
    proc = ok(ran.proc)
    x, w = np.load(ran.dir / "x.npy"), np.load(ran.dir / "w.npy")
    np.testing.assert_allclose(np.load(ran.dir / "out" / "out0.npy"), x @ w, rtol=1e-5, atol=1e-5)
    found = pipelines(proc.stdout)
    if algorithm == "none":  # the loop and the GEMM say why they run as they are
        assert [p["algorithm"] for p in found] == ["none", "none"], found
        assert proc.stdout.count('reason = "algorithm = none requested"') == 2
    else:
        assert [p["algorithm"] for p in found] == [algorithm]


@pytest.mark.parametrize("algorithm", ["collective", "ring"])
@launches(lambda d, algorithm: CliRun(2, [write(d, "outer", outer_fusion(2, 2)), "-p", pipeline(algorithm=algorithm), "--backend", "cpu", "--check", "--print-host-ir"]))
def test_allgather_per_chunk_from_fusion(algorithm: str, ran: Ran) -> None:
    """The same written as a fusion program (a Stream split outside a
    device split), through the whole pipeline."""
    proc = ok(ran.proc)
    assert [p["algorithm"] for p in pipelines(proc.stdout)] == [algorithm]


# --------------------------------------------------------------------------
# Local Stream splits, auto, refusals
# --------------------------------------------------------------------------


def local_stream_split() -> str:
    """A GEMM of 2 devices with a Stream split on its result's columns."""
    rows = "#fusion.sharding<@tp, [DIDx, -]>"
    x = f"tensor<16x8xf32, {rows}>"
    w = "tensor<8x6xf32, #fusion.sharding<@tp, [-, -]>>"
    y = "tensor<16x6xf32, #fusion.sharding<@tp, [DIDx, Stream(3)]>>"
    text = f"""fusion.mesh @tp shape = [2]
func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %y = fusion.matmul %x, %w : ({x}, {w}) -> {y}
  func.return %y : {y}
}}
"""
    return text


@launches(lambda d: checked(2, write(d, "local", local_stream_split()), pipeline()))
def test_local_stream_split(ran: Ran) -> None:
    """A Stream split on the columns of a GEMM that needs no communication:
    the GEMM in chunks of columns on rotating streams."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p["chunks"]) == ("local", "3")


def sp_mlp_runs(d: Path) -> dict[str, CliRun]:
    """sp_mlp.mlir with slow communication, with the default links, lowered."""
    prog = EXAMPLES / "sp_mlp.mlir"
    (d / "slow").mkdir()
    return {
        "slow": checked(4, prog, "default", env=links_file(d / "slow", **COMM_BOUND)),
        "plain": checked(4, prog, "default", env=links_file(d, **DEFAULT_LINKS)),
        "lowered": checked(4, prog, f"{LOWERING},plan-memory"),
    }


@launches(sp_mlp_runs)
def test_auto_adds_pipelines_where_they_pay(ran: Ran) -> None:
    """sp_mlp.mlir writes no Stream split. Where communication is slow next
    to compute, auto pipelines its AllGather + GEMM and its GEMM +
    ReduceScatter; with the default links nothing pays at this size and
    the host program is the unpipelined one (its buffers planned as the
    default pipeline plans them), exactly."""
    out = check(ran.procs["slow"])
    found = pipelines(out)
    assert [p["algorithm"] for p in found] == ["ring", "ring"], found
    assert "hir.allgather" not in out and "hir.reduce_scatter" not in out
    plain = check(ran.procs["plain"])
    lowered = check(ran.procs["lowered"])
    assert plain == lowered


@launches(lambda d: checked(4, write(d, "ag", allgather_matmul(4)), "default", env=links_file(d, **{**GEMM_BOUND, **SLOW_COPY})))
def test_auto_collective_without_copy_engines(ran: Ran) -> None:
    out = check(ran.proc)
    assert [p["algorithm"] for p in pipelines(out)] == ["collective"]


@launches(lambda d: checked(4, write(d, "ag", allgather_matmul(4)), "default"))
def test_auto_declines_a_written_split_that_does_not_pay(ran: Ran) -> None:
    """With the default links a written Stream split of a tiny GEMM is not
    worth its per-chunk cost: the program runs unpipelined (and right), and
    the GEMM says why."""
    out = check(ran.proc)
    found = pipelines(out)  # on the allgather and on the GEMM, both marked with the split
    assert [p["algorithm"] for p in found] == ["none", "none"], found
    assert out.count('reason = "cost model (defaults): none') == 2
    assert "hir.allgather" in out and "hir.for" not in out


def uneven_split() -> str:
    """Stream(6) of a GEMM's rows gathered from 4 devices."""
    x = "tensor<48x8xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    w = "tensor<8x4xf32, #fusion.sharding<@tp, [-, -]>>"
    y = "tensor<48x4xf32, #fusion.sharding<@tp, [Stream(6), -]>>"
    text = f"""fusion.mesh @tp shape = [4]
func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %y = fusion.matmul %x, %w : ({x}, {w}) -> {y}
  func.return %y : {y}
}}
"""
    return text


@launches(lambda d: CliRun(4, [write(d, "uneven", uneven_split()), "--backend", "cpu"]))
def test_uneven_split_is_refused(ran: Ran) -> None:
    """Stream(6) over 4 devices: chunk 1 would span two devices."""
    prog = ran.dir / "uneven.mlir"
    proc = ran.proc
    assert proc.returncode == 1, proc.stderr
    assert f"{prog}:3:3: error: stream-pipeline: Stream(6) does not fit the rows gathered from the 4 devices" in proc.stderr
    assert "S must be a multiple of 4" in proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------
# Rings across nodes: 4 ranks as 2 nodes of 2
# --------------------------------------------------------------------------

NODES = {"FUSERC_GPUS_PER_NODE": "2"}
SLOW_NET = {**GEMM_BOUND, "net_latency_us": 1e6}
"""Rings and collectives pay here on one node; between nodes every
transfer waits a second."""


def across_nodes_run(d: Path, program: str, form: str) -> CliRun:
    """The AllGather + GEMM or GEMM + ReduceScatter ring as 2 nodes of 2."""
    text = allgather_matmul(4) if program == "ag" else matmul_reduce_scatter(4)
    options = {"ring_form": form} if form else {}
    return checked(4, write(d, program, text), pipeline(**options), env={**NODES, **links_file(d, **GEMM_BOUND)})


@pytest.mark.parametrize("program,form", [("ag", ""), ("rs", "sum"), ("rs", "pull")])
@launches(across_nodes_run)
def test_auto_keeps_the_ring_across_nodes(program: str, form: str, ran: Ran) -> None:
    """auto rings as on one node; peers of one node copy over shared
    buffers (gets, or the sum form's puts) and peers of the other node
    send and receive; the results pass --check."""
    out = check(ran.proc)
    (p,) = pipelines(out)
    assert (p["algorithm"], p.get("form", "")) == ("ring", form), p
    assert "FUSERC_GPUS_PER_NODE=2): ring(S=4" in out
    assert "hir.send %" in out and "hir.recv %" in out
    assert ("hir.put %" if form == "sum" else "hir.get %") in out
    assert "hir.allgather" not in out and "hir.reduce_scatter" not in out


@launches(lambda d: checked(4, write(d, "ag", allgather_matmul(4)), "default", env={**NODES, **links_file(d, **SLOW_NET)}))
def test_auto_weighs_the_network(ran: Ran, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same links rank the ring first on one node; as 2 nodes, with a
    network of a second's latency, every pipeline waits for it per step and
    the program runs unpipelined (and right)."""
    text = allgather_matmul(4)
    monkeypatch.setenv("FUSERC_LINKS", links_file(ran.dir, **SLOW_NET)["FUSERC_LINKS"])
    one_node = to_text(compile_module(text, "ag.mlir", "main", "default").host)
    assert [p["algorithm"] for p in pipelines(one_node)][0] == "ring"
    out = check(ran.proc)
    assert [p["algorithm"] for p in pipelines(out)] == ["none", "none"]
    assert "FUSERC_GPUS_PER_NODE=2): none " in out and "hir.send" not in out


@launches(lambda d: checked(4, write(d, "ag", allgather_matmul(4)), pipeline(algorithm="ring"), env=links_file(d, **GEMM_BOUND, gpus_per_node=2)))
def test_the_job_nodes_reach_the_compiler(ran: Ran, monkeypatch: pytest.MonkeyPatch) -> None:
    """A links file of nodes of 2 GPUs: compiled outside a job the ring
    sends between them; run as a job of 4 ranks on one machine, the ring
    compiled there copies between all four over shared buffers, as the
    runtime groups them, and says why."""
    text = allgather_matmul(4)
    monkeypatch.setenv("FUSERC_LINKS", links_file(ran.dir, **GEMM_BOUND, gpus_per_node=2)["FUSERC_LINKS"])
    alone = to_text(compile_module(text, "ag.mlir", "main", pipeline(algorithm="ring")).host)
    assert "hir.send %" in alone
    out = check(ran.proc)
    assert "the job's nodes of 4 ranks): ring(S=4" in out
    assert "hir.send" not in out and "hir.get %" in out


@pytest.mark.parametrize("site,form", [("ag", ""), ("rs", "pull"), ("rs", "sum")])
def test_rings_under_torchrun(site: str, form: str, tmp_path: Path) -> None:
    """torchrun's world has no MPI windows for the cpu backend's peer
    copies: there each rank is a node of its own (`MpiEnv.copy_nodes`), so
    rings send and receive, and the reason says so; on cuda they copy over
    CUDA IPC as under mpiexec. Checked against the reference either way."""
    text = allgather_matmul(4) if site == "ag" else matmul_reduce_scatter(4)
    pipe = pipeline(algorithm="ring", **({"ring_form": form} if form else {}))
    out = check(mpirun(4, [write(tmp_path, site, text), "-p", pipe, "--backend", "cpu", "--check", "--print-host-ir"], launch="torchrun"))
    (p,) = pipelines(out)
    assert p["algorithm"] == "ring" and p.get("form", "") == form
    if BACKEND == "cpu":
        assert "the job's nodes of 1 rank)" in out
        assert "hir.send %" in out and "hir.recv %" in out and "hir.get %" not in out and "hir.put %" not in out
    else:
        assert "hir.send" not in out


GPU_SIZED = ("allgather_matmul_large.mlir", "matmul_reduce_scatter_large.mlir", "long_context.mlir")
FOUR_RANK_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.mlir") if p.name not in GPU_SIZED)


@pytest.mark.parametrize("example", FOUR_RANK_EXAMPLES)
@launches(lambda d, example: CliRun(4, [EXAMPLES / example, "--backend", "cpu", "--check"]))
def test_examples_run_with_the_default_pipeline(example: str, ran: Ran) -> None:
    """Every example (but the GPU-sized ones) under `-p default`."""
    ok(ran.proc)


def test_links_helper_measures_a_node(tmp_path: Path) -> None:
    """runtime/backends/links.py writes a links file the cost model reads; auto's
    reason names it."""
    from harness import mpirun_python

    from fuserc.passes.cost_model import load_machine

    out = tmp_path / "links.json"
    script = Path(__file__).parents[2] / "runtime" / "backends" / "links.py"
    ok(mpirun_python(2, script, ["--backend", "cpu", "--gemm", "64", "--bytes", "65536", "--out", out]))
    machine = load_machine(out)
    assert machine.gpus_per_node == 2 and machine.source == str(out)
    assert min(machine.gemm_tflops["f32"], machine.copy_engine_gbps, machine.nccl_busbw_gbps, machine.hbm_gbps) > 0
    prog = write(tmp_path, "ag", allgather_matmul(2))
    run = checked(2, prog, "default", env={"FUSERC_LINKS": str(out)})
    host = check(mpirun(run.n, run.args, env=run.env))
    assert f"cost model ({out})" in host


GPT_LAYER = Path(__file__).parents[1] / "lit" / "passes" / "Inputs" / "gpt_layer_bf16.mlir"
SLOW_GEMM = {"gemm_tflops": {"f32": 1e-6, "bf16": 1e-6}, "gemm_half_gflop": 0, "nccl_busbw_gbps": 0.001}


@launches(lambda d: checked(4, GPT_LAYER, "autodiff,default", "--entry", "main_bwd", env=links_file(d, **SLOW_GEMM)))
def test_backward_shares_its_weight_gradients_between_collectives(ran: Ran) -> None:
    """GEMMs slow enough that one weight gradient hides a collective: the
    layer's backward moves an MLP weight gradient from beside the
    reduce-scatter to beside the gather after it (schedule.share_compute),
    and NCCL slow enough that both reduce-scatters, beside weight
    gradients, are copy-engine pulls (schedule.pull_beside); its gradients
    still pass --check on 4 ranks."""
    out = check(ran.proc)
    bwd = out[out.index("func.func @main_bwd") :]
    assert "hir.reduce_scatter" not in bwd and bwd.count('backend = cuda_ipc {hir.reshard = "partial->DIDx"}') == 6
    gathers = list(re.finditer(r"(%tok\w*) = hir\.allgather", bwd))
    assert len(gathers) == 2
    gather = gathers[1]  # the attention block's cotangent, after the MLP's reduce-scatter
    between = bwd[gather.end() : bwd.index(f"hir.wait {gather.group(1)} ")]
    assert "hir.matmul" in between

"""Stream splits nvFuser's multi-device tests write (its
test_multidevice_stream_parallel_type.cpp and Python overlap tests), ported
to fusion programs on 4 ranks: a Stream split on the result of a plain
allgather, allreduce or reduce-scatter (one collective per chunk), nvFuser's
explicit device dimension (`x [S, d, M/(S*d), K]`) for AllGather + GEMM
and GEMM + ReduceScatter, a matmul + AllReduce, the DIDx-to-Stream
allgather without a GEMM, the row-parallel linear with an allreduce per
chunk, GEMM + ReduceScatter (explicit layout) and GEMM + AllReduce with
the split on the partial product, alltoalls with a Stream split (per chunk, on a 1-D mesh or in every
column of a 2-D one, or whole and explained where the split cuts the
gathered dimension). Each runs under the
collective pipelines, the rings where they exist, and auto, against the
float64 reference (tests/e2e/batch.py, one mpiexec launch); and again as 2 nodes of 2 ranks ($FUSERC_GPUS_PER_NODE=2),
where the rings move chunks between nodes by send/recv (the cpu backend
refuses a peer copy across nodes, as CUDA IPC does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import BACKEND, MPI_ENV, MPIEXEC

from fuserc.dialects import hir
from fuserc.ir import to_text
from fuserc.runtime.evaluator.evaluator import find_host_program
from fuserc.runtime.evaluator.program import compile_module

HERE = Path(__file__).parent
BATCH = HERE / "batch.py"
LOWERING = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"
N = 4


def t(shape: str, axes: str, partial: str = "", elem: str = "f32") -> str:
    extra = f", partial = {partial}" if partial else ""
    return f"tensor<{shape}x{elem}, #fusion.sharding<@tp, [{axes}]{extra}>>"


def program(args: list[tuple[str, str]], body: list[tuple[str, str, list[str], str]], result: str) -> str:
    """`body`: (name, op text after the operands, operand names, result type)."""
    types = dict(args)
    lines = [f"fusion.mesh @tp shape = [{N}]"]
    sig = ", ".join(f"%{n}: {ty}" for n, ty in args)
    ret = types_of = ""
    lines.append(f"func.func @main({sig}) -> {result} {{")
    for name, op, operands, ty in body:
        ins = ", ".join(f"%{o}" for o in operands)
        op_name, _, keywords = op.partition(" ")
        kw = f" {keywords}" if keywords else ""
        lines.append(f"  %{name} = {op_name} {ins}{kw} : ({', '.join(types[o] for o in operands)}) -> {ty}")
        types[name] = ty
        ret, types_of = name, ty
    lines += [f"  func.return %{ret} : {types_of}", "}", ""]
    return "\n".join(lines)


PROGRAMS: dict[str, str] = {
    # nvFuser's Allgather: tv0 [4, d] DIDx on dim 1 -> tv1 [Stream, -]
    "allgather": program(
        [("x", t("4x8", "-, DIDx"))], [("y", "fusion.set", ["x"], t("4x8", "Stream(4), -"))], t("4x8", "Stream(4), -")
    ),
    # Allreduce: a sum over the device dimension, Stream on dim 0
    "allreduce": program(
        [("x", t("4x4x8", "-, DIDx, -"))],
        [("y", "fusion.sum dims = [1]", ["x"], t("4x8", "Stream(4), -"))],
        t("4x8", "Stream(4), -"),
    ),
    # ReduceScatter: the same sum scattered over the next dimension
    "reduce_scatter": program(
        [("x", t("4x4x4x8", "-, DIDx, -, -"))],
        [("y", "fusion.sum dims = [1]", ["x"], t("4x4x8", "Stream(4), DIDx, -"))],
        t("4x4x8", "Stream(4), DIDx, -"),
    ),
    # AG_matmul: x [S, DIDx(d), M/(S*d), K] @ w [K, N] -> [Stream(S), d, M/(S*d), N]
    "ag_matmul": program(
        [("x", t("2x4x4x16", "-, DIDx, -, -")), ("w", t("16x8", "-, -"))],
        [("y", "fusion.matmul", ["x", "w"], t("2x4x4x8", "Stream(2), -, -, -"))],
        t("2x4x4x8", "Stream(2), -, -, -"),
    ),
    # matmul_AR: x [S, DIDx(d), M/S, K/d] @ w [DIDx(d), K/d, N], summed over d
    "matmul_ar": program(
        [("x", t("2x4x8x4", "-, DIDx, -, -")), ("w", t("4x4x6", "DIDx, -, -"))],
        [
            ("p", "fusion.matmul", ["x", "w"], t("2x4x8x6", "Stream(2), DIDx, -, -")),
            ("y", "fusion.sum dims = [1]", ["p"], t("2x8x6", "Stream(2), -, -")),
        ],
        t("2x8x6", "Stream(2), -, -"),
    ),
    # matmul_RS_through_bcast: x [S, DIDx(d), d, M/(S*d), K/d] @ broadcast w
    # [1, DIDx(d), 1, K/d, N], summed over d and scattered over the next d
    "matmul_rs_bcast": program(
        [("x", t("2x4x4x3x2", "-, DIDx, -, -, -")), ("w", t("4x2x5", "DIDx, -, -"))],
        [
            ("wb", "fusion.broadcast_in_dim dims = [1, 3, 4]", ["w"], t("1x4x1x2x5", "-, DIDx, -, -, -")),
            ("p", "fusion.matmul", ["x", "wb"], t("2x4x4x3x5", "Stream(2), DIDx, -, -, -")),
            ("y", "fusion.sum dims = [1]", ["p"], t("2x4x3x5", "Stream(2), DIDx, -, -")),
        ],
        t("2x4x3x5", "Stream(2), DIDx, -, -"),
    ),
    # AllgatherP2p: x [DIDx, -] -> [Stream(d), -], no GEMM
    "allgather_p2p": program(
        [("x", t("8x4", "DIDx, -"))], [("y", "fusion.set", ["x"], t("8x4", "Stream(4), -"))], t("8x4", "Stream(4), -")
    ),
    # AG_matmul_P2p, two chunks per device
    "ag_matmul_2d": program(
        [("x", t("32x12", "DIDx, -")), ("w", t("12x5", "-, -"))],
        [("y", "fusion.matmul", ["x", "w"], t("32x5", "Stream(8), -"))],
        t("32x5", "Stream(8), -"),
    ),
    # The row-parallel linear of nvFuser's overlap tests: a linear of
    # [t, 4h] split on 4h, then an allreduce per chunk of the rows
    "row_parallel_linear": program(
        [("x", t("12x16", "-, DIDx")), ("w", t("4x16", "-, DIDx"))],
        [("y", "fusion.linear", ["x", "w"], t("12x4", "Stream(3), -"))],
        t("12x4", "Stream(3), -"),
    ),
    # GEMM + ReduceScatter written on the partial product, two chunks per device
    "matmul_rs_2d": program(
        [("x", t("32x16", "-, DIDx")), ("w", t("16x6", "DIDx, -"))],
        [
            ("p", "fusion.matmul", ["x", "w"], t("32x6", "Stream(8), -", partial="DIDx")),
            ("y", "fusion.set", ["p"], t("32x6", "DIDx, -")),
        ],
        t("32x6", "DIDx, -"),
    ),
    # GEMM + ReduceScatter in the explicit layout, the Stream split written
    # on the partial product: a reduce-scatter per chunk of the GEMM
    "matmul_rs_explicit": program(
        [("x", t("2x4x4x16", "-, -, -, DIDx")), ("w", t("16x8", "DIDx, -"))],
        [
            ("p", "fusion.matmul", ["x", "w"], t("2x4x4x8", "Stream(2), -, -, -", partial="DIDx")),
            ("y", "fusion.set", ["p"], t("2x4x4x8", "-, DIDx, -, -")),
        ],
        t("2x4x4x8", "-, DIDx, -, -"),
    ),
    # GEMM + AllReduce written on the partial product: an allreduce per chunk
    "matmul_ar_partial": program(
        [("x", t("8x16", "-, DIDx")), ("w", t("16x8", "DIDx, -"))],
        [
            ("p", "fusion.matmul", ["x", "w"], t("8x8", "Stream(2), -", partial="DIDx")),
            ("y", "fusion.set", ["p"], t("8x8", "-, -")),
        ],
        t("8x8", "-, -"),
    ),
    # A reduce-scatter onto dim 2 of a partial product split on dim 0 (chunks
    # of extent 4): per chunk of the split once the scattered dim is first
    "matmul_rs_partial_stream": program(
        [("x", t("4x8x8x16", "-, -, -, DIDx")), ("w", t("16x8", "DIDx, -"))],
        [
            ("p", "fusion.matmul", ["x", "w"], t("4x8x8x8", "Stream(2), -, -, -", partial="DIDx")),
            ("y", "fusion.set", ["p"], t("4x8x8x8", "-, -, DIDx, -")),
        ],
        t("4x8x8x8", "-, -, DIDx, -"),
    ),
    # An alltoall (DIDx from dim 1 to dim 2) with Stream on dim 0: one per chunk
    "alltoall_chunks": program(
        [("x", t("2x8x8", "-, DIDx, -"))], [("y", "fusion.set", ["x"], t("2x8x8", "Stream(2), -, DIDx"))], t("2x8x8", "Stream(2), -, DIDx")
    ),
    # An alltoall whose Stream split cuts the dimension it gathers: whole, explained
    "alltoall_gathered": program(
        [("x", t("8x8", "DIDx, -"))], [("y", "fusion.set", ["x"], t("8x8", "Stream(2), DIDx"))], t("8x8", "Stream(2), DIDx")
    ),
    # An alltoall with the Stream split inside the device split it makes
    # (`DIDx*Stream(2)`): one alltoall per column chunk of each block
    "alltoall_scattered": program(
        [("x", t("8x16", "DIDx, -"))],
        [("y", "fusion.set", ["x"], t("8x16", "-, DIDx*Stream(2)"))],
        t("8x16", "-, DIDx*Stream(2)"),
    ),
    # On a 2-D mesh, the alltoall of every column is one op (its team with
    # its translates): per chunk, as on a 1-D mesh
    "alltoall_mesh2d": """fusion.mesh @g shape = [2, 2]
func.func @main(%x: tensor<8x8xf32, #fusion.sharding<@g, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>> {
  %y = fusion.relu %x : (tensor<8x8xf32, #fusion.sharding<@g, [DIDy, DIDx]>>) -> tensor<8x8xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>>
  func.return %y : tensor<8x8xf32, #fusion.sharding<@g, [-, DIDy*Stream(2)]>>
}
""",
    # An allgather per chunk of an interleaved shard
    "ag_interleaved": program(
        [("x", t("32x8", "Stream(2)*DIDx, -")), ("w", t("8x3", "-, -"))],
        [("y", "fusion.matmul", ["x", "w"], t("32x3", "Stream(2), -"))],
        t("32x3", "Stream(2), -"),
    ),
}

EXPLAINED = ("alltoall_gathered",)
"""Programs whose Stream split cannot run per chunk: every algorithm leaves
them whole, with hir.pipeline = none and why."""

ONE_NODE = {
    "collective": f"{LOWERING},stream-pipeline{{algorithm=collective}}",
    "ring": f"{LOWERING},stream-pipeline{{algorithm=ring}}",
    "auto": "default",
}
RINGS = ("ag_matmul", "allgather_p2p", "ag_matmul_2d", "matmul_rs_2d", "ag_interleaved")
TWO_NODES = {
    "ring": f"{LOWERING},stream-pipeline{{algorithm=ring}}",
    "ring_sum": f"{LOWERING},stream-pipeline{{algorithm=ring ring-form=sum}}",
    "ring_pull": f"{LOWERING},stream-pipeline{{algorithm=ring ring-form=pull}}",
}
NODES_ENV_NAME = "FUSERC_GPUS_PER_NODE"
NODES_ENV = {NODES_ENV_NAME: "2"}


def _launch(cases: dict[str, dict[str, str]], directory: Path, env: dict[str, str]) -> dict[str, dict]:
    """One batch.py job: {program: pipelines} -> results by `program/pipeline`."""
    listing = []
    for name, pipelines in cases.items():
        path = directory / f"{name}.mlir"
        path.write_text(PROGRAMS[name])
        listing.append({"id": name, "file": str(path), "pipelines": pipelines})
    spec = directory / "cases.json"
    spec.write_text(json.dumps(listing))
    cmd = [MPIEXEC, "-n", str(N), sys.executable, str(BATCH), str(spec), "--backend", BACKEND]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "5", "600", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **MPI_ENV, **env}, timeout=630)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("E2E-RESULT "):
            r = json.loads(line.split(" ", 1)[1])
            out[r["id"]] = r
    if not out:
        out["job"] = {"status": "crash", "detail": f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"}
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    one = _launch({name: ONE_NODE for name in PROGRAMS}, tmp_path_factory.mktemp("one_node"), {})
    two = _launch({name: TWO_NODES for name in RINGS}, tmp_path_factory.mktemp("two_nodes"), NODES_ENV)
    return {**{f"one/{k}": v for k, v in one.items()}, **{f"two/{k}": v for k, v in two.items()}}


ITEMS = [("one", n, p) for n in PROGRAMS for p in ONE_NODE] + [("two", n, p) for n in RINGS for p in TWO_NODES]


@pytest.mark.parametrize("nodes,name,pipe", ITEMS, ids=[f"{a}-{b}-{c}" for a, b, c in ITEMS])
def test_checked(nodes: str, name: str, pipe: str, results: dict[str, dict]) -> None:
    """Every program under every pipeline (on one node, and as 2 nodes of 2
    ranks for the rings) within --check's tolerance of the reference."""
    r = results.get(f"{nodes}/{name}/{pipe}") or results.get(f"{nodes}/job")
    assert r is not None, "the batch reported nothing for this case"
    assert r["status"] == "ok", f"{r['status']}:\n{r.get('detail', '')}\n\n{PROGRAMS[name]}"


# --------------------------------------------------------------------------
# The host programs
# --------------------------------------------------------------------------


def host(name: str, spec: str) -> str:
    return to_text(compile_module(PROGRAMS[name], f"{name}.mlir", "main", spec).host)


def plans(text: str) -> list[str]:
    import re

    return re.findall(r'hir\.pipeline = \{algorithm = "(\w+)"', text)


def unexplained(text: str) -> list[str]:
    """Lines with a Stream split marker and no plan, outside the loops of
    per-chunk collectives (whose loop carries the plan)."""
    out, depth_of_loop, depth = [], [], 0
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("hir.for") and s.endswith("{"):
            depth_of_loop.append(depth)
        if "hir.stream = [" in s and "hir.pipeline" not in s and not depth_of_loop:
            out.append(s)
        depth += s.count("{") - s.count("}")
        while depth_of_loop and depth <= depth_of_loop[-1]:
            depth_of_loop.pop()
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_stream_split_pipelined_or_explained(name: str) -> None:
    """Forced to the collective algorithm, every program has a pipelined
    loop; under auto (default links: these shapes are too small to pay)
    every op still marked with the split carries hir.pipeline = none and
    why. Either way no marked op is left without a plan."""
    coll = host(name, ONE_NODE["collective"])
    assert ("none" if name in EXPLAINED else "collective") in plans(coll), coll
    auto = host(name, "default")
    assert "none" in plans(auto), auto
    for text in (coll, auto, host(name, ONE_NODE["ring"])):
        assert not unexplained(text), unexplained(text)


def test_per_chunk_collectives_in_one_loop() -> None:
    """nvFuser's matmul_AR: the batched GEMM, the sum over the device
    dimension and the allreduce of each chunk in one loop, on rotating
    streams; ReduceScatter: a reduce-scatter per chunk, no alltoall."""
    text = host("matmul_ar", ONE_NODE["collective"])
    loop = text[text.index("hir.for %c = 0 to 2"):]
    loop = loop[: loop.index('hir.pipeline = {algorithm = "collective"')]
    assert ["hir.matmul" in loop, "fusion.sum" in loop, "hir.allreduce" in loop] == [True] * 3, loop
    rs = host("reduce_scatter", ONE_NODE["collective"])
    assert "hir.reduce_scatter" in rs and "hir.alltoall" not in rs, rs


def test_explicit_gemm_reduce_scatter_and_alltoall_per_chunk() -> None:
    """GEMM + ReduceScatter (explicit layout) or + AllReduce written on the
    partial product runs its GEMM and collective chunk by chunk in one loop;
    an alltoall with
    a Stream split on a dimension it does not exchange, or inside the
    device split it makes, or the alltoall of every column of a 2-D mesh
    (one op, its team translated), runs one alltoall per chunk; one whose
    split cuts what it gathers says why it runs whole."""
    cases = (
        ("matmul_rs_explicit", ["hir.matmul", "hir.reduce_scatter"]),
        ("matmul_ar_partial", ["hir.matmul", "hir.allreduce"]),
        ("matmul_rs_partial_stream", ["fusion.matmul", "hir.reduce_scatter"]),
        ("alltoall_chunks", ["hir.alltoall"]),
        ("alltoall_scattered", ["hir.alltoall"]),
        ("alltoall_mesh2d", ["hir.alltoall %pc, %yc team = [0, 2] translated [2 step 1]"]),
    )
    for name, ops in cases:
        text = host(name, ONE_NODE["collective"])
        loop = text[text.index("hir.for %c = 0 to 2"):]
        loop = loop[: loop.index('hir.pipeline = {algorithm = "collective"')]
        assert all(op in loop for op in ops), text
    text = host("alltoall_gathered", ONE_NODE["collective"])
    assert "cuts the dimension the hir.alltoall communicates along" in text, text


def test_rings_across_nodes_use_send_recv() -> None:
    """As 2 nodes of 2 ranks, a ring's transfers between nodes are NCCL
    send/recv pairs and its fences are per node."""
    os.environ.update(NODES_ENV)
    try:
        for name in RINGS:
            text = host(name, TWO_NODES["ring"])
            assert "hir.send" in text and "hir.recv" in text, text
            assert "hir.barrier team = [0, 1, 2, 3] backend = cuda_ipc" not in text, text
    finally:
        for k in NODES_ENV:
            os.environ.pop(k, None)


def test_rings_follow_the_job_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled inside a job whose ranks sit on nodes round-robin (0 and 2
    on one, 1 and 3 on the other), the ring passes its fences per node as
    the job has them, and moves by copy engine only the step whose peers
    share a node (offset 2), by send/recv the others."""
    monkeypatch.delenv(NODES_ENV_NAME, raising=False)
    compiled = compile_module(PROGRAMS["ag_matmul"], "ag_matmul.mlir", "main", TWO_NODES["ring"], nodes=[0, 1, 0, 1])
    text = to_text(compiled.host)
    assert "the job's nodes [0, 1, 0, 1]): ring(S=2" in text
    assert "hir.barrier team = [0, 2] backend = cuda_ipc" in text and "hir.barrier team = [1, 3] backend = cuda_ipc" in text
    assert "hir.barrier team = [0, 1] " not in text
    assert (text.count("hir.send %"), text.count("hir.recv %"), text.count("hir.get %")) == (4, 4, 2), text


def test_a_program_without_a_mesh_runs_on_one_device() -> None:
    """An unsharded program (no mesh at all) compiles for one device."""
    text = """func.func @main(%x: tensor<8x4xf32>, %w: tensor<4x6xf32>) -> tensor<8x6xf32> {
  %y = fusion.matmul %x, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  func.return %y : tensor<8x6xf32>
}
"""
    compiled = compile_module(text, "plain.mlir", "main", "default")
    assert "fusion.mesh @implicit shape = [1]" in to_text(compiled.host)
    assert hir.is_host_program(find_host_program(compiled.host, "main"))

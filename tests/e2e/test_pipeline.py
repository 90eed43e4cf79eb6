"""Fusion programs through the whole compiler and the cpu runtime, under
`mpiexec -n N` for N = 1, 2, 3 and 4, checked against the unsharded float64
reference (what `fuserc run --check` does).

The programs are tests/e2e/programs/pipeline/*.mlir (the rows of the
reshard table of docs/passes.md and Stream splits, `rt_*`; the cases of
the sharding passes, `case_*`; more ops, `ops_*`; results, `ret_*`), the
examples, and generated programs of random reshards between every kind of
placement. A program is a template (tests/e2e/harness.py): `${...}` are
Python expressions of N, and `${T}` is the element type, so each runs in
f32 and in bf16 (bf16 at 1, 2 and 4 ranks). A header line `// ranks: 2 3 4` restricts the job sizes
(default 1 2 3 4).

Every program runs under the lowering passes and under the default
pipeline (with stream-pipeline) when that pass is available, twice (the
first time on other inputs, so that cached buffers hold stale data). To pay
the start-up of MPI and Python once per job size, tests/e2e/batch.py runs
all the programs of one N in one launch and prints a line per program; each
program is its own test, reading its line. A few tests go through the real
CLI (`fuserc run --check`, `-i` float32 files for bf16, `--save-outputs`),
their runs of one job size in one launch (cli_batch.mpirun_many).
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from batch import Outcome, launch_batches
from fuserc.sharding import Mesh, Sharding, Split
from cli_batch import CliRun, Ran, launches
from harness import BACKEND, MPIEXEC, PROGRAMS, expand, ok

HERE = Path(__file__).parent
PIPELINE_PROGRAMS = PROGRAMS / "pipeline"
EXAMPLES = HERE.parents[1] / "examples"
LOWERING = "propagate-shardings,make-resharding-contiguous,lower-to-host-ir"
RANKS = (1, 2, 3, 4)
DTYPES = ("f32", "bf16")
BF16_RANKS = (1, 2, 4)
"""Job sizes of the bf16 runs: 3 ranks (uneven splits) run in f32, bf16
changes the element type, not the layouts (CI time)."""
EXAMPLE_RANKS = (1, 2, 4)
"""Examples are written for 4 ranks; those on one 1-D mesh of all ranks
also run at 1 and 2 (their extents divide by 4)."""
EXAMPLES_SKIPPED = {
    "allgather_matmul_large.mlir": "the headline GEMM shape, for GPUs",
    "matmul_reduce_scatter_large.mlir": "the headline GEMM shape, for GPUs",
    "long_context.mlir": "131072 tokens, for GPUs (test_ring_attention.py runs it at 256)",
}


PIPELINES: dict[str, str] = {"lower": LOWERING, "default": "default"}
"""Every program runs under the lowering passes alone and the whole pipeline."""


# --------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One program for one job size and element type."""

    name: str
    n: int
    dtype: str  # f32 | bf16 | own (the program's own types)
    source: Path | None  # None: `generated` is the template
    generated: str = ""

    @property
    def ident(self) -> str:
        return f"{self.name}-n{self.n}-{self.dtype}"

    def text(self) -> str:
        """The program for this job size and element type."""
        if self.source is None:
            return expand(self.generated.replace("${T}", self.dtype), self.n)
        text = self.source.read_text()
        if self.source.parent == EXAMPLES:
            return text if self.n == 4 else text.replace("shape = [4]", f"shape = [{self.n}]")
        return expand(text.replace("${T}", self.dtype), self.n)


def _header(text: str, key: str) -> list[str] | None:
    m = re.search(rf"^// {key}:(.*)$", text, re.MULTILINE)
    return m.group(1).split() if m else None


def _program_cases() -> list[Case]:
    out = []
    for path in sorted(PIPELINE_PROGRAMS.glob("*.mlir")):
        text = path.read_text()
        ranks = [int(r) for r in _header(text, "ranks") or RANKS]
        dtypes = DTYPES if "${T}" in text else ("own",)
        out += [Case(path.stem, n, t, path) for n in ranks for t in dtypes if n in BF16_RANKS or t != "bf16"]
    return out


def _resizable(text: str) -> bool:
    """Every mesh is `shape = [4]` over all ranks (no device list)."""
    meshes = re.findall(r"fusion\.mesh @\w+ shape = \[[^\]]*\][^\n]*", text)
    return bool(meshes) and all(re.fullmatch(r"fusion\.mesh @\w+ shape = \[4\]\s*", m) for m in meshes)


def _example_cases() -> list[Case]:
    out = []
    for path in sorted(EXAMPLES.glob("*.mlir")):
        if path.name in EXAMPLES_SKIPPED:
            continue
        ranks = EXAMPLE_RANKS if _resizable(path.read_text()) else (4,)
        out += [Case(f"example_{path.stem}", n, "own", path) for n in ranks]
    return out


RANDOM_PROGRAMS = 2
RANDOM_SETS = 24
RANDOM_SHAPE = (48, 48)


def _placements(meshes: dict[str, Mesh]) -> list[Sharding]:
    """Every valid placement of a RANDOM_SHAPE tensor on `meshes`: up to two
    device splits per dimension, with or without a Stream(2) split between,
    before or after them (interleaved or not), partial sums aside."""
    out: set[Sharding] = set()
    for name, mesh in meshes.items():
        types = [p for p in ("DIDx", "DIDy")[: mesh.rank]]
        axes = [()]
        for k in (1, 2):
            for combo in itertools.permutations(types, k):
                base = tuple(Split(p) for p in combo)
                axes += [base] + [base[:i] + (Split("Stream", 2),) + base[i:] for i in range(k + 1)]
        for a, b in itertools.product(axes, axes):
            s = Sharding(name, (a, b))
            if not s.errors(RANDOM_SHAPE, mesh):
                out.add(s)
    return sorted(out, key=str)


def random_reshards(seed: int, n: int) -> str:
    """A program of RANDOM_SETS fusion.sets between placements drawn from
    those of a 1-D mesh of all ranks, a 2-D one ([2, n/2] or [1, n]) and,
    for n > 1, a mesh of the second half of the ranks: every pair has a
    chain of reshards (docs/passes.md), and the data must arrive intact."""
    rows = 2 if n % 2 == 0 else 1
    meshes = {"t": Mesh("t", (n,)), "g": Mesh("g", (rows, n // rows))}
    if n > 1:
        meshes["h"] = Mesh("h", (n - n // 2,), tuple(range(n // 2, n)))
    rng = random.Random(seed)
    every = _placements(meshes)
    sources = rng.sample(every, 6)

    def ty(s: Sharding) -> str:
        return f"tensor<{RANDOM_SHAPE[0]}x{RANDOM_SHAPE[1]}x${{T}}, {s}>"

    decls = [f"fusion.mesh @{m.name} shape = {list(m.shape)} devices = {list(m.devices)}" for m in meshes.values()]
    sets = [(rng.randrange(len(sources)), rng.choice(every)) for _ in range(RANDOM_SETS)]
    args = ", ".join(f"%a{i}: {ty(s)}" for i, s in enumerate(sources))
    results = ", ".join(ty(b) for _, b in sets)
    body = [f"  %r{k} = fusion.set %a{i} : ({ty(sources[i])}) -> {ty(b)}" for k, (i, b) in enumerate(sets)]
    ret = f"  func.return {', '.join(f'%r{k}' for k in range(len(sets)))} : {results}"
    return "\n".join([*decls, f"func.func @main({args}) -> ({results}) {{", *body, ret, "}"]) + "\n"


def _random_cases() -> list[Case]:
    return [
        Case(f"random_reshards_{seed}", n, t, None, random_reshards(seed, n))
        for seed in range(RANDOM_PROGRAMS)
        for n in RANKS
        for t in DTYPES
        if n in BF16_RANKS or t != "bf16"
    ]


CASES = _program_cases() + _example_cases() + _random_cases()
ITEMS = [(c, p) for c in CASES for p in PIPELINES]


# --------------------------------------------------------------------------
# One batch per job size
# --------------------------------------------------------------------------


def run_batches(n: int, cases: list[Case], directory: Path) -> dict[str, Outcome]:
    """Every case of job size n under every pipeline (batch.launch_batches)."""
    return launch_batches(n, [(c.ident, c.text(), PIPELINES) for c in cases], directory, BACKEND)


@pytest.fixture(scope="session")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """results(n): the outcomes of every case of job size n (one launch,
    made at the first test of that size)."""
    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    cache: dict[int, dict[str, Outcome]] = {}

    def results(n: int) -> dict[str, Outcome]:
        if n not in cache:
            directory = tmp_path_factory.mktemp(f"pipeline_n{n}")
            cache[n] = run_batches(n, [c for c in CASES if c.n == n], directory)
        return cache[n]

    return results


@pytest.mark.parametrize(
    "case,pipe", ITEMS, ids=[f"{c.ident}-{p}" for c, p in ITEMS]
)
def test_program(case: Case, pipe: str, batch: Any) -> None:
    """The program compiles with the pipeline, runs on N ranks, and each
    output is within --check's tolerance of the float64 reference."""
    outcome = batch(case.n).get(f"{case.ident}/{pipe}")
    assert outcome is not None, "the batch reported nothing for this case"
    again = f"reproduce: mpiexec -n {case.n} fuserc run FILE -p {PIPELINES[pipe]} --check, FILE = {case.ident}.mlir:\n{case.text()}"
    assert outcome.status == "ok", f"{outcome.status}:\n{outcome.detail}\n\n{again}"


def test_every_reshard_table_row_has_a_program() -> None:
    """docs/passes.md's reshard table, row by row, and the sharding passes'
    cases each have a program here."""
    names = {p.stem for p in PIPELINE_PROGRAMS.glob("*.mlir")}
    rows = {
        "rt_allgather", "rt_local_slice", "rt_scatter", "rt_alltoall", "rt_allreduce",
        "rt_reduce_scatter", "rt_reduce", "rt_gather", "rt_gather_pairs", "rt_sendrecv",
        "rt_broadcast", "rt_stream",
    }  # fmt: skip
    cases = {
        "case_pointwise_gather", "case_linear_column", "case_linear_row", "case_linear_sequence",
        "case_sp_mlp", "case_residual", "case_permute_reshape", "case_sums",
        "case_reduce_scatter_inner", "case_mesh2d", "case_pipeline_stages",
    }  # fmt: skip
    assert rows | cases <= names, sorted((rows | cases) - names)
    assert {c.n for c in CASES} == set(RANKS)


# --------------------------------------------------------------------------
# Through the CLI
# --------------------------------------------------------------------------


def _write(case: Case, directory: Path) -> Path:
    path = directory / f"{case.ident}.mlir"
    path.write_text(case.text())
    return path


def _case(name: str, n: int, dtype: str) -> Case:
    return Case(name, n, dtype, PIPELINE_PROGRAMS / f"{name}.mlir")


def _bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()


@pytest.mark.parametrize("n,pipe", [(3, "lower"), (2, "default")])
@launches(lambda d, n, pipe: CliRun(n, [_write(_case("case_sp_mlp", n, "f32"), d), "-p", PIPELINES[pipe], "--check", "--seed", "3"]))
def test_cli_check(n: int, pipe: str, ran: Ran) -> None:
    """`fuserc run --check` on a fusion program: one ok line per output."""
    proc = ok(ran.proc)
    assert re.search(r"output 0: max rel error \S+ <= 1e-04 \(f32 tolerance\): ok", proc.stdout), proc.stdout


def _saved(d: Path, arrays: dict[str, np.ndarray]) -> list[Any]:
    """`-i FILE` options of `arrays`, each saved in d as NAME.npy."""
    args: list[Any] = []
    for name, a in arrays.items():
        np.save(d / f"{name}.npy", a)
        args += ["-i", d / f"{name}.npy"]
    return args


def bf16_inputs_run(d: Path) -> CliRun:
    """case_linear_row in bf16 on 2 ranks, float32 inputs, outputs saved."""
    rng = np.random.default_rng(7)
    shapes = {"x": (12, 24), "w": (16, 24), "b": (16,)}
    inputs = _saved(d, {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()})
    return CliRun(2, [_write(_case("case_linear_row", 2, "bf16"), d), "-p", LOWERING, "--check", "--save-outputs", d / "out", *inputs])


@launches(bf16_inputs_run)
def test_cli_bf16_inputs_and_saved_outputs(ran: Ran) -> None:
    """bf16 arguments from float32 .npy files (rounded); the saved outputs
    (float32) against NumPy on the rounded inputs; --check in the same run."""
    tmp_path = ran.dir
    x, w, b = (np.load(tmp_path / f"{name}.npy") for name in ("x", "w", "b"))
    proc = ok(ran.proc)
    assert proc.stdout.count("<= 4e-02 (bf16 tolerance): ok") == 3, proc.stdout
    xb, wb, bb = (_bf16(a).astype(np.float64) for a in (x, w, b))
    expected = [xb @ wb.T + bb, xb @ wb.T, xb @ wb.T + bb]
    for i, e in enumerate(expected):
        got = np.load(tmp_path / "out" / f"out{i}.npy")
        assert got.dtype == np.float32 and got.shape == e.shape
        np.testing.assert_allclose(got, e, rtol=0, atol=4e-2 * np.abs(e).max(), err_msg=f"output {i}")


def moved_data_runs(d: Path) -> dict[str, CliRun]:
    """rt_alltoall and rt_interleaved on 4 ranks, random inputs, outputs saved."""
    n, rng = 4, np.random.default_rng(11)
    shapes = {"x": (24, 48), "y": (24, 48), "z": (12, 4, 24), "xi": (48, 12), "wi": (12, 8)}
    arrays = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    alltoall = _saved(d, {k: arrays[k] for k in ("x", "y", "z")})
    interleaved = _saved(d, {k: arrays[k] for k in ("xi", "wi")})
    return {
        "alltoall": CliRun(n, [_write(_case("rt_alltoall", n, "f32"), d), "-p", LOWERING, "--save-outputs", d / "a", *alltoall]),
        "interleaved": CliRun(n, [_write(_case("rt_interleaved", n, "f32"), d), "-p", LOWERING, *interleaved, "--save-outputs", d / "b"]),
    }


@launches(moved_data_runs)
def test_cli_moved_data_is_exact(ran: Ran) -> None:
    """Reshards move data bit for bit: AllToAll, interleaved chunks gathered
    then sliced, a relu kept interleaved; saved outputs equal NumPy exactly."""
    tmp_path = ran.dir
    x, y, z, xi, wi = (np.load(tmp_path / f"{name}.npy") for name in ("x", "y", "z", "xi", "wi"))
    ok(ran.procs["alltoall"])
    for i, e in enumerate((x, y, z)):
        np.testing.assert_array_equal(np.load(tmp_path / "a" / f"out{i}.npy"), e, err_msg=f"alltoall output {i}")

    ok(ran.procs["interleaved"])
    got = [np.load(tmp_path / "b" / f"out{i}.npy") for i in range(4)]
    np.testing.assert_allclose(got[0], xi.astype(np.float64) @ wi, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], np.maximum(xi, 0))
    np.testing.assert_array_equal(got[2], xi)
    np.testing.assert_allclose(got[3], np.maximum(xi, 0).sum(axis=1), rtol=1e-5, atol=1e-5)


def pass_diagnostic_run(d: Path) -> CliRun:
    """A program refused by the passes, on 2 ranks."""
    prog = d / "bad.mlir"
    prog.write_text(
        "fusion.mesh @tp shape = [2]\n"
        "func.func @main(%x: tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>)\n"
        "    -> tensor<8x4xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>> {\n"
        "  %y = fusion.set %x : (tensor<8x4xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x4xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>\n"
        "  func.return %y : tensor<8x4xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>\n"
        "}\n"
    )
    return CliRun(2, [prog, "-p", LOWERING, "--check"])


@launches(pass_diagnostic_run)
def test_cli_pass_diagnostic_under_mpiexec(ran: Ran) -> None:
    """A program the passes refuse: exit 1, one located message, no
    traceback, every rank stopped."""
    prog, proc = ran.dir / "bad.mlir", ran.proc
    assert proc.returncode == 1, proc.stderr
    assert f"{prog}:4:3: error: 'fusion.set' op" in proc.stderr, proc.stderr
    assert "partial" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1

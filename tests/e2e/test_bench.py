"""tools/bench.py in its cpu mode under `mpiexec -n 2` (and torchrun; tiny shapes): every
figure measured in one run, fuserc checked against eager, the Markdown
tables and the JSON; async TP reported n/a; bad shapes and bad usage.
tools/bench_layer.py --small on 2 ranks under torchrun and mpiexec: its
figures, peak memory and compiled graphs' collectives (n/a on the CPU),
tables and JSON, and its check failing on a wrong layer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import BACKEND, mpirun_python, ok

BENCH = Path(__file__).parents[2] / "tools" / "bench.py"
FIGURES = ("gemm", "fuserc", "eager", "async_tp")


def _bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "bench.json"
    proc = ok(mpirun_python(2, BENCH, ["--backend", "cpu", "--small", "--json", str(out), *args], timeout=60))
    return proc, json.loads(out.read_text())


def test_both_patterns(tmp_path: Path) -> None:
    proc, data = _bench(tmp_path, "--pattern", "both", "--shapes", "64x32x16,128x64x32", "--warmup", "1", "--iters", "2", "--repeats", "3")
    assert "### AllGather + GEMM (2 ranks, bf16)" in proc.stdout
    assert "### GEMM + ReduceScatter (2 ranks, bf16)" in proc.stdout
    assert "| M x K x N | GEMM ms | GEMM TFLOP/s | fuserc ms" in proc.stdout
    assert "| 128 x 64 x 32 |" in proc.stdout
    assert data["ranks"] == 2 and data["backend"] == BACKEND and data["iters"] == 2 and data["repeats"] == 3
    assert "back to back: iters 2 x repeats 3" in proc.stdout
    rows = data["rows"]
    assert [(r["pattern"], r["shape"]) for r in rows] == [
        ("ag", "64x32x16"), ("ag", "128x64x32"), ("rs", "64x32x16"), ("rs", "128x64x32"),
    ]  # fmt: skip
    for r in rows:
        m, k, n = map(int, r["shape"].split("x"))
        assert r["flops_per_gpu"] == 2 * m * n * (k if r["pattern"] == "ag" else k // 2)
        for key in ("gemm", "fuserc", "eager"):
            f = r[key]
            assert f["ms"] > 0 and len(f["times_ms"]) == 3, (key, f)  # one per repeat
            assert f["tflops"] == pytest.approx(r["flops_per_gpu"] / (f["ms"] / 1e3) / 1e12)
            assert f["ratio"] == pytest.approx(r["gemm"]["ms"] / f["ms"])
        if BACKEND == "cpu":
            assert r["async_tp"]["ms"] is None and r["async_tp"]["reason"] == "needs CUDA"
        assert r["fuserc_rel_err"] is not None and r["fuserc_rel_err"] < 4e-2
        assert r["plan"]
    if BACKEND == "cpu":
        assert "n/a: async TP: needs CUDA" in proc.stdout
    assert [r["plan"].split()[0] for r in rows if r["pattern"] == "ag"] != ["not", "not"]  # Stream(2) is pipelined


def test_bench_under_torchrun(tmp_path: Path) -> None:
    """The same benchmark under torchrun: torch.distributed's world is the
    tool's, started once, and fuserc joins it. --per-iteration times each
    iteration alone (iters x repeats figures). fuserc's plan takes each
    rank for a node of its own (the cpu backend has no MPI windows for peer
    copies under torchrun), where a ring would send and receive."""
    from test_torch_function import launch

    out = tmp_path / "bench.json"
    args = ["--backend", "cpu", "--small", "--pattern", "ag", "--shapes", "64x32x16", "--warmup", "0", "--iters", "2", "--repeats", "2", "--per-iteration", "--json", str(out)]
    proc = launch("torchrun", 2, BENCH, args, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["fuserc"]["ms"] > 0 and row["eager"]["ms"] > 0 and row["fuserc_rel_err"] < 4e-2, row
    assert len(row["fuserc"]["times_ms"]) == 4 and "each iteration timed alone: iters 2 x repeats 2" in proc.stdout


def test_algorithm_stream_profile_and_bad_shape(tmp_path: Path) -> None:
    """--algorithm and --stream shape fuserc's plan; --profile writes its
    runs' trace and timeline (rank 0; with --profile-ranks all, rank 1's
    trace too); a shape the ranks do not divide is n/a."""
    prof = tmp_path / "prof"
    proc, data = _bench(
        tmp_path, "--pattern", "rs", "--algorithm", "collective", "--stream", "4",
        "--shapes", "64x32x16,64x33x16", "--iters", "1", "--warmup", "0", "--profile", str(prof), "--profile-ranks", "all",
    )  # fmt: skip
    good, bad = data["rows"]
    assert good["plan"].startswith("collective S=4")
    assert sorted(p.name for p in prof.iterdir()) == ["fuserc_rs_64x32x16.json", "fuserc_rs_64x32x16.txt", "fuserc_rs_64x32x16_rank1.json"]
    assert json.loads((prof / "fuserc_rs_64x32x16_rank1.json").read_text())["traceEvents"]
    assert json.loads((prof / "fuserc_rs_64x32x16.json").read_text())["traceEvents"]
    assert "3 steps" in (prof / "fuserc_rs_64x32x16.txt").read_text()
    assert good["fuserc"]["ms"] > 0 and good["fuserc_rel_err"] < 4e-2
    for key in FIGURES:
        assert bad[key]["ms"] is None and bad[key]["reason"] == "K=33 is not divisible by 2 ranks"
    assert "n/a: fuserc: K=33 is not divisible by 2 ranks" in proc.stdout


def test_fuserc_failure_is_reported_not_fatal(tmp_path: Path) -> None:
    """A program fuserc refuses (here: stream-pipeline cannot read the links
    file it is given) is n/a with the pass's message; the baselines still run."""
    pipe = 'propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline{links="/nonexistent/links.json"}'
    proc, data = _bench(tmp_path, "--pattern", "rs", "--pipeline", pipe, "--shapes", "64x32x16", "--iters", "1")
    (row,) = data["rows"]
    assert row["fuserc"]["ms"] is None and "stream-pipeline" in row["fuserc"]["reason"]
    assert row["eager"]["ms"] > 0 and row["gemm"]["ms"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shapes", "10x10"], "a shape is MxKxN"),
        (["--stream", "x"], "--stream takes"),
        (["--algorithm", "ring", "--pipeline", "propagate-shardings"], "needs pass 'stream-pipeline'"),
        (["--iters", "0"], "--iters and --repeats >= 1"),
        (["--repeats", "0"], "--iters and --repeats >= 1"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr


def testcuda_unavailable_is_a_clean_error(tmp_path: Path) -> None:
    from fuserc.runtime.backends.backend import cuda_unavailable

    if cuda_unavailable() is None:
        pytest.skip("the cuda backend can run here")
    proc = mpirun_python(2, BENCH, ["--small"], timeout=60)
    assert proc.returncode != 0
    assert "the cuda backend cannot run here" in proc.stderr and "Traceback" not in proc.stderr


# -- tools/bench_layer.py ----------------------------------------------------------
LAYER = Path(__file__).parents[2] / "tools" / "bench_layer.py"
LAYER_SHAPE = ["--small"] if BACKEND == "cpu" else ["--hidden", "256", "--tokens", "256"]
"""The CPU (f32, head dim 16, hidden 64, 32 tokens) or, on the cuda suite, a
small bf16 layer on the GPUs (head dim 128, 2 heads)."""
VARIANT_KEYS = ["limit", "fuserc", "eager", "compile", "async_tp"]
LAYER_NAMES = ["x", "ln1.weight", "ln1.bias", "attn.wq.weight", "attn.wq.bias", "attn.wk.weight", "attn.wk.bias",
               "attn.wv.weight", "attn.wv.bias", "attn.wo.weight", "attn.wo.bias", "ln2.weight", "ln2.bias",
               "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"]  # fmt: skip


def _layer(how: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    from test_torch_function import launch

    out = tmp_path / "layer.json"
    proc = launch(how, 2, LAYER, [*LAYER_SHAPE, "--warmup", "1", "--iters", "1", "--repeats", "2", "--json", str(out), *args], timeout=240)
    return proc, json.loads(out.read_text()) if out.exists() else {}


def test_bench_layer_under_torchrun(tmp_path: Path) -> None:
    """Every figure of both modes measured on 2 ranks; fuserc's output and
    gradients as close to the wider reference as DTensor eager's; the
    tables and the JSON."""
    proc, data = _layer("torchrun", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for title in (
        "### forward (2 ranks", "### forward+backward (2 ranks", "### The check (forward+backward): max |a - b| / max |b| against eager and against the ",
        "### forward: peak memory per GPU and the compiled graphs' collectives", "### forward+backward: peak memory per GPU and the compiled graphs' collectives",
    ):  # fmt: skip
        assert title in proc.stdout, proc.stdout
    assert "| hidden | tokens | heads | limit ms | limit TFLOP/s | fuserc ms | fuserc TFLOP/s | fuserc / limit | eager ms" in proc.stdout
    assert "| torch.compile ms | torch.compile TFLOP/s | torch.compile / limit | async TP ms |" in proc.stdout
    assert "| eager / fuserc | torch.compile / fuserc | async TP / fuserc |" in proc.stdout
    assert "| limit peak MiB | fuserc peak MiB | eager peak MiB | torch.compile peak MiB | async TP peak MiB | torch.compile: collectives | async TP: fused |" in proc.stdout
    assert data["ranks"] == 2 and data["repeats"] == 2 and data["algorithm"] == "auto"
    runs = re.search(r"^fuserc at hidden \d+, tokens \d+: @main_fwd (.*); @main_bwd (.*)$", proc.stdout, re.M)
    assert runs, proc.stdout  # how fuserc's calls went: op by op on the cpu backend, either way on cuda
    assert all(r.startswith("replayed as a graph (") or r.startswith("op by op") for r in runs.groups()), runs.groups()
    first_call = re.search(r"^  fuserc's first step: backend \S+ s, passes (\S+) s, .*kernels \S+ s.*\(kernels: .*\)$", proc.stdout, re.M)
    assert first_call and float(first_call.group(1)) > 0, proc.stdout
    (first,) = data["first_step_s"]
    assert first["fuserc"] > 0 and first["eager"] > 0 and "limit" not in first, first
    assert re.search(r"^  first forward\+backward step \(s\): fuserc \d+\.\d, eager \d+\.\d, torch.compile (n/a|\d+\.\d), async TP (n/a|\d+\.\d)$", proc.stdout, re.M), proc.stdout
    rows = data["rows"]
    assert [r["mode"] for r in rows] == ["fwd", "fwdbwd"]
    fwd, fwdbwd = rows
    t, h = fwd["tokens"], fwd["hidden"]
    assert fwd["flops_per_gpu"] == (24 * t * h * h + 2 * t * t * h) // 2 and fwdbwd["flops_per_gpu"] == 3 * fwd["flops_per_gpu"]
    for r in rows:
        figs = r["figures"]
        for key in ("limit", "fuserc", "eager"):
            f = figs[key]
            assert f["ms"] > 0 and len(f["times_ms"]) == 2, (key, f)
            assert f["tflops"] == pytest.approx(r["flops_per_gpu"] / (f["ms"] / 1e3) / 1e12)
            assert f["ratio"] == pytest.approx(figs["limit"]["ms"] / f["ms"])
        assert r["speedup"]["eager"] == pytest.approx(figs["eager"]["ms"] / figs["fuserc"]["ms"])
        assert sorted(r["peak_mib"]) == sorted(VARIANT_KEYS) and sorted(r["graphs"]) == ["async_tp", "compile"]
        assert sorted(r["speedup"]) == ["async_tp", "compile", "eager"]
        if BACKEND == "cpu":
            assert figs["async_tp"]["ms"] is None and figs["async_tp"]["reason"] == "needs CUDA (symmetric memory)"
            assert figs["compile"]["ms"] is None and "--cpu-compile" in figs["compile"]["reason"]
            assert all(v is None for v in r["peak_mib"].values()) and r["graphs"] == {"compile": None, "async_tp": None}
        else:
            assert all(r["peak_mib"][k] > 0 for k in ("limit", "fuserc", "eager", "compile")), r["peak_mib"]
            graphs = r["graphs"]["compile"]
            assert graphs["ag_matmul"] == graphs["matmul_rs"] == 0 and graphs["all_gather"] > 0, graphs  # plain compile fuses nothing
    (c,) = data["checks"]
    assert c["compared"] == "forward+backward" and data["reference"] == ("f64" if BACKEND == "cpu" else "f32")
    eager, fuserc = c["eager"], c["fuserc"]
    assert eager["ok"] is None and eager["vs_eager"] is None and sorted(eager["vs_reference"]["per_grad"]) == sorted(LAYER_NAMES)
    assert fuserc["ok"] is True, c
    for against in ("vs_eager", "vs_reference"):
        assert sorted(fuserc[against]["per_grad"]) == sorted(LAYER_NAMES)
    bound = {k: data["factor"] * v + data["floor"] for k, v in eager["vs_reference"]["per_grad"].items()}
    assert all(fuserc["vs_reference"]["per_grad"][k] <= bound[k] for k in bound)
    if BACKEND == "cpu":
        assert fuserc["vs_eager"]["output"] < 1e-5 and max(fuserc["vs_eager"]["per_grad"].values()) < 1e-5
        assert c["async_tp"]["reason"] == "needs CUDA (symmetric memory)" and "--cpu-compile" in c["compile"]["reason"]
        assert "- n/a: peak memory: needs CUDA (torch.cuda.max_memory_allocated)" in proc.stdout
        assert re.search(r"^\| \d+ \| \d+ \| torch\.compile \| n/a \| .* \| n/a: on the CPU only with --cpu-compile", proc.stdout, re.M), proc.stdout
    else:
        assert c["async_tp"]["ok"] is True and c["compile"]["ok"] is True, c
    assert re.search(r"^\| \d+ \| \d+ \| fuserc \| .* \| ok \|$", proc.stdout, re.M), proc.stdout


@pytest.mark.parametrize("value", ["fuserc,nope", ","])
def test_bench_layer_unknown_variant(value: str) -> None:
    proc = subprocess.run([sys.executable, str(LAYER), "--small", "--variants", value], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"variants are among limit,fuserc,eager,compile,async_tp, got '{value}'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_bench_layer_check_fails_on_a_wrong_layer(tmp_path: Path) -> None:
    """fuserc's layer with a shifted layer_norm bias: its output and
    gradients are far from the reference while eager's are not, the run
    says FAILED and exits with 1. Also: `--variants` runs only those asked
    for, `--algorithm` pipelines fuserc's programs as asked, and `--profile`
    writes fuserc's steps under torch.profiler (`--profile-ranks all`: rank
    1's trace too)."""
    prof = tmp_path / "prof"
    proc, data = _layer(
        "mpiexec", tmp_path, "--mode", "fwdbwd", "--perturb", "1", "--variants", "fuserc,eager", "--algorithm", "collective",
        "--profile", str(prof), "--profile-ranks", "all",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert data["algorithm"] == "collective"
    (row,) = data["rows"]
    for key in ("limit", "compile", "async_tp") if BACKEND == "cuda" else ("limit",):  # (the cpu has its own reason for the compiled)
        assert row["figures"][key] == {**row["figures"][key], "ms": None, "reason": "not asked for (--variants)"}
    assert row["figures"]["fuserc"]["ms"] > 0 and row["figures"]["eager"]["ms"] > 0
    stem = prof / f"fuserc_{row['hidden']}x{row['tokens']}_fwdbwd"
    trace = json.loads(stem.with_suffix(".json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "_Autograd" in names and "_AutogradBackward" in names, sorted(n for n in names if n)[:50]
    text = stem.with_suffix(".txt").read_text()
    assert text.startswith("3 steps\ndevice timeline: ") and "aten::" in text, text[:2000]
    assert sorted(p.name for p in prof.iterdir()) == [stem.name + ".json", stem.name + ".txt", stem.name + "_rank1.json"]  # fuserc alone
    rank1 = {e.get("name") for e in json.loads((prof / (stem.name + "_rank1.json")).read_text())["traceEvents"]}
    assert "_Autograd" in rank1 and "_AutogradBackward" in rank1
    assert re.search(r"^FAILED: hidden \d+ tokens \d+: fuserc: output: \S+ > 2 x eager's \S+ \+ \S+$", proc.stdout, re.M), proc.stdout
    c = data["checks"][0]
    fuserc, eager = c["fuserc"], c["eager"]["vs_reference"]
    assert fuserc["ok"] is False
    for key in ("output", "grads"):
        assert fuserc["vs_reference"][key] > 10 * eager[key] + data["floor"]


# -- tools/bench_model.py ----------------------------------------------------------
MODEL = Path(__file__).parents[2] / "tools" / "bench_model.py"


def test_bench_model_under_torchrun(tmp_path: Path) -> None:
    """train_gpt's model in a training step on 2 ranks: fuserc beside DTensor
    eager (their first losses agree), the compiled variants n/a on the CPU
    with their reasons, the tables and the figures written to --out."""
    from test_torch_function import launch

    shape = ["--small"] if BACKEND == "cpu" else ["--layers", "2", "--hidden", "256", "--tokens", "256", "--vocab", "512"]
    proc = launch("torchrun", 2, MODEL, [*shape, "--warmup", "1", "--iters", "1", "--repeats", "1", "--out", str(tmp_path)], timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tables = (tmp_path / "bench_model.md").read_text()
    for title in ("### training step (fwd+bwd+AdamW), 2 rank(s)", "### peak memory above parameters", "### first step, compile time and kernels"):
        assert title in tables and title in proc.stdout, tables
    data = json.loads((tmp_path / "bench_model.json").read_text())
    assert data["ranks"] == 2 and len(data["shapes"]) == 1
    got = data["shapes"][0]
    for key in ("fuserc", "eager"):
        r = got["results"][key]
        assert r["step_ms"] > 0 and r["tokens_per_s"] > 0 and r["first_step_s"] > 0, r
        assert got["loss_diff"][key] is not None and got["loss_diff"][key] <= 1e-3, got["loss_diff"]
    assert got["speedup"]["eager"] > 0 and got["results"]["fuserc"]["compile_s"] > 0
    if BACKEND == "cpu":
        assert got["results"]["compile"]["step_ms"] is None and "--cpu-compile" in got["results"]["compile"]["reason"]
        assert "n/a: async TP: needs CUDA" in tables

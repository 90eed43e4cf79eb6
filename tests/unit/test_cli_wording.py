"""What the CLI says about itself: help lines that are whole, the cache's
folder as the code finds it, timing figures in units that fit the backend,
and a note before a GPU-sized program runs on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fuserc.cli as cli
from fuserc.run_cli import flop_rate

ROOT = Path(__file__).resolve().parents[2]


def test_help_lines_are_whole() -> None:
    out = CliRunner().invoke(cli.main, ["--help"]).output
    commands = out.split("Commands:", 1)[1].strip().splitlines()
    assert any(line.split() == ["run", "Compile", "FILE", "(or", "-", "for", "stdin)", "and", "run", "it,", "one", "process", "per", "rank."] for line in commands), out
    assert not [line for line in commands if line.rstrip().endswith((":", "..."))], out


def test_cache_folder_as_the_code_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fuserc.runtime.kernels.kernel_cache import cache_dir

    monkeypatch.delenv("FUSERC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "fuserc"
    said = " ".join(CliRunner().invoke(cli.main, ["cache", "--help"]).output.split())
    rule = "$FUSERC_CACHE_DIR, else $XDG_CACHE_HOME/fuserc, else ~/.cache/fuserc"
    assert rule in said, said
    assert rule.replace("$", "`$").replace(", else", "`, else").replace("~/.cache/fuserc", "`~/.cache/fuserc`").replace("fuserc`, else `~", "fuserc`, else `~") in " ".join((ROOT / "docs" / "runtime.md").read_text().split())


def test_flop_rate_units() -> None:
    assert flop_rate(2.5e14) == "250.000 TFLOP/s"
    assert flop_rate(3.2e10) == "32.000 GFLOP/s"
    assert flop_rate(4e6) == "4.000 MFLOP/s"
    assert flop_rate(12.0) == "12 FLOP/s"


def _fuserc(*args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fuserc", *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def test_timing_on_the_cpu_backend_is_per_rank() -> None:
    proc = _fuserc("run", ROOT / "examples" / "sp_mlp.mlir", "--mesh", "tp=1", "--backend", "cpu", "--iters", "1", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("time: "))
    assert "FLOP/s per rank (8388608 flops on 1 device, backend cpu)" in line and " 0.000 " not in line, line


def test_a_gpu_sized_program_on_the_cpu_is_noted(tmp_path: Path) -> None:
    """examples/allgather_matmul_large.mlir on the cpu backend: a note
    before anything runs (here the inputs are refused right after)."""
    small = tmp_path / "small.npy"
    np.save(small, np.zeros((2, 2), np.float32))
    proc = _fuserc("run", ROOT / "examples" / "allgather_matmul_large.mlir", "--mesh", "tp=1", "--backend", "cpu", "-i", small, "-i", small)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        "note: a run of @main is 8796 GFLOP per rank: on the cpu backend that may take minutes a run, "
        "with nothing printed meanwhile (it is work for GPUs)"
    ), proc.stderr
    assert lines[1].startswith("error: argument #0 (%x)")

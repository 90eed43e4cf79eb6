"""`fuserc opt` and `fuserc run` at the edges of their inputs and outputs:
integers too large for any value, a named pipe nobody writes, an output
that cannot be written, `-o` onto the input."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import fuserc.cli as cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sp_mlp.mlir"
BIG = "9" * 5000


def _opt(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, ["opt", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (f"fusion.mesh @tp shape = [{BIG}]\n", "1:26", "integer literal of 5000 characters"),
        (f"fusion.mesh @tp shape = [0x{'f' * 5000}]\n", "1:26", "integer literal of 5002 characters"),
        (f"func.func @f(%x: tensor<{BIG}xf32>) {{\n  func.return\n}}\n", "1:25", "integer literal of 5000 characters"),
        (f"func.func @f(%x: tensor<4x{BIG}xf32>) {{\n  func.return\n}}\n", "1:27", "integer literal of 5000 characters"),
        ("func.func @f(%x: tensor<4x18446744073709551616xf32>) {\n  func.return\n}\n", "1:27", "dimension 18446744073709551616 is larger than"),
        ("fusion.mesh @tp shape = [9223372036854775808]\n", "1:26", "9223372036854775808 is out of the range of i64"),
        ("fusion.mesh @tp shape = [2] devices = [2, 9223372036854775807]\n", "1:1", "device 9223372036854775807 is not a rank"),
    ],
)
def test_huge_integers_are_located(tmp_path: Path, text: str, where: str, message: str) -> None:
    path = tmp_path / "big.mlir"
    path.write_text(text)
    code, out = _opt(str(path), "-p", "default")
    assert code == 1, out
    assert f"big.mlir:{where}: error: " in out and message in out, out[:400]
    assert "Traceback" not in out


@pytest.mark.parametrize("shape", ["99999999999999999999", "9223372036854775808", "2x4194304", BIG])
def test_mesh_option_bounds(shape: str) -> None:
    code, out = _opt(str(EXAMPLE), "--mesh", f"tp={shape}")
    assert code == 2, out
    assert "a mesh has at most 4194304 devices" in out and "Traceback" not in out


def test_output_onto_input_survives_a_failed_write(tmp_path: Path) -> None:
    """`-o` onto the input under `ulimit -f 1`: the write fails, the
    program is as it was; without the limit it is replaced, mode kept."""
    prog = tmp_path / "s.mlir"
    prog.write_text(EXAMPLE.read_text())
    prog.chmod(0o640)
    before = prog.read_text()
    cmd = f"ulimit -f 1; exec {sys.executable} -m fuserc opt s.mlir -p default -o s.mlir"
    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "cannot write s.mlir: File too large" in proc.stderr, proc.stderr
    assert prog.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.mlir"]  # no temporary left
    code, out = _opt(str(prog), "-o", str(prog), "-p", "propagate-shardings")
    assert code == 0, out
    assert prog.read_text() != before and "builtin.module" in prog.read_text()
    assert prog.stat().st_mode & 0o777 == 0o640
    link = tmp_path / "link.mlir"
    link.symlink_to(prog)
    assert _opt(str(link), "-o", str(link))[0] == 0
    assert link.is_symlink()


def test_output_to_a_full_device() -> None:
    """Standard output that cannot be written: one line, exit 1 (small
    output, written when Python flushes, and large, written at once)."""
    for args in (["--version"], ["opt", str(EXAMPLE), "-p", "default"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "fuserc", *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "cannot write the output to standard output: No space left on device" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_named_pipe_without_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A named pipe nobody writes is given up after PIPE_SILENCE_S; one
    whose writer comes is read."""
    monkeypatch.setattr(cli, "PIPE_SILENCE_S", 0.5)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, out = _opt(str(fifo))
    assert code == 1 and "it is a named pipe and nothing was written to it for 0.5 s" in out, out

    def write() -> None:
        with open(fifo, "w") as f:
            f.write("fusion.mesh @tp shape = [4]\n")

    writer = threading.Thread(target=write)
    writer.start()
    code, out = _opt(str(fifo))
    writer.join()
    assert code == 0 and "fusion.mesh @tp shape = [4]" in out, out


def test_trace_into_a_missing_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.main, ["run", str(EXAMPLE), "--trace", str(tmp_path / "no" / "t.json")])
    assert result.exit_code == 2 and "Invalid value for '--trace'" in result.output, result.output
    assert not (tmp_path / "no").exists()

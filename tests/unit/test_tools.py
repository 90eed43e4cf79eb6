"""Every tool in tools/ is exercised, so that a refactor that breaks one
fails here and not on the next GPU machine:

- every tools/*.py answers `--help` (a module of helpers is imported);
- every import in every tool, and in the Python embedded in tools/*.sh
  (here-documents fed to Python, `python3 -c "..."`), resolves: the module
  exists and has each name imported from it, wherever the import sits (in
  a function too). Modules missing here that only a GPU machine has (cupy,
  triton) are skipped;
- every tools/*.sh parses (`bash -n`) and its embedded Python compiles;
- the tools without a test of their own run in their small CPU mode here;
  the others name the test that runs them (`COVERED`), and each file of
  tools/ must be in one of these tables.

Run as a script (`python tests/unit/test_tools.py FILE ...`) it prints the
imports of FILEs that do not resolve, one per line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
SEARCH = [TOOLS, ROOT / "examples" / "python", ROOT / "tests" / "e2e", ROOT / "tests" / "property"]
"""Where tools find their sibling modules (they put these folders on
sys.path themselves)."""

GPU_ONLY = {"cupy", "triton", "cuda", "nvidia"}
"""Top-level modules a GPU machine has and CI may not."""

COVERED = {
    "bench.py": "tests/e2e/test_bench.py: --small under mpiexec and torchrun",
    "bench_compile.py": "tests/unit/test_bench_compile.py: 1,000 ops",
    "bench_layer.py": "tests/e2e/test_bench.py: --small under torchrun and mpiexec",
    "bench_layer_check.py": "tests/e2e/test_bench.py: bench_layer's check, failing on a wrong layer",
    "bench_layer_graphs.py": "tests/unit/test_bench_layer_graphs.py: async TP's fused calls counted in compiled graphs",
    "bench_model.py": "tests/e2e/test_bench.py: --small under torchrun; tests/unit/test_bench_model.py: its PyTorch model and options",
    "fuzz.py": "tests/unit/test_fuzz.py: a fixed budget of mutants",
    "profile_model.py": "tests/unit/test_profile_model.py: --small, and its reading of a profile's kernels, gaps and leads",
    "trace_png.py": "tests/e2e/test_trace.py: a trace rendered",
    "test.sh": "CI itself (.ci/run)",
}
SMALL_RUNS: dict[str, tuple[int, list[str]]] = {
    "bench_local.py": (1, ["--small", "--no-compile"]),
    "bench_attention.py": (1, ["--small"]),
    "bench_torch.py": (1, ["--small", "--no-compile"]),
    "bench_moe.py": (1, ["--small", "--no-compile", "--case", "deepseek"]),
    "bench_mesh.py": (1, ["--sizes", "16,32"]),
    "check_examples.py": (2, ["--backend", "cpu", "--mesh", "tp=2", "examples/sp_mlp.mlir", "examples/attention.mlir"]),
}
"""Tool -> (ranks, arguments) of its small run here (ranks > 1: mpiexec)."""
HELP_ONLY = {
    "gemm_chunks.py": "times GEMMs on one GPU: nothing to run without one",
    "faults.py": "minutes of fault runs: its own tests run it",
    "gpu_check.sh": "the GPU machine's check: its embedded Python is checked here",
    "gpu_bench.sh": "the GPU machine's benchmark session",
}
MODULES = {"bench_layer_check.py", "bench_layer_graphs.py"}
"""Helpers imported by other tools: no command line."""


def _tools() -> list[str]:
    return sorted(p.name for p in TOOLS.iterdir() if p.suffix in (".py", ".sh"))


def test_every_tool_is_exercised() -> None:
    known = set(COVERED) | set(SMALL_RUNS) | set(HELP_ONLY)
    assert set(_tools()) == known, f"not in a table: {set(_tools()) - known}; gone: {known - set(_tools())}"


# ---- embedded Python -------------------------------------------------------------

_HEREDOC = re.compile(r"^(?P<cmd>[^\n]*)<<-?\s*(?P<q>['\"]?)(?P<tag>\w+)(?P=q)[^\n]*\n(?P<body>.*?)^\s*(?P=tag)\s*$", re.M | re.S)
_DASH_C = re.compile(r"""python3?\s+-c\s+(?P<q>["'])(?P<code>.*?)(?<!\\)(?P=q)""", re.S)


def embedded_python(text: str) -> list[str]:
    """The Python in a shell script: here-documents given to Python (or
    written to a .py file), and `python3 -c` strings (shell variables as 4)."""
    out = []
    for m in _HEREDOC.finditer(text):
        cmd = m.group("cmd")
        if re.search(r"\bpython3?\b", cmd) or re.search(r">\s*\S+\.py\b", cmd):
            out.append(m.group("body"))
    for m in _DASH_C.finditer(text):
        out.append(re.sub(r"\$\{?\w+\}?", "4", m.group("code")))
    return out


def sources(path: Path) -> list[str]:
    text = path.read_text()
    return [text] if path.suffix == ".py" else embedded_python(text)


def test_shell_tools_parse_and_embed_python() -> None:
    for name in _tools():
        if not name.endswith(".sh"):
            continue
        proc = subprocess.run(["bash", "-n", str(TOOLS / name)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        for code in embedded_python((TOOLS / name).read_text()):
            compile(code, name, "exec")
    assert len(embedded_python((TOOLS / "gpu_check.sh").read_text())) >= 3  # the finder finds them


# ---- imports -------------------------------------------------------------------------


def unresolved(code: str) -> list[str]:
    """The imports of `code` that do not resolve here."""
    problems = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                problems += _check(alias.name, [])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            problems += _check(node.module, [a.name for a in node.names if a.name != "*"])
    return problems


def _check(module: str, names: list[str]) -> list[str]:
    if module.split(".")[0] in GPU_ONLY or module == "__future__":
        return []
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        if getattr(e, "name", None) and e.name.split(".")[0] in GPU_ONLY:
            return []
        return [f"import {module}: {type(e).__name__}: {e}"]
    missing = []
    for n in names:
        if hasattr(mod, n):
            continue
        try:
            if importlib.util.find_spec(f"{module}.{n}") is not None:
                continue
        except (ImportError, ValueError):
            pass
        missing.append(f"from {module} import {n}: {module} has no {n}")
    return missing


def test_every_import_of_every_tool_resolves() -> None:
    """In one process of its own (the tools' sibling modules on its path)."""
    files = [str(TOOLS / n) for n in _tools()]
    proc = subprocess.run([sys.executable, __file__, *files], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr[-3000:]


def test_the_import_check_finds_a_stale_import() -> None:
    """tools/gpu_check.sh once imported `abort_job` from a module that no
    longer had it."""
    assert unresolved("from fuserc.runtime.job.mpi_env import abort_job, mpi_env") == [
        "from fuserc.runtime.job.mpi_env import abort_job: fuserc.runtime.job.mpi_env has no abort_job"
    ]
    assert unresolved("def f():\n    import fuserc.runtime.nothing\n")[0].startswith("import fuserc.runtime.nothing")
    assert unresolved("from cupy.cuda import nccl\nfrom fuserc.run_cli import run_file") == []


# ---- running them --------------------------------------------------------------------


def _harness():  # type: ignore[no-untyped-def]
    """tests/e2e/harness.py (the e2e folder is not on the path of a run of
    the unit tests alone)."""
    if "harness" not in sys.modules:
        spec = importlib.util.spec_from_file_location("harness", ROOT / "tests" / "e2e" / "harness.py")
        assert spec is not None and spec.loader is not None
        sys.modules["harness"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["harness"])
    return sys.modules["harness"]


def _env() -> dict[str, str]:
    return {**os.environ, **_harness().MPI_ENV}


@pytest.mark.parametrize("name", sorted(n for n in _tools() if n.endswith(".py") and n not in MODULES))
def test_help(name: str) -> None:
    proc = subprocess.run([sys.executable, str(TOOLS / name), "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env())
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stdout + proc.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(SMALL_RUNS))
def test_small_run(name: str) -> None:
    ranks, args = SMALL_RUNS[name]
    cmd = [sys.executable, str(TOOLS / name), *args]
    if ranks > 1:
        mpiexec = _harness().MPIEXEC
        if mpiexec is None:
            pytest.skip("mpiexec is not installed")
        cmd = [mpiexec, "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def main(files: list[str]) -> int:
    for folder in reversed(SEARCH):
        sys.path.insert(0, str(folder))
    for f in files:
        for code in sources(Path(f)):
            for problem in unresolved(code):
                print(f"{Path(f).name}: {problem}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The checkout behaves as the package wherever Python imports it from.

The repository keeps `dialects/`, `passes/` and `runtime/` beside `fuserc/`
(installed, they are `fuserc.dialects`, ...). `python -m fuserc` and
`torchrun -m fuserc` run from the repository's folder put that folder first
on sys.path, so they import the checkout's `fuserc/`, also after a plain
(non-editable) `pip install .`: fuserc/__init__.py finds the subpackages
beside it. These tests use a fresh virtual environment that sees the
dependencies of this one (its site-packages on a .pth line, whose own .pth
files, such as an editable install's finder, do not run), so that nothing
but the checkout or the plain install can provide fuserc.

Needs: `venv`, and for the plain install pip with a build backend
(setuptools >= 64, from the index when it is not installed here).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from harness import MPI_ENV

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/sp_mlp.mlir"


def _fresh_python(tmp_path: Path, first: Path | None = None) -> Path:
    """A venv's python seeing `first` (a pip --target folder), then this
    interpreter's site-packages, and nothing installed of its own."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    own = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True)
    dirs = [*([str(first)] if first else []), *site.getsitepackages()]
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user and os.path.isdir(user):
        dirs.append(user)
    (Path(own.stdout.strip()) / "deps.pth").write_text("\n".join(dirs) + "\n")
    return python


def _mpi_library_dirs() -> str:
    """Where this interpreter's mpi4py looks for the MPI library (the
    `lib` folders of its prefixes: MPICH's wheel puts libmpi there), for
    MPI4PY_LIBMPI: a fresh venv sees this one's mpi4py on its .pth line,
    and must load the same library, not whatever its own prefixes hold."""
    prefixes = [sys.exec_prefix, site.getuserbase(), sys.base_exec_prefix]
    dirs = [os.path.join(p, "lib") for p in dict.fromkeys(prefixes) if os.path.isdir(os.path.join(p, "lib"))]
    return os.pathsep.join([*dirs, ""])  # "": then the loader's own search


def _run(cmd: list[object], cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env.setdefault("MPI4PY_LIBMPI", _mpi_library_dirs())
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env={**env, **MPI_ENV}, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def _where(python: Path, cwd: Path) -> Path:
    """The folder `fuserc.runtime` is imported from, as `python` in `cwd` sees it."""
    out = _run([python, "-c", "import fuserc.runtime as r; print(r.__file__)"], cwd).stdout.strip()
    return Path(out).parent


_LOADED_LIBMPI = "from mpi4py import MPI; print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libmpi' in l}))"


def test_checkout_without_install(tmp_path: Path) -> None:
    """Nothing installed but the dependencies: from the repository's folder,
    or with it on PYTHONPATH. The fresh venv loads the MPI library this
    environment's mpi4py loads (MPICH's wheel keeps it in this prefix's
    lib/, which the fresh venv's prefix is not)."""
    python = _fresh_python(tmp_path)
    if importlib.util.find_spec("mpi4py") is not None and os.path.exists("/proc/self/maps"):
        here = subprocess.run([sys.executable, "-c", _LOADED_LIBMPI], capture_output=True, text=True, timeout=60)
        if here.returncode == 0:
            assert _run([python, "-c", _LOADED_LIBMPI], tmp_path).stdout == here.stdout
    assert _where(python, ROOT) == ROOT / "runtime"
    proc = _run([python, "-m", "fuserc", "opt", EXAMPLE, "-p", "default"], ROOT)
    assert "hir." in proc.stdout
    proc = _run([python, "-m", "fuserc", "run", EXAMPLE, "--mesh", "tp=1", "--check"], ROOT)
    assert "output 0:" in proc.stdout and ": ok" in proc.stdout
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([python, "-c", "import fuserc.passes as p; print(p.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and Path(proc.stdout.strip()).parent == ROOT / "passes", proc.stderr


def _build_flags() -> list[str]:
    """Build in this environment when it can (no index needed), else let pip
    fetch the build backend."""
    try:
        import setuptools
    except ImportError:
        return []
    version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    if version >= (70, 1) or (version >= (64, 0) and importlib.util.find_spec("wheel") is not None):
        return ["--no-build-isolation"]
    return []


def test_checkout_after_plain_install(tmp_path: Path) -> None:
    """`pip install .` (not editable), then `python -m fuserc` and `torchrun
    -m fuserc` from the repository's folder: the checkout is imported,
    whole; elsewhere the installed package is."""
    if importlib.util.find_spec("torch.distributed.run") is None:
        pytest.skip("torch.distributed.run is not available")
    source = tmp_path / "source"  # a copy: the build leaves build/ and *.egg-info/ in its source
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("fuserc", "dialects", "passes", "runtime"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", *_build_flags(), "--target", target, source]
    _run(pip, tmp_path, timeout=300)
    assert (target / "fuserc" / "runtime" / "__init__.py").is_file()
    python = _fresh_python(tmp_path, target)
    assert _where(python, tmp_path) == target / "fuserc" / "runtime"  # elsewhere: the installed package
    assert _where(python, ROOT) == ROOT / "runtime"  # from the checkout: the checkout, not a mix
    proc = _run([python, "-m", "fuserc", "--version"], ROOT)
    assert "0." in proc.stdout
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = _run([*torchrun, "-m", "fuserc", "run", EXAMPLE, "--mesh", "tp=2", "--check"], ROOT, timeout=180)
    assert "output 0:" in proc.stdout and ": ok" in proc.stdout, proc.stdout

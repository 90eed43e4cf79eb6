#!/usr/bin/env python
"""Every example through a pipeline and `--check`, in one job (one startup
of the ranks and the backend for all of them).

    mpiexec -n 4 python tools/check_examples.py [--pipeline P] [--backend auto|cpu|cuda]
        [--mesh NAME=SHAPE ...] [FILE ...]
    torchrun --nproc-per-node 4 tools/check_examples.py ...     (the same)

FILEs default to examples/*.mlir but the *_large ones; on the cpu backend
one whose inputs pass 1 GiB is skipped (says so). Each is compiled
with the pipeline (default: `default`) and run once on random inputs, and
rank 0 compares every output with the unsharded float64 reference, as
`fuserc run FILE --check` does (fuserc/check.py), then prints one line per
example. `--mesh` resizes a mesh of every example that declares it (the
examples use @tp of 4 devices: `--mesh tp=2` runs them on 2 ranks). Exit 1
when any example fails its check; a diagnostic ends the job, as in
`fuserc run`. tools/gpu_check.sh runs it on the GPUs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_files() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "examples").glob("*.mlir")) if "large" not in p.name]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="the programs (default: examples/*.mlir but the *_large ones)")
    p.add_argument("--pipeline", default="default", help="the passes (default: default)")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--mesh", action="append", default=[], metavar="NAME=SHAPE", help="resize a declared mesh, where an example has it")
    a = p.parse_args(argv)
    from fuserc.ir import mesh_option

    try:
        meshes = dict(mesh_option(m) for m in a.mesh)
    except ValueError as e:
        p.error(str(e))
    files = a.files or default_files()
    from fuserc.runtime.job.job import current, run_guarded

    run_guarded(lambda: check_all(current(), files, a.pipeline, a.backend, meshes))
    return 0


CPU_INPUT_LIMIT = 2**30
"""Global input bytes above which an example is skipped on the cpu backend
(examples/long_context.mlir's 131072 tokens: its float64 reference alone
would not fit; its test runs it smaller)."""


def input_bytes(text: str, path: str) -> int:
    """Bytes of the global arguments of the program's @main."""
    import math

    from xdsl.dialects.builtin import TensorType
    from xdsl.dialects.func import FuncOp

    from fuserc.ir import make_context, parse
    from fuserc.passes.reshard_util import element_bytes

    module = parse(text, path, make_context())
    main = next((f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data == "main"), None)
    if main is None:
        return 0
    types = [t for t in main.function_type.inputs.data if isinstance(t, TensorType)]
    return sum(math.prod(t.get_shape()) * element_bytes(t) for t in types)


def check_all(job: object, files: list[str], pipeline: str, backend: str, meshes: dict[str, tuple[int, ...]]) -> int:
    """Each file checked in turn in this job; the exit code (rank 0's)."""
    from fuserc.run_cli import run_file
    from fuserc.runtime.backends.backend import resolve_auto

    env = job.env  # type: ignore[attr-defined]
    results = []
    for path in files:
        if env.rank == 0:
            print(f"--- {path}", flush=True)
        text = Path(path).read_text()
        declared = {name: shape for name, shape in meshes.items() if f"fusion.mesh @{name} " in text}
        size = input_bytes(text, path)
        if resolve_auto(backend) == "cpu" and size > CPU_INPUT_LIMIT:
            if env.rank == 0:
                print(f"skipped on the cpu backend: {size / 2**30:.1f} GiB of inputs (over {CPU_INPUT_LIMIT / 2**30:.0f} GiB)", flush=True)
            continue
        code = run_file(job, path, pipeline=pipeline, backend=backend, check=True, meshes=declared)
        results.append((Path(path).name, code))
    if env.rank != 0:
        return 0
    for name, code in results:
        print(f"{'ok' if code == 0 else 'FAILED'}: {name}")
    failed = [name for name, code in results if code]
    print(f"{len(results) - len(failed)} of {len(results)} examples pass their check", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

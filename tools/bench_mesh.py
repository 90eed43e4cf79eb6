"""Compile time of reshards on big meshes: linear in the devices used.

    python3 tools/bench_mesh.py [--sizes 10000,100000,1000000] [--kinds all]

For each kind of reshard and each mesh size N, the time of `fuserc opt -p
default` on the program (parse, the four passes, printing; wall and CPU),
each in a fresh process, and that process's peak memory. Each CPU time is
printed beside its baseline from the same run: the smallest size's time
scaled linearly to N (ratio 1.0: linear; a quadratic algorithm shows a ratio
growing with N). Also the time to refuse a mesh of 10^8 devices (the
verifier's limit, before any pass).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from collections.abc import Callable

def _square(n: int) -> tuple[int, int]:
    r = int(math.isqrt(n))
    return r, n // r


Case = tuple[tuple[int, ...], str, str, str, bool]
"""(mesh shape, extent text, source axes, destination axes, to a second
mesh of the same shape whose ids run backwards)."""

KINDS: dict[str, Callable[[int], Case]] = {
    "allgather 1-D": lambda n: ((n,), f"{n}x2", "[DIDx, -]", "[-, -]", False),
    "allgather 2-D rows": lambda n: (_square(n), f"{_square(n)[1]}x2", "[DIDx, -]", "[-, -]", False),
    "gather both axes": lambda n: (_square(n), f"{math.prod(_square(n))}", "[DIDy*DIDx]", "[-]", False),
    "alltoall 2-D": lambda n: (_square(n), f"{_square(n)[1]}x{_square(n)[1]}", "[DIDx, -]", "[-, DIDx]", False),
    "local slice": lambda n: ((n,), f"{n}", "[-]", "[DIDx]", False),
    "send/recv to another mesh": lambda n: ((n,), f"{n}", "[DIDx]", "[DIDx]", True),
}
"""The reshards timed, each a function of the number of devices."""


def program(case: Case) -> str:
    shape, extent, src, dst, other = case
    mesh = f"fusion.mesh @a shape = [{', '.join(map(str, shape))}]\n"
    if other:
        ids = ", ".join(str(d) for d in reversed(range(math.prod(shape))))
        mesh += f"fusion.mesh @b shape = [{', '.join(map(str, shape))}] devices = [{ids}]\n"
    a = f"tensor<{extent}xf32, #fusion.sharding<@a, {src}>>"
    b = f"tensor<{extent}xf32, #fusion.sharding<@{'b' if other else 'a'}, {dst}>>"
    return f"{mesh}func.func @main(%x: {a}) -> {b} {{\n  %y = fusion.set %x : ({a}) -> {b}\n  func.return %y : {b}\n}}\n"


def compile_seconds(text: str, timeout: float | None = None) -> tuple[float, float, int] | None:
    """(wall seconds, CPU seconds, peak RSS bytes) of `fuserc opt -p default`
    on `text`, in a fresh process (imports are not timed); None past
    `timeout` seconds."""
    code = (
        "import resource, sys, time\n"
        "from fuserc import ir, pipeline as pl\n"
        "text = sys.stdin.read()\n"
        "w, c = time.perf_counter(), time.process_time()\n"
        "ctx = ir.make_context()\n"
        "module = ir.parse(text, 'bench.mlir', ctx)\n"
        "pl.PassRunner(pl.build('default')).run(ctx, module)\n"
        "ir.to_text(module)\n"
        "print(time.perf_counter() - w, time.process_time() - c, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    wall, cpu, rss_kib = out.stdout.split()
    return float(wall), float(cpu), int(rss_kib) * 1024


def refuse_seconds() -> tuple[float, str]:
    from fuserc import ir
    from fuserc.diagnostics import Diagnostic

    start = time.perf_counter()
    try:
        ir.parse(program(KINDS["allgather 1-D"](10**8)), "huge.mlir", ir.make_context())
        message = "accepted"
    except Diagnostic as d:
        message = d.message
    return time.perf_counter() - start, message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--kinds", default="all", help="comma-separated names (see KINDS), or all")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed to one compile")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = list(KINDS) if args.kinds == "all" else args.kinds.split(",")
    print(f"{'reshard':<28}{'devices':>10}{'wall s':>9}{'CPU s':>9}{'CPU linear from smallest':>26}{'ratio':>7}{'peak RSS MiB':>14}")
    for k in kinds:
        base: tuple[int, float] | None = None
        for n in sizes:
            got = compile_seconds(program(KINDS[k](n)), args.timeout)
            if got is None:
                print(f"{k:<28}{n:>10}{'> ' + str(args.timeout):>9}", flush=True)
                break
            wall, cpu, rss = got
            if base is None:
                base = (n, cpu)
            linear = base[1] * n / base[0]
            print(f"{k:<28}{n:>10}{wall:>9.2f}{cpu:>9.2f}{linear:>26.2f}{cpu / linear:>7.2f}{rss / 2**20:>14.0f}", flush=True)
    seconds, message = refuse_seconds()
    print(f"mesh of 10^8 devices refused in {seconds:.3f} s: {message}")


if __name__ == "__main__":
    main()

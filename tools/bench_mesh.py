"""Compile time of reshards on big meshes: linear in the devices used.

    python3 tools/bench_mesh.py [--sizes 10000,100000,1000000] [--kinds all]

For each kind of reshard and each mesh size N, the time of `fuserc opt -p
default` on the program (parse, the passes, printing; wall and CPU),
each in a fresh process, that process's peak memory, and the size of the
host program it prints (bytes and `hir.if_rank` regions: constant in N when
teams and regions are computed, not listed per mesh slice). Beside the
single reshards, whole programs (`PROGRAMS`) on 2-D meshes of N / 64 rows
of 64: a partial sum set onto one device, under `default` and under
`autodiff,default`, and a mixed-precision program (bf16 GEMM and GELU,
an f32 loss) under `autodiff,default`. Each CPU time is
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


def partial_to_one(shape: tuple[int, int]) -> str:
    """A GEMM contracted over DIDx of a 2-D mesh (a partial sum, whole over
    DIDy) set onto a mesh of one device."""
    xt = "tensor<8x128xf32, #fusion.sharding<@a, [-, DIDx]>>"
    wt = "tensor<128x8xf32, #fusion.sharding<@a, [DIDx, -]>>"
    pt = "tensor<8x8xf32, #fusion.sharding<@a, [-, -], partial = DIDx>>"
    ot = "tensor<8x8xf32, #fusion.sharding<@one, [-, -]>>"
    return (
        f"fusion.mesh @a shape = [{shape[0]}, {shape[1]}]\nfusion.mesh @one shape = [1]\n"
        f"func.func @main(%x: {xt}, %w: {wt}) -> {ot} {{\n"
        f"  %p = fusion.matmul %x, %w : ({xt}, {wt}) -> {pt}\n"
        f"  %y = fusion.set %p : ({pt}) -> {ot}\n  func.return %y : {ot}\n}}\n"
    )


def mixed_precision(shape: tuple[int, int]) -> str:
    """Rows split over DIDx of a 2-D mesh, an f32 weight cast to bf16, a
    bf16 GEMM and GELU, an f32 sum as the loss (for autodiff)."""
    rows, w = "tensor<128x16xbf16, #fusion.sharding<@a, [DIDx, -]>>", "tensor<16x16xf32, #fusion.sharding<@a, [-, -]>>"
    loss = "tensor<f32, #fusion.sharding<@a, []>>"
    return (
        f"fusion.mesh @a shape = [{shape[0]}, {shape[1]}]\n"
        f"func.func @main(%x: {rows}, %w: {w}) -> {loss} {{\n"
        f"  %wb = fusion.cast %w : ({w}) -> tensor<16x16xbf16>\n"
        f"  %h = fusion.matmul %x, %wb : ({rows}, tensor<16x16xbf16>) -> tensor<128x16xbf16>\n"
        f"  %g = fusion.gelu %h : (tensor<128x16xbf16>) -> tensor<128x16xbf16>\n"
        f"  %f = fusion.cast %g : (tensor<128x16xbf16>) -> tensor<128x16xf32>\n"
        f"  %s = fusion.sum %f dims = [0, 1] : (tensor<128x16xf32>) -> {loss}\n"
        f"  func.return %s : {loss}\n}}\n"
    )


def _rows_of_64(n: int) -> tuple[int, int]:
    return max(1, n // 64), 64


PROGRAMS: dict[str, tuple[Callable[[int], str], str]] = {
    "partial to one device": (lambda n: partial_to_one(_rows_of_64(n)), "default"),
    "partial to one (autodiff)": (lambda n: partial_to_one(_rows_of_64(n)), "autodiff,default"),
    "mixed precision (autodiff)": (lambda n: mixed_precision(_rows_of_64(n)), "autodiff,default"),
}
"""Whole programs timed, each (its text for N devices, its pipeline)."""


def compile_seconds(text: str, timeout: float | None = None, spec: str = "default") -> tuple[float, float, int, int, int] | None:
    """(wall seconds, CPU seconds, peak RSS bytes, bytes printed, hir.if_rank
    regions) of `fuserc opt -p SPEC` on `text`, in a fresh process (imports
    are not timed); None past `timeout` seconds."""
    code = (
        "import resource, sys, time\n"
        "from fuserc import ir, pipeline as pl\n"
        "text = sys.stdin.read()\n"
        "w, c = time.perf_counter(), time.process_time()\n"
        "ctx = ir.make_context()\n"
        "module = ir.parse(text, 'bench.mlir', ctx)\n"
        f"pl.PassRunner(pl.build({spec!r})).run(ctx, module)\n"
        "out = ir.to_text(module)\n"
        "print(time.perf_counter() - w, time.process_time() - c, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
        " len(out), out.count('hir.if_rank'))\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    wall, cpu, rss_kib, size, regions = out.stdout.split()
    return float(wall), float(cpu), int(rss_kib) * 1024, int(size), int(regions)


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
    parser.add_argument("--kinds", default="all", help="comma-separated names (see KINDS and PROGRAMS), or all")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed to one compile")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [*KINDS, *PROGRAMS] if args.kinds == "all" else args.kinds.split(",")
    print(
        f"{'reshard or program':<28}{'devices':>10}{'wall s':>9}{'CPU s':>9}{'CPU linear from smallest':>26}{'ratio':>7}"
        f"{'peak RSS MiB':>14}{'printed KiB':>13}{'regions':>9}"
    )
    for k in kinds:
        base: tuple[int, float] | None = None
        for n in sizes:
            text, spec = (program(KINDS[k](n)), "default") if k in KINDS else (PROGRAMS[k][0](n), PROGRAMS[k][1])
            got = compile_seconds(text, args.timeout, spec)
            if got is None:
                print(f"{k:<28}{n:>10}{'> ' + str(args.timeout):>9}", flush=True)
                break
            wall, cpu, rss, size, regions = got
            if base is None:
                base = (n, cpu)
            linear = base[1] * n / base[0]
            print(
                f"{k:<28}{n:>10}{wall:>9.2f}{cpu:>9.2f}{linear:>26.2f}{cpu / linear:>7.2f}{rss / 2**20:>14.0f}{size / 1024:>13.1f}{regions:>9}",
                flush=True,
            )
    seconds, message = refuse_seconds()
    print(f"mesh of 10^8 devices refused in {seconds:.3f} s: {message}")


if __name__ == "__main__":
    main()

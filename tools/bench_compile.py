#!/usr/bin/env python
"""Compile time of `fuserc opt -p default`, per op, as programs grow.

    python tools/bench_compile.py [--ops 100,1000,10000] [--ranks 4] [--json FILE]
        [--program blocks|chain] [--pipeline default|autodiff,default]

For each size, one generated program (`generate`) of about that many fusion
ops on a 1-D mesh of `--ranks` devices: blocks of a sequence-parallel MLP
(an AllGather + GEMM, an elementwise chain, a GEMM + ReduceScatter), a
residual add and explicit reshards between them (to `[-, DIDx]`, an
alltoall, and back). Each is parsed, run through the default pipeline and
printed in this process, as `fuserc opt -p default` does, and timed in CPU
time (time.process_time) per phase: parsing (with the verification of
the input), each pass, the verification after each pass, printing.
`--program chain` times instead one chain of ops (`chain`: elementwise
ops with a GEMM every tenth), and `--pipeline autodiff,default` compiles
its forward and backward too (three functions: main, main_fwd, main_bwd).

Printed per size: the total, the time per op, and that figure over the
per-op time of the smallest size of the same run (the baseline: 1.00 is
linear growth); then each phase's share. With `--repeat N` each phase's
time is its least over N compiles (a shared machine's noise only adds). `--check-linear R` exits 1 when
a larger size's per-op time exceeds R times the baseline's (not used by
the tests: timings are not asserted there).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field


def generate(ops: int, ranks: int = 4) -> str:
    """A program of about `ops` fusion ops (at least one block of 12)."""
    m, h, f = 16 * ranks, 8 * ranks, 16 * ranks
    rows = "#fusion.sharding<@tp, [DIDx, -]>"
    x = f"tensor<{m}x{h}xf32, {rows}>"
    w1 = f"tensor<{h}x{f}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    w2 = f"tensor<{f}x{h}xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    hid = f"tensor<{m}x{f}xf32>"
    act = f"tensor<{m}x{h}xf32>"
    cols = f"tensor<{m}x{h}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    lines = [f"fusion.mesh @tp shape = [{ranks}]", f"func.func @main(%x: {x}, %w1: {w1}, %w2: {w2}) -> {x} {{"]
    cur = "%x"
    per_block = 12
    for b in range(max(1, ops // per_block)):
        p = f"%b{b}_"
        lines += [
            f"  {p}h = fusion.matmul {cur}, %w1 : ({x}, {w1}) -> {hid}",
            f"  {p}g = fusion.gelu {p}h : ({hid}) -> {hid}",
            f"  {p}s = fusion.mul {p}g, {p}h : ({hid}, {hid}) -> {hid}",
            f"  {p}t = fusion.tanh {p}s : ({hid}) -> {hid}",
            f"  {p}a = fusion.add {p}t, {p}g : ({hid}, {hid}) -> {hid}",
            f"  {p}y = fusion.matmul {p}a, %w2 : ({hid}, {w2}) -> {x}",
            f"  {p}r = fusion.relu {p}y : ({x}) -> {act}",
            f"  {p}c = fusion.set {p}r : ({act}) -> {cols}",
            f"  {p}e = fusion.exp {p}c : ({cols}) -> {act}",
            f"  {p}n = fusion.neg {p}e : ({act}) -> {act}",
            f"  {p}d = fusion.set {p}n : ({act}) -> {x}",
            f"  {p}o = fusion.add {p}d, {cur} : ({x}, {x}) -> {x}",
        ]
        cur = f"{p}o"
    lines += [f"  func.return {cur} : {x}", "}", ""]
    return "\n".join(lines)


def chain(ops: int, ranks: int = 4) -> str:
    """A chain of `ops` fusion ops, each using the one before: a GEMM with a
    column-split weight every tenth op (the first), elementwise ops
    between; rows split over the mesh, an f32 sum as the result (a loss,
    for autodiff)."""
    m, h = 16 * ranks, 8 * ranks
    rows = f"tensor<{m}x{h}xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    w = f"tensor<{h}x{h}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    t = f"tensor<{m}x{h}xf32>"
    loss = "tensor<f32, #fusion.sharding<@tp, []>>"
    unary = ("gelu", "tanh", "relu", "neg", "sigmoid", "silu", "tanh", "neg", "gelu")
    lines = [f"fusion.mesh @tp shape = [{ranks}]", f"func.func @main(%x: {rows}, %w: {w}) -> {loss} {{"]
    cur, ty = "%x", rows
    for i in range(max(1, ops - 1)):
        if i % 10 == 0:
            lines.append(f"  %v{i} = fusion.matmul {cur}, %w : ({ty}, {w}) -> {t}")
        else:
            lines.append(f"  %v{i} = fusion.{unary[i % 10 - 1]} {cur} : ({ty}) -> {t}")
        cur, ty = f"%v{i}", t
    lines += [f"  %loss = fusion.sum {cur} dims = [0, 1] : ({t}) -> {loss}", f"  func.return %loss : {loss}", "}", ""]
    return "\n".join(lines)


GENERATORS = {"blocks": generate, "chain": chain}
"""--program: the generated programs."""


@dataclass
class Result:
    ops: int
    phases: dict[str, float] = field(default_factory=dict)  # CPU seconds

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    @property
    def per_op_us(self) -> float:
        return self.total / self.ops * 1e6


def compile_once(text: str, spec: str = "default") -> Result:
    """Parse, the pipeline `spec` pass by pass, print: CPU time of each."""
    from fuserc import ir
    from fuserc import pipeline as pl
    from fuserc.dialects.fusion import FusionOp

    ctx = ir.make_context()
    phases: dict[str, float] = {}
    with ir.compiling():  # as fuserc opt: the collector made rare
        t0 = time.process_time()
        module = ir.parse(text, "bench.mlir", ctx)
        phases["parse+verify"] = time.process_time() - t0
        count = sum(1 for op in module.walk() if isinstance(op, FusionOp))
        phases["verify after passes"] = 0.0
        for p in pl.build(spec):
            t0 = time.process_time()
            p.apply(ctx, module)
            t1 = time.process_time()
            ir.verify(module)  # as fuserc opt does after each pass
            phases[p.name] = t1 - t0
            phases["verify after passes"] += time.process_time() - t1
        t0 = time.process_time()
        ir.to_text(module)
        phases["print"] = time.process_time() - t0
    return Result(count, phases)


def print_phase_growth(results: list[Result]) -> None:
    """Each phase's CPU time per op over its own at the smallest size (1.00:
    the phase grows linearly; a phase walking the whole function per op
    doubles its figure with each doubling of the program)."""
    base = results[0]
    print("time per op of each phase over the smallest size's:")
    print(f"{'phase':<28}" + "".join(f"{r.ops:>9}" for r in results))
    for name in base.phases:
        first = base.phases[name] / base.ops
        print(f"{name:<28}" + "".join(f"{r.phases[name] / r.ops / first:>9.2f}" if first > 0 else f"{'-':>9}" for r in results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="100,1000,10000", help="program sizes, comma-separated")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="compile each size this many times; keep each phase's least time")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--program", choices=sorted(GENERATORS), default="blocks", help="the generated program (module docstring)")
    parser.add_argument("--pipeline", default="default", help="the pass pipeline: default or autodiff,default")
    parser.add_argument("--check-linear", type=float, default=0.0, metavar="R")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.ops.split(",")]
    make = GENERATORS[args.program]
    compile_once(make(12, args.ranks), args.pipeline)  # warm caches and lazy imports
    results = []
    for n in sizes:
        text = make(n, args.ranks)
        runs = [compile_once(text, args.pipeline) for _ in range(max(1, args.repeat))]
        results.append(Result(runs[0].ops, {k: min(r.phases[k] for r in runs) for k in runs[0].phases}))
    base = results[0].per_op_us
    print(f"fuserc opt -p {args.pipeline}, CPU time, {args.ranks} ranks, program {args.program} (baseline: {results[0].ops} ops per op)")
    print(f"{'ops':>7} {'total s':>9} {'us/op':>9} {'vs base':>8}")
    for r in results:
        print(f"{r.ops:>7} {r.total:>9.3f} {r.per_op_us:>9.1f} {r.per_op_us / base:>8.2f}")
    names = list(results[0].phases)
    print("share of each phase:")
    print(f"{'phase':<28}" + "".join(f"{r.ops:>9}" for r in results))
    for name in names:
        print(f"{name:<28}" + "".join(f"{r.phases[name] / r.total:>9.0%}" for r in results))
    print_phase_growth(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**asdict(r), "total": r.total, "per_op_us": r.per_op_us} for r in results], f, indent=1)
    if args.check_linear and any(r.per_op_us > args.check_linear * base for r in results):
        print(f"growth is not linear within {args.check_linear}x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

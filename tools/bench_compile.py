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
linear growth), the CPU time of `fuserc opt` on that program as a
process (imports included; `process s`) beside its target where there is
one (`TARGETS`: the 1,000-op program under `-p default` in under 1 s);
then each phase's share. With `--repeat N` each phase's
time is its least over N compiles (a shared machine's noise only adds). `--check-linear R` exits 1 when
a larger size's per-op time exceeds R times the baseline's (not used by
the tests: timings are not asserted there).

    python tools/bench_compile.py --model-layers 1,2,4,12,24,48 --ranks-list 2,4,8

The model mode: the L-layer GPT of examples/python/train_gpt.py
(examples/python/gpt_model.py; bf16, hidden 4096, tokens 8192 unless
given) through `fuserc opt -p autodiff,default`, per L and rank count: the
communication report's bytes per rank of @main_fwd and @main_bwd in units
of one [tokens, hidden] bf16 tensor, beside the linear expectation (the
1-layer model plus L - 1 times what the second layer adds) and their
ratio, the share overlapped, the CPU time of `fuserc opt` as a process
(imports included; `cpu s`) beside its target (`TARGETS`: 12 layers at
d = 4 in under 3 s, 48 in under 10 s), the same with `--comm-report`
(`+report`, as the plan is read), and of each phase in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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

TARGETS: dict[tuple, float] = {
    ("blocks", "default", 1000): 1.0,
    ("model", 12, 4): 3.0,
    ("model", 48, 4): 10.0,
}
"""CPU seconds of `fuserc opt` as a process, imports included, on a
2-core development machine: (program, pipeline, about how many ops) and
("model", layers, ranks)."""


def target(key: tuple) -> str:
    """The target of `key` as printed beside a figure ('-' where none);
    a generated program's size counts within 5% (996 ops is the 1,000-op
    program)."""
    if key[0] != "model":
        key = next((k for k in TARGETS if k[:2] == key[:2] and abs(k[2] - key[2]) <= 0.05 * k[2]), key)
    t = TARGETS.get(key)
    return f"< {t:g}" if t is not None else "-"


@dataclass
class Result:
    ops: int
    phases: dict[str, float] = field(default_factory=dict)  # CPU seconds
    process_cpu: float = 0.0  # `fuserc opt` on the program as a process, imports included

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    @property
    def per_op_us(self) -> float:
        return self.total / self.ops * 1e6


def compile_once(text: str, spec: str = "default") -> Result:
    """Parse, the pipeline `spec` pass by pass, print: CPU time of each."""
    return Result(*run_timed(text, spec)[1:])


def run_timed(text: str, pipeline: str) -> tuple[Any, int, dict[str, float]]:
    """(module, its fusion ops, CPU seconds per phase) of parsing `text`,
    running `pipeline` pass by pass (each followed by verification, as
    fuserc opt does) and printing the result."""
    from fuserc import ir
    from fuserc import pipeline as pl
    from fuserc.dialects.fusion import FusionOp

    ctx = ir.make_context()
    phases: dict[str, float] = {}
    with ir.compiling():  # as fuserc opt: the collector kept from running
        t0 = time.process_time()
        module = ir.parse(text, "bench.mlir", ctx)
        phases["parse+verify"] = time.process_time() - t0
        count = sum(1 for op in module.walk() if isinstance(op, FusionOp))
        phases["verify after passes"] = 0.0
        for p in pl.build(pipeline):
            t0 = time.process_time()
            p.apply(ctx, module)
            t1 = time.process_time()
            ir.verify(module)  # as fuserc opt does after each pass
            phases[p.name] = t1 - t0
            phases["verify after passes"] += time.process_time() - t1
        t0 = time.process_time()
        ir.to_text(module)
        phases["print"] = time.process_time() - t0
    return module, count, phases


# ---- the L-layer GPT of examples/python/train_gpt.py ----------------------
MODEL_PIPELINE = "autodiff,default"


@dataclass
class ModelRow:
    layers: int
    ranks: int
    fwd: float  # bytes per rank of @main_fwd
    bwd: float
    overlapped: float  # of both
    phases: dict[str, float] = field(default_factory=dict)  # CPU seconds in this process
    process_cpu: float = 0.0  # `fuserc opt` as a process: user + system CPU, imports included
    process_cpu_report: float = 0.0  # the same with --comm-report

    @property
    def total(self) -> float:
        return self.fwd + self.bwd


def model_text(layers: int, ranks: int, model: argparse.Namespace) -> str:
    """examples/python/gpt_model.py's program of `layers` layers on `ranks` devices."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "python"))
    try:
        from gpt_model import build
    finally:
        sys.path.pop(0)
    a = argparse.Namespace(**{**vars(model), "layers": layers, "dropout": 0.0, "dtype": "bf16"})
    return build(a, ranks)[0].to_mlir()


def process_cpu(path: Path, pipeline: str, *extra: str) -> float:
    """User + system CPU seconds of `fuserc opt PATH -p PIPELINE EXTRA...` in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, "-m", "fuserc", "opt", str(path), "-p", pipeline, *extra, "-o", os.devnull]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL if extra else None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def model_row(layers: int, ranks: int, model: argparse.Namespace, tmp: Path) -> ModelRow:
    from fuserc.comm_report import report

    text = model_text(layers, ranks, model)
    module, _, phases = run_timed(text, MODEL_PIPELINE)
    rep = report(module)
    fwd, bwd = (rep.function(f).per_rank[0] for f in ("main_fwd", "main_bwd"))
    path = tmp / f"model{layers}x{ranks}.mlir"
    path.write_text(text)
    row = ModelRow(layers, ranks, float(fwd.nbytes), float(bwd.nbytes), float(fwd.overlapped + bwd.overlapped), phases)
    row.process_cpu = process_cpu(path, MODEL_PIPELINE)
    row.process_cpu_report = process_cpu(path, MODEL_PIPELINE, "--comm-report")
    return row


def model_main(args: argparse.Namespace) -> int:
    """Plan and compile time of the L-layer model per L and rank count:
    units of [tokens, hidden] bf16 beside the linear expectation (the
    1-layer model plus L - 1 times the 2-layer model's extra), and CPU time."""
    layers = [int(s) for s in args.model_layers.split(",")]
    unit = args.tokens * args.hidden * 2
    rows: list[ModelRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in [int(s) for s in str(args.ranks_list or args.ranks).split(",")]:
            one, two = (model_row(n, d, args, Path(tmp)) for n in (1, 2))
            per_layer = two.total - one.total
            print(f"{MODEL_PIPELINE} of the GPT model (hidden {args.hidden}, tokens {args.tokens}, bf16) at d = {d}: "
                  f"units of {args.tokens}x{args.hidden}xbf16 per rank; linear = 1 layer + (L - 1) x {per_layer / unit:.3f}")  # fmt: skip
            names = [k for k in one.phases]
            print(f"{'L':>3} {'fwd':>8} {'bwd':>8} {'total':>8} {'linear':>8} {'ratio':>6} {'ovl %':>6} {'cpu s':>7} {'target':>7} {'+report':>7} {'in-proc':>8}  "
                  + " ".join(f"{n[:12]:>12}" for n in names))  # fmt: skip
            for n in layers:
                r = {1: one, 2: two}.get(n) or model_row(n, d, args, Path(tmp))
                rows.append(r)
                linear = one.total + (n - 1) * per_layer
                print(f"{n:>3} {r.fwd / unit:>8.2f} {r.bwd / unit:>8.2f} {r.total / unit:>8.2f} {linear / unit:>8.2f} "
                      f"{r.total / linear:>6.3f} {100 * r.overlapped / r.total:>6.1f} {r.process_cpu:>7.2f} {target(('model', n, d)):>7} {r.process_cpu_report:>7.2f} {sum(r.phases.values()):>8.2f}  "
                      + " ".join(f"{r.phases[k]:>12.3f}" for k in names), flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**asdict(r), "total": r.total} for r in rows], f, indent=1)
    return 0


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
    model = parser.add_argument_group("the GPT model of examples/python/train_gpt.py (instead of --ops)")
    model.add_argument("--model-layers", help="layer counts, comma-separated, e.g. 1,2,4,12,24,48")
    model.add_argument("--ranks-list", help="rank counts for the model, comma-separated (default: --ranks)")
    model.add_argument("--tokens", type=int, default=8192)
    model.add_argument("--hidden", type=int, default=4096)
    model.add_argument("--heads", type=int, default=32)
    model.add_argument("--ffn", type=int, default=16384)
    model.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args(argv)
    if args.model_layers:
        return model_main(args)
    sizes = [int(s) for s in args.ops.split(",")]
    make = GENERATORS[args.program]
    compile_once(make(12, args.ranks), args.pipeline)  # warm caches and lazy imports
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            text = make(n, args.ranks)
            runs = [compile_once(text, args.pipeline) for _ in range(max(1, args.repeat))]
            path = Path(tmp) / f"{args.program}{n}.mlir"
            path.write_text(text)
            cpu = min(process_cpu(path, args.pipeline) for _ in range(max(1, args.repeat)))
            results.append(Result(runs[0].ops, {k: min(r.phases[k] for r in runs) for k in runs[0].phases}, cpu))
    base = results[0].per_op_us
    print(f"fuserc opt -p {args.pipeline}, CPU time, {args.ranks} ranks, program {args.program} (baseline: {results[0].ops} ops per op)")
    print(f"{'ops':>7} {'total s':>9} {'us/op':>9} {'vs base':>8} {'process s':>10} {'target':>7}")
    for r in results:
        print(f"{r.ops:>7} {r.total:>9.3f} {r.per_op_us:>9.1f} {r.per_op_us / base:>8.2f} {r.process_cpu:>10.3f} {target((args.program, args.pipeline, r.ops)):>7}")
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

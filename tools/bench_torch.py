#!/usr/bin/env python
"""fuserc inside PyTorch: what `fuserc.torch.function` and `execute` cost
over the programs they run, beside torch eager and torch.compile.

    python tools/bench_torch.py [--case mlp|gpt|both] [--tokens T] [--hidden H]
        [--ffn F] [--heads N] [--dtype bf16|f32] [--iters N] [--repeats R] [--warmup W]
        [--no-compile] [--json FILE]
    python tools/bench_torch.py --small          # CPU, tiny shapes (a smoke run)

Cases (one device, bf16 by default): `mlp`, linear+bias, gelu, linear+bias
(T=8192, H=4096, F=16384); `gpt`, the layer of examples/python/gpt_layer.py
(the same as examples/gpt_layer.mlir) at hidden 4096, 8192 tokens, heads of
128. Each figure is device time in one process and one run: R repeats of N
back-to-back iterations between two CUDA events on torch's current stream
(the host enqueues ahead; nothing waits on it inside the N), the median
repeat over N. Figures:

- programs: `@main_fwd` then `@main_bwd` run by `Program.run_prepared` on
  inputs prepared once (op by op, as the function runs them): the limit of
  the function's forward+backward;
- function: `y = f(*inputs); y.backward(ct)` with `fuserc.torch.function`
  (parameters' .grad set to None between iterations, as a training step's
  zero_grad does); overhead = function / programs;
- forward only: a `CompiledProgram`'s `execute(local=True, gather=False)`
  on GPU tensors beside its own `run_prepared` on the same tensors prepared
  once; and the function under `torch.no_grad()` beside its `@main` by
  `run_prepared`;
- torch eager and torch.compile of the same layer, forward+backward and
  forward only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "python"))
sys.path.insert(0, str(ROOT / "tools"))

from bench import cuda_clock, host_clock  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=["mlp", "gpt", "both"], default="both")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=16384)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations before each figure")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--small", action="store_true", help="CPU, tiny shapes: a smoke run")
    p.add_argument("--json", metavar="FILE")
    return p


# -- the two layers ------------------------------------------------------------
def mlp_case(a: argparse.Namespace) -> tuple[Any, Callable[..., torch.Tensor], list[list[int]]]:
    from fuserc.api import FusionDefinition

    fd = FusionDefinition()
    t, h, f = a.tokens, a.hidden, a.ffn
    shapes = [[t, h], [f, h], [f], [h, f], [h]]
    x, w1, b1, w2, b2 = (fd.define_tensor(s, a.dtype) for s in shapes)
    fd.add_output(fd.ops.linear(fd.ops.gelu(fd.ops.linear(x, w1, b1)), w2, b2))

    def torch_fn(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    return fd, torch_fn, shapes


def gpt_case(a: argparse.Namespace) -> tuple[Any, Callable[..., torch.Tensor], list[list[int]]]:
    from gpt_layer import build, reference

    fd = build(a.tokens, a.hidden, a.heads, a.ffn, 1, a.dtype)
    shapes = [list(t.shape) for t in fd.inputs]

    def torch_fn(*args: torch.Tensor) -> torch.Tensor:
        return reference(list(args), a.heads)

    return fd, torch_fn, shapes


# -- timing ---------------------------------------------------------------------
Step = Callable[[], Any]
Window = Callable[[Step, int], float]
"""Times `iters` back-to-back calls of a step: ms per call."""


def window_ms(step: Step, iters: int, cuda: bool) -> float:
    """ms per call of `iters` back-to-back calls of `step`: device time
    between two CUDA events on torch's current stream (cuda; the host
    enqueues ahead, nothing waits on it inside the window), else the host's
    time."""
    clock = cuda_clock() if cuda else host_clock()
    clock.sync()
    mark = clock.start()
    for _ in range(iters):
        step()
    return clock.stop(mark) * 1e3 / iters


def device_ms(step: Step, a: argparse.Namespace, cuda: bool) -> float:
    """Median over repeats of (N back-to-back iterations) / N, in ms."""
    for _ in range(a.warmup):
        step()
    return statistics.median(window_ms(step, a.iters, cuda) for _ in range(a.repeats))


def interleaving(a: argparse.Namespace, unit: str = "calls") -> str:
    """How `interleaved_ms` timed, for a reader of the output."""
    return f"interleaved, {a.repeats} rounds ({a.warmup} warm-up + {a.iters} timed {unit} of each variant a round)"


def interleaved_ms(steps: Mapping[str, Step], a: argparse.Namespace, cuda: bool = False, window: Window | None = None) -> dict[str, float]:
    """Each step's ms per call, its variants timed in turn: `a.repeats`
    rounds, in each every step runs `a.warmup` untimed calls then a window
    of `a.iters` timed ones (`window`, by default `window_ms`); round r
    starts with the (r mod V)-th step, so none always follows the same one.
    Each figure is the median of its rounds. Timed one after another, the
    variants' figures carry the device's drift between their windows (its
    clock: on an H200 the same GEMMs measured 3-10% apart, either way);
    interleaved, every variant sees each stretch of it.

    The steps are built and warmed up before (their kernels in, compiled):
    the warm-up calls of a round only bring each back after the others."""
    timer: Window = window or (lambda step, iters: window_ms(step, iters, cuda))
    names = list(steps)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(a.repeats):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            for _ in range(a.warmup):
                steps[name]()
            samples[name].append(timer(steps[name], a.iters))
    return {n: statistics.median(s) for n, s in samples.items()}


def bench_case(name: str, a: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import fuserc.torch as ft

    fd, torch_fn, shapes = (mlp_case if name == "mlp" else gpt_case)(a)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    cuda = device.type == "cuda"
    gen = torch.Generator(device=device).manual_seed(0)
    args = [(torch.randn(s, generator=gen, device=device) / max(1, s[-1]) ** 0.5).to(dtype) for s in shapes]
    args[0] = torch.randn(shapes[0], generator=gen, device=device).to(dtype)  # activations at unit scale
    params = [t.clone().requires_grad_(True) for t in args]

    f = ft.function(fd)
    y = f(*params)
    ct = torch.randn(y.shape, generator=gen, device=device).to(dtype)
    loaded = next(iter(f._loaded.values()))
    b = loaded.backend
    fwd, bwd, main = (loaded.program(n) for n in ("main_fwd", "main_bwd", "main"))

    def run(prog: Any, ins: list[Any], owned: bool = False) -> list[Any]:
        caller = b.enter_caller()
        out = prog.run_prepared(ins, synchronize=not b.stream_ordered, graphs=False, owned_results=owned)
        b.leave_caller(caller, out if owned else [])
        return out

    fwd_in = fwd.prepare_inputs(args)
    saved = run(fwd, fwd_in, owned=True)[1:]
    bwd_in = bwd.prepare_inputs([*saved, ct])
    main_in = main.prepare_inputs(args)

    def function_step() -> None:
        for p in params:
            p.grad = None
        f(*params).backward(ct)

    def torch_step(fn: Callable[..., torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            for p in params:
                p.grad = None
            fn(*params).backward(ct)

        return step

    program = fd.compile(backend=b.name)
    figures: dict[str, float | None] = {}
    figures["programs"] = device_ms(lambda: (run(fwd, fwd_in), run(bwd, bwd_in)), a, cuda)
    figures["function"] = device_ms(function_step, a, cuda)
    figures["eager"] = device_ms(torch_step(torch_fn), a, cuda)
    compiled = None if a.no_compile else torch.compile(torch_fn)
    figures["compile"] = device_ms(torch_step(compiled), a, cuda) if compiled is not None else None
    figures["main_fwd"] = device_ms(lambda: run(main, main_in), a, cuda)
    exe_in = program.program.prepare_inputs(args)
    figures["run_prepared_fwd"] = device_ms(lambda: run(program.program, exe_in), a, cuda)
    figures["execute_fwd"] = device_ms(lambda: program.execute(args, local=True, gather=False), a, cuda)
    with torch.no_grad():
        figures["function_fwd"] = device_ms(lambda: f(*args), a, cuda)
        figures["eager_fwd"] = device_ms(lambda: torch_fn(*args), a, cuda)
        figures["compile_fwd"] = device_ms(lambda: compiled(*args), a, cuda) if compiled is not None else None
    with torch.no_grad():  # the numbers agree: fuserc's forward against eager's
        want = torch_fn(*[t.float() for t in args])
        err = ((f(*args).float() - want).abs().max() / want.abs().max()).item()
    program.close()
    f.close()
    return {"case": name, "shape": shapes[0], "dtype": a.dtype, "device": str(device), "ms": figures, "max_rel_err": err}


def report(row: dict[str, Any]) -> str:
    ms = row["ms"]

    def fmt(key: str) -> str:
        v = ms.get(key)
        return "n/a" if v is None else f"{v:.3f}"

    def ratio(k1: str, k2: str) -> str:
        return "n/a" if ms.get(k1) is None or ms.get(k2) is None else f"{ms[k1] / ms[k2]:.3f}"

    return "\n".join(
        [
            f"{row['case']} {row['shape']} {row['dtype']} on {row['device']} (max rel err vs torch {row['max_rel_err']:.1e})",
            f"  forward+backward ms: programs {fmt('programs')}  function {fmt('function')}  "
            f"eager {fmt('eager')}  torch.compile {fmt('compile')}",
            f"    function / programs {ratio('function', 'programs')}  function / eager {ratio('function', 'eager')}  "
            f"function / compile {ratio('function', 'compile')}",
            f"  forward ms: run_prepared {fmt('run_prepared_fwd')}  execute {fmt('execute_fwd')}  "
            f"@main {fmt('main_fwd')}  function (no_grad) {fmt('function_fwd')}  eager {fmt('eager_fwd')}  "
            f"torch.compile {fmt('compile_fwd')}",
            f"    execute / run_prepared {ratio('execute_fwd', 'run_prepared_fwd')}  "
            f"function / @main {ratio('function_fwd', 'main_fwd')}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.small:
        a.tokens, a.hidden, a.ffn, a.heads, a.dtype, a.iters, a.repeats, a.warmup = 64, 32, 64, 4, "f32", 2, 2, 1
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("bench_torch: no CUDA GPU here (use --small on the CPU)", file=sys.stderr)
            return 1
        device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for name in (["mlp", "gpt"] if a.case == "both" else [a.case]):
        row = bench_case(name, a, device)
        print(report(row), flush=True)
        rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

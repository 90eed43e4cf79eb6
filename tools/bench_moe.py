#!/usr/bin/env python
"""A dropless mixture-of-experts layer on one device: fuserc beside a
PyTorch layer built on torch._grouped_mm, eager and torch.compile.

    python tools/bench_moe.py [--case mixtral|deepseek|both] [--tokens T] [--iters N]
        [--repeats R] [--warmup W] [--no-compile] [--json FILE]
    python tools/bench_moe.py --small          # CPU, tiny shapes (a smoke run)

Cases (bf16, 8192 tokens): `mixtral`, hidden 4096, expert ffn 14336, 8
experts, top 2; `deepseek`, hidden 2048, expert ffn 1408, 64 experts, top
6, a shared expert of ffn 1408. Both layers: softmax router (f32), top-k
weights normalized, the (token, choice) pairs sorted by expert, SwiGLU
experts by grouped GEMMs over the sorted tokens, index_add combine, the
load-balancing loss (fuserc's: examples/python/moe_layer.py). Forward
(no_grad) and forward+backward: every layer is first built and warmed up
(fuserc's until its kernels are in and its programs' trial of CUDA graphs
is over: `SETTLE`; torch.compile's compiled) and its peak memory
allocated above the inputs (cuda) measured alone; then the layers are
timed in turn (bench_torch.interleaved_ms): R rounds, in each every layer
runs W warm-up calls then N back-to-back timed ones (device time between
CUDA events), round r starting with layer r mod V; each figure is the
median over rounds, so the device's clock drifting between windows
touches every layer alike. Then the grouped GEMMs alone, timed the same
way: fuserc's `fusion.grouped_matmul` of the first expert GEMM ([T*k, H]
x [E, H, F]) beside torch._grouped_mm on the same groups (the layer's
routing of random tokens). Last, how fuserc's programs ran (replayed as
CUDA graphs or op by op, and why).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "python"))
sys.path.insert(0, str(ROOT / "tools"))

from bench_torch import interleaved_ms, interleaving  # noqa: E402

CASES = {
    "mixtral": {"hidden": 4096, "ffn": 14336, "experts": 8, "top": 2, "shared": False},
    "deepseek": {"hidden": 2048, "ffn": 1408, "experts": 64, "top": 6, "shared": True},
}
SMALL = {
    "mixtral": {"hidden": 32, "ffn": 48, "experts": 4, "top": 2, "shared": False},
    "deepseek": {"hidden": 32, "ffn": 16, "experts": 8, "top": 3, "shared": True},
}


GEMM_WINDOW_MS = 20.0
"""The grouped GEMMs alone are timed in windows of at least this much
work (a first untimed call tells each call's time): a window starts on an
idle device, whose first call waits for the host's (a one-op fuserc
program's call costs more host time than torch._grouped_mm's), and in a
window of 5 calls of 0.5 ms that wait would weigh on the figure."""
SETTLE = 12
"""Untimed calls of fuserc's layer (forward, and forward+backward) once its
kernels are in: its programs' trial of CUDA graphs against runs op by op
(runtime/evaluator/graphs.py: runs 2 to 8), and the capture anew once the
backward's inputs (the forward's saved tensors, in the forward's graph
after its own trial) keep their place, are a start-up cost, not the
layer's speed."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=["mixtral", "deepseek", "both"], default="both")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5, help="rounds, each variant timed once in each (the median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations of each variant before its window in a round")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--small", action="store_true", help="CPU, tiny shapes, f32: a smoke run")
    p.add_argument("--json", metavar="FILE")
    return p


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """torch._grouped_mm with int32 group ends."""
    return torch._grouped_mm(a, b, offs=offs.to(torch.int32))


def torch_layer(x: torch.Tensor, wr: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
                *shared: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The PyTorch layer: sort-based dispatch, SwiGLU by torch._grouped_mm
    over weights stacked [E, F, H], index_add combine."""
    tokens, experts = x.shape[0], wr.shape[0]
    scores = torch.softmax(x.float() @ wr.float().t(), dim=1)
    top, ids = torch.topk(scores, k, dim=1)
    weights = top / top.sum(dim=1, keepdim=True)
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    rows = order // k
    counts = torch.bincount(flat, minlength=experts)
    ends = torch.cumsum(counts, 0)
    xs = x[rows]
    h = F.silu(grouped_mm(xs, w1.transpose(1, 2), ends)) * grouped_mm(xs, w3.transpose(1, 2), ends)
    ys = grouped_mm(h, w2.transpose(1, 2), ends) * weights.flatten()[order].unsqueeze(1).to(x.dtype)
    base = (F.silu(x @ shared[0].t()) * (x @ shared[1].t())) @ shared[2].t() if shared else torch.zeros_like(x)
    y = base.index_add(0, rows, ys)
    aux = (counts.float() / flat.numel() * scores.mean(dim=0)).sum() * experts
    return y, aux


def inputs(case: dict[str, Any], tokens: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    from moe_layer import params

    return [t.to(device=device, dtype=dtype) for t in params(tokens, case["hidden"], case["ffn"], case["experts"], case["shared"], seed=0)]


def peak_mib(step: Callable[[], Any], cuda: bool, held: int = 0, params: Sequence[torch.Tensor] = ()) -> float | None:
    """Peak memory allocated during one step above what was allocated
    before it, MiB (cuda only), plus `held`: bytes the layer keeps between
    steps (fuserc's: its programs' cached buffers and its CUDA graphs'
    pools, which a step reuses rather than allocates). The gradients of
    `params` are dropped before the baseline is read: a step that drops
    them itself would otherwise free the last step's gradients below its
    own and count none of them (eager's ~1 GiB at the DeepSeek-like shape),
    while fuserc's gradient buffers count in `held`."""
    if not cuda:
        return None
    for p in params:
        p.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before + held) / 2**20


def bench_case(name: str, a: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import fuserc.torch as ft
    from moe_layer import definition

    case = (SMALL if a.small else CASES)[name]
    dt = "f32" if a.small else "bf16"
    dtype = torch.float32 if a.small else torch.bfloat16
    cuda = device.type == "cuda"
    k = case["top"]
    args = inputs(case, a.tokens, dtype, device)
    params = [t.clone().requires_grad_(True) for t in args]
    gen = torch.Generator(device=device).manual_seed(1)
    ct = torch.randn(a.tokens, case["hidden"], generator=gen, device=device).to(dtype)
    f = ft.function(definition(a.tokens, case["hidden"], case["ffn"], case["experts"], k, case["shared"], "softmax", dt))
    eager = lambda *t: torch_layer(*t, k=k)  # noqa: E731
    compiled = None if a.no_compile else torch.compile(eager)
    layers: dict[str, Callable[..., Any] | None] = {"fuserc": f, "eager": eager, "compile": compiled}

    def train_step(fn: Callable[..., Any]) -> Callable[[], None]:
        def step() -> None:
            for p in params:
                p.grad = None
            y, aux = fn(*params)
            torch.autograd.backward([y, aux], [ct, torch.ones_like(aux)])

        return step

    live = {key: fn for key, fn in layers.items() if fn is not None}
    mib: dict[str, float | None] = {}
    gc.collect()  # what an earlier case left unreachable goes now, not under this one's figures
    base = torch.cuda.memory_allocated(device) if cuda else 0  # the inputs: before fuserc's first call
    for key, fn in live.items():  # each built, warmed up and its peaks measured alone
        held = 0
        if fn is f:  # its first calls start its kernels' builds: timed once they are in, not on the stand-ins
            with torch.no_grad():
                f(*args)
            train_step(f)()
            f.wait_for_kernels()
            for _ in range(SETTLE if cuda else 1):  # then once each program's way of running is settled
                with torch.no_grad():
                    f(*args)
                train_step(f)()
            if cuda:  # what its programs keep between calls (cached buffers, graph pools) counts in its peak
                for p in params:
                    p.grad = None
                torch.cuda.synchronize(device)
                held = torch.cuda.memory_allocated(device) - base
        for _ in range(max(a.warmup, 1)):  # (torch.compile compiles both graphs here)
            with torch.no_grad():
                fn(*args)
            train_step(fn)()
        with torch.no_grad():
            mib[key + "_fwd"] = peak_mib(lambda fn=fn: fn(*args), cuda, held)
        mib[key] = peak_mib(train_step(fn), cuda, held, params)
    with torch.no_grad():  # then timed in turn (`interleaved_ms`)
        times = interleaved_ms({key + "_fwd": lambda fn=fn: fn(*args) for key, fn in live.items()}, a, cuda)
    times |= interleaved_ms({key: train_step(fn) for key, fn in live.items()}, a, cuda)
    order = [key + suffix for key in layers for suffix in ("_fwd", "")]
    ms, mib = {k: times.get(k) for k in order}, {k: mib.get(k) for k in order}
    with torch.no_grad():  # fuserc's output against eager PyTorch's, in f32
        want = torch_layer(*[t.float() for t in args], k=k)[0]
        err = ((f(*args)[0].float() - want).abs().max() / want.abs().max()).item()
    runs = f.runs()  # how its programs ran in the timed calls: replayed as CUDA graphs or op by op, and why
    f.close()
    gemm = bench_grouped(case, a, args, device)
    return {"case": name, "tokens": a.tokens, **case, "dtype": dt, "device": str(device), "ms": ms, "peak_mib": mib,
            "max_rel_err": err, "grouped": gemm, "runs": runs, "timing": interleaving(a)}  # fmt: skip


def bench_grouped(case: dict[str, Any], a: argparse.Namespace, args: list[torch.Tensor], device: torch.device) -> dict[str, Any]:
    """The first expert GEMM alone on the layer's groups: fuserc's
    grouped_matmul (a program of that one op) beside torch._grouped_mm."""
    from fuserc.api import FusionDefinition

    x, wr, w1 = args[0], args[1], args[2]
    k, e, h, ffn = case["top"], case["experts"], case["hidden"], case["ffn"]
    ids = torch.topk(x.float() @ wr.float().t(), k, dim=1).indices.flatten()
    ends = torch.cumsum(torch.bincount(ids, minlength=e), 0)
    xs = x[torch.argsort(ids, stable=True) // k].contiguous()
    w = w1.transpose(1, 2).contiguous()  # [E, H, F]
    fd = FusionDefinition()
    dt = "f32" if a.small else "bf16"
    ta, tw, to = fd.define_tensor(list(xs.shape), dt), fd.define_tensor([e, h, ffn], dt), fd.define_tensor([e], "i64")
    fd.add_output(fd.ops.grouped_matmul(ta, tw, to))
    program = fd.compile(backend="cuda" if device.type == "cuda" else "cpu")
    ins = [xs, w, ends]
    cuda = device.type == "cuda"
    got = program.execute(ins, local=True, gather=False)[0]
    want = grouped_mm(xs, w, ends)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    flops = 2 * xs.shape[0] * h * ffn
    steps = {"fuserc": lambda: program.execute(ins, local=True, gather=False), "torch": lambda: grouped_mm(xs, w, ends)}
    rough = interleaved_ms(steps, argparse.Namespace(repeats=1, warmup=1, iters=1), cuda)
    calls = max(a.iters, math.ceil(GEMM_WINDOW_MS / max(min(rough.values()), 1e-3)))
    times = interleaved_ms(steps, argparse.Namespace(repeats=a.repeats, warmup=a.warmup, iters=calls), cuda)
    fus, ref = times["fuserc"], times["torch"]
    program.close()
    return {"rows": xs.shape[0], "fuserc_ms": fus, "torch_ms": ref, "tflops": flops / fus / 1e9, "max_rel_err": err,
            "counts": torch.diff(ends, prepend=ends.new_zeros(1)).tolist()}  # fmt: skip


def report(row: dict[str, Any]) -> str:
    ms, mib, g = row["ms"], row["peak_mib"], row["grouped"]

    def fmt(v: float | None, spec: str = ".3f") -> str:
        return "n/a" if v is None else format(v, spec)

    def ratio(k1: str, k2: str) -> str:
        return "n/a" if ms.get(k1) is None or ms.get(k2) is None else f"{ms[k2] / ms[k1]:.2f}x"

    def phase(suffix: str, what: str) -> str:
        f, e, c = (f"fuserc{suffix}", f"eager{suffix}", f"compile{suffix}")
        best = min((ms[x] for x in (e, c) if ms.get(x) is not None), default=None)
        vs_best = "n/a" if best is None or ms.get(f) is None else f"{best / ms[f]:.2f}x"
        return (f"  {what} ms: fuserc {fmt(ms[f])}  eager {fmt(ms[e])}  torch.compile {fmt(ms[c])}  "
                f"speedup vs eager {ratio(f, e)}  vs compile {ratio(f, c)}  vs the faster {vs_best}  "
                f"(peak MiB: fuserc {fmt(mib[f], '.0f')}  eager {fmt(mib[e], '.0f')}  compile {fmt(mib[c], '.0f')})")  # fmt: skip

    return "\n".join([
        f"{row['case']}: {row['tokens']} tokens, hidden {row['hidden']}, ffn {row['ffn']}, {row['experts']} experts, "
        f"top {row['top']}{', shared expert' if row['shared'] else ''}, {row['dtype']} on {row['device']} "
        f"(max rel err vs eager {row['max_rel_err']:.1e}; timing: {row['timing']})",
        phase("_fwd", "forward"),
        phase("", "forward+backward"),
        f"  grouped GEMM [{g['rows']}, {row['hidden']}] x [{row['experts']}, {row['hidden']}, {row['ffn']}]: "
        f"fuserc {g['fuserc_ms']:.3f} ms ({g['tflops']:.1f} TFLOP/s)  torch._grouped_mm {g['torch_ms']:.3f} ms  "
        f"fuserc / torch speed {g['torch_ms'] / g['fuserc_ms']:.2f}  (max rel err {g['max_rel_err']:.1e}; "
        f"tokens per expert {min(g['counts'])}..{max(g['counts'])})",
        *(f"  fuserc @{name}: {how}" for name, how in row["runs"].items()),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.small:
        a.tokens, a.iters, a.repeats, a.warmup = 64, 2, 2, 1
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("bench_moe: no CUDA GPU here (use --small on the CPU)", file=sys.stderr)
            return 1
        device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for name in (["mixtral", "deepseek"] if a.case == "both" else [a.case]):
        row = bench_case(name, a, device)
        print(report(row), flush=True)
        rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""Local kernels on one GPU: fuserc's generated kernels beside PyTorch eager
and torch.compile, with achieved bandwidth against a device-to-device copy.

    python tools/bench_local.py [--cases a,b,...] [--rows R] [--cols C]
        [--dtype bf16|f32] [--iters N] [--repeats R] [--kernels inductor|cupy] [--json FILE]
    python tools/bench_local.py --small      # CPU, tiny shapes (a smoke run)

Cases (bf16, 16384x8192 unless said): `chain` gelu(x*y+z)*sigmoid(z);
`softmax`, `log_softmax`, `sum` along dim 1; `layer_norm` and `rms_norm`
over dim 1 with weights; `ln_by_hand`, a layer norm written as a user
would (cast, mean, sub, mul, mean, rsqrt, ...: one launch region); `cross_entropy` of [rows, cols] logits; `linear_gelu`,
gelu(x @ w^T + b) at T=8192, H=4096, F=16384 (the MLP's first half: a GEMM
with its epilogue); `gpt_layer`, the forward of examples/python/gpt_layer.py
(the layer of examples/gpt_layer.mlir) on one device at hidden 4096, 8192
tokens, heads of 128. fuserc runs each as a compiled program
(`run_prepared` on inputs prepared once, its runs replayed as a CUDA graph
where that is faster); every figure is device time measured as
tools/bench_torch.py does (back-to-back iterations between two CUDA events,
median of the repeats). Bandwidth is the bytes each case must move (its
inputs read once, its outputs written once) over the time, beside a
device-to-device copy of a rows x cols tensor measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "examples" / "python")]

from bench_torch import device_ms  # noqa: E402


@dataclass
class Case:
    name: str
    fd: Any  # FusionDefinition
    torch_fn: Callable[..., Any]
    args: list[torch.Tensor]
    bytes: int  # what the case must move: inputs once, outputs once
    memory_bound: bool = True


def _nbytes(*ts: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def cases(a: argparse.Namespace, device: torch.device) -> list[Case]:
    from fuserc.api import FusionDefinition

    dt = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    r, c = a.rows, a.cols
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=g, device=device) * scale).to(dt)

    out: list[Case] = []

    def add(name: str, build: Callable[[FusionDefinition], None], torch_fn: Callable[..., Any], args: list[torch.Tensor],
            out_bytes: int, memory_bound: bool = True) -> None:
        if a.cases and name not in a.cases:
            return
        fd = FusionDefinition()
        build(fd)
        out.append(Case(name, fd, torch_fn, args, _nbytes(*args) + out_bytes, memory_bound))

    def unary(op: Callable[[Any, Any], Any]) -> Callable[[FusionDefinition], None]:
        def build(fd: FusionDefinition) -> None:
            x = fd.define_tensor([r, c], a.dtype)
            fd.add_output(op(fd, x))

        return build

    x = rand(r, c)
    elem = x.element_size()

    def chain(fd: FusionDefinition) -> None:
        p, q, z = (fd.define_tensor([r, c], a.dtype) for _ in range(3))
        fd.add_output(fd.ops.gelu(p * q + z) * fd.ops.sigmoid(z))

    add("chain", chain, lambda p, q, z: F.gelu(p * q + z) * torch.sigmoid(z), [x, rand(r, c), rand(r, c)], r * c * elem)
    add("softmax", unary(lambda fd, x: fd.ops.softmax(x, dim=1)), lambda x: torch.softmax(x, 1), [x], r * c * elem)
    add("log_softmax", unary(lambda fd, x: fd.ops.log_softmax(x, dim=1)), lambda x: torch.log_softmax(x, 1), [x], r * c * elem)
    add("sum", unary(lambda fd, x: fd.ops.sum(x, dims=[1])), lambda x: x.sum(1), [x], r * elem)
    w, b = rand(c, scale=0.1) + 1, rand(c, scale=0.1)

    def norm(kind: str) -> Callable[[FusionDefinition], None]:
        def build(fd: FusionDefinition) -> None:
            xx, ww = fd.define_tensor([r, c], a.dtype), fd.define_tensor([c], a.dtype)
            if kind == "layer_norm":
                bb = fd.define_tensor([c], a.dtype)
                fd.add_output(fd.ops.layer_norm(xx, ww, bb, dims=1, eps=1e-5))
            else:
                fd.add_output(fd.ops.rms_norm(xx, ww, dims=1, eps=1e-5))

        return build

    add("layer_norm", norm("layer_norm"), lambda x, w, b: F.layer_norm(x, (c,), w, b, 1e-5), [x, w, b], r * c * elem)
    add("rms_norm", norm("rms_norm"), lambda x, w: F.rms_norm(x, (c,), w, 1e-5), [x, w], r * c * elem)

    def by_hand(fd: FusionDefinition) -> None:  # a user's layer norm: one launch region
        xx, ww, bb = fd.define_tensor([r, c], a.dtype), fd.define_tensor([c], a.dtype), fd.define_tensor([c], a.dtype)
        xf = fd.ops.cast(xx, dtype="f32")
        d = xf - fd.ops.mean(xf, dims=[1], keepdim=True)
        n = d * fd.ops.rsqrt(fd.ops.mean(d * d, dims=[1], keepdim=True) + 1e-5)
        fd.add_output(fd.ops.cast(n * fd.ops.cast(ww, dtype="f32") + fd.ops.cast(bb, dtype="f32"), dtype=a.dtype))

    add("ln_by_hand", by_hand, lambda x, w, b: F.layer_norm(x, (c,), w, b, 1e-5), [x, w, b], r * c * elem)
    labels = torch.randint(0, c, (r,), generator=g, device=device)

    def ce(fd: FusionDefinition) -> None:
        lg, lb = fd.define_tensor([r, c], a.dtype), fd.define_tensor([r], "i64")
        fd.add_output(fd.ops.cross_entropy(lg, lb))

    add("cross_entropy", ce, lambda lg, lb: F.cross_entropy(lg, lb), [x, labels], elem)
    t, h, f = a.tokens, a.hidden, a.ffn

    def linear_gelu(fd: FusionDefinition) -> None:
        xx, ww, bb = fd.define_tensor([t, h], a.dtype), fd.define_tensor([f, h], a.dtype), fd.define_tensor([f], a.dtype)
        fd.add_output(fd.ops.gelu(fd.ops.linear(xx, ww, bb)))

    if not a.cases or "linear_gelu" in a.cases:
        lx, lw, lb_ = rand(t, h), rand(f, h, scale=h**-0.5), rand(f, scale=0.1)
        add("linear_gelu", linear_gelu, lambda x, w, b: F.gelu(F.linear(x, w, b)), [lx, lw, lb_], t * f * elem, False)
    if not a.cases or "gpt_layer" in a.cases:
        from gpt_layer import build, reference

        fd = build(t, h, a.heads, f, 1, a.dtype)
        shapes = [list(v.shape) for v in fd.inputs]
        args = [rand(*s, scale=1.0 if i == 0 else s[-1] ** -0.5) for i, s in enumerate(shapes)]
        out.append(Case("gpt_layer", fd, lambda *xs: reference(list(xs), a.heads), args, _nbytes(*args) + t * h * elem, False))
    return out


def program_step(fd: Any, args: list[torch.Tensor]) -> tuple[Callable[[], Any], Any]:
    """One run of the compiled program on inputs prepared once, ordered on
    torch's current stream (so the CUDA events time it)."""
    program = fd.compile(backend="cuda" if args[0].is_cuda else "cpu")
    p, b = program.program, program.backend
    ins = p.prepare_inputs(args)

    def step() -> Any:
        caller = b.enter_caller()
        out = p.run_prepared(ins, synchronize=not b.stream_ordered)
        b.leave_caller(caller, [])
        return out

    return step, program


def bench(case: Case, a: argparse.Namespace, cuda: bool, copy_gbs: float) -> dict[str, Any]:
    step, program = program_step(case.fd, case.args)
    ms: dict[str, float | None] = {"fuserc": device_ms(step, a, cuda)}
    with torch.no_grad():
        ms["eager"] = device_ms(lambda: case.torch_fn(*case.args), a, cuda)
        compiled = None if a.no_compile else torch.compile(case.torch_fn)
        ms["compile"] = device_ms(lambda: compiled(*case.args), a, cuda) if compiled is not None else None
        got = step()[0].float()
        want = case.torch_fn(*[t.float() if t.is_floating_point() else t for t in case.args]).float()
    err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    launches = getattr(program.backend, "fused_launches", None)
    program.close()
    gbs = {k: (case.bytes / (v * 1e-3) / 1e9 if v else None) for k, v in ms.items()}
    return {"case": case.name, "ms": ms, "GB/s": gbs, "copy_GB/s": copy_gbs, "memory_bound": case.memory_bound,
            "max_rel_err": err, "fused_launches_so_far": launches}


def line(row: dict[str, Any]) -> str:
    ms, gbs, copy = row["ms"], row["GB/s"], row["copy_GB/s"]

    def f(k: str) -> str:
        return "n/a" if ms.get(k) is None else f"{ms[k]:.3f}"

    ratio = lambda k: "n/a" if ms.get(k) is None else f"{ms['fuserc'] / ms[k]:.2f}"  # noqa: E731
    bw = f"{gbs['fuserc']:.0f} GB/s = {gbs['fuserc'] / copy:.2f} of copy" if row["memory_bound"] else "GEMM-bound"
    return (f"{row['case']:<14} fuserc {f('fuserc'):>8} ms ({bw})  eager {f('eager'):>8} ms  "
            f"torch.compile {f('compile'):>8} ms  fuserc/eager {ratio('eager')}  fuserc/compile {ratio('compile')}  "
            f"err {row['max_rel_err']:.1e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=lambda s: [c for c in s.split(",") if c], default=[])
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=16384)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--kernels", choices=["inductor", "cupy"], help="sets $FUSERC_KERNELS")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--small", action="store_true", help="CPU, tiny shapes: a smoke run")
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    if a.kernels:
        import os

        os.environ["FUSERC_KERNELS"] = a.kernels
    if a.small:
        a.rows, a.cols, a.tokens, a.hidden, a.ffn, a.heads = 64, 48, 32, 32, 64, 4
        a.dtype, a.iters, a.repeats, a.warmup = "f32", 2, 2, 1
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("bench_local: no CUDA GPU here (use --small on the CPU)", file=sys.stderr)
            return 1
        device = torch.device("cuda", torch.cuda.current_device())
    cuda = device.type == "cuda"
    src = torch.empty(a.rows, a.cols, dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float32, device=device)
    dst = torch.empty_like(src)
    copy_ms = device_ms(lambda: dst.copy_(src), a, cuda)
    copy_gbs = 2 * _nbytes(src) / (copy_ms * 1e-3) / 1e9
    print(f"device-to-device copy of {a.rows}x{a.cols} {a.dtype}: {copy_ms:.3f} ms, {copy_gbs:.0f} GB/s", flush=True)
    rows = []
    for case in cases(a, device):
        row = bench(case, a, cuda, copy_gbs)
        print(line(row), flush=True)
        rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps({"copy_ms": copy_ms, "copy_GB/s": copy_gbs, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

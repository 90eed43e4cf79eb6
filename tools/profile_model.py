#!/usr/bin/env python
"""Where a training step's time goes, kernel by kernel: fuserc beside
PyTorch on the model of tools/bench_model.py.

    python tools/profile_model.py --layers 24 --hidden 4096 --tokens 4096
    python tools/profile_model.py --variants fuserc,eager --iters 5
    python tools/profile_model.py --small                  (the CPU)

Each variant is made and warmed up as bench_model makes and warms it
(its first step, its kernels in, its programs settled, `--warmup` steps),
then `--iters` steps run under torch.profiler, on CUDA behind a hold of
the device (`--hold`, by default `bench_model.HOLD_S`), so that the host
is far ahead; `--hold 0` starts them on an idle device, as bench_model's
timed steps start, and shows where the device waits for the host. For
each variant, a step's:

- kernels by kind (GEMMs, attention, generated, the optimizer's, ...),
  their sum, the launches, and the span from the first kernel's start to
  the last one's end;
- the device's idle time between kernels (each start after the latest end
  before it), binned by the gap's length, and the kernel pairs with the
  most idle time between them: a gap that is not the host's is the
  device's own time to end one kernel and start the next;
- the host's lead: each kernel's start less its launch call's. Under
  `HOST_BEHIND_US` the device waited for the host, and the idle time
  before such kernels is the host's.

With two variants, the kernels whose time a step differs most. On the CPU
(`--small`, or no GPU) the "kernels" are the host's top-level aten ops,
the idle time is the host's between them (the interpreter's, autograd's),
and there is no lead. `--out DIR` writes the report to DIR/profile_model.txt.
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "examples" / "python"))

import torch  # noqa: E402

import bench_model as bm  # noqa: E402
from bench_layer import tool_main  # noqa: E402

KINDS = (
    ("copy", r"Memcpy"),
    ("memset", r"Memset"),
    ("gemm", r"gemm|sm90_xmma|cutlass|nvjet|gemv|aten::(mm|addmm|bmm|linear|matmul)$"),
    ("attention", r"flash|fmha|cudnn|attention"),
    ("optimizer", r"multi_tensor_apply|Optimizer|_foreach"),
    ("generated", r"^triton|^cpp_fused"),
)
"""A kernel's kind, by the first pattern its name matches ("torch" else)."""
GAP_BINS_US = (2.0, 5.0, 20.0, 100.0)
HOST_BEHIND_US = 30.0
"""A kernel starting this soon after its launch call found the device waiting for it."""
LAUNCH_CALL = re.compile(r"^cu(da)?(Launch|Memset|Memcpy)")
HOLD_KERNEL = re.compile(r"spin|sleep")


def kind(name: str) -> str:
    return next((k for k, pattern in KINDS if re.search(pattern, name, re.I)), "torch")


@dataclass
class Profile:
    """One variant's profiled steps, per step."""

    steps: int
    device: bool
    """CUDA kernels (else the host's top-level aten ops)."""
    by_name: dict[str, list[float]] = field(default_factory=dict)
    """name -> [count, microseconds]"""
    span_us: float = 0.0
    gaps: list[tuple[float, str, str]] = field(default_factory=list)
    """(microseconds idle, the kernel before, the kernel after)"""
    behind: list[tuple[float, str, str]] = field(default_factory=list)
    """The gaps before kernels that started within HOST_BEHIND_US of their launch call."""
    leads_us: list[float] = field(default_factory=list)

    @property
    def behind_us(self) -> float:
        """Idle time before kernels that started within HOST_BEHIND_US of their launch call."""
        return sum(g for g, _, _ in self.behind)


def _events(prof: Any) -> list[Any]:
    return list(prof.profiler.kineto_results.events())


def _annotation(e: Any) -> bool:
    """A `record_function` range shown on the device (the optimizer's step):
    it spans kernels, it is none."""
    is_annotation = getattr(e, "is_user_annotation", None)
    return bool(is_annotation()) if is_annotation is not None else False


def _top_level(events: Sequence[Any]) -> list[Any]:
    """The aten ops of the host's main thread not inside another one."""
    thread = collections.Counter(e.start_thread_id() for e in events if e.name().startswith("aten::")).most_common(1)
    if not thread:
        return []
    tid = thread[0][0]
    out, end = [], -1
    for e in sorted((e for e in events if e.name().startswith("aten::") and e.start_thread_id() == tid), key=lambda e: e.start_ns()):
        if e.start_ns() >= end:
            out.append(e)
            end = e.end_ns()
    return out


def read_profile(prof: Any, steps: int, device: bool) -> Profile:
    """The kernels (or top-level ops), gaps and leads of a torch.profiler run."""
    events = _events(prof)
    if device:
        calls = {e.correlation_id(): e.start_ns() for e in events if e.device_type() != torch.autograd.DeviceType.CUDA and LAUNCH_CALL.match(e.name())}
        kernels = [e for e in events if e.device_type() == torch.autograd.DeviceType.CUDA and not HOLD_KERNEL.search(e.name()) and not _annotation(e)]
    else:
        calls, kernels = {}, _top_level(events)
    p = Profile(steps, device)
    kernels.sort(key=lambda e: e.start_ns())
    end: int | None = None
    before = ""
    for e in kernels:
        name = e.name()
        row = p.by_name.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += e.duration_ns() / 1e3
        called = calls.get(e.correlation_id())
        lead = None if called is None else (e.start_ns() - called) / 1e3
        if lead is not None:
            p.leads_us.append(lead)
        if end is not None and e.start_ns() > end:
            gap = (e.start_ns() - end) / 1e3
            p.gaps.append((gap, before, name))
            if lead is not None and lead < HOST_BEHIND_US:
                p.behind.append(p.gaps[-1])
        if end is None or e.end_ns() > end:
            end, before = e.end_ns(), name
    if kernels:
        p.span_us = (max(e.end_ns() for e in kernels) - kernels[0].start_ns()) / 1e3
    return p


def profile_steps(v: bm.Variant, job: bm.Job, steps: int, hold_s: float = bm.HOLD_S) -> Profile:
    """`steps` steps of `v` under torch.profiler, on CUDA behind a device
    hold of `hold_s` (0: none, the host and the device start together, as
    in bench_model's timed steps)."""
    from torch.profiler import ProfilerActivity, profile

    job.drain()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if job.cuda else [])
    with profile(activities=activities) as prof:
        if job.cuda and hold_s > 0:
            from fuserc.runtime.backends.cuda import spin

            spin(hold_s)
        for _ in range(steps):
            v.step()
        job.drain()
    return read_profile(prof, steps, job.cuda)


def warm(v: bm.Variant, job: bm.Job, a: argparse.Namespace) -> None:
    """bench_model's warm-up: the first step, every rank's kernels in, the programs settled, --warmup steps."""
    import time

    v.step()
    job.drain()
    while not all(job.comm.allgather(v.ready())):
        time.sleep(0.1)
    bm.settle(v, job, a.warmup)


def _ms(us: float, p: Profile) -> str:
    return f"{us / p.steps / 1e3:.3f} ms"


def report(key: str, p: Profile, top: int) -> list[str]:
    what = "kernels" if p.device else "top-level ops"
    total = sum(t for _, t in p.by_name.values())
    count = sum(c for c, _ in p.by_name.values()) / p.steps
    idle = sum(g for g, _, _ in p.gaps)
    out = [f"{key}: span {_ms(p.span_us, p)} a step; {what} {_ms(total, p)} ({count:.0f}); idle between them {_ms(idle, p)}"]
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for name, (c, t) in p.by_name.items():
        kinds[kind(name)][0] += c
        kinds[kind(name)][1] += t
    out.append("  by kind: " + ", ".join(f"{k} {_ms(t, p)} ({c / p.steps:.0f})" for k, (c, t) in sorted(kinds.items(), key=lambda x: -x[1][1])))
    bins = [0.0, *GAP_BINS_US, float("inf")]
    cells = []
    for lo, hi in zip(bins, bins[1:]):
        inside = [g for g, _, _ in p.gaps if lo < g <= hi]
        label = f"> {lo:g} us" if hi == float("inf") else f"{lo:g}-{hi:g} us"
        cells.append(f"{label}: {len(inside) / p.steps:.0f} ({_ms(sum(inside), p)})")
    out.append("  idle by gap: " + ", ".join(cells))
    if p.leads_us:
        leads = sorted(p.leads_us)
        behind = sum(lead < HOST_BEHIND_US for lead in leads)
        out.append(
            f"  host lead: least {leads[0] / 1e3:.2f} ms, median {statistics.median(leads) / 1e3:.2f} ms; "
            f"{behind / p.steps:.0f} {what} a step waited for the host (idle before them {_ms(p.behind_us, p)})"
        )
    out += _pairs("most idle time between (a step):", p.gaps, p, top)
    if p.behind:
        out += _pairs("most idle time waiting for the host, between (a step):", p.behind, p, top)
    out.append(f"  top {what} (a step):")
    for name, (c, t) in sorted(p.by_name.items(), key=lambda x: -x[1][1])[:top]:
        out.append(f"    {_ms(t, p)} {c / p.steps:5.0f}x  {name[:100]}")
    return out


def _pairs(title: str, gaps: Sequence[tuple[float, str, str]], p: Profile, top: int) -> list[str]:
    """The kernel pairs around the most idle time of `gaps`."""
    pairs: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for g, before, after in gaps:
        pairs[(before, after)][0] += 1
        pairs[(before, after)][1] += g
    out = [f"  {title}"]
    for (before, after), (c, t) in sorted(pairs.items(), key=lambda x: -x[1][1])[:top]:
        out.append(f"    {_ms(t, p)} {c / p.steps:5.0f}x  {before[:50]} -> {after[:50]}")
    return out


def differences(a_key: str, a: Profile, b_key: str, b: Profile, top: int) -> list[str]:
    out = [f"{a_key} - {b_key}, by name (ms a step, count a step):"]
    names = set(a.by_name) | set(b.by_name)

    def per_step(p: Profile, n: str) -> tuple[float, float]:
        c, t = p.by_name.get(n, [0, 0.0])
        return c / p.steps, t / p.steps / 1e3

    rows = sorted(names, key=lambda n: -abs(per_step(a, n)[1] - per_step(b, n)[1]))
    for n in rows[:top]:
        (ca, ta), (cb, tb) = per_step(a, n), per_step(b, n)
        out.append(f"  {ta - tb:+8.3f}  {ta:8.3f} ({ca:4.0f}) | {tb:8.3f} ({cb:4.0f})  {n[:90]}")
    return out


def parser() -> argparse.ArgumentParser:
    p = bm.parser()
    p.description = __doc__.split("\n\n")[0]
    p.add_argument("--top", type=int, default=15, help="rows of each list (default 15)")
    p.add_argument("--hold", type=float, default=bm.HOLD_S, metavar="S",
                   help=f"seconds the device is held before the profiled steps, so that the host is ahead (default {bm.HOLD_S}; 0: none, as bench_model's timed steps start)")
    return p


def resolve(a: argparse.Namespace) -> argparse.Namespace:
    a = bm.resolve(a)
    if len(a.shape_list) != 1:
        raise argparse.ArgumentTypeError("one shape: --layers/--hidden/--tokens")
    if a.variants == tuple(k for k, _ in bm.VARIANTS):  # not given: fuserc beside torch.compile (eager on the CPU)
        a.variants = ("fuserc", "compile" if torch.cuda.is_available() and not a.small else "eager")
    return a


def run(a: argparse.Namespace) -> int:
    job = bm.Job(a)
    s = a.shape_list[0]
    weights, ids, labels = bm.inputs(s, job, bm.DTYPES[a.dtype])
    lines = [f"profile_model: {job.d} rank(s) on {job.device_name()}, {a.dtype}, {s.text()}, {a.iters} steps a variant" + (f" behind a {a.hold} s hold" if job.cuda and a.hold > 0 else "")]
    profiles: dict[str, Profile] = {}
    makers = bm.variant_makers(s, weights, ids, labels, job, a)
    for key in a.variants:
        reason, make = makers[key]
        if reason:
            lines.append(f"{key}: not run ({reason})")
            continue
        v = make()
        try:
            warm(v, job, a)
            profiles[key] = profile_steps(v, job, a.iters, a.hold)
        finally:
            bm.end(v)
            del v
            job.release()
        lines += report(key, profiles[key], a.top)
    if len(profiles) == 2:
        (ka, pa), (kb, pb) = profiles.items()
        lines += differences(ka, pa, kb, pb, a.top)
    if job.rank == 0:
        text = "\n".join(lines)
        print(text, flush=True)
        if a.out:
            folder = Path(a.out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "profile_model.txt").write_text(text + "\n")
    job.end()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main("profile_model", parser(), resolve, run, argv)


if __name__ == "__main__":
    sys.exit(main())

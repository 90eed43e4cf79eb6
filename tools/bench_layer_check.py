"""The numerical check of tools/bench_layer.py.

Every variant runs one forward+backward (the forward alone with --mode fwd)
on the same inputs, weights and cotangent; its output and gradients (of x
and of every weight: this rank's shards) are compared, as
max |a - b| / max |b| over all ranks,

- with eager's: how closely the variants agree (printed);
- with the reference's: the eager layer run in a wider type (f32 for a
  bf16 run, f64 for f32) on the same values, which the verdict uses.

Sums over many tokens in bf16 (the norms' and biases' gradients) differ
by percents between two correct implementations, so agreement alone
cannot decide. A variant passes when, for the output and every gradient,
its error against the reference is at most FACTOR times eager's own error
plus FLOOR: rounding stays within that bound; a wrong layer does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gpt_layer import WEIGHTS

NAMES = ("x", *WEIGHTS)
"""The gradients compared, in the order of the layer's inputs."""
WIDER = {"bf16": (torch.float32, "f32"), "f32": (torch.float64, "f64")}
"""The reference's type for each run's type."""
FACTOR = 2.0
FLOOR = {"bf16": 1e-2, "f32": 1e-5}
ZERO_IN_EXACT_ARITHMETIC = {"attn.wk.bias": "attn.wk.weight"}
"""Gradients that are zero but for rounding, measured on the scale of
another: softmax ignores a shift shared by all keys, so the key bias's
gradient is noise, as large as the rounding of the key weight's."""


@dataclass
class Outcome:
    """One run of a variant: this rank's output and gradients (none for a forward)."""

    y: torch.Tensor
    grads: list[torch.Tensor]


def run_once(v: Any, ct: torch.Tensor, with_grads: bool) -> Outcome:
    """A forward (+ backward with `ct`) of a bench_layer Variant, its results copied."""
    if not with_grads:
        return Outcome(v.forward().detach().clone(), [])
    y = v.step(ct)
    with v.stream():
        return Outcome(y.detach().clone(), [g.clone() for g in v.grads()])


@dataclass
class Comparison:
    """max |a - b| / max |b| over all ranks: the output, each gradient, the worst one."""

    output: float
    grads: float | None = None
    worst_grad: str = ""
    per_grad: dict[str, float] = field(default_factory=dict)

    def text(self) -> str:
        grads = "" if self.grads is None else f", gradients {self.grads:.2e} ({self.worst_grad})"
        return f"output {self.output:.2e}{grads}"

    def errors(self) -> dict[str, float]:
        return {"output": self.output, **self.per_grad}


def _local(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    """(max |got - want|, max |want|) on this rank (inf when the shapes differ)."""
    if got.shape != want.shape:
        return math.inf, 1.0
    g, w = got.double(), want.double()
    return float((g - w).abs().max()), float(w.abs().max())


def compare(got: Outcome, want: Outcome, comm: Any) -> Comparison:
    """Collective over `comm` (every rank compares its shards)."""
    pairs = [_local(got.y, want.y)] + [_local(g, w) for g, w in zip(got.grads, want.grads, strict=True)]
    every = comm.allgather(pairs)
    num = [max(r[i][0] for r in every) for i in range(len(pairs))]
    den = [max(r[i][1] for r in every) for i in range(len(pairs))]
    scale = dict(zip(NAMES, den[1:]))

    def rel(n: float, d: float) -> float:
        return n / d if d > 0 else (0.0 if n == 0 else math.inf)

    c = Comparison(rel(num[0], den[0]))
    for name, n, d in zip(NAMES, num[1:], den[1:]):
        c.per_grad[name] = r = rel(n, max(d, scale[ZERO_IN_EXACT_ARITHMETIC.get(name, name)]))
        if c.grads is None or math.isnan(r) or (not math.isnan(c.grads) and r > c.grads):  # NaN is the worst
            c.grads, c.worst_grad = r, name
    return c


@dataclass
class Check:
    """A variant against eager and against the reference, and the verdict
    (None when there is nothing to judge by)."""

    vs_eager: Comparison | None = None
    vs_reference: Comparison | None = None
    ok: bool | None = None
    failure: str = ""  # the first tensor over its bound
    reason: str = ""  # why the check did not run

    def text(self, wide: str) -> str:
        if self.reason:
            return f"n/a ({self.reason})"
        parts = []
        if self.vs_eager is not None:
            parts.append(f"vs eager {self.vs_eager.text()}")
        if self.vs_reference is not None:
            parts.append(f"vs {wide} {self.vs_reference.text()}")
        verdict = "" if self.ok is None else (": ok" if self.ok else f": FAILED ({self.failure})")
        return "; ".join(parts) + verdict


def judge(check: Check, eager: Comparison | None, dtype: str) -> None:
    """The verdict: every error against the reference within FACTOR x
    eager's + FLOOR."""
    mine = check.vs_reference
    if mine is None or eager is None:
        return
    check.ok = True
    floor = FLOOR[dtype]
    for name, err in mine.errors().items():
        bound = FACTOR * eager.errors()[name] + floor
        if not err <= bound:  # NaN fails
            check.ok = False
            check.failure = f"{name}: {err:.2e} > {FACTOR:g} x eager's {eager.errors()[name]:.2e} + {floor:g}"
            return


def table(shapes: Sequence[tuple[int, int, dict[str, Check]]], wide: str, compared: str) -> str:
    """The checks of every shape as a Markdown table."""
    out = [
        f"### The check ({compared}): max |a - b| / max |b| against eager and against the {wide} reference",
        "",
        f"| hidden | tokens | variant | vs eager: output | vs eager: gradients (worst) | vs {wide}: output | vs {wide}: gradients (worst) | check |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cells(c: Comparison | None) -> list[str]:
        if c is None:
            return ["-", "-"]
        return [f"{c.output:.2e}", "-" if c.grads is None else f"{c.grads:.2e} ({c.worst_grad})"]

    for hidden, tokens, checks in shapes:
        for key, title in (("eager", "eager"), ("fuserc", "fuserc"), ("compile", "torch.compile"), ("async_tp", "async TP")):
            c = checks.get(key) or Check(reason="not run")
            if c.reason:
                out.append(f"| {hidden} | {tokens} | {title} | n/a | n/a | n/a | n/a | n/a: {c.reason} |")
                continue
            verdict = "the bound's base" if key == "eager" else ("n/a" if c.ok is None else "ok" if c.ok else f"FAILED: {c.failure}")
            out.append(f"| {hidden} | {tokens} | {title} | " + " | ".join(cells(c.vs_eager) + cells(c.vs_reference)) + f" | {verdict} |")
    return "\n".join(out)

"""tools/bench_attention.py's one-device ring (the schedule of
passes/ring_attention.py, `step`) against float64 PyTorch sdpa, and the
schedule's cover of the causal pairs; the tool's --small run is in
test_tools.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from bench_attention import Ring, ring_backward, ring_forward  # noqa: E402

from fuserc.passes.ring_attention import FULL, step  # noqa: E402


@pytest.mark.parametrize("d", [1, 2, 3, 4, 8])
def test_zigzag_schedule_covers_each_causal_block_once(d: int) -> None:
    """Over the d steps of every rank, each (query chunk, key chunk) pair of
    the 2d chunks below the diagonal is attended to whole exactly once,
    each diagonal one under the causal mask once, none above; and every
    rank attends to as many chunk pairs as every other at each step."""
    cover: dict[tuple[int, int], list[str]] = {}
    for j in range(d):
        work = []
        for p in range(d):
            piece = step(d, p, j, True, True)
            assert piece is not None
            qp, kp, causal = piece
            s = (p - j) % d
            qs = [p, 2 * d - 1 - p] if qp == FULL else [[p, 2 * d - 1 - p][qp]]
            ks = [s, 2 * d - 1 - s] if kp == FULL else [[s, 2 * d - 1 - s][kp]]
            work.append(len(qs) * len(ks))
            for a, qc in enumerate(qs):
                for b, kc in enumerate(ks):
                    # the causal mask is over the local order of the chunks
                    seen = "whole" if not causal or b < a else ("diagonal" if a == b else "")
                    if seen:
                        cover.setdefault((qc, kc), []).append(seen)
        assert len(set(work)) == 1, (j, work)
    want = {(qc, kc): ["whole" if kc < qc else "diagonal"] for qc in range(2 * d) for kc in range(qc + 1)}
    assert cover == want


@pytest.mark.parametrize("d", [2, 4])
def test_one_device_ring_matches_float64_sdpa(d: int) -> None:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, h, 8 * d, 8, generator=gen) for h in (4, 2, 2))
    g = torch.randn(1, 4, 8 * d, 8, generator=gen)
    r = Ring(q, k, v, d)
    out, lse = ring_forward(r)
    grads = ring_backward(r, out, lse, r.laid(g))
    ref = [t.double().requires_grad_(True) for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*ref, is_causal=True, enable_gqa=True)
    want.backward(g.double())
    torch.testing.assert_close(r.unlaid(out).double(), want.detach(), rtol=1e-5, atol=1e-5)
    for got, t in zip(grads, ref):
        torch.testing.assert_close(got.double(), t.grad, rtol=1e-5, atol=1e-5)

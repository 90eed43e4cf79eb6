"""stream-pipeline's cost model: what auto chooses at the benchmark's shapes
(one node of 4 H200s, the documented defaults), and the links file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuserc.passes import cost_model as cm

D = 4
ALL = [cm.NONE, cm.COLLECTIVE, cm.RING]
CHUNKS = [4, 8, 16]


def allgather(m: int, k: int, n: int) -> cm.Site:
    return cm.Site(cm.ALLGATHER, 2.0 * m * k * n, m * k * 2, "bf16", D)


def reduce_scatter(m: int, k: int, n: int) -> cm.Site:
    return cm.Site(cm.REDUCE_SCATTER, 2.0 * m * (k // D) * n, m * n * 2, "bf16", D)


@pytest.mark.parametrize("site", [allgather(4096, 4096, 4096), reduce_scatter(4096, 4096, 4096)])
def test_small_shapes_are_not_pipelined(site: cm.Site) -> None:
    """A GEMM of a few tenths of a millisecond cannot pay the per-chunk
    host cost of a pipeline: auto keeps the plain collective."""
    best, reason = cm.choose(cm.Machine(), site, ALL, CHUNKS, requested=False)
    assert best.algorithm == cm.NONE, reason


@pytest.mark.parametrize(
    "site,chunks", [(allgather(32768, 16384, 8192), D), (reduce_scatter(32768, 16384, 8192), 2 * D)]
)
def test_headline_shape_takes_the_ring(site: cm.Site, chunks: int) -> None:
    """AllGather: one chunk per device; ReduceScatter: two sub-rings, so
    that each running sum has a GEMM's time to land."""
    best, reason = cm.choose(cm.Machine(), site, ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.chunks) == (cm.RING, chunks), reason
    assert reason.startswith(f"cost model (defaults): ring(S={chunks})")


def test_per_chunk_cost_grows_with_chunks() -> None:
    """More chunks pay more fixed cost: with a large chunk_us the model
    prefers fewer chunks, and a requested split still gets a pipeline."""
    site = allgather(8192, 8192, 8192)
    slow_host = cm.Machine(chunk_us=2000.0)
    ring4 = cm.estimate(slow_host, site, cm.RING, 4)
    ring16 = cm.estimate(slow_host, site, cm.RING, 16)
    assert ring4.seconds < ring16.seconds
    best, _ = cm.choose(slow_host, site, [cm.COLLECTIVE, cm.RING], CHUNKS, requested=True)
    assert best.algorithm != cm.NONE
    best, _ = cm.choose(slow_host, site, ALL, CHUNKS, requested=False)
    assert best.algorithm == cm.NONE


def test_reduce_scatter_ring_hides_its_transfers() -> None:
    """The ring adds the running sums in the GEMMs' epilogues: when the
    transfers keep up its time is the GEMMs' alone; when they do not, a
    sub-ring per GEMM in flight (k = 2) hides them better than one."""
    m = cm.Machine(copy_engine_gbps=1e6, copy_engine_latency_us=0.0, chunk_us=0.0)
    site = reduce_scatter(32768, 16384, 8192)
    for s in (D, 2 * D):
        ring = cm.estimate(m, site, cm.RING, s)
        assert ring.seconds == pytest.approx(s * m.gemm(site.flops / s, "bf16"), rel=1e-3)
    slow = cm.Machine(copy_engine_gbps=200.0, chunk_us=0.0)
    one, two = cm.estimate(slow, site, cm.RING, D), cm.estimate(slow, site, cm.RING, 2 * D)
    assert two.seconds < one.seconds


def test_links_file_overrides_and_rejects_unknown_keys(tmp_path: Path) -> None:
    good = tmp_path / "links.json"
    good.write_text(json.dumps({"chunk_us": 12.5, "gemm_tflops": {"bf16": 700}}))
    m = cm.load_machine(good)
    assert m.chunk_us == 12.5 and m.gemm_tflops["bf16"] == 700 and m.gemm_tflops["f32"] == 50.0
    assert m.source == str(good)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"chunk_ms": 1}))
    with pytest.raises(ValueError, match="unknown keys: chunk_ms"):
        cm.load_machine(bad)

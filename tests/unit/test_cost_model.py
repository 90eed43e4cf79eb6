"""stream-pipeline's cost model: what auto chooses at the benchmark's shapes
(one node of 4 H200s, the documented defaults), and the links file."""

from __future__ import annotations

import json
import re
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


def test_small_shapes_are_not_pipelined() -> None:
    """A GEMM of a few tens of microseconds cannot pay a ring's fences and
    per-chunk costs: auto keeps the plain collective."""
    best, reason = cm.choose(cm.Machine(), allgather(2048, 2048, 2048), ALL, CHUNKS, requested=False)
    assert best.algorithm == cm.NONE, reason


def test_reduce_scatter_at_4096_cubed_pulls() -> None:
    """GEMM+ReduceScatter at 4096^3 over 4 H200s, replayed back to back:
    0.172 ms as the pull ring with its fences beside its gets, 0.201 with
    them between (and 0.207 for NCCL's whole reduce-scatter after the
    GEMM, eager); on 4 H100s before, 0.187 whole against 0.210 pulled."""
    best, reason = cm.choose(cm.Machine(), reduce_scatter(4096, 4096, 4096), ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.form) == (cm.RING, cm.PULL), reason


def test_allgather_gemm_rings_from_2048x4096x4096() -> None:
    """With the fence kernel (12 us a fence mid-program), an AllGather +
    GEMM of 2048 x 4096 x 4096 over 4 H100s ran 0.163 ms as a ring of 4
    against 0.191 whole (tools/bench.py, replayed back to back)."""
    best, reason = cm.choose(cm.Machine(), allgather(2048, 4096, 4096), ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.chunks) == (cm.RING, D), reason


def test_allgather_gemm_rings_from_4096_cubed() -> None:
    """AllGather + GEMM at 4096^3 over 4 H200s, replayed back to back
    (tools/bench.py): 0.277 ms as a ring of 4, 0.308 ms whole (NCCL's
    gather then the GEMM); the ring's gets, 26 us each, hide under its
    45 us chunk GEMMs."""
    best, reason = cm.choose(cm.Machine(), allgather(4096, 4096, 4096), ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.chunks) == (cm.RING, D), reason


@pytest.mark.parametrize(
    "site,chunks", [(allgather(32768, 16384, 8192), D), (reduce_scatter(32768, 16384, 8192), 2 * D)]
)
def test_headline_shape_takes_the_ring(site: cm.Site, chunks: int) -> None:
    """AllGather: one chunk per device; ReduceScatter: two sub-rings, so
    that each running sum has a GEMM's time to land."""
    best, reason = cm.choose(cm.Machine(), site, ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.chunks) == (cm.RING, chunks), reason
    form = ", sum" if site.kind == cm.REDUCE_SCATTER else ""
    assert reason.startswith(f"cost model (defaults): ring(S={chunks}{form})")


@pytest.mark.parametrize("hidden", [4096, 8192])
def test_gpt_layer_gathers_ring_at_8192_tokens(hidden: int) -> None:
    """The GPT layer's AllGather + GEMM sites at 8192 tokens (q/k/v and the
    MLP's first GEMM, per device N = 3H/d and 4H/d) ring at hidden 4096 as
    at 8192: with its pulls in order, every site a ring ran the forward at
    4096 x 8192 in 1.93 ms against 2.29 unpipelined on 4 H200s. So does the
    backward's gather of the attention block's cotangent (N = H/d), whose
    GEMM is shorter than its gather: its gets still hide under the GEMMs
    better than NCCL's whole gather does before them."""
    for n in (3 * hidden // D, 4 * hidden // D, hidden // D):
        best, reason = cm.choose(cm.Machine(), allgather(8192, hidden, n), ALL, CHUNKS, requested=False)
        assert best.algorithm == cm.RING, reason


def test_a_fence_waits_for_the_peers_of_its_team() -> None:
    """A fence's cost (`ipc_fence_us`, measured over 4 ranks: the wait for
    the last of 3 peers) is (t - 1) / 3 of it for a team of t < 4 ranks,
    the whole of it from 4 on. So an MLP AllGather + GEMM at hidden 4096 x
    1024 tokens rings over 2 GPUs and stays whole over 4, where the fence
    waits for three peers. (On 2 H200s the GPT layer's forward at 4096 x
    8192 ran 8% faster once the fence's cost followed the team.)"""
    m = cm.Machine()
    assert m.ipc_fence(2) == pytest.approx(m.ipc_fence_us * 1e-6 / 3)
    assert m.ipc_fence(3) == pytest.approx(m.ipc_fence_us * 1e-6 * 2 / 3)
    assert m.ipc_fence(4) == m.ipc_fence(8) == pytest.approx(m.ipc_fence_us * 1e-6)
    for d, rings in ((2, True), (4, False)):
        site = cm.Site(cm.ALLGATHER, 2.0 * 1024 * 4096 * (4 * 4096 // d), 1024 * 4096 * 2, "bf16", d)
        best, reason = cm.choose(m, site, ALL, [d, 2 * d, 4 * d], requested=False)
        assert (best.algorithm == cm.RING) == rings, (d, reason)


def test_medium_reduce_scatter_pulls_partials() -> None:
    """Below the headline shape the running sum's GEMMs would wait for its
    transfers: each destination pulls its partials instead, one chunk per
    device, and pays one add at the end. The GPT layer's out-projection at
    hidden 4096 x 8192 tokens (GEMM [8192, 1024] x [1024, 4096], then its
    reduce-scatter) over 4 H100s with the fence kernel: the forward ran in
    1.846 ms pulled against 1.884 whole (the model: 40 us)."""
    best, reason = cm.choose(cm.Machine(), reduce_scatter(8192, 4096, 4096), ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.chunks, best.form) == (cm.RING, D, cm.PULL), reason


def test_reduce_scatter_at_8192_cubed_pulls() -> None:
    """GEMM+ReduceScatter at 8192^3 over 4 H200s, replayed back to back,
    with the pull form's fences beside its gets: 0.497 ms pulled, 0.524 as
    the sum form at S = 8 (before, with the fences between the gets, on 4
    H100s: 0.545 pulled, 0.532 summed). The layer at hidden 8192 x 8192
    tokens, whose out-projections went from the sum form to the pull form
    with it: forward 5.443 -> 5.387 ms (same machine)."""
    best, reason = cm.choose(cm.Machine(), reduce_scatter(8192, 8192, 8192), ALL, CHUNKS, requested=False)
    assert (best.algorithm, best.chunks, best.form) == (cm.RING, D, cm.PULL), reason


def test_pull_fences_run_beside_the_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one sub-chunk and a third worker stream the pull form's fences
    run beside the previous get (`pulls_beside_fences`): in the model the
    gets of a ring bound by its transfers then follow one another, which
    saves at most a fence per step after the first."""
    assert cm.pulls_beside_fences(1, D) and not cm.pulls_beside_fences(2, 2 * D) and not cm.pulls_beside_fences(1, 2)
    m, site = cm.Machine(), reduce_scatter(4096, 4096, 4096)
    beside = cm.estimate(m, site, cm.RING, D, cm.PULL).seconds
    monkeypatch.setattr(cm, "pulls_beside_fences", lambda k, streams: False)
    between = cm.estimate(m, site, cm.RING, D, cm.PULL).seconds
    assert 0 < between - beside <= (D - 2) * m.ipc_fence(D) * (1 + 1e-9)


def test_sum_form_sub_rings_share_one_channel() -> None:
    """The sum form's sub-rings take turns at the copy engine and the
    fences, so more sub-rings add transfers rather than hiding them: the
    GPT layer's out-projection at hidden 4096 x 8192 tokens over 4 H200s
    ran the forward in 2.17 ms as the sum form at S = 16 against 1.91
    whole. The model puts S = 16 well behind the collective left whole."""
    m = cm.Machine()
    site = reduce_scatter(8192, 4096, 4096)
    assert cm.estimate(m, site, cm.RING, 4 * D, cm.SUM).seconds > 1.2 * cm.estimate(m, site, cm.NONE, 1).seconds


def test_pull_form_is_tried_at_one_chunk_per_device_unless_asked() -> None:
    """Its sub-rings measured slow: auto tries the pull form at S = d only;
    a requested S other than d still runs it when the form is forced."""
    site = reduce_scatter(16384, 8192, 8192)
    pairs = cm.candidates(site, [cm.RING], CHUNKS)
    assert [(s, f) for _, s, f in pairs if f == cm.PULL] == [(D, cm.PULL)]
    assert cm.candidates(site, [cm.RING], [2 * D], (cm.PULL,)) == [(cm.RING, 2 * D, cm.PULL)]
    tail = cm.estimate(cm.Machine(), site, cm.RING, D, cm.PULL)
    gemms = D * (cm.Machine().gemm(site.flops / D, "bf16") + cm.Machine().chunk_us * 1e-6)
    assert tail.seconds > gemms  # the final add over d blocks is paid after the GEMMs


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
    m = cm.Machine(copy_engine_gbps=1e6, copy_engine_latency_us=0.0, ipc_fence_us=0.0, chunk_us=0.0)
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
    with pytest.raises(ValueError, match="bad.json:1:14: chunk_ms: unknown key"):
        cm.load_machine(bad)


def test_links_file_one_located_message_per_bad_field(tmp_path: Path) -> None:
    """A missing value, a zero bandwidth, a string for a number, a string
    for the GPU count, a bad GEMM peak: each named at its line and column;
    fields the file leaves out keep their defaults."""
    bad = tmp_path / "links.json"
    bad.write_text(
        '{\n  "copy_engine_gbps": 0,\n  "gpus_per_node": "8",\n  "nccl_latency_us": "20",\n'
        '  "hbm_gbps": null,\n  "gemm_tflops": {"bf16": -1, "fp8": 9}, "launch_us": true\n}\n'
    )
    with pytest.raises(cm.LinksFileError) as info:
        cm.load_machine(bad)
    lines = str(info.value).splitlines()
    assert lines == [
        f"{bad}:2:23: copy_engine_gbps: must be a positive number, got 0",
        f'{bad}:3:20: gpus_per_node: must be a positive integer, got "8"',
        f'{bad}:4:22: nccl_latency_us: must be a number >= 0, got "20"',
        f"{bad}:5:15: hbm_gbps: must be a positive number, got null",
        f"{bad}:6:27: gemm_tflops.bf16: must be a positive number, got -1",
        f"{bad}:6:38: gemm_tflops.fp8: unknown element type (known: bf16, f16, f32, f64)",
        f"{bad}:6:55: launch_us: must be a number >= 0, got true",
    ]
    d = info.value.diagnostic()
    assert d.render().splitlines()[0] == f"{bad}:2:23: error: stream-pipeline: links file: copy_engine_gbps: must be a positive number, got 0"
    assert len(d.render().splitlines()) == len(lines)
    for text, where in [("{", ":1:2: not JSON"), ("[8]", ":1:1: must hold a JSON object"), ('{"gemm_tflops": 5}', ":1:17: gemm_tflops: must be an object")]:
        bad.write_text(text)
        with pytest.raises(cm.LinksFileError, match=re.escape(where)):
            cm.load_machine(bad)
    with pytest.raises(cm.LinksFileError, match="cannot read it"):
        cm.load_machine(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="copy_engine_gbps: must be a positive number"):
        cm.Machine(copy_engine_gbps=0)
    bad.write_text('{"nccl_busbw_gbps": 120.5}')
    m = cm.load_machine(bad)
    assert m.nccl_busbw_gbps == 120.5 and m.copy_engine_gbps == cm.Machine().copy_engine_gbps


# --------------------------------------------------------------------------
# Two links: within a node and between nodes
# --------------------------------------------------------------------------


def test_ring_links_per_offset() -> None:
    """4 ranks as 2 nodes of 2: offsets 1 and 3 cross nodes for some ranks,
    offset 2 for all; a team on one node crosses none."""
    m = cm.Machine(gpus_per_node=2)
    assert m.ring_links((0, 1, 2, 3)) == (True, True, True)
    assert m.ring_links((0, 1)) == (False,)
    assert cm.Machine().ring_links((0, 1, 2, 3)) == (False, False, False)
    assert m.node_of(3) == 1 and not m.one_node((1, 2))


def test_the_network_slows_rings_and_collectives_across_nodes() -> None:
    """The same AllGather + GEMM spanning 2 nodes: every ring step and the
    collective pay the network (net_gbps), so each takes longer than on one
    node; with a network as fast as NVLink they match again."""
    site = allgather(32768, 16384, 8192)
    across = cm.Machine(gpus_per_node=2)
    links = across.ring_links((0, 1, 2, 3))
    for algorithm in (cm.RING, cm.COLLECTIVE):
        one = cm.estimate(cm.Machine(), site, algorithm, D).seconds
        two = cm.estimate(across, cm.Site(**{**site.__dict__, "links": links}), algorithm, D).seconds
        assert two > 1.5 * one, (algorithm, one, two)
    fast = cm.Machine(gpus_per_node=2, net_gbps=350.0, net_latency_us=10.0, nccl_busbw_gbps=300.0)
    ring = cm.estimate(fast, cm.Site(**{**site.__dict__, "links": links}), cm.RING, D).seconds
    assert ring == pytest.approx(cm.estimate(cm.Machine(), site, cm.RING, D).seconds)


def test_gpus_per_node_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$FUSERC_GPUS_PER_NODE overrides the links file, and says so in the
    source the reasons name; a bad value is an error."""
    path = tmp_path / "links.json"
    path.write_text(json.dumps({"gpus_per_node": 8}))
    monkeypatch.setenv(cm.GPUS_PER_NODE_ENV, "2")
    m = cm.load_machine(path)
    assert m.gpus_per_node == 2 and m.source == f"{path}, FUSERC_GPUS_PER_NODE=2"
    monkeypatch.setenv(cm.GPUS_PER_NODE_ENV, "zero")
    with pytest.raises(ValueError, match="FUSERC_GPUS_PER_NODE='zero': expected a positive number"):
        cm.load_machine(path)


def test_the_job_groups_ranks_into_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled inside a job, the ranks' nodes are the job's: runs of one
    size become `gpus_per_node`, other groupings (ranks placed round-robin)
    are kept rank by rank; a job grouped as the file says changes nothing;
    $FUSERC_GPUS_PER_NODE still wins."""
    path = tmp_path / "links.json"
    path.write_text(json.dumps({"gpus_per_node": 2}))
    monkeypatch.delenv(cm.GPUS_PER_NODE_ENV, raising=False)
    with cm.job_nodes([0, 0, 1, 1]):
        m = cm.load_machine(path)
    assert (m.gpus_per_node, m.nodes, m.source) == (2, (), str(path))
    with cm.job_nodes([5, 5, 5, 5]):
        m = cm.load_machine(path)
    assert (m.gpus_per_node, m.nodes, m.source) == (4, (), f"{path}, the job's nodes of 4 ranks")
    assert m.ring_links((0, 1, 2, 3)) == (False, False, False)
    with cm.job_nodes([0, 1, 0, 1]):
        m = cm.load_machine(path)
    assert m.nodes == (0, 1, 0, 1) and m.source == f"{path}, the job's nodes [0, 1, 0, 1]"
    assert [m.node_of(r) for r in range(4)] == [0, 1, 0, 1]
    assert m.ring_links((0, 2)) == (False,) and m.ring_links((0, 1, 2, 3)) == (True, False, True)
    assert cm.load_machine(path).gpus_per_node == 2  # outside a job: the file
    monkeypatch.setenv(cm.GPUS_PER_NODE_ENV, "1")
    with cm.job_nodes([0, 0, 0, 0]):
        assert cm.load_machine(path).gpus_per_node == 1
    problems = cm.field_problems({"nodes": [0, 0]})
    assert problems and problems[0][0] == ("nodes",) and "unknown key" in problems[0][1]


def test_two_links_rank_the_candidates_apart() -> None:
    """One AllGather + GEMM, one set of links: on one node the ring (copy
    engines) wins; as 2 nodes of 2 behind a slow network every pipelined
    step waits for it and the plain collective (one transfer) wins; with 8
    ranks as 2 nodes of 4 every ring offset crosses for some rank."""
    site = allgather(32768, 16384, 8192)
    slow = cm.Machine(gpus_per_node=2, net_latency_us=1e5)
    best, reason = cm.choose(cm.Machine(), site, ALL, [D], requested=True)
    assert best.algorithm == cm.RING, reason
    across = cm.Site(**{**site.__dict__, "links": slow.ring_links((0, 1, 2, 3))})
    best, reason = cm.choose(slow, across, ALL, [D], requested=True)
    assert best.algorithm == cm.NONE, reason
    assert cm.estimate(slow, across, cm.RING, D).seconds > 3 * 0.1  # three steps, each one latency
    assert cm.Machine(gpus_per_node=4).ring_links(tuple(range(8))) == (True,) * 7
    assert cm.Machine(gpus_per_node=4).ring_links((0, 1, 4, 5)) == (True, True, True)
    assert cm.Machine(gpus_per_node=4).ring_links((0, 1, 2, 3)) == (False,) * 3


@pytest.mark.parametrize("compute", [cm.BEFORE, cm.AFTER])
def test_a_collective_per_chunk_pays_with_its_compute_only(compute: str) -> None:
    """A collective per chunk with a GEMM's worth of compute around it
    overlaps the two at large shapes; the collective alone only adds a
    latency per chunk, so the unpipelined one is faster."""
    big = cm.Site(cm.CHUNKS, 2.0 * 8192**3, 8192 * 8192 * 2, "bf16", D, cm.ALLREDUCE, compute)
    best, reason = cm.choose(cm.Machine(), big, ALL[:2], [8], requested=True)
    assert best.algorithm == cm.COLLECTIVE, reason
    alone = cm.Site(cm.CHUNKS, 0.0, 8192 * 8192 * 2, "bf16", D, cm.ALLREDUCE, "")
    best, reason = cm.choose(cm.Machine(), alone, ALL[:2], [8], requested=True)
    assert best.algorithm == cm.NONE, reason


def test_nccl_slows_a_gemm_only_while_they_overlap() -> None:
    """A GEMM beside an NCCL kernel is slowed for the time they overlap
    (the GPT layer's weight-gradient GEMMs took 1.5-2x beside its
    backward's reduce-scatter): a short collective beside a long GEMM
    costs little, a long one the whole slowdown."""
    m = cm.Machine()
    assert m.nccl_sm_slowdown == 0.5
    assert m.beside_nccl(1e-3, 1e-4) == pytest.approx(1e-3 + 0.5e-4)
    assert m.beside_nccl(1e-4, 1e-3) == pytest.approx(1.5e-4)
    assert cm.Machine(nccl_sm_slowdown=0).beside_nccl(1e-3, 1e-3) == 1e-3
    # the collective pipeline of a GEMM + ReduceScatter pays it per chunk
    site = cm.Site(cm.REDUCE_SCATTER, 2 * 8192 * 4096 * 1024, 8192 * 4096 * 2, "bf16", 4)
    fast, slow = (cm.estimate(cm.Machine(nccl_sm_slowdown=x), site, cm.COLLECTIVE, 4).seconds for x in (0.0, 0.5))
    assert slow > fast


def test_moe_chunks_pay_where_the_all_to_all_is_worth_hiding() -> None:
    """An expert-parallel layer is cut into token chunks where a chunk's
    dispatch beside the other chunk's GEMMs saves more than the chunks'
    latencies cost: the DeepSeek-like layer on 8 GPUs (8192 tokens each,
    hidden 2048, expert ffn 1408, top 6), whose all-to-all is as long as its
    GEMMs; not the tiny test layers, whose transfers are all latency, nor
    one device, which has nothing to send."""
    m = cm.Machine()

    def swiglu(tokens: int, hidden: int, ffn: int, k: int, ranks: int, elem: str) -> tuple[int, dict[int, float]]:
        size = 2 if elem == "bf16" else 4
        return cm.moe_chunks(m, tokens, k, hidden * size, [2.0 * hidden * ffn] * 3, ranks, elem)

    best, times = swiglu(8192, 2048, 1408, 6, 8, "bf16")
    assert best > 1 and times[best] < cm.PAYS * times[1]
    assert swiglu(16, 16, 24, 2, 4, "f32")[0] == 1
    one, options = swiglu(8192, 2048, 1408, 6, 1, "bf16")
    assert one == 1 and list(options) == [1]
    assert set(swiglu(6, 8, 8, 2, 2, "f32")[1]) == {1, 2}  # only chunkings that divide the tokens

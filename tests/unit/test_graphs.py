"""Runs replayed as captured graphs (runtime/evaluator/graphs.py): when a program's
run is captured, replayed, or run op by op (MPI singleton, in-process, on a
cpu backend that pretends to capture: its "graph" runs the captured body
again); the cuda backend's choice of fence flags per program (from its first
run), what it reports as unrepeatable, and the indexed-flag layout, on fakes
that need no GPU. The real CUDA graphs run in the GPU tests
(test_cuda_backend.py) and every e2e test with `--iters` on cuda."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fuserc.runtime.backends import cuda
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.backends.cuda_comm import FENCE_SLOTS, INDEXED_FENCES, Communicators, SignalPad
from fuserc.runtime.evaluator.graphs import GRAPHS_ENV, SETTLED, graphs_enabled, graphs_mode, input_key
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.runtime.evaluator.trace import tracing

from test_evaluator import _close_programs, load  # noqa: F401  (the fixture closes loaded programs)
from test_evaluator_speed import BLOCKS


@pytest.fixture(autouse=True)
def _holds_in_pretend_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pretend backend's runs take seconds (2 s op by op by default):
    its holds are not capped at a real run's HOLD_MAX_S, else every gauge
    of a host-bound run would outlast its hold and could not tell."""
    from fuserc.runtime.evaluator import graphs

    monkeypatch.setattr(graphs, "HOLD_MAX_S", 1e9)

SHARES_ITS_INPUT = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %c0 = hir.constant 0 : index
  %h = hir.share %x team = [0] : tensor<4x2xf32> -> !hir.handle
  %out = hir.alloc "out" : tensor<4x2xf32>
  %t = hir.get %h, %c0, %out backend = cuda_ipc : (!hir.handle, index, tensor<4x2xf32>) -> !hir.token
  hir.wait %t : !hir.token
  func.return %out : tensor<4x2xf32>
}
"""


class _Pretend(CpuBackend):
    """The cpu backend with pretend graphs: `capture` runs the body (and
    keeps it as the graph), `replay` runs it again; a run op by op takes
    `ops_s` seconds and a replay `graph_s` (what `span` reports), and the
    host issues a run op by op in `host_s` (`host_clock`; by default as
    long as the device takes: the host is the bottleneck)."""

    graphs_unavailable = None

    def __init__(
        self, blockers: tuple[str, ...] = (), fail: bool = False, ops_s: float = 2.0, graph_s: float = 1.0, host_s: float | None = None
    ):
        super().__init__(mpi_env())
        self.host_s = ops_s if host_s is None else host_s
        self.clock = 0.0
        self.log: list[str] = []
        self.extra = list(blockers)
        self.fail = fail
        self.forgotten: list[Any] = []
        self.seconds = {"ops": ops_s, "graph": graph_s}
        self.timeline: list[float] = []  # seconds of the n-th timed run, when given
        self.ends = 0
        self.holds: list[float] = []
        self._last = "ops"

    def begin_run(self, owner: Any) -> None:
        self.log.append("begin")
        self._last = "ops"
        self.clock += self.host_s

    def host_clock(self) -> float:
        return self.clock

    def end_run(self) -> list[str]:
        self.log.append("end")
        return list(self.extra)

    def capture(self, body: Callable[[], Any]) -> tuple[Any, Any]:
        self.log.append("capture")
        if self.fail:
            raise RuntimeError("capture broke")
        return body, body()

    def replay(self, graph: Any, staged: Any = ()) -> None:
        self.log.append("replay")
        self._last = "graph"
        for src, dst in staged:
            dst.copy_(src)
        graph()

    def hold(self, seconds: float) -> None:
        self.log.append("hold")
        self.holds.append(seconds)

    def mark(self, join: bool = False) -> Any:
        self.log.append("mark")
        self.ends += join
        return (self._last, self.ends - 1)

    def synchronize(self) -> None:
        self.log.append("sync")
        super().synchronize()

    def span(self, start: Any, end: Any) -> float:
        kind, n = end
        return self.timeline[n] if self.timeline else self.seconds[kind]

    def forget_owner(self, owner: Any) -> None:
        self.forgotten.append(owner)


def _runs(prog: Any, x: torch.Tensor, n: int) -> list[list[str]]:
    """`n` runs on the prepared `x`; each run's backend log (and its result checked)."""
    logs = []
    for _ in range(n):
        prog.backend.log.clear()
        (out,) = prog.run_prepared([x])
        torch.testing.assert_close(out, x)
        logs.append(list(prog.backend.log))
    return logs


# each run ends with the backend synchronized (run_prepared's default); a
# timed run of the trial also starts with it
OP_BY_OP = ["begin", "end", "sync"]
TIMED_OPS = ["sync", "mark", "begin", "end", "mark", "sync"]
GAUGED_OPS = ["sync", "hold", "mark", "begin", "end", "mark", "sync"]
CAPTURED = ["begin", "capture", "end", "replay", "sync"]
REPLAY = ["replay", "sync"]
TIMED_REPLAY = ["sync", "mark", "replay", "mark", "sync"]
TRIAL = [OP_BY_OP, GAUGED_OPS, TIMED_OPS, CAPTURED, TIMED_REPLAY, TIMED_REPLAY, TIMED_OPS]
"""Run 1 op by op, run 2 gauged (timed op by op behind a hold on the
device: no sample of the trial), then the trial: run 3 timed op by op,
run 4 captured and replayed untimed (a first replay's one-time costs),
runs 5 and 6 timed replays, run 7 timed op by op."""


def test_replays_kept_when_measured_faster() -> None:
    """Run 2 is gauged, run 3 timed op by op, run 4 captured and replayed
    untimed, runs 5 and 6 timed replays, run 7 timed op by op; from run 8
    on the faster way (here the graph) is kept."""
    prog = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 9) == TRIAL + [REPLAY, REPLAY]
    r = prog.replays
    assert (r.captures, r.replays, r.prefer_graph) == (1, 4, True)
    assert r.mode() == (
        "replayed as a graph (1.000 ms replayed, 2.000 ms op by op; 1 capture(s), 4 replays;"
        " gauged: the host issued a run in 2.000 ms, the device ran it in 2.000 ms)"
    )  # the gauge's figures too: why the trial ran
    assert prog.runs == 9


def test_a_program_the_device_is_busy_with_runs_op_by_op() -> None:
    """Run 2 is gauged: the host issued it in 0.4 ms, the device ran it in 2
    ms (a whole model's step: the host runs ahead), so no graph is ever
    captured, whose pool and staged inputs would cost memory and which could
    spare only host time the device never waits for."""
    prog = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=0.4e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 6) == [OP_BY_OP, GAUGED_OPS] + [OP_BY_OP] * 4
    assert prog.backend.holds == [pytest.approx(2 * 0.4e-3)]  # twice the host's time for run 1 (`hold_for`)
    r = prog.replays
    assert (r.captures, r.replays, r.prefer_graph) == (0, 0, False)
    assert r.mode() == "op by op: the device is the bottleneck (the host issued a run in 0.400 ms, the device ran it in 2.000 ms)"


POOLED = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %t = hir.alloc "t" storage 0 : tensor<4x2xf32>
  hir.copy %x, %t : tensor<4x2xf32>, tensor<4x2xf32>
  %out = hir.alloc "out" : tensor<4x2xf32>
  hir.copy %t, %out : tensor<4x2xf32>, tensor<4x2xf32>
  hir.dealloc %t : tensor<4x2xf32>
  func.return %out : tensor<4x2xf32>
}
"""


@pytest.mark.parametrize("host_s", [0.4e-3, 2e-3])
def test_a_pool_keeps_its_blocks_while_its_program_may_be_captured(host_s: float) -> None:
    """Runs op by op before the gauge's verdict keep the pool's blocks where
    they are (a graph captured next reads them there); once the program
    runs op by op for good (device-bound), each block goes back after its
    last buffer; a captured graph pins them."""
    prog = load(POOLED, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=host_s))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    pool = prog.cache.pool
    held = []
    for _ in range(8):
        (out,) = prog.run_prepared([x])
        torch.testing.assert_close(out, x)
        held.append(pool.nbytes())
    if host_s < 2e-3:  # device-bound: judged after run 2, op by op from run 3
        assert held == [32, 32] + [0] * 6 and pool.pinned is None
    else:  # the trial: captured at run 4
        assert held == [32] * 8 and pool.pinned == "a captured graph reads its blocks"


def test_a_forward_and_its_backward_are_judged_together() -> None:
    """The backward alone looks host-bound (1.9 ms to issue, 2 ms on the
    device), but after a forward the device is busy with (0.4 ms against
    2) the host is ahead over the pair: neither is captured. Each is
    gauged twice (`Gauges.RUNS`), the run its host issued fastest taken
    (the backward's first gauge, 3.5 ms of host, would have sent the pair
    to the trial), and waits, op by op, until both are gauged."""
    from fuserc.runtime.evaluator.graphs import Gauges

    fwd = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=0.4e-3))
    bwd = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=1.9e-3))
    gauges = Gauges(["main_fwd", "main_bwd"])
    gauges.join("main_fwd", fwd.replays)
    gauges.join("main_bwd", bwd.replays)
    (x,) = fwd.prepare_inputs([torch.randn(4, 2)])
    (y,) = bwd.prepare_inputs([torch.randn(4, 2)])
    logs = []
    for i in range(6):
        bwd.backend.host_s = 3.5e-3 if i == 1 else 1.9e-3  # noise in the first gauge
        logs.append((_runs(fwd, x, 1)[0], _runs(bwd, y, 1)[0]))
    gauged = (GAUGED_OPS, GAUGED_OPS)
    assert logs[1] == logs[2] == gauged and all(step == (OP_BY_OP, OP_BY_OP) for i, step in enumerate(logs) if i not in (1, 2))
    for r in (fwd.replays, bwd.replays):
        assert (r.captures, r.prefer_graph) == (0, False)
        assert r.mode() == "op by op: the device is the bottleneck (the host issued @main_fwd and @main_bwd in 2.300 ms, the device ran them in 4.000 ms)"
    alone = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=1.9e-3))
    (z,) = alone.prepare_inputs([torch.randn(4, 2)])
    assert _runs(alone, z, 7) == TRIAL  # judged alone, the backward would be tried as a graph


@pytest.mark.parametrize("room", [None, 1000, 600])
def test_graphs_that_would_hold_too_much_memory_are_not_tried(room: int | None) -> None:
    """A host-bound forward and backward (the trial would follow) whose
    graphs would hold more than `room` bytes between runs together (400
    and 300 here: `GRAPH_MEMORY` of the device's memory, read from each
    program's buffers) run op by op; within it, the trial follows."""
    from fuserc.passes.plan_memory import memory_plan
    from fuserc.runtime.evaluator.graphs import GRAPH_MEMORY, Gauges, Replays

    assert Replays(None, lambda a, b: 0.0, 7, 2000).room == int(GRAPH_MEMORY * 2000) == 100  # a share of the device's memory

    fwd = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=1.9e-3))
    bwd = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=1.9e-3))
    assert fwd.replays.holds == memory_plan(fwd.func).planned > 0 and fwd.replays.room is None  # (no bound on the cpu backend)
    gauges = Gauges(["main_fwd", "main_bwd"])
    for name, p, holds in (("main_fwd", fwd, 400), ("main_bwd", bwd, 300)):
        gauges.join(name, p.replays)
        p.replays.holds, p.replays.room = holds, room
    (x,) = fwd.prepare_inputs([torch.randn(4, 2)])
    (y,) = bwd.prepare_inputs([torch.randn(4, 2)])
    for _ in range(5):
        _runs(fwd, x, 1), _runs(bwd, y, 1)
    for r in (fwd.replays, bwd.replays):
        if room == 600:
            assert r.off is not None and r.mode().startswith("op by op: its graphs would hold 0.0 GiB between runs, more than 5% of the device's memory (the host is not ahead: the host issued @main_fwd and @main_bwd in 3.800 ms")
        else:
            assert r.off is None and r.judged, "on to the trial"
        assert r.settled() == (room == 600)  # (the trial's runs still to come)


def test_the_gauge_waits_for_the_kernels_and_need_not_have_the_trials_inputs() -> None:
    """No run is gauged while kernels build in the background (the host then
    runs their regions op by op); a gauged run with new inputs is not the
    trial's first, which then starts anew."""
    backend = _Pretend(ops_s=2e-3, graph_s=1e-3)
    building = [True]
    backend.wait_for_kernels = lambda timeout=None: not (building and building.pop())  # type: ignore[method-assign]
    prog = load(BLOCKS, backend)
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    (y,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 2) == [OP_BY_OP, OP_BY_OP]  # run 2: kernels still building
    assert _runs(prog, y, 1) == [GAUGED_OPS] and prog.replays.judged is False  # gauged; another input
    assert _runs(prog, y, 1) == [TIMED_OPS] and prog.replays.judged  # host-bound: the trial's first run
    assert len(prog.replays.samples["ops"]) == 1


@pytest.mark.parametrize(("together", "cap"), [(False, None), (True, None), (False, 3e-3)])
def test_a_gauge_the_host_took_longer_than_its_hold_for_cannot_tell(together: bool, cap: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host took 5 ms to issue the gauged run, longer than the hold
    before it (4 ms: twice its 2 ms for the run before): it may have waited
    for the device (CUDA queues about a thousand launches; a run of more,
    issued behind the hold, blocks the host until the device takes them),
    and its time says nothing of its own speed. The program runs op by op
    (a graph's pools would hold its buffers between runs), alone or judged
    with the others of its step, which would otherwise go to the trial; so
    too where the hold was at its cap (`cap`: 3 ms; the 24-layer model's
    backward, issued behind a hold of 0.5 s, took its host 0.65 s with the
    forward's)."""
    from fuserc.runtime.evaluator import graphs
    from fuserc.runtime.evaluator.graphs import Gauges

    if cap is not None:
        monkeypatch.setattr(graphs, "HOLD_MAX_S", cap)

    backend = _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=2e-3)  # host-bound as measured
    prog = load(BLOCKS, backend)
    progs = [prog]
    if together:
        other = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3, host_s=2e-3))
        gauges = Gauges(["main_fwd", "main_bwd"])
        gauges.join("main_fwd", prog.replays)
        gauges.join("main_bwd", other.replays)
        progs.append(other)
    ins = [p.prepare_inputs([torch.randn(4, 2)])[0] for p in progs]
    assert [_runs(p, x, 1) for p, x in zip(progs, ins)] == [[OP_BY_OP]] * len(progs)
    backend.host_s = 5e-3
    assert [_runs(p, x, 1) for p, x in zip(progs, ins)] == [[GAUGED_OPS]] * len(progs)
    assert backend.holds == [4e-3 if cap is None else cap]
    if together:  # gauged twice (`Gauges.RUNS`): the second too past its hold (twice the 5 ms before it)
        backend.host_s = 11e-3
        assert [_runs(p, x, 1) for p, x in zip(progs, ins)] == [[GAUGED_OPS]] * len(progs)
        assert backend.holds == [4e-3, 10e-3]
    for p, x in zip(progs, ins):
        assert _runs(p, x, 5) == [OP_BY_OP] * 5
    for p in progs:
        assert p.replays.mode().startswith("op by op: the gauge could not tell (the host issued "), p.replays.mode()
        assert "the host was still issuing when the device's hold ended" in p.replays.mode()


def test_the_first_run_with_every_kernel_in_is_not_gauged() -> None:
    """The first run after the last kernel came in launches it for the first
    time (loading it, maybe timing its configurations: host time and waits
    for the device no later run has), so the gauge is the run after it."""
    backend = _Pretend(ops_s=2e-3, graph_s=1e-3)
    prog = load(BLOCKS, backend)
    backend.wait_for_kernels = lambda timeout=None: prog.runs >= 2  # type: ignore[method-assign]  (in from run 2 on)
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 4) == [OP_BY_OP, OP_BY_OP, OP_BY_OP, GAUGED_OPS]


def test_the_hold_before_a_gauged_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice the host's time for the run before, at most HOLD_MAX_S (also
    where that time is unknown): the device starts the gauged run once the
    host has issued it, so its span is its own time, without waits for the
    host, which made a host-bound program look device-bound."""
    from fuserc.runtime.evaluator.graphs import hold_for

    monkeypatch.undo()  # the real cap
    from fuserc.runtime.evaluator.graphs import HOLD_MAX_S

    assert hold_for(1e-3) == pytest.approx(2e-3)
    assert hold_for(10.0) == hold_for(None) == HOLD_MAX_S == 0.5


def test_replays_not_enough_faster_are_not_kept() -> None:
    """Replays 4% faster than op by op (1.92 ms against 2.0) are within the
    trial's noise, and a graph's pool would hold the run's buffers between
    runs: the program runs op by op, and says why."""
    from fuserc.runtime.evaluator.graphs import GRAPH_GAIN

    backend = _Pretend()
    backend.timeline = [2.0e-3, 2.0e-3, 1.92e-3, 1.92e-3, 2.0e-3]
    prog = load(BLOCKS, backend)
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    _runs(prog, x, 8)
    assert prog.replays.prefer_graph is False and GRAPH_GAIN == 0.05
    assert prog.replays.mode() == "op by op: runs op by op measured less than 5% slower than the replays (1.920 ms replayed, 2.000 ms op by op)"


def test_the_first_replay_of_a_capture_is_not_timed() -> None:
    """A capture's replay pays once for the graph's upload (and NCCL's
    buffer registration): a trial that timed it would keep a slower way.
    Here run 4 (the capture's replay) would take 10 ms; the timed replays
    1 ms each win against 2 ms op by op."""
    backend = _Pretend(ops_s=2e-3, graph_s=1e-3)
    backend.timeline = [2e-3, 2e-3, 1e-3, 1e-3, 2e-3]  # the timed runs only: 2 (gauged), 3, 5, 6, 7
    prog = load(BLOCKS, backend)
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    logs = _runs(prog, x, 8)
    assert logs[3] == CAPTURED and "mark" not in logs[3]
    assert prog.replays.prefer_graph is True and backend.ends == 5


@pytest.mark.parametrize(
    "timeline, verdict",
    [
        # A device slowing down over the trial (op by op 1.0 then 1.6 ms, the
        # replays 1.1 and 1.2 between): the best of each would keep op by op,
        # the means keep the replays.
        ([1.0e-3, 1.0e-3, 1.1e-3, 1.2e-3, 1.6e-3], "1.150 ms replayed, 1.300 ms op by op"),
        # A replay that stalled (8 ms against 1 ms: a kernel built in the
        # background, the host descheduled) is not the graph's speed: the
        # faster replay counts alone, and the replays are kept against 2 ms
        # op by op, where the means would have kept running op by op.
        ([2.0e-3, 2.0e-3, 1.0e-3, 8.0e-3, 2.1e-3], "1.000 ms replayed, 2.050 ms op by op"),
    ],
)
def test_trial_compares_means_in_an_abba_order_but_not_stalls(timeline: list[float], verdict: str) -> None:
    """(Each timeline starts with the gauged run's span, which is no
    sample of the trial.)"""
    backend = _Pretend()
    backend.timeline = timeline
    prog = load(BLOCKS, backend)
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    _runs(prog, x, 8)
    assert prog.replays.mode().startswith(f"replayed as a graph ({verdict}; 1 capture(s), 3 replays; gauged: the host issued a run in ")


def test_runs_op_by_op_when_measured_faster() -> None:
    prog = load(BLOCKS, _Pretend(ops_s=1e-3, graph_s=2e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 9) == TRIAL + [OP_BY_OP, OP_BY_OP]
    r = prog.replays
    assert r.prefer_graph is False and r.captured is None
    assert r.mode() == "op by op: runs op by op measured faster (2.000 ms replayed, 1.000 ms op by op)"


def test_owned_results_of_replays_are_copies_the_next_run_leaves_alone() -> None:
    """A caller that owns its results (fuserc.torch's runs) gets replays
    too: each replay's results are copied out of the graph's buffers, so a
    result held from an earlier run keeps its values when the same input
    buffer, changed in place, is run again; the copies count in the
    trial's time of a replay (between its marks)."""
    prog = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    held: list[tuple[torch.Tensor, torch.Tensor]] = []
    for k in range(8):
        x.copy_(torch.full((4, 2), float(k)))
        prog.backend.log.clear()
        (out,) = prog.run_prepared([x], owned_results=True)
        held.append((out, x.clone()))
        if k == 4:
            assert prog.backend.log == ["sync", "mark", "replay", "mark", "sync"]
    for out, want in held:
        torch.testing.assert_close(out, want)
    assert len({id(out) for out, _ in held}) == 8
    r = prog.replays
    assert (r.captures, r.replays, r.prefer_graph) == (1, 3, True)
    assert not any(out.data_ptr() == res.data_ptr() for out, _ in held for res in r.captured.results)


def test_an_input_at_another_address_is_staged() -> None:
    """An input seen at another address with the same layout drops the
    graph (one run op by op, then a capture) and is staged from then on:
    the graph reads a buffer of its own, into which each replay copies
    the input, wherever it lies (`_runs` checks each result)."""
    prog = load(BLOCKS, _Pretend())
    x, y = (prog.prepare_inputs([torch.randn(4, 2)])[0] for _ in range(2))
    assert input_key([x]) != input_key([y])
    _runs(prog, x, 7)
    assert _runs(prog, y, 3) == [OP_BY_OP, CAPTURED, REPLAY]  # measured already: no second trial
    assert _runs(prog, x, 2) == [REPLAY, REPLAY]  # staged: x is copied in
    r = prog.replays
    assert r.staged == {0} and r.captures == 2 and set(r.captured.staged) == {0}
    assert r.mode().endswith("; 2 capture(s), 5 replays, 1 input(s) staged; gauged: the host issued a run in 2000.000 ms, the device ran it in 2000.000 ms)")


def test_a_staged_input_that_settles_is_read_in_place_again() -> None:
    """A staged input that keeps its new address for SETTLED runs (a saved
    tensor once the forward replays into the same buffer) is read in place
    again: one run op by op, one capture anew, then replays without the
    copy. Moving after that, it is staged again, for good."""
    prog = load(BLOCKS, _Pretend())
    x, y = (prog.prepare_inputs([torch.randn(4, 2)])[0] for _ in range(2))
    _runs(prog, x, 7)
    assert SETTLED == 3
    assert _runs(prog, y, 8) == [OP_BY_OP, CAPTURED, REPLAY, OP_BY_OP, CAPTURED, REPLAY, REPLAY, REPLAY]
    r = prog.replays
    assert r.staged == set() and r.captured.staged == {} and r.captures == 3
    assert _runs(prog, x, 6) == [OP_BY_OP, CAPTURED] + [REPLAY] * 4
    assert r.staged == {0} and set(r.captured.staged) == {0}


def test_a_trial_lost_while_staging_is_run_again_once_inputs_settle() -> None:
    """Replays measured slower while an input was staged (each replay paid
    its copy): runs go op by op, and once the input settles the trial runs
    again, this time on a graph that reads it in place."""
    backend = _Pretend()
    backend.timeline = [1e-3, 1e-3, 2e-3, 2e-3, 1e-3, 2e-3, 1e-3, 1e-3, 2e-3]  # ms: gauged; ops, graph, graph, ops; again
    prog = load(BLOCKS, backend)
    moving = [prog.prepare_inputs([torch.randn(4, 2)])[0] for _ in range(7)]
    logs = [_runs(prog, x, 1)[0] for x in moving]
    # run 2 (an input moved: not the trial's) is gauged, the trial starts at run 3
    assert logs == [OP_BY_OP, GAUGED_OPS, TIMED_OPS, CAPTURED, TIMED_REPLAY, TIMED_REPLAY, TIMED_OPS] and prog.replays.staged == {0}
    z = prog.prepare_inputs([torch.randn(4, 2)])[0]
    assert _runs(prog, z, 3) == [OP_BY_OP] * 3
    assert prog.replays.mode() == (
        "op by op: runs op by op measured faster with staged inputs (2.000 ms replayed, 1.000 ms op by op), "
        "measured again once they settle"
    )
    assert _runs(prog, z, 8) == [OP_BY_OP, TIMED_OPS, CAPTURED, TIMED_REPLAY, TIMED_REPLAY, TIMED_OPS, REPLAY, REPLAY]
    assert prog.replays.staged == set()
    assert prog.replays.mode().startswith("replayed as a graph (1.000 ms replayed, 2.000 ms op by op;")


def test_lent_results_of_replays_are_the_graphs_own_buffers() -> None:
    """`run_prepared(lent=...)`: a replay hands the lent results out as the
    graph's buffers (no copy; `lends` says so, and the next replay writes
    them again), the others as copies; runs op by op hand out buffers the
    caller owns (`lends` is false)."""
    prog = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    outs = []
    for k in range(9):
        x.copy_(torch.full((4, 2), float(k)))
        (out,) = prog.run_prepared([x], owned_results=True, lent=range(1))
        (copied,) = prog.run_prepared([x], owned_results=True) if k == 8 else (None,)
        outs.append((out, prog.lends(out), x.clone()))
    assert [lends for _, lends, _ in outs] == [False, False, False, True, True, True, False, True, True]
    graph_buffer = prog.replays.captured.results[0]
    assert all(out is graph_buffer for out, lends, _ in outs if lends)
    torch.testing.assert_close(graph_buffer, outs[8][2])  # written again by the last replay
    assert copied is not graph_buffer and not prog.lends(copied)
    for out, lends, want in outs:
        if not lends:
            torch.testing.assert_close(out, want)


@pytest.mark.parametrize("via", ["run_prepared", "execute"])
def test_loaned_results_are_the_graphs_buffers_until_a_caller_holds_one(via: str) -> None:
    """`run_prepared(loan=True)`, and `CompiledProgram.execute(gather=False)`
    through it: a replay hands its results out as the graph's buffers (no
    copy: a one-op program of a 0.5 ms grouped GEMM on an H200 copied its
    138 MB result out in 64 us a call) while the caller lets go of them
    before the next run; a result still held at the next run keeps its
    values (its buffer leaves the cache and the graph is captured anew)
    and results are copies from then on."""
    from fuserc.runtime.evaluator.program import CompiledProgram

    prog = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    compiled = CompiledProgram.__new__(CompiledProgram)  # around the loaded program
    compiled.compiled, compiled.backend, compiled.env, compiled.program = SimpleNamespace(entry="main"), prog.backend, prog.backend.env, prog

    def run(k: float) -> torch.Tensor:
        x.copy_(torch.full((4, 2), k))
        if via == "execute":
            (out,) = compiled.execute([x], local=True, gather=False)
        else:
            (out,) = prog.run_prepared([x], owned_results=True, loan=True)
        torch.testing.assert_close(out, x)
        return out

    def graphs(out: torch.Tensor) -> bool:
        c = prog.replays.captured
        return c is not None and out.data_ptr() == c.results[0].data_ptr()

    loaned = []
    for k in range(9):
        loaned.append(graphs(run(float(k))))  # the result dropped before the next run
    assert loaned == [False, False, False, True, True, True, False, True, True]
    assert prog.loans.refused is None
    held = run(9.0)
    assert graphs(held)
    for k in range(10, 14):
        out = run(float(k))
        assert not graphs(out) and out.data_ptr() != held.data_ptr()
        torch.testing.assert_close(held, torch.full((4, 2), 9.0))
    assert prog.loans.refused == "a caller held results of one run into the next"
    assert prog.replays.captures == 2 and prog.replays.prefer_graph
    assert all(e.buffer.data_ptr() != held.data_ptr() for e in prog.cache)


RETURNS_A_SHARED_BUFFER = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %buf = hir.alloc "buf" : tensor<4x2xf32>
  hir.copy %x, %buf : tensor<4x2xf32>, tensor<4x2xf32>
  %h = hir.share %buf team = [0] : tensor<4x2xf32> -> !hir.handle
  %f = hir.barrier team = [0] backend = cuda_ipc : !hir.token
  hir.wait %f : !hir.token
  func.return %buf : tensor<4x2xf32>
}
"""


def test_a_lent_buffer_shared_with_peers_is_not_copied_op_by_op() -> None:
    """Run op by op, a result the program shares with peers stays in its
    cache (its registration with it): a caller that owns its results gets a
    copy, but at a `lent` position the buffer itself (`lends` says so; the
    next run writes it again), as a replay lends the graph's buffers."""
    prog = load(RETURNS_A_SHARED_BUFFER, CpuBackend(mpi_env()))
    (x,) = prog.prepare_inputs([torch.full((4, 2), 1.0)])
    (lent,) = prog.run_prepared([x], owned_results=True, lent=range(1))
    assert prog.lends(lent) and any(lent is e.buffer for e in prog.cache)
    torch.testing.assert_close(lent, torch.full((4, 2), 1.0))
    x.fill_(2.0)
    (copied,) = prog.run_prepared([x], owned_results=True)
    assert not prog.lends(lent) and not prog.lends(copied) and copied is not lent
    torch.testing.assert_close(lent, torch.full((4, 2), 2.0))  # the next run wrote it
    x.fill_(3.0)
    prog.run_prepared([x], owned_results=True)
    torch.testing.assert_close(copied, torch.full((4, 2), 2.0))


RETURNS_ITS_INPUT = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>},
        tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %out = hir.alloc "out" : tensor<4x2xf32>
  hir.copy %x, %out : tensor<4x2xf32>, tensor<4x2xf32>
  func.return %out, %x : tensor<4x2xf32>, tensor<4x2xf32>
}
"""


@pytest.mark.parametrize("moving", [False, True], ids=["same-input", "moving-inputs"])
def test_an_argument_returned_as_it_is_comes_back_as_the_callers_input(moving: bool) -> None:
    """A result that is an argument (lower-to-host-ir copies none): lent, it
    is this run's input itself, op by op and replayed alike, never the
    captured run's input nor the graph's staging buffer (moving inputs are
    staged), and not lent by the program; owned, it is a copy."""
    prog = load(RETURNS_ITS_INPUT, _Pretend(ops_s=2e-3, graph_s=1e-3))
    assert prog.result_args == {1: 0}
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    for k in range(9):
        if moving:
            (x,) = prog.prepare_inputs([torch.full((4, 2), float(k))])
        else:
            x.copy_(torch.full((4, 2), float(k)))
        out, arg = prog.run_prepared([x], owned_results=True, lent=range(2))
        assert arg is x and not prog.lends(arg), f"run {k}"
        torch.testing.assert_close(out, x)
    assert prog.replays.captured is not None and prog.replays.staged == ({0} if moving else set())
    out, arg = prog.run_prepared([x], owned_results=True)
    assert arg is not x and arg.data_ptr() != x.data_ptr()
    torch.testing.assert_close(arg, x)


def test_an_input_of_another_layout_runs_op_by_op_and_drops_the_graph() -> None:
    prog = load(BLOCKS, _Pretend())
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    t = torch.randn(2, 4).t()  # 4x2 at another stride (as run_prepared takes it): not staged
    _runs(prog, x, 7)
    assert _runs(prog, t, 3) == [OP_BY_OP, CAPTURED, REPLAY]
    assert _runs(prog, x, 2) == [OP_BY_OP, CAPTURED]
    assert prog.replays.staged == set() and prog.replays.captures == 3


def test_a_run_with_blockers_is_never_captured() -> None:
    prog = load(BLOCKS, _Pretend(blockers=("a fence with new flags",)))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 5) == [OP_BY_OP] * 5
    assert prog.replays.blockers == ["a fence with new flags"]
    assert prog.replays.mode() == "op by op (a fence with new flags)"


def test_a_buffer_shared_for_one_run_blocks_capture() -> None:
    prog = load(SHARES_ITS_INPUT, _Pretend())
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 5) == [OP_BY_OP] * 5
    assert prog.replays.blockers == ["a buffer from outside the allocation cache shared for one run"]


def test_a_failed_capture_runs_op_by_op_and_turns_graphs_off() -> None:
    prog = load(BLOCKS, _Pretend(fail=True))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    _runs(prog, x, 3)
    prog.backend.log.clear()
    with pytest.warns(RuntimeWarning, match="capture broke"):
        (out,) = prog.run_prepared([x])
    torch.testing.assert_close(out, x)
    assert prog.backend.log == ["begin", "capture", "end"] + OP_BY_OP
    assert "capture broke" in (prog.replays.off or "")
    assert _runs(prog, x, 2) == [OP_BY_OP] * 2


def test_traced_runs_run_op_by_op() -> None:
    prog = load(BLOCKS, _Pretend())
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    _runs(prog, x, 7)
    with tracing(prog) as tracer:
        assert _runs(prog, x, 1) == [OP_BY_OP]
    assert any(e["name"] == "hir.get" for e in tracer.events())
    assert _runs(prog, x, 1) == [REPLAY]  # the graph is still the inputs'


def test_close_forgets_the_program() -> None:
    backend = _Pretend()
    prog = load(BLOCKS, backend)
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    _runs(prog, x, 5)
    assert prog.replays.captured is not None
    prog.close()
    assert backend.forgotten == [prog._owner] and prog.replays.captured is None


def test_graphs_still_held_at_exit_are_released_first() -> None:
    """A program never closed (a fuserc.torch.function alive at exit) drops
    its graph in an exit handler, before the interpreter tears down what
    the graph's kernels use."""
    from fuserc.runtime.evaluator import graphs

    prog = load(BLOCKS, _Pretend())
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    _runs(prog, x, 6)
    assert prog.replays.captured is not None and prog.replays in graphs._HOLDING
    graphs._release_at_exit()
    assert prog.replays.captured is None and not graphs._HOLDING
    assert _runs(prog, x, 1) == [OP_BY_OP]  # (a later run still runs)


def test_the_cpu_backend_runs_op_by_op() -> None:
    prog = load(BLOCKS)
    assert prog.replays.off
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    for _ in range(3):
        torch.testing.assert_close(prog.run_prepared([x])[0], x)
    assert prog.replays.captures == 0


def test_input_key_is_where_the_inputs_lie() -> None:
    a = torch.zeros(4, 4)
    assert input_key([a, None]) == input_key([a, None])
    assert input_key([a]) != input_key([a.t()])  # strides
    assert input_key([a]) != input_key([a.view(16)])  # shape
    assert input_key([a]) != input_key([a[1:]])  # address
    assert input_key([a]) != input_key([a.view(torch.int32)])  # dtype


def test_env_sets_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    assert graphs_mode() == "auto"
    for off in ("0", "off", "false"):
        monkeypatch.setenv(GRAPHS_ENV, off)
        assert graphs_mode() == "off" and not graphs_enabled()
        assert cuda._graphs_unavailable() == f"{GRAPHS_ENV}=0"
    monkeypatch.setenv(GRAPHS_ENV, "1")
    assert graphs_mode() == "auto" and graphs_enabled()


def test_always_replays_from_the_second_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GRAPHS_ENV, "always")
    prog = load(BLOCKS, _Pretend(ops_s=1e-3, graph_s=2e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 4) == [OP_BY_OP, CAPTURED, REPLAY, REPLAY]
    assert prog.replays.mode() == f"replayed as a graph ({GRAPHS_ENV}=always; 1 capture(s), 2 replays)"


# ---- the cuda backend's fences, on fakes -------------------------------------------


class _Comms:
    """Records the flags each cuda_ipc fence asks for."""

    capturing = False

    def __init__(self) -> None:
        self.fences: list[tuple[Any, int] | None] = []

    def flush(self) -> None:
        pass

    def ipc_fence(self, team: Any, stream: Any, indexed: tuple[Any, int] | None) -> tuple[Any, bool]:
        self.fences.append(indexed)
        return object(), indexed is not None

    def forget_owner(self, owner: Any) -> None:
        pass


def _fake_cuda() -> Any:
    b = object.__new__(cuda.CudaBackend)
    b.comms = _Comms()
    b._current = SimpleNamespace(cupy=None)
    b._activate = lambda stream: None
    b.graphs_unavailable = None
    b._owner, b._fences, b._fences_per_run, b._blockers, b._capturing = None, {}, {}, [], False
    return b


def _run(b: Any, owner: Any, fences: int, team: tuple[int, ...] = (0, 1)) -> list[str]:
    b.begin_run(owner)
    for _ in range(fences):
        b.team_barrier(team, "cuda_ipc")
    return b.end_run()


def test_fences_of_a_run_use_indexed_flags() -> None:
    b = _fake_cuda()
    for _ in range(2):
        b.comms.fences.clear()
        assert _run(b, "p", 3) == []
        assert b.comms.fences == [("p", 0), ("p", 1), ("p", 2)]


def test_one_fence_per_run_uses_epoch_flags_after_the_first_run() -> None:
    """Indexed flags need two fences per run (SignalPad): a program with one
    uses them in its first run only, then epoch flags, which a graph cannot
    repeat."""
    b = _fake_cuda()
    assert _run(b, "p", 1) == [] and b.comms.fences == [("p", 0)]
    blockers = _run(b, "p", 1)
    assert b.comms.fences[-1] is None
    assert blockers == ["a cuda_ipc fence on team [0, 1] with new flag values every run (one fence per run on it)"]
    assert _run(b, "q", 2) == []  # another program keeps its own count
    b.forget_owner("p")
    assert _run(b, "p", 1) == [] and b.comms.fences[-1] == ("p", 0)  # a closed program's count is forgotten


def test_fences_outside_a_run_and_nccl_fences() -> None:
    b = _fake_cuda()
    b.comms.fence = lambda team, stream: object()
    b.team_barrier((0, 1), "cuda_ipc")
    assert b.comms.fences == [None]  # no program: epoch flags
    assert _run(b, "p", 0) == []
    b.begin_run("p")
    b.team_barrier((0, 1), "nccl")  # an NCCL fence repeats as it is
    assert b.end_run() == [] and b.comms.fences == [None]


def test_indexed_flag_layout_and_slots() -> None:
    pad = SignalPad(handle=None, me=1, size=4, ops=None)  # type: ignore[arg-type]
    assert SignalPad.words(4) == 4 * (1 + FENCE_SLOTS * INDEXED_FENCES)
    assert [pad.offset(p) for p in range(4)] == [0, 4, 8, 12]  # epoch words
    assert pad.offset(2, slot=0, index=0) == 4 * (4 + 2)
    assert pad.offset(3, slot=1, index=5) == 4 * ((1 + INDEXED_FENCES + 5) * 4 + 3)
    last = pad.offset(3, slot=FENCE_SLOTS - 1, index=INDEXED_FENCES - 1)
    assert last == 4 * (SignalPad.words(4) - 1)
    owners = [f"p{i}" for i in range(FENCE_SLOTS)]
    assert [pad.slot(o) for o in owners] == list(range(FENCE_SLOTS))
    assert pad.slot("late") is None and pad.slot("p3") == 3
    comms = object.__new__(Communicators)
    comms._pads = {(0, 1, 2, 3): pad, (0, 1): None}
    comms.forget_owner("p3")
    assert pad.slot("late") == 3


def _gelu_function(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """fuserc.torch's gelu(x @ w) on the cpu, its programs on pretend
    graphs (replays run the captured body again) from the second run."""
    import fuserc.torch
    from fuserc.api import FusionDefinition

    fd = FusionDefinition()
    fd.sched.mesh("m", [1])
    x, w = fd.define_tensor([8, 16]), fd.define_tensor([16, 8])
    fd.add_output(fd.ops.gelu(x @ w))
    monkeypatch.setenv(GRAPHS_ENV, "always")
    f = fuserc.torch.function(fd, backend="cpu")
    loaded = f._load([])
    loaded.backend = _Pretend()
    return f, loaded


def test_saved_tensors_of_replayed_forwards_are_lent_until_the_next_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """fuserc.torch: the saved tensors of a replayed @main_fwd are its
    graph's buffers (not copies), read in place by the backward; a forward
    that runs again before an earlier one's backward (two micro-batches
    accumulating gradients) first copies the earlier one's out. Each step's
    gradients against torch.autograd."""
    import torch.nn.functional as F

    f, loaded = _gelu_function(monkeypatch)
    gen = torch.Generator().manual_seed(0)
    w_ = torch.randn(16, 8, generator=gen).requires_grad_(True)
    batches = [torch.randn(8, 16, generator=gen).requires_grad_(True) for _ in range(2)]
    for step in range(4):
        w_.grad = None
        ya = f(batches[0], w_)
        saved_a = ya.grad_fn.saved
        lent = [v for v in saved_a.values if loaded.programs["main_fwd"].lends(v)]
        assert bool(lent) == (step > 0), f"step {step}: lent {len(lent)}"  # run 1 runs op by op
        before = [v.clone() for v in saved_a.values]
        yb = f(batches[1], w_)  # the forward again, before ya's backward
        assert not any(loaded.programs["main_fwd"].lends(v) for v in saved_a.values)
        for v, b in zip(saved_a.values, before):
            torch.testing.assert_close(v, b)
        (ya.sum() + (yb * yb).sum()).backward()
        ref = w_.detach().clone().requires_grad_(True)
        refs = [b.detach().clone().requires_grad_(True) for b in batches]
        (F.gelu(refs[0] @ ref).sum() + F.gelu(refs[1] @ ref).pow(2).sum()).backward()
        torch.testing.assert_close(w_.grad, ref.grad)
        for b, r in zip(batches, refs):
            torch.testing.assert_close(b.grad, r.grad)
            b.grad = None
        assert not loaded.lent
    assert f.runs()["main_fwd"].startswith("replayed as a graph")
    assert f.settled()  # (replays from the second run under `always`)
    f.close()



def test_gradients_of_replayed_backwards_are_loaned_while_zero_grad_drops_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """fuserc.torch: the gradients of a replayed @main_bwd are its graph's
    buffers (AccumulateGrad makes them `.grad` as they are, no copy) while
    each step sets `.grad` to None first; gradients accumulated over two
    backwards without zeroing are right (the held one becomes the caller's
    and later gradients are copies). Each step against torch.autograd."""
    import torch.nn.functional as F

    f, loaded = _gelu_function(monkeypatch)
    gen = torch.Generator().manual_seed(0)
    w_ = torch.randn(16, 8, generator=gen).requires_grad_(True)
    ref = w_.detach().clone().requires_grad_(True)
    x_ = torch.randn(8, 16, generator=gen)
    bwd = None

    def step(k: int, zero: bool) -> bool:
        """One step (.grad set to None first, or accumulated); whether w's
        gradient is a buffer of @main_bwd's graph."""
        nonlocal bwd
        if zero:
            w_.grad = ref.grad = None
        f(x_ * k, w_).pow(2).sum().backward()
        F.gelu((x_ * k) @ ref).pow(2).sum().backward()
        torch.testing.assert_close(w_.grad, ref.grad)
        bwd = loaded.programs["main_bwd"]
        captured = bwd.replays.captured
        return captured is not None and any(w_.grad.data_ptr() == r.data_ptr() for r in captured.results)

    # which of the first steps replay depends on where the allocator puts each
    # step's inputs (a moved input is staged, then read in place once settled)
    k = 1
    while not step(k, zero=True):
        k += 1
        assert k < 10, "no gradient was loaned"
    assert bwd.loans.refused is None
    assert not step(k + 1, zero=False)  # accumulated into the loaned buffer, now the caller's
    assert not step(k + 2, zero=False)
    assert f.runs()["main_bwd"].endswith("; results copied out (a caller held results of one run into the next)"), f.runs()
    f.close()

def test_cuda_copy_all_copies_every_pair() -> None:
    """The cuda backend's copy-out of a replay's results: tensors under
    BATCHED_BELOW bytes in one multi-tensor copy, the others one by one
    (run here on CPU tensors, which torch's copies take too)."""
    from types import SimpleNamespace

    from fuserc.runtime.backends.cuda import BATCHED_BELOW, CudaBackend

    srcs = [torch.randn(4), torch.randn(BATCHED_BELOW // 4 + 1), torch.randn(3, 2).t(), torch.arange(5)]
    dsts = [torch.empty(s.shape, dtype=s.dtype) for s in srcs]
    CudaBackend.copy_all(SimpleNamespace(_begin=lambda: None), srcs, dsts)  # type: ignore[arg-type]
    for s, d in zip(srcs, dsts, strict=True):
        assert torch.equal(s, d)


def test_timed_runs_are_issued_without_garbage_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection in the gauged run (tens of ms in a process holding
    a model's IR) would count as the host's time and could tip the verdict:
    the collector is held off while a timed run is issued, and only then."""
    import gc

    from fuserc.runtime.evaluator import evaluator

    assert gc.isenabled()
    with evaluator._no_collection(True):
        assert not gc.isenabled()
    assert gc.isenabled()
    with evaluator._no_collection(False):
        assert gc.isenabled()
    seen: list[bool] = []
    real = evaluator._no_collection
    monkeypatch.setattr(evaluator, "_no_collection", lambda timed: seen.append(timed) or real(timed))
    prog = load(BLOCKS, _Pretend(ops_s=2e-3, graph_s=1e-3))
    (x,) = prog.prepare_inputs([torch.randn(4, 2)])
    assert _runs(prog, x, 3) == TRIAL[:3]
    assert seen == [False, True, True]  # run 1 untimed; run 2 gauged, run 3 the trial's first

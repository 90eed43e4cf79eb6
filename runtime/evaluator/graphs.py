"""Replaying a program's run as a captured graph (CUDA graphs on cuda).

Every run of a host program with the same input buffers enqueues the same
device work: the evaluator's decisions (loops, rank conditionals, views,
cached buffers, streams) depend on nothing else. The host's share of a run
(Python issuing each op: the GPU idles until the first kernel, and small
chunks wait for the host) can then be paid once: the run is captured as a
graph, and later runs launch it whole.

A graph is not always faster: its branches run on streams the driver picks,
which measured slower than the program's own streams for the copy-engine
AllGather ring. So the choice is measured, per program, as GEMMs are
chosen per shape (cuda_gemm.py):
- run 1 runs op by op (first-use costs: GEMM choice, kernel compilation,
  memory handles) and tells what in it a graph could not repeat
  (`Backend.end_run`: a region run op by op with torch, a fence whose flag
  values change every run, a buffer shared for one run only);
- the next run op by op after the first with every generated kernel in
  (which launches the last ones for the first time: a first launch loads
  the kernel and may time its configurations) is gauged: if the
  host issued it in less than DEVICE_BOUND (0.9) of the device's time for it,
  the device is the bottleneck (the device's time alone: the gauged run
  starts behind a hold on the device, `hold_for`, so that the host has
  issued it whole before the device starts, and the device's span counts
  no wait for the host) and a graph could only spare host time the
  device never waits for (in a training step the host runs ahead of it),
  while the graph's memory pool would hold the run's buffers between runs
  and each staged input a copy: such a program always runs op by op (a
  whole model's forward and backward). Programs that run one after the
  other in a step (`fuserc.torch`'s forward and its backward: `Gauges`) are
  judged together, by their sums, as the host's lead carries over from one
  to the next; each of those is gauged twice, and its run the host issued
  fastest counts (`Gauges.RUNS`: noise only adds to the host's time).
  Where the host took longer to issue the gauged run than the hold lasted,
  it may have waited for the device (CUDA queues about a thousand
  launches; a longer run issued behind the hold blocks the host until the
  device takes them), and the gauge cannot tell: the program runs op by
  op too; so it does where its graphs (those judged with it) would hold
  more than `GRAPH_MEMORY` of the device's memory between runs (every
  buffer of a captured run stays: a whole model's forward keeps a step's
  activations). Else the trial follows (the gauged run is none of it: held,
  its span has none of the host's latency the trial's runs count);
- runs 3 to 7 (4 to 8 after two gauges; with the same inputs: the same
  addresses, shapes, strides and dtypes, since a graph reads them where
  they were) are the trial: run
  3 timed op by op, run 4 captured and replayed untimed (a graph's first
  replay pays once for its upload to the device and for NCCL's
  registration of its buffers: timing it, the GPT layer's forward on 4
  H200s measured 4.1-7.2 ms replayed, against 2.4 ms in later replays, and
  op by op won the trial), runs 5 and 6 timed replays, run 7 timed op by
  op;
- from run 8 on, the faster way (by the mean of each, but a run that
  stalled: `STALL`; the replays only where at least `GRAPH_GAIN` faster)
  is kept for every run
  of the program: replays (re-captured once whenever the inputs change) or
  runs op by op.
An input that moves from run to run with the same layout is staged (see
`Replays.staged`): each replay first copies it into the graph's own
buffer. One that then keeps its address for SETTLED runs in a row (a
training step's saved tensors once the forward replays into the same
buffers) is read in place again, with one capture anew; and a trial that
found replays slower while inputs were staged is run once more then.
Each timed run starts on an idle device (the host waits for it first), so
that its time counts the host's latency before the first kernel and any
wait for the host inside the run, what a caller that synchronizes between
runs sees; a caller running back to back hides some of it, but a graph is
then no slower either, except where its streams are, which the trial
sees too. Timing marks are events on the device. A traced run, or one with an injected failure, runs op by op.

Ranks need not agree: a replay enqueues exactly what a run op by op would,
fences included (their flags are the same every run). A capture that fails
(a CUDA error while capturing) turns graphs off for the program, with a
warning, and the run goes on op by op. `FUSERC_CUDA_GRAPHS=always` replays
from the second run without measuring; `FUSERC_CUDA_GRAPHS=0` never.
"""

from __future__ import annotations

import atexit
import os
import warnings
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

GRAPHS_ENV = "FUSERC_CUDA_GRAPHS"
OPS, CAPTURE, REPLAY, GRAPH = "ops", "capture", "replay", "graph"

InputKey = tuple[Hashable, ...]


AUTO, ALWAYS, OFF = "auto", "always", "off"


def graphs_mode() -> str:
    """$FUSERC_CUDA_GRAPHS: `auto` (the default: replay where measured
    faster), `always` (replay without measuring), or `0`/`off` (never)."""
    value = os.environ.get(GRAPHS_ENV, AUTO).strip().lower()
    if value in ("0", "off", "false", "no"):
        return OFF
    return ALWAYS if value == ALWAYS else AUTO


def graphs_enabled() -> bool:
    return graphs_mode() != OFF


def input_key(inputs: Sequence[Any]) -> InputKey:
    """What a captured run depends on in its inputs: where each one lies."""
    key: list[Hashable] = []
    for t in inputs:
        if t is None:
            key.append(None)
        else:
            key.append((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, str(t.device)))
    return tuple(key)


@dataclass
class Captured:
    """A captured run: its graph, and what the run returned (the program's
    cached result buffers, which every replay writes again)."""

    key: InputKey
    graph: Any
    results: list[Any]
    flops: int
    staged: dict[int, Any] = field(default_factory=dict)
    """Input position -> the buffer the graph reads in its place: the
    caller's input is copied into it before each replay (`Replays.staged`)."""


SETTLED = 3
"""Runs in a row a staged input must keep its address to be read in place
again (once: if it moves after that, it stays staged)."""

TRIAL = (OPS, GRAPH, GRAPH, OPS)
"""The order of the trial's timed runs: each way first and last in turn, so
that a drift of the device's speed over the trial (a GPU heating up under
long GEMMs) weighs on both ways alike when their means are compared."""

DEVICE_BOUND = 0.9
"""A run op by op whose host issued it in less than this share of the
device's time for it keeps the device busy by itself (see the module):
from an idle device the host's head start is its lead. At 0.5, the
12-layer model's forward on one H200 (the host ahead, 25.5 ms op by op from
an idle device, 24.1 ms replayed) was still tried and kept as a graph, and
its backward too: 95.7 ms a step with 30.5 GiB reserved, against 93.2 ms
and 6.7 GiB at the peak op by op (eager PyTorch: 89.6 ms, 7.6 GiB)."""

GRAPH_MEMORY = 0.05
"""The share of the device's memory a program's graphs may hold between
runs (every buffer of a captured run stays: its results, its memory
blocks; `holds`), summed over the programs judged together. Beyond it the
program runs op by op, where a graph can only spare host time: the
12-layer GPT's forward and backward (15.7 GiB of buffers on one H200)
replayed peaked at 22.6 GiB, 2.9x eager PyTorch's 7.8, for a step as fast
as op by op (85.7 and 86.1 ms); the DeepSeek-like MoE layer's (3.3 GiB)
ran 1.1-1.4x faster replayed."""

HOLD_PER_HOST = 2.0
HOLD_MAX_S = 0.5
"""The hold before a gauged run (`hold_for`): twice the host's time for
the run before it, at most half a second. Without it the device's span of
a run from an idle device counts its waits for the host, and a program
whose host barely keeps up looks device-bound: the DeepSeek-like MoE
layer's forward+backward on one H200 was gauged at 7.97 ms of host against
8.93 of device span, run op by op at 9.75 ms, where replays had taken 7.17."""


def hold_for(host_s: float | None) -> float:
    """Seconds the device waits before a gauged run, given the host's time
    for the run op by op before it (None: not measured)."""
    return HOLD_MAX_S if host_s is None else min(HOLD_MAX_S, HOLD_PER_HOST * host_s)


STALL = 2.0
"""A trial run this many times as long as the other run of its way stalled
(a kernel build in the background, the host descheduled): not the
device's speed, so that way's faster run counts alone. One such stall
among the GPT layer's replays (8 ms against 1.9) once kept its forward
running op by op at 2.9 ms instead of 1.9."""


GRAPH_GAIN = 0.05
"""How much faster than op by op the trial must find the replays to keep
them: a graph's pool holds its run's buffers between runs (a training
step's forward replayed held the 24-layer model's activations: a peak of
2.5x eager's), which a gain inside the trial's noise does not pay for
(that forward measured 67.6 ms replayed against 67.9 op by op)."""


def _typical(spans: list[float]) -> float:
    """A way's time in the trial: the mean of its runs, or the fastest where
    another stalled (`STALL`)."""
    fastest = min(spans)
    return fastest if max(spans) > STALL * fastest else sum(spans) / len(spans)


Mark = Any
"""A point in the device's work (`Backend.mark`)."""


class Replays:
    """When a program's runs are captured and replayed (see the module)."""

    def __init__(self, why_not: str | None, span: Callable[[Mark, Mark], float], holds: int = 0, memory: int | None = None):
        self.off = why_not
        """Why runs are not replayed (None: they may be)."""
        self._span = span
        self.captured: Captured | None = None
        self.candidate: InputKey | None = None
        """The inputs of the last run op by op, when a graph could repeat it."""
        self.blockers: list[str] = []
        """What the last run op by op had that a graph could not repeat."""
        self.samples: dict[str, list[tuple[Mark, Mark]]] = {OPS: [], GRAPH: []}
        always = graphs_mode() == ALWAYS
        self.prefer_graph: bool | None = True if always else None
        """Whether replays measured faster than runs op by op (None: not yet)."""
        self.verdict = f"{GRAPHS_ENV}={ALWAYS}" if always else ""
        """The measured times behind `prefer_graph`."""
        self.gauged = ""
        """The gauge's figures (the host's time and the device's), where a
        program was gauged: shown with a graph kept after the trial."""
        self.replays = 0
        self.captures = 0
        self.staged: set[int] = set()
        """Input positions read from a buffer of the graph's own, into
        which each replay first copies the caller's input: those seen at
        another address with the same layout from one run to the next (a
        training step's saved activations and cotangents come from the
        caching allocator, not always at the same place). Their address is
        then no part of the key, so that such inputs still replay (at the
        price of one copy each) instead of capturing anew every run."""
        self._pending: InputKey | None = None
        self._seen: InputKey | None = None
        """The full key (addresses included) of the inputs the kept graph,
        or else the candidate, was made for."""
        self._previous: InputKey | None = None
        """The full key of the last run's inputs."""
        self._still: dict[int, int] = {}
        """Staged position -> runs in a row it kept its address."""
        self._settled: set[int] = set()
        """Positions staged once and then read in place again."""
        self._retrial = False
        """Replays measured slower while inputs were staged: the trial is
        run again once they settle (runs go op by op until then)."""
        self.judged = always
        """Whether a run op by op was gauged and judged (`DEVICE_BOUND`)."""
        self.gauges: Gauges | None = None
        """The programs judged with this one (None: alone)."""
        self._gauges: list[tuple[float | None, Mark, Mark, float | None]] = []  # (host, start, end, hold) of each gauged run
        self.gauge_runs = 1
        """Runs gauged before the verdict, which takes the one the host
        issued fastest (`Gauges.RUNS` for a training step's programs)."""
        self._waiting = False  # gauged, waiting for the others of `gauges` to be gauged too
        self.holds = holds
        """Bytes a graph of the program would hold between runs (its buffers)."""
        self.room = None if memory is None else int(GRAPH_MEMORY * memory)
        """Bytes its graphs may hold (`GRAPH_MEMORY` of the device's `memory`; None: no bound)."""

    def key(self, inputs: Sequence[Any], plain: bool) -> InputKey | None:
        """The run's key, or None when it must run op by op (graphs off, or
        not a `plain` run: traced, or failing on purpose). An input found at
        another address than in the last run kept or captured, with the same
        layout, is staged from now on."""
        if self.off is not None or not plain:
            return None
        full = input_key(inputs)
        seen = self._seen
        if seen is not None and len(seen) == len(full):
            for i, (a, b) in enumerate(zip(seen, full)):
                if a is not None and b is not None and a[0] != b[0] and a[1:] == b[1:]:
                    self.staged.add(i)
        self._settle(full)
        self._previous = self._pending = full
        return tuple(e[1:] if e is not None and i in self.staged else e for i, e in enumerate(full))

    def _settle(self, full: InputKey) -> None:
        """Read in place again each staged input that kept its address for
        SETTLED runs (the key then names its address: a graph made anew)."""
        prev = self._previous
        if prev is None or len(prev) != len(full):
            return
        for i in sorted(self.staged - self._settled):
            a, b = prev[i], full[i]
            self._still[i] = self._still.get(i, 0) + 1 if a is not None and b is not None and a[0] == b[0] else 0
            if self._still[i] >= SETTLED:
                self.staged.discard(i)
                self._settled.add(i)
                del self._still[i]
                if self._seen is not None:  # its new place is not a move
                    self._seen = tuple(full[j] if j == i else e for j, e in enumerate(self._seen))
                if self._retrial:
                    self._retrial = False
                    self.prefer_graph = None
                    self.samples = {OPS: [], GRAPH: []}

    def next(self, key: InputKey | None, ready: bool = True) -> tuple[str, bool]:
        """What a run with `key` does (REPLAY, CAPTURE or OPS), and whether
        it is timed (gauged, or one of the trial's runs); `ready`: the run
        is past the program's first and its generated kernels are in (a
        run may be gauged)."""
        self._decide()
        if key is None or self.off is not None:
            return OPS, False
        if self.captured is not None and self.captured.key != key:
            self.captured = None  # other inputs: a graph for them is made anew
        warm = self.candidate == key  # the last run op by op had these inputs
        if self.prefer_graph is False:  # measured slower while staging: a retrial waits
            return OPS, False
        if self.prefer_graph is not None:  # decided (or always): replay
            return (REPLAY, False) if self.captured is not None else (CAPTURE if warm else OPS, False)
        if not self.judged:  # gauged where a graph could repeat the last run
            return OPS, ready and not self.blockers and not self._waiting
        wanted = TRIAL[len(self.samples[OPS]) + len(self.samples[GRAPH])]
        if wanted == OPS:
            return OPS, warm  # a first run with new inputs warms up untimed
        if self.captured is not None:
            return REPLAY, True
        return (CAPTURE if warm else OPS), False  # the capture's replay is untimed (the module says why)

    def sample(self, kind: str, start: Mark, end: Mark, host: float | None = None, hold: float | None = None) -> None:
        """A timed run from mark `start` to `end`; `host`: the seconds the
        host took to issue it (runs op by op); `hold`: the seconds the
        device waited before it (the gauge)."""
        if kind == OPS and not self.judged:  # the gauge (behind a hold: not the trial's)
            self._gauges.append((host, start, end, hold))
            return
        self.samples[kind].append((start, end))

    def _judge(self) -> None:
        """The gauged runs' verdict (with the others of `gauges`, once all
        are gauged), on the run the host issued fastest: a device-bound
        program runs op by op."""
        host, start, end, hold = min(self._gauges, key=lambda g: float("inf") if g[0] is None else g[0])
        self._gauges = []
        device = self._span(start, end)
        waited = host is not None and hold is not None and host >= hold
        if self.gauges is None:
            self.verdict_on(host, device, f"the host issued a run in {_ms(host)}, the device ran it in {_ms(device)}", waited, self.holds)
        else:
            self._waiting = True
            self.gauges.note(self, host, device, waited)

    def verdict_on(self, host: float | None, device: float, figures: str, waited: bool = False, holds: int = 0) -> None:
        """Judged on these gauged times: op by op from now on where the
        device is the bottleneck, or where the gauge cannot tell (`waited`:
        the host was still issuing a gauged run when the device's hold
        ended, so it may have waited for the device: CUDA queues about a
        thousand launches, and a run of more, issued behind the hold, blocks
        the host until the device takes them; a model's backward can
        have that many), or where its graphs would hold more than the
        program may (`holds` bytes, `room`), else on to the trial."""
        self.judged, self._waiting = True, False
        self.gauged = figures
        if waited:
            why = f"the gauge could not tell ({figures}; the host was still issuing when the device's hold ended, and may have waited for the device)"
        elif host is not None and host < DEVICE_BOUND * device:
            why = f"the device is the bottleneck ({figures})"
        elif self.room is not None and holds > self.room:
            why = (f"its graphs would hold {holds / 2**30:.1f} GiB between runs, more than {GRAPH_MEMORY:.0%} of the device's memory "
                   f"(the host is not ahead: {figures})")  # fmt: skip
        else:
            return
        self.prefer_graph = False
        self.verdict = figures
        self.off = why
        self.samples = {OPS: [], GRAPH: []}
        self.drop()

    def _decide(self) -> None:
        """Once the trial's runs are timed: keep the faster way (`_typical`
        of each) for every later run of the program."""
        if len(self._gauges) >= self.gauge_runs:
            self._judge()
        ops, graph = self.samples[OPS], self.samples[GRAPH]
        if self.prefer_graph is not None or len(ops) + len(graph) < len(TRIAL):
            return
        t_ops = _typical([self._span(a, b) for a, b in ops])
        t_graph = _typical([self._span(a, b) for a, b in graph])
        self.prefer_graph = t_graph < (1.0 - GRAPH_GAIN) * t_ops
        self.samples = {OPS: [], GRAPH: []}
        self.verdict = f"{t_graph * 1e3:.3f} ms replayed, {t_ops * 1e3:.3f} ms op by op"
        if not self.prefer_graph:
            self._retrial = bool(self.staged - self._settled)
            if not self._retrial:
                how = "measured faster" if t_ops <= t_graph else f"measured less than {GRAPH_GAIN:.0%} slower than the replays"
                self.off = f"runs op by op {how} ({self.verdict})"
            self.drop()

    def ran(self, key: InputKey | None, blockers: list[str]) -> None:
        """A run op by op ended."""
        self.blockers = blockers
        self.candidate = key if not blockers else None
        if self.candidate is not None and self.captured is None:
            self._seen = self._pending

    def keep(self, key: InputKey, graph: Any, results: list[Any], flops: int, staged: dict[int, Any] | None = None) -> Captured:
        self.captures += 1
        self.captured = Captured(key, graph, results, flops, dict(staged or {}))
        self._seen = self._pending
        _holding(self)
        return self.captured

    def failed(self, error: BaseException, where: str) -> None:
        """A capture failed: no more graphs for this program."""
        self.off = f"the capture of a run failed: {error}"
        self.drop()
        warnings.warn(f"{where}: runs are not replayed as graphs ({self.off})", RuntimeWarning, stacklevel=3)

    def settled(self) -> bool:
        """Whether the way runs go is decided: op by op for good, or the
        trial kept the replays (a retrial waiting for staged inputs to
        settle is not)."""
        return self.off is not None or self.prefer_graph is True

    def mode(self) -> str:
        """How the program's runs go now, in words."""
        if self.prefer_graph:
            staged = f", {len(self.staged)} input(s) staged" if self.staged else ""
            gauged = f"; gauged: {self.gauged}" if self.gauged else ""
            return f"replayed as a graph ({self.verdict}; {self.captures} capture(s), {self.replays} replays{staged}{gauged})"
        if self.off is not None:
            return f"op by op: {self.off}"
        if self._retrial:
            return f"op by op: runs op by op measured faster with staged inputs ({self.verdict}), measured again once they settle"
        return "op by op" + (f" ({'; '.join(self.blockers)})" if self.blockers else "")

    def drop(self) -> None:
        """Forget the graph and the inputs it could be captured for."""
        self.captured = None
        self.candidate = None
        self._seen = None


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.3f} ms"


class Gauges:
    """Programs that run one after the other, as a training step runs a
    forward then its backward: each is judged (`DEVICE_BOUND`) on the sums
    of all their gauged runs, once every one is gauged, since the host's
    lead over the device carries over from one program to the next (a
    backward whose host nearly keeps up with its device alone still never
    starves it after a forward the device is busy with)."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self._members: dict[int, tuple[str, Replays]] = {}
        self._figures: dict[int, tuple[float | None, float, bool]] = {}
        """Each member's gauged host and device times, and whether its gauge could not tell."""

    RUNS = 2
    """Runs of each member gauged, the one its host issued fastest taken:
    noise only adds to the host's time (a build worker ending, the kernel
    cache written), and a step's graphs hold its buffers between steps.
    One gauge of the 12-layer model's forward and backward on one H200
    read 90.1 ms of host against 74.6 of device where the run before had
    read 52.3 against 75.1: the trial followed, and the graphs it kept
    held 22.6 GB, 2.9x eager's peak."""

    def join(self, name: str, replays: Replays) -> None:
        self._members[id(replays)] = (name, replays)
        replays.gauges = self
        replays.gauge_runs = self.RUNS

    def note(self, replays: Replays, host: float | None, device: float, waited: bool = False) -> None:
        self._figures[id(replays)] = (host, device, waited)
        if len(self._figures) < len(self.names) or len(self._members) < len(self.names):
            return
        hosts = [h for h, _, _ in self._figures.values()]
        host = None if any(h is None for h in hosts) else sum(hosts)  # type: ignore[arg-type]
        device = sum(d for _, d, _ in self._figures.values())
        waited = any(w for _, _, w in self._figures.values())
        names = " and ".join(f"@{n}" for n, _ in self._members.values())
        figures = f"the host issued {names} in {_ms(host)}, the device ran them in {_ms(device)}"
        holds = sum(member.holds for _, member in self._members.values())
        for _, member in self._members.values():
            member.verdict_on(host, device, figures, waited, holds)


_HOLDING: weakref.WeakSet[Replays] = weakref.WeakSet()
"""Replays that keep a captured graph; released at exit (`_release_at_exit`)."""


_registered = False
"""Whether `_release_at_exit` is registered: at the first graph kept, after
torch and CuPy registered theirs, so that it runs before them."""


def _holding(replays: Replays) -> None:
    global _registered
    if not _registered:
        atexit.register(_release_at_exit)
        _registered = True
    _HOLDING.add(replays)


def _release_at_exit() -> None:
    """Drop every captured graph still held (a program its caller never
    closed: a `fuserc.torch.function` alive at exit) while CUDA and the
    communicators its kernels use are still up, not in the interpreter's
    teardown after them. Local: no rank waits for another."""
    for replays in list(_HOLDING):
        replays.drop()
    _HOLDING.clear()


def _uses(storage: Any) -> int:
    """How many tensors (and storage objects) hold `storage` now."""
    import torch

    return torch._C._storage_Use_Count(storage._cdata)


class Loans:
    """Results of a replay handed to the caller as the graph's own buffers,
    not copies, while the caller lets go of them before the next run.

    A training step's gradients are the case: copying them out of the
    graph (the GPT layer's weight gradients, 100 MiB a rank at hidden 4096
    and 400 MiB at 8192) costs 0.07 and 0.25 ms a step on 4 H200s, and the
    step that follows `zero_grad()` (set_to_none, torch's default) has
    dropped them before the next backward. Each loaned result is a new
    tensor on the graph's storage (`detach`), so that torch's AccumulateGrad
    takes it as the parameter's `.grad` instead of cloning it. At the start
    of the next run (`held`) the program counts who still holds each loaned
    storage: more than it held itself when it lent them means the caller
    kept one (a `.grad` accumulated over micro-batches, a list of earlier
    results); those buffers are then the caller's alone (the program drops
    them and the graph that writes them) and the program copies its results
    out from then on (`refused` says why)."""

    def __init__(self) -> None:
        self.refused: str | None = None
        self._out: list[tuple[Any, int]] = []  # (storage, its holders when lent, the loan's not counted)

    def hand_out(self, results: Sequence[Any], which: Sequence[int]) -> list[Any]:
        """`results` with those at `which` (the graph's buffers) loaned."""
        storages: dict[int, Any] = {}
        for i in which:
            s = results[i].untyped_storage()
            storages.setdefault(s.data_ptr(), s)
        self._out = [(s, _uses(s)) for s in storages.values()]
        positions = set(which)
        return [r.detach() if i in positions else r for i, r in enumerate(results)]

    def held(self) -> list[Any]:
        """The storages of the last loan that someone besides the program
        still holds (the loan ends either way)."""
        out = [s for s, n in self._out if _uses(s) > n]
        self._out = []
        return out

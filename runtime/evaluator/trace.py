"""Tracing a run: what each stream of each rank did, when, as a Chrome trace.

`fuserc run --trace FILE.json` records one run (the last timed one with
`--iters`) so that overlap of compute and communication can be seen in
Perfetto (ui.perfetto.dev) or chrome://tracing. The evaluator asks the
program's `Tracer` (when one is set) for a span around every op it runs;
bookkeeping ops (allocations, views, index arithmetic, stream switches,
loops) are not traced, the others fall in one of `CATEGORIES`.

Times come from the backend's trace marks (`Backend.trace_begin`,
`trace_end`, `trace_seconds`): host wall-clock on cpu, where each op runs
when the host reaches it; events recorded on the op's stream on cuda, so a
span is the op's time on the device. Every rank measures from an origin
taken right after a job-wide barrier, so ranks line up to within the
barrier's skew.

The trace is Chrome's JSON format: one complete event (`"ph": "X"`, `ts`
and `dur` in microseconds) per op, `pid` = rank, `tid` = stream (0 is the
main stream, others numbered in order of first use and named by metadata
events), `name` = the hir op, `cat` = its category, and `args` with the
local shapes, bytes, team and flops. The ranks' events are gathered to rank
0, which writes one file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from fuserc.diagnostics import Diagnostic, location_of
from fuserc.dialects import hir
from fuserc.runtime.backends.backend import Backend, Stream, Work

if TYPE_CHECKING:
    from fuserc.runtime.evaluator.evaluator import Program
    from fuserc.runtime.job.mpi_env import MpiEnv

COMPUTE = "compute"
COMMUNICATION = "communication"
COPY = "copy"
SYNC = "sync"
CATEGORIES: tuple[str, ...] = (COMPUTE, COMMUNICATION, COPY, SYNC)
"""compute: GEMMs and fused launches; communication: team collectives,
send/recv, handle exchange; copy: local copies and one-sided peer copies
(copy engines on cuda); sync: waits on tokens, streams and events, and
team fences."""

_SYNC_OPS: tuple[type[Operation], ...] = (hir.WaitOp, hir.SyncStreamOp, hir.WaitEventOp, hir.BarrierOp)
_COPY_OPS: tuple[type[Operation], ...] = (hir.CopyOp, *hir.PEER_COPY_OPS)


def category_of(op: Operation) -> str | None:
    """The trace category of an op (None: not traced)."""
    if isinstance(op, _SYNC_OPS):
        return SYNC
    if isinstance(op, _COPY_OPS):
        return COPY
    if isinstance(op, hir.COMPUTE_OPS):
        return COMPUTE
    if isinstance(op, (*hir.COMMUNICATION_OPS, hir.ShareOp)):
        return COMMUNICATION
    return None


def _type_text(t: TensorType) -> str:
    return "x".join(str(d) for d in t.get_shape()) + f"x{t.element_type}"


def _nbytes(t: TensorType) -> int:
    width = getattr(t.element_type, "bitwidth", 8)
    return math.prod(t.get_shape()) * max(1, math.ceil(width / 8))


def op_args(op: Operation) -> dict[str, Any]:
    """What a trace event says about an op, from its (static, local) types:
    operand shapes, the bytes of its largest buffer (what a communication
    or copy moves), its team, and the flops of a GEMM."""
    tensors = [v.type for v in op.operands if isinstance(v.type, TensorType)]
    args: dict[str, Any] = {}
    if tensors:
        args["shapes"] = [_type_text(t) for t in tensors]
        args["bytes"] = max(_nbytes(t) for t in tensors)
    team = getattr(op, "team", None) if isinstance(op, hir.TeamOp) else None
    if team is not None:
        args["team"] = list(team)
        if team.translates:  # the first team of a family: each rank ran in its own translate
            args["translates"] = [list(t) for t in team.translates]
    if isinstance(op, (hir.MatmulOp, hir.LinearOp)):
        a, out = op.operands[0].type, op.out.type
        assert isinstance(a, TensorType) and isinstance(out, TensorType)
        args["flops"] = 2 * math.prod(out.get_shape()) * (a.get_shape()[-1] if a.get_shape() else 1)
    loc = location_of(op)
    if loc is not None:
        args["loc"] = str(loc)
    return args


@dataclass
class OpenSpan:
    """An op being traced: begun, not yet ended."""

    op: Operation
    category: str
    tid: int
    begin: Any


@dataclass
class Span:
    op: Operation
    category: str
    tid: int
    begin: Any
    end: Any


class Tracer:
    """Records the spans of one rank's runs of a program.

    `start()` takes the origin (on the main stream, after a synchronize);
    the evaluator calls `begin(op)` before and `end(span, results)` after
    each op; `events()` (after the run, which synchronizes) turns the
    backend's marks into Chrome trace events of this rank."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.rank = backend.rank
        self._origin: Any = None
        self._streams: dict[int, tuple[Stream, int, str]] = {}  # id -> (stream, tid, name)
        self._spans: list[Span] = []
        self._rows: dict[int, list[Any]] = {}
        """id(hir.alltoallv) -> the counts it received, run by run (copies)."""

    def received(self, op: Operation, counts: Any) -> None:
        """The rows per team position an alltoallv received (read after the
        run: a copy, as its buffer may be reused)."""
        self._rows.setdefault(id(op), []).append(counts.clone())

    def start(self) -> None:
        self.backend.synchronize()  # the main stream is current and idle
        main = self.backend.get_current_stream()
        self._tid(main)
        self._origin = self.backend.trace_begin(main)

    def _tid(self, stream: Stream) -> int:
        known = self._streams.get(id(stream))
        if known is None:
            tid = len(self._streams)
            name = getattr(stream, "name", None) or f"stream {tid}"
            known = self._streams[id(stream)] = (stream, tid, str(name))
        return known[1]

    def begin(self, op: Operation) -> OpenSpan | None:
        """A span for `op` about to run on the current stream (None when
        its kind is not traced)."""
        category = category_of(op)
        if category is None:
            return None
        if self._origin is None:
            raise RuntimeError("Tracer.start() was not called before the run")
        stream = self.backend.get_current_stream()
        return OpenSpan(op, category, self._tid(stream), self.backend.trace_begin(stream))

    def end(self, span: OpenSpan, results: Sequence[Any]) -> None:
        """`op` has been enqueued; `results` are its result values (a
        communication's `Work` token lets the backend end the span when
        the work completes)."""
        work = next((r for r in results if isinstance(r, Work)), None)
        mark = self.backend.trace_end(span.begin, work)
        self._spans.append(Span(span.op, span.category, span.tid, span.begin, mark))

    @property
    def stream_names(self) -> dict[int, str]:
        return {tid: name for _, tid, name in self._streams.values()}

    def events(self) -> list[dict[str, Any]]:
        """This rank's Chrome trace events (metadata first). Synchronizes
        the backend so that every mark can be read."""
        self.backend.synchronize()
        seconds = self.backend.trace_seconds
        out: list[dict[str, Any]] = [
            _meta("process_name", self.rank, 0, {"name": f"rank {self.rank}"}),
            _meta("process_sort_index", self.rank, 0, {"sort_index": self.rank}),
        ]
        for tid, name in sorted(self.stream_names.items()):
            out.append(_meta("thread_name", self.rank, tid, {"name": name}))
            out.append(_meta("thread_sort_index", self.rank, tid, {"sort_index": tid}))
        args: dict[int, dict[str, Any]] = {}
        runs: dict[int, int] = {}
        for s in self._spans:
            if id(s.op) not in args:
                args[id(s.op)] = op_args(s.op)
            if id(s.op) in self._rows:  # an alltoallv: the rows it received at this run
                n = runs[id(s.op)] = runs.get(id(s.op), -1) + 1
                args[id(s.op)] = {**args[id(s.op)], "rows_received": int(self._rows[id(s.op)][n].sum())}
            t0 = seconds(self._origin, s.begin) * 1e6
            t1 = seconds(self._origin, s.end) * 1e6
            out.append(
                {
                    "name": s.op.name,
                    "cat": s.category,
                    "ph": "X",
                    "ts": round(t0, 3),
                    "dur": round(max(0.0, t1 - t0), 3),
                    "pid": self.rank,
                    "tid": s.tid,
                    "args": args[id(s.op)],
                }
            )
        return out


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


@contextmanager
def tracing(program: "Program") -> Iterator[Tracer]:
    """Trace the runs of `program` made inside the block. Call it on every
    rank at the same point: it starts with a barrier, so that every rank's
    origin is the same moment."""
    program.backend.synchronize()
    program.backend.barrier()
    tracer = Tracer(program.backend)
    tracer.start()
    program.tracer = tracer
    try:
        yield tracer
    finally:
        program.tracer = None


def merge(per_rank: Sequence[Sequence[dict[str, Any]]], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trace from every rank's events (Chrome's JSON object format)."""
    events = [e for rank_events in per_rank for e in rank_events]
    events.sort(key=lambda e: (e["ph"] != "M", e["pid"], e["tid"], e.get("ts", 0.0)))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(metadata or {})}


def gather_trace(events: list[dict[str, Any]], env: "MpiEnv", metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Collective: rank 0 gets the merged trace of every rank, others None."""
    per_rank = env.comm.gather(events, root=0)
    if env.rank != 0:
        return None
    return merge(per_rank, {"ranks": env.size, **(metadata or {})})


def alltoallv_imbalance(events: list[dict[str, Any]]) -> list[str]:
    """One line per hir.alltoallv of a trace: the rows each rank received
    (its n-th run on every rank is one exchange) and the imbalance, the
    largest over the mean."""
    per: dict[int, dict[int, int]] = {}
    seen: dict[int, int] = {}
    spans = [e for e in events if e.get("ph") == "X" and "rows_received" in e.get("args", {})]
    for e in sorted(spans, key=lambda e: (e["pid"], e["ts"])):
        k = seen[e["pid"]] = seen.get(e["pid"], -1) + 1
        per.setdefault(k, {})[e["pid"]] = e["args"]["rows_received"]
    out = []
    for k, by_rank in sorted(per.items()):
        rows = [by_rank[r] for r in sorted(by_rank)]
        mean = sum(rows) / len(rows)
        ratio = f"{max(rows) / mean:.2f}" if mean else "- (no rows)"
        out.append(f"alltoallv {k + 1}: rows received per rank {rows}, imbalance (largest over mean) {ratio}")
    return out


def write_trace(path: str | Path, events: list[dict[str, Any]], env: "MpiEnv", metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Collective: gather every rank's events; rank 0 writes the JSON file
    (into a folder that exists: `fuserc run --trace` refuses one that does
    not, as `fuserc opt -o` does) and returns the trace."""
    trace = gather_trace(events, env, metadata)
    if trace is None:
        return None
    from fuserc.files import replacing

    try:
        with replacing(path) as f:
            f.write(json.dumps(trace).encode())
    except OSError as e:
        raise Diagnostic(f"cannot write the trace {path}: {e.strerror or e}") from None
    return trace


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """The events of a trace file (the JSON object or bare array form)."""
    data = json.loads(Path(path).read_text())
    return data["traceEvents"] if isinstance(data, dict) else list(data)

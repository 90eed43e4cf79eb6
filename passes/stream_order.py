"""A rank's run of a host program in the device's order, without data.

The walk unrolls host loops, enters the `hir.if_rank` regions the rank is
in, evaluates index values (team positions included) and resolves streams
(the main stream, `hir.stream_for`'s pools); every op it issues on a stream
gets a vector clock: for each stream, how many of its ops are known to be
complete before this one starts (stream order, `hir.sync_stream`,
`hir.wait_event`, `hir.wait` of a token). Subclasses say what they record
of the device ops (`RankWalk.device`): the communication report (overlap),
plan-memory (the buffers' uses).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from fuserc.dialects import hir
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Block, Operation, SSAValue

Stream = tuple[Any, ...]
Clock = dict[Stream, int]
MAIN: Stream = ("main",)


class Kinds:
    """The first of `classes` an op is an instance of (None: none of
    them), found once per op class: an if-chain of isinstance tests costs
    an ABC check (a Python call) at every miss, and the walks test every
    op of a program against a dozen classes."""

    def __init__(self, *classes: type[Operation]):
        self.classes = classes
        self.known: dict[type[Operation], type[Operation] | None] = {}

    def __call__(self, op: Operation) -> type[Operation] | None:
        cls = type(op)
        kind = self.known.get(cls, Operation)
        if kind is Operation:
            kind = self.known[cls] = next((c for c in self.classes if issubclass(cls, c)), None)
        return kind


STEPS = Kinds(
    hir.ForOp, hir.IfRankOp, hir.ConstantOp, hir.TeamIndexOp, hir.AddModOp, hir.DivOp, hir.TeamRankOp,
    hir.GetCurrentStreamOp, hir.StreamForOp, hir.SetCurrentStreamOp, hir.SyncStreamOp, hir.RecordEventOp,
    hir.WaitEventOp, hir.WaitOp, hir.YieldOp, ReturnOp,
)  # fmt: skip
"""The ops a rank's walk steps through itself (`RankWalk.op`); the others are device ops."""


def join(a: Clock, b: Clock) -> Clock:
    out = dict(a)
    for s, t in b.items():
        if out.get(s, 0) < t:
            out[s] = t
    return out


@dataclass
class Issued:
    """An op enqueued on a stream: its position there and what is known
    complete before it starts (its clock: `tick` on its own stream)."""

    seq: int  # host order
    stream: Stream
    tick: int
    clock: Clock


class RankWalk:
    """One rank's run of a host program (module docstring)."""

    def __init__(self, rank: int, ranks: dict[Operation, frozenset[int]]):
        self.rank = rank
        self.ranks = ranks  # of each team op and rank region
        self.env: dict[SSAValue, Any] = {}
        self.current: Stream = MAIN
        self.clocks: dict[Stream, Clock] = {}
        self.ticks: dict[Stream, int] = defaultdict(int)
        self.seq = 0

    # ---- streams ------------------------------------------------------------
    def issue(self) -> Issued:
        s = self.current
        self.seq += 1
        self.ticks[s] += 1
        clock = dict(self.clocks.get(s, {}))
        clock[s] = self.ticks[s]
        self.clocks[s] = clock
        return Issued(self.seq, s, self.ticks[s], clock)

    def wait_for(self, clock: Clock | None) -> None:
        """The current stream waits for the work of `clock`."""
        if clock is not None:
            self.clocks[self.current] = join(self.clocks.get(self.current, {}), clock)

    # ---- ops ----------------------------------------------------------------
    def block(self, block: Block) -> list[Any] | None:
        """Walk `block`; the values its `hir.yield` hands back."""
        op = block._first_op  # `block.ops` without its iterator (the walk changes nothing)
        while op is not None:
            kind = STEPS(op)
            if kind is hir.YieldOp:
                return [self.env.get(v) for v in op.values]  # type: ignore[attr-defined]
            if kind is ReturnOp:
                return None
            self.op(op)
            op = op._next_op
        return None

    def op(self, op: Any) -> None:
        env = self.env
        kind = STEPS(op)
        if kind is None or kind is hir.YieldOp or kind is ReturnOp:
            self.device(op)
        elif kind is hir.ForOp:
            for i in op.indices:
                env[op.induction_var] = i
                self.block(op.body.block)
        elif kind is hir.IfRankOp:
            got = self.block(op.body.block) if self.rank in self.ranks[op] else None
            for r, v in zip(op.results, got or [None] * len(op.results)):
                env[r] = v
        elif kind is hir.ConstantOp:
            env[op.result] = op.value
        elif kind is hir.TeamIndexOp:
            env[op.result] = op.team.position(self.rank) if self.rank in self.ranks[op] else None
        elif kind is hir.AddModOp:
            a, b = env.get(op.lhs), env.get(op.rhs)
            env[op.result] = (a + b) % op.modulus if a is not None and b is not None else None
        elif kind is hir.DivOp:
            a = env.get(op.lhs)
            env[op.result] = a // op.divisor if a is not None else None
        elif kind is hir.TeamRankOp:
            p = env.get(op.position)
            own = op.team.of(self.rank) if p is not None and 0 <= p < len(op.team) else None  # this rank's team of a family
            env[op.result] = own[p] if own is not None else None
        elif kind is hir.GetCurrentStreamOp:
            env[op.stream] = self.current
        elif kind is hir.StreamForOp:
            i = env.get(op.index)
            env[op.stream] = ("pool", op.count, i % op.count) if i is not None else ("unknown", id(op))
        elif kind is hir.SetCurrentStreamOp:
            self.current = env.get(op.stream) or ("unknown", id(op))
        elif kind is hir.SyncStreamOp:
            s = env.get(op.stream)
            self.wait_for(self.clocks.get(s, {}) if s is not None else None)
        elif kind is hir.RecordEventOp:
            env[op.event] = dict(self.clocks.get(self.current, {}))
        elif kind is hir.WaitEventOp:
            self.wait_for(env.get(op.event))
        else:  # hir.WaitOp
            self.wait_for(env.get(op.token))

    def device(self, op: Operation) -> None:
        """Any other op (allocations, views, shares, compute, communications)."""

"""plan-memory: buffers whose uses never overlap on the device share memory.

Every `hir.alloc` site keeps its own buffer across runs (the allocation
cache), so without a plan a program holds all its buffers at once, for its
whole life. This pass gives sites of one host program a `storage` number:
sites with the same number are backed by one block of memory, as large as
the largest (XLA's buffer assignment, by whole blocks), which the runtime
may also lend to the other programs of the compilation (a forward and its
backward run one after the other).

Order is decided on the device's terms, not the host's: each rank's run is
walked as passes/stream_order.py walks it (loops unrolled, streams
resolved, a vector clock per op). A use of a buffer is any op that reads or
writes it or a view of it; a communication's or peer copy's use lasts until
its token is waited (on cpu the transfer runs until then). Buffer C may
take B's memory when, on every rank, every use of B is complete before any
use of C starts. Left alone (a block of their own, no `storage`): buffers
a function returns (the caller keeps them), buffers shared with peers
(`hir.share`: peers read and write them on their own schedule, and their
registrations belong to one buffer), allocations inside loops (one site,
several buffers in flight), buffers still in use on a worker stream when
the program's main stream ends, and every buffer of a program whose
streams the walk cannot resolve (a stream chosen by the rank's position, a
token or event it did not see made).

Each site goes, in the order of first use, to the compatible block that
wastes least (the smallest that holds it, else the largest, which grows).
Blocks are numbered largest first, so that block k of two programs that
share a pool have similar sizes. `memory_plan` reads the result back from
the IR (the communication report prints it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fuserc.dialects import hir
from fuserc.passes.stream_order import MAIN, Issued, RankClasses, RankWalk
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

_VIEWS = (hir.ChunkOp, hir.ViewOp, hir.TransposeOp, hir.SelectOp)
_IN_FLIGHT = (hir.CommunicationOp, *hir.PEER_COPY_OPS)
"""Ops whose buffers stay in use until their token is waited."""


class Unresolved(Exception):
    """The walk cannot tell the device's order: the program is left as it is."""


@dataclass(eq=False)
class Buffer:
    """An allocation site and, per walked rank, its uses: the first on each
    stream and the last one's place on each stream."""

    alloc: hir.AllocOp
    bytes: int
    first_seq: int = -1  # host order of its first use (any rank)
    first: dict[int, dict[object, Issued]] = field(default_factory=dict)
    last: dict[int, dict[object, int]] = field(default_factory=dict)
    pinned: str = ""

    def use(self, rank: int, at: Issued) -> None:
        if self.first_seq < 0 or at.seq < self.first_seq:
            self.first_seq = at.seq
        self.first.setdefault(rank, {}).setdefault(at.stream, at)
        last = self.last.setdefault(rank, {})
        last[at.stream] = max(last.get(at.stream, 0), at.tick)

    def after(self, other: Buffer) -> bool:
        """Whether, on every rank, every use of `other` is complete before
        any use of this one starts."""
        for rank, firsts in self.first.items():
            for t, tick in other.last.get(rank, {}).items():
                for s, u in firsts.items():
                    if (u.tick <= tick) if t == s else (u.clock.get(t, 0) < tick):
                        return False
        return True


@dataclass(eq=False)
class MemoryBlock:
    """A block of memory and the buffers it holds, in order of first use."""

    bytes: int
    buffers: list[Buffer]


@dataclass
class _Token:
    buffers: set[Buffer]
    waited: bool = False


class _Walk(RankWalk):
    """One rank's run, recording each buffer's uses (module docstring)."""

    def __init__(self, rank: int, ranks: dict[Operation, frozenset[int]], buffers: dict[hir.AllocOp, Buffer]):
        super().__init__(rank, ranks)
        self.buffers = buffers
        self.roots: dict[SSAValue, set[Buffer]] = {}
        self.by_rank: set[SSAValue] = set()  # index values that depend on the rank's position
        self.tokens: dict[SSAValue, _Token] = {}
        self.loops = 0

    def run(self, func: FuncOp) -> None:
        self.block(func.body.block)
        ret = func.body.block.last_op
        if isinstance(ret, ReturnOp):
            for v in ret.operands:
                for b in self.roots.get(v, ()):
                    b.pinned = b.pinned or "returned"
        for tok in self.tokens.values():
            if not tok.waited:
                for b in tok.buffers:
                    b.pinned = b.pinned or "a communication's token is not waited"
        end = self.clocks.get(MAIN, {})
        for b in self.buffers.values():
            if any(t != MAIN and end.get(t, 0) < tick for t, tick in b.last.get(self.rank, {}).items()):
                b.pinned = b.pinned or "in use on a stream the program's end does not wait for"

    def op(self, op: Operation) -> None:
        if isinstance(op, (hir.TeamIndexOp, hir.TeamRankOp)) or (
            isinstance(op, (hir.AddModOp, hir.DivOp)) and any(v in self.by_rank for v in op.operands)
        ):
            self.by_rank.add(op.results[0])
        if isinstance(op, hir.StreamForOp) and op.index in self.by_rank:
            raise Unresolved("a stream chosen by the rank's position")
        if isinstance(op, hir.ForOp):
            self.loops += 1
            super().op(op)
            self.loops -= 1
            return
        if isinstance(op, hir.WaitOp):
            tok = self.tokens.get(op.token)
            if tok is None and self.env.get(op.token) is None:
                return  # a rank outside the communication's team: nothing to wait for
            if tok is None:
                raise Unresolved("a token the walk did not see made")
            super().op(op)
            tok.waited = True
            at = self.issue()
            for b in tok.buffers:
                b.use(self.rank, at)
            return
        super().op(op)
        if isinstance(op, hir.IfRankOp) and self.rank in self.ranks[op]:
            last = op.body.block.last_op
            if isinstance(last, hir.YieldOp):
                for r, v in zip(op.results, last.values):
                    self.roots[r] = set(self.roots.get(v, ()))
        if isinstance(op, (hir.SetCurrentStreamOp, hir.SyncStreamOp)) and self.env.get(op.stream) is None:
            raise Unresolved("a stream the walk did not see made")
        if isinstance(op, hir.WaitEventOp) and self.env.get(op.event) is None:
            raise Unresolved("an event the walk did not see recorded")

    def device(self, op: Operation) -> None:
        if isinstance(op, hir.AllocOp):
            b = self.buffers.setdefault(op, Buffer(op, hir.buffer_bytes(op.result)))
            if self.loops:
                b.pinned = b.pinned or "allocated in a loop"
            self.roots[op.result] = {b}
        elif isinstance(op, _VIEWS):
            self.roots[op.results[0]] = set(self.roots.get(op.operands[0], ()))
        elif isinstance(op, hir.ShareOp):
            for b in self.roots.get(op.operands[0], ()):
                b.pinned = "shared with peers"
        elif isinstance(op, hir.DeallocOp):
            pass
        elif op.regions and not isinstance(op, hir.LaunchOp):
            raise Unresolved(f"{op.name} has regions the walk does not know")
        else:
            self._device_op(op)

    def _device_op(self, op: Operation) -> None:
        if isinstance(op, hir.TeamOp) and self.rank not in self.ranks[op]:
            return  # outside its team: skipped
        if isinstance(op, hir.PEER_COPY_OPS):
            share = op.handle.owner
            if isinstance(share, hir.ShareOp) and self.rank not in self.ranks[share]:
                return
        used = {b for v in op.operands for b in self.roots.get(v, ())}
        token = next((r for r in op.results if isinstance(r.type, hir.TokenType)), None)
        if not used and token is None:
            return
        at = self.issue()
        for b in used:
            b.use(self.rank, at)
        if token is not None:
            self.env[token] = at.clock
            self.tokens[token] = _Token(used if isinstance(op, _IN_FLIGHT) else set())
        for r in op.results:
            if isinstance(r.type, TensorType):
                self.roots[r] = set(used)


def plan(func: FuncOp) -> tuple[list[MemoryBlock], list[Buffer], str]:
    """The blocks of memory for `func`'s buffers, its buffers left out of
    the plan, and why none were planned ('' when the walks went through)."""
    classes = RankClasses(func)
    buffers: dict[hir.AllocOp, Buffer] = {}
    # one rank of each group, and a rank outside every team and rank region
    for rank in [*(g[0] for g in classes.groups()), -1]:
        try:
            _Walk(rank, classes.ranks, buffers).run(func)
        except Unresolved as e:
            return [], list(buffers.values()), str(e)
    planned = sorted((b for b in buffers.values() if not b.pinned and b.first_seq >= 0), key=lambda b: b.first_seq)
    blocks: list[MemoryBlock] = []
    for b in planned:
        fits = [k for k in blocks if all(b.after(o) for o in k.buffers)]
        roomy = [k for k in fits if k.bytes >= b.bytes]
        if roomy:
            k = min(roomy, key=lambda k: k.bytes)
        elif fits:
            k = max(fits, key=lambda k: k.bytes)
            k.bytes = b.bytes
        else:
            k = MemoryBlock(b.bytes, [])
            blocks.append(k)
        k.buffers.append(b)
    left = [b for b in buffers.values() if b.pinned or b.first_seq < 0]
    return sorted(blocks, key=lambda k: -k.bytes), left, ""


def host_funcs(module: ModuleOp) -> Iterator[FuncOp]:
    for op in module.ops:
        if isinstance(op, FuncOp) and hir.is_host_program(op) and op.body.blocks:
            yield op


@dataclass(frozen=True)
class MemoryPlan:
    """What a program's buffers take without the plan and with it (bytes),
    and how many blocks hold more than one buffer."""

    buffers: int
    unplanned: int
    planned: int
    shared_blocks: int


def memory_plan(func: FuncOp) -> MemoryPlan:
    """`func`'s buffers as its `storage` numbers lay them out (read from the IR)."""
    allocs = [op for op in func.walk() if isinstance(op, hir.AllocOp)]
    alone = sum(hir.buffer_bytes(op.result) for op in allocs if op.storage is None)
    blocks = hir.storage_blocks(func)
    counts: dict[int, int] = {}
    for op in allocs:
        if op.storage is not None:
            counts[op.storage] = counts.get(op.storage, 0) + 1
    total = sum(hir.buffer_bytes(op.result) for op in allocs)
    return MemoryPlan(len(allocs), total, alone + sum(blocks.values()), sum(n > 1 for n in counts.values()))


@dataclass(frozen=True)
class PlanMemory(ModulePass):
    """Give buffers whose device work never overlaps a common `storage`."""

    name = "plan-memory"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for func in host_funcs(op):
            for alloc in func.walk():
                if isinstance(alloc, hir.AllocOp):
                    alloc.storage = None
            blocks, _, _ = plan(func)
            for number, k in enumerate(blocks):
                for b in k.buffers:
                    b.alloc.storage = number

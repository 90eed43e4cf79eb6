"""plan-memory: buffers whose uses never overlap on the device share memory.

Every `hir.alloc` site keeps its own buffer across runs (the allocation
cache), so without a plan a program holds all its buffers at once, for its
whole life. This pass gives sites of one host program a `storage` number:
sites with the same number are backed by one block of memory, as large as
the largest (XLA's buffer assignment, by whole blocks), which the runtime
may also lend to the other programs of the compilation (a forward and its
backward run one after the other).

Order is decided on the device's terms, not the host's: the program is
walked as passes/stream_order.py walks a rank's run (loops unrolled,
streams resolved, a vector clock per op), once for all the ranks it needs
and once for a rank outside every team and region (a job larger than the
program needs). The first walk enters every `hir.if_rank` region and runs
every team op, but a region or team that leaves some of those ranks out
orders nothing (its waits and syncs are not followed): on every rank, what
the walk takes as ordered is. A use of a buffer is any op that reads or
writes it or a view of it; a communication's or peer copy's use lasts
until its token is waited (on cpu the transfer runs until then). Buffer C
may take B's memory when, in both walks, every use of B is complete before
any use of C starts. Left alone (no `storage`): buffers a function returns
(the caller keeps them), buffers shared with peers (`hir.share`: peers
read and write them on their own schedule, and their registrations belong
to one buffer), allocations inside loops (one site, several buffers in
flight), buffers still in use on a worker stream when the program's main
stream ends, and every buffer of a program whose streams the walk cannot
resolve (a stream chosen by the rank's position or switched on some ranks
only, a token or event it did not see made).

Each site goes, in the order of first use, to the compatible block that
wastes least (the smallest that holds it, else the largest, which grows),
in two packings, with and without a bound on the waste (`_WASTES`), of
which the smaller is kept.
Blocks are numbered largest first, so that block k of two programs that
share a pool have similar sizes. `memory_plan` reads the result back from
the IR (the communication report prints it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from fuserc.diagnostics import Diagnostic, location_of
from fuserc.dialects import hir
from fuserc.dialects.fusion import MeshOp
from fuserc.ir import ClassTest, walk
from fuserc.passes.stream_order import MAIN, STEPS, Clock, Issued, Kinds, RankWalk, Stream

_VIEWS = (hir.ChunkOp, hir.ViewOp, hir.TransposeOp, hir.SelectOp)
_WASTES = (2.0, float("inf"))
"""The packings tried (the one of fewest bytes is kept): a buffer takes a
free block at most this many times its size. A small buffer that lives
long in a large block holds it, and every buffer that could take it
after, to the end (a backward's layers would each need new blocks); a
bound on the waste keeps the large blocks for the large buffers."""
_IN_FLIGHT = (hir.CommunicationOp, *hir.PEER_COPY_OPS)
"""Ops whose buffers stay in use until their token is waited."""

_TEAMED = (hir.TeamOp, *hir.PEER_COPY_OPS)
"""Ops that run on their team's ranks only."""

_DEVICE = Kinds(hir.AllocOp, *_VIEWS, hir.ShareOp, hir.DeallocOp, hir.LaunchOp, *_TEAMED)
"""The device ops `_Walk.device` tells apart."""


class Unresolved(Exception):
    """The walk cannot tell the device's order: the program is left as it is."""


@dataclass(eq=False)
class Buffer:
    """An allocation site and, per walk (`_Walk.key`), its uses: the first
    on each stream and the last one's place on each stream."""

    alloc: hir.AllocOp
    bytes: int
    first_seq: int = -1  # host order of its first use (any rank)
    first: dict[int, dict[Stream, Issued]] = field(default_factory=dict)
    last: dict[int, dict[Stream, int]] = field(default_factory=dict)
    pinned: str = ""

    def use(self, walk: int, at: Issued) -> None:
        if self.first_seq < 0 or at.seq < self.first_seq:
            self.first_seq = at.seq
        self.first.setdefault(walk, {}).setdefault(at.stream, at)
        last = self.last.setdefault(walk, {})
        last[at.stream] = max(last.get(at.stream, 0), at.tick)

    def after(self, other: Buffer) -> bool:
        """Whether, in every walk, every use of `other` is complete before
        any use of this one starts."""
        return self.follows(other.last)

    def follows(self, last: dict[int, dict[Stream, int]]) -> bool:
        """`after` against the last uses of a set of buffers (`merge_last`):
        the test only grows stricter with a later tick, so the latest per
        walk and stream stands for them all, and a buffer is checked
        against a block in one step, not one per buffer."""
        for walk, firsts in self.first.items():
            for t, tick in last.get(walk, {}).items():
                for s, u in firsts.items():
                    if (u.tick <= tick) if t == s else (u.clock.get(t, 0) < tick):
                        return False
        return True


def merge_last(into: dict[int, dict[Stream, int]], b: Buffer) -> None:
    """Adds `b`'s last uses to the latest ones of a set (`Buffer.follows`)."""
    for walk, ticks in b.last.items():
        mine = into.setdefault(walk, {})
        for t, tick in ticks.items():
            mine[t] = max(mine.get(t, 0), tick)


@dataclass(eq=False)
class MemoryBlock:
    """A block of memory and the buffers it holds, in order of first use."""

    bytes: int
    buffers: list[Buffer]
    last: dict[int, dict[Stream, int]] = field(default_factory=dict)
    """The latest use of its buffers per walk and stream (`merge_last`)."""


@dataclass
class _Token:
    buffers: set[Buffer]
    clock: Clock
    everywhere: bool  # made on every rank the walk stands for: waiting for it orders streams there
    region: int  # the rank region it was made in (0: none)
    waited: bool = False


class _Walk(RankWalk):
    """The runs of many ranks at once, recording each buffer's uses: with
    `ranks` = N, every rank of [0, N) (regions and teams that leave some of
    them out are entered, but their waits order nothing); with None, a rank
    outside every team and region (a job larger than the program needs)."""

    def __init__(self, ranks: int | None, buffers: dict[hir.AllocOp, Buffer]):
        super().__init__(-1, {})
        self.n = ranks
        self.buffers = buffers
        self.roots: dict[SSAValue, set[Buffer]] = {}
        self.by_rank: set[SSAValue] = set()  # index values that depend on the rank's position
        self.tokens: dict[SSAValue, _Token] = {}
        self.loops = 0
        self.regions: list[int] = []  # the rank regions entered that leave ranks out
        self.key = 0 if ranks is None else 1  # whose uses (`Buffer.first`, `last`)
        self.skipped: set[SSAValue] = set()  # tokens of communications outside the walked ranks' teams
        self.top = 0  # the largest rank a team or region names, plus one
        self._everywhere: dict[Operation, bool | None] = {}

    def _all(self, ranks: Sized, first: int, last: int) -> bool:
        """Whether a team or region of these ranks (distinct) is [0, N)."""
        return self.n is not None and len(ranks) == self.n and first == 0 and last == self.n - 1

    def _team_everywhere(self, op: Operation) -> bool | None:
        """True: its team holds every rank; False: some; None: none walked."""
        if op not in self._everywhere:
            self._everywhere[op] = self._team_of(op)
        return self._everywhere[op]

    def _team_of(self, op: Operation) -> bool | None:
        team = op.team if isinstance(op, hir.TeamOp) else None
        if isinstance(op, hir.PEER_COPY_OPS):
            share = op.handle.owner
            team = share.team if isinstance(share, hir.ShareOp) else None
        if team is None:
            return True
        if self.n is None:
            return None
        first, last = min(team, default=0), team.top if team else -1  # a family's: every team of it
        self.top = max(self.top, last + 1)
        return self._all(range(len(team) * team.count), first, last)

    def wait_for(self, clock: Clock | None) -> None:
        if not self.regions:  # in a region some ranks skip, no stream waits everywhere
            super().wait_for(clock)

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
            if any(t != MAIN and end.get(t, 0) < tick for t, tick in b.last.get(self.key, {}).items()):
                b.pinned = b.pinned or "in use on a stream the program's end does not wait for"

    def op(self, op: Any) -> None:
        env = self.env
        kind = STEPS(op)
        if kind is None:  # a device op (most of a program): `RankWalk.op` gives it to `device`
            self.device(op)
            return
        if kind is hir.TeamIndexOp or kind is hir.TeamRankOp or (
            (kind is hir.AddModOp or kind is hir.DivOp) and any(v in self.by_rank for v in op.operands)
        ):
            self.by_rank.add(op.results[0])
        if kind is hir.TeamIndexOp:
            env[op.result] = None
        elif kind is hir.StreamForOp and op.index in self.by_rank:
            raise Unresolved("a stream chosen by the rank's position")
        elif kind is hir.ForOp:
            self.loops += 1
            super().op(op)
            self.loops -= 1
        elif kind is hir.IfRankOp:
            self._region(op)
        elif kind is hir.WaitOp:
            self._wait(op)
        else:
            super().op(op)
            if kind is hir.RecordEventOp and self.regions:
                env[op.event] = {}  # recorded on some ranks only: waiting for it orders nothing everywhere
            if (kind is hir.SetCurrentStreamOp or kind is hir.SyncStreamOp) and env.get(op.stream) is None:
                raise Unresolved("a stream the walk did not see made")
            if kind is hir.WaitEventOp and env.get(op.event) is None:
                raise Unresolved("an event the walk did not see recorded")

    def _region(self, op: hir.IfRankOp) -> None:
        ranks = op.ranks
        if self.n is None:  # outside every region
            for r in op.results:
                self.env[r] = None
            return
        last = ranks.last if ranks else -1
        self.top = max(self.top, last + 1)
        everywhere = bool(ranks) and self._all(ranks, ranks.runs[0][0], last)
        if not everywhere:
            self.regions.append(id(op))
        current = self.current
        got = self.block(op.body.block)
        if not everywhere:
            self.regions.pop()
            if self.current != current:
                raise Unresolved("a stream switched on some ranks only")
        end = op.body.block.last_op
        for i, r in enumerate(op.results):
            self.env[r] = got[i] if got else None
            if isinstance(end, hir.YieldOp):
                self.roots[r] = set(self.roots.get(end.values[i], ()))

    def _wait(self, op: hir.WaitOp) -> None:
        tok = self.tokens.get(op.token)
        if tok is None:
            if op.token in self.skipped:
                return  # a communication this rank does not take part in
            raise Unresolved("a token the walk did not see made")
        if tok.everywhere:
            self.wait_for(tok.clock)
        if not self.regions or (self.regions and self.regions[-1] == tok.region):
            tok.waited = True
        at = self.issue()
        for b in tok.buffers:
            b.use(self.key, at)

    def device(self, op: Any) -> None:
        kind = _DEVICE(op)
        if kind is hir.AllocOp:
            b = self.buffers.get(op)
            if b is None:  # the walk for a rank outside every team meets the buffers of the one before
                b = self.buffers[op] = Buffer(op, hir.buffer_bytes(op.result))
            if self.loops:
                b.pinned = b.pinned or "allocated in a loop"
            self.roots[op.result] = {b}
        elif kind in _VIEWS:
            self.roots[op.results[0]] = set(self.roots.get(op.operands[0], ()))
        elif kind is hir.ShareOp:
            for b in self.roots.get(op.operands[0], ()):
                b.pinned = "shared with peers"
        elif kind is hir.DeallocOp:
            pass
        elif op.regions and kind is not hir.LaunchOp:
            raise Unresolved(f"{op.name} has regions the walk does not know")
        else:
            self._device_op(op, kind)

    def _device_op(self, op: Operation, kind: type[Operation] | None) -> None:
        token = next((r for r in op.results if type(r._type) is hir.TokenType), None) if op.results else None
        everywhere = self._team_everywhere(op) if kind in _TEAMED else True
        if everywhere is None:  # outside its team: skipped
            if token is not None:
                self.skipped.add(token)
            return
        roots = self.roots
        used = {b for v in op._operands for b in roots.get(v, ())}  # xDSL's fields: `op.operands` makes a view
        if not used and token is None:
            return
        at = self.issue()
        for b in used:
            b.use(self.key, at)
        if token is not None:
            self.env[token] = at.clock
            region = self.regions[-1] if self.regions else 0
            self.tokens[token] = _Token(used if isinstance(op, _IN_FLIGHT) else set(), at.clock, everywhere and not self.regions, region)
        for r in op.results:
            if isinstance(r.type, TensorType):
                self.roots[r] = set(used)


def _mesh_ranks(func: FuncOp) -> int:
    """The ranks its module's meshes need (their largest device, plus one)."""
    module = func.parent_op()
    meshes = [op for op in module.ops if isinstance(op, MeshOp)] if isinstance(module, ModuleOp) else []
    return max([1, *(m.model.max_device + 1 for m in meshes)])


def _uses(func: FuncOp) -> tuple[dict[hir.AllocOp, Buffer], str]:
    """Each buffer's uses on the ranks the program needs (one conservative
    walk for them all: those of its meshes, or more where a team or region
    names more) and on a rank outside every team and region, or why the
    walks could not resolve them."""
    n = _mesh_ranks(func)
    while True:
        buffers: dict[hir.AllocOp, Buffer] = {}
        walk = _Walk(n, buffers)
        try:
            walk.run(func)
            if walk.top > n:  # ranks beyond the meshes': walk again for them all
                n = walk.top
                continue
            _Walk(None, buffers).run(func)
        except Unresolved as e:
            return buffers, str(e)
        return buffers, ""


def check_storage(func: FuncOp, allocs: Sequence[hir.AllocOp]) -> None:
    """That the `storage` numbers a host program carries (written by hand,
    or by this pass) are safe: each buffer with one may share memory, and
    buffers with the same one are never in use at the same time. `allocs`:
    its hir.allocs with a `storage` number, in program order (the verifier
    collects them in its walk). Raises a Diagnostic at the first allocation
    that breaks it."""
    if not allocs:
        return
    buffers, why = _uses(func)
    if why:
        raise Diagnostic(
            f'hir.alloc "{allocs[0].site}" storage {allocs[0].storage}: the program\'s device order cannot be told ({why})', location_of(allocs[0])
        )
    seen: dict[int, list[Buffer]] = {}
    latest: dict[int, dict[int, dict[Stream, int]]] = {}  # per storage number (`merge_last`)
    for op in allocs:
        b = buffers.get(op)
        if b is None:
            continue
        if b.pinned:
            raise Diagnostic(f'hir.alloc "{op.site}" storage {op.storage}: its buffer cannot share memory ({b.pinned})', location_of(op))
        last = latest.setdefault(op.storage or 0, {})
        for o in [] if b.follows(last) else seen.get(op.storage or 0, []):
            if not (b.after(o) or o.after(b)):
                raise Diagnostic(
                    f'hir.alloc "{op.site}" storage {op.storage}: in use on the device at the same time as '
                    f'"{o.alloc.site}" (storage {op.storage}), so they cannot share memory',
                    location_of(op),
                )
        seen.setdefault(op.storage or 0, []).append(b)
        merge_last(last, b)


_is_alloc, _is_view, _is_yield, _is_kept = ClassTest(hir.AllocOp), ClassTest(_VIEWS), ClassTest(hir.YieldOp), ClassTest((hir.ShareOp, ReturnOp))


def _any_candidate(func: FuncOp) -> bool:
    """Whether some allocation might be planned: one not in a loop whose
    buffer (or a view) is neither returned nor shared, read off the ops
    without walking the runs (a program of the ranks of a big mesh, each
    its buffer for the caller, needs no walk)."""
    roots: dict[SSAValue, set[Operation]] = {}
    kept: set[Operation] = set()
    allocs: list[Operation] = []
    for op in walk(func):
        if _is_alloc(op):
            allocs.append(op)
            roots[op.result] = {op}  # type: ignore[attr-defined]
            parent = op.parent_op()
            while parent is not None and parent is not func:
                if isinstance(parent, hir.ForOp):
                    kept.add(op)
                parent = parent.parent_op()
        elif _is_view(op):
            roots[op.results[0]] = roots.get(op.operands[0], set())
        elif _is_yield(op) and isinstance(op.parent_op(), hir.IfRankOp):
            for r, v in zip(op.parent_op().results, op.values):  # type: ignore[union-attr]
                roots[r] = roots.get(r, set()) | roots.get(v, set())
        elif _is_kept(op):
            for v in op.operands:
                kept |= roots.get(v, set())
    return any(op not in kept for op in allocs)


def _pack(planned: list[Buffer], waste: float) -> list[MemoryBlock]:
    """Each buffer, in order of first use, to the free block that wastes
    least: the smallest that holds it and is at most `waste` times its
    size, else the largest smaller one (which grows), else a new one."""
    blocks: list[MemoryBlock] = []
    for b in planned:
        fits = [k for k in blocks if b.follows(k.last)]
        roomy = [k for k in fits if b.bytes <= k.bytes <= waste * b.bytes]
        smaller = [k for k in fits if k.bytes < b.bytes]
        if roomy:
            k = min(roomy, key=lambda k: k.bytes)
        elif smaller:
            k = max(smaller, key=lambda k: k.bytes)
            k.bytes = b.bytes
        else:
            k = MemoryBlock(b.bytes, [])
            blocks.append(k)
        k.buffers.append(b)
        merge_last(k.last, b)
    return blocks


def plan(func: FuncOp) -> tuple[list[MemoryBlock], list[Buffer], str]:
    """The blocks of memory for `func`'s buffers, its buffers left out of
    the plan, and why none were planned ('' when the walks went through)."""
    if not _any_candidate(func):
        return [], [], ""
    buffers, why = _uses(func)
    if why:
        return [], list(buffers.values()), why
    planned = sorted((b for b in buffers.values() if not b.pinned and b.first_seq >= 0), key=lambda b: b.first_seq)
    blocks = min((_pack(planned, waste) for waste in _WASTES), key=lambda ks: sum(k.bytes for k in ks))
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
    allocs = [op for op in walk(func) if isinstance(op, hir.AllocOp)]
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
            for alloc in walk(func):
                if _is_alloc(alloc):
                    alloc.storage = None
            blocks, _, _ = plan(func)
            for number, k in enumerate(blocks):
                for b in k.buffers:
                    b.alloc.storage = number

"""Building blocks of the host IR the scheduling passes write: `Emitter`
(a list of ops at one location, with loops, rank regions, streams and
fences), a compute op on chunks of its operands, the transfers of a ring
(`Ring`: copy-engine gets and puts within a node, NCCL send/recv pairs
across nodes) and the add of several blocks in one launch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import LocationAttr
from xdsl.ir import Block, Operation, SSAValue

from fuserc.dialects import hir
from fuserc.dialects.fusion import AddOp
from fuserc.ir import walk
from fuserc.passes.stream_sites import LaunchChunks, chunk_dims

IPC = "cuda_ipc"
"""The rings' transport within a node: copy-engine puts/gets and fences on
IPC-shared flags (one warp's kernel)."""
NET = "nccl"
"""The rings' transport between nodes: send/recv pairs."""


class Emitter:
    """Builds a list of ops at one location; `loop` nests a body."""

    def __init__(self, location: LocationAttr, root_: "Emitter | None" = None):
        self.location = location
        self.ops: list[Operation] = []
        self.root = root_ or self
        self.consts: dict[int, SSAValue] = {}
        self.views: dict[tuple[SSAValue, SSAValue, int, int], SSAValue] = {}
        self.joined_at: int | None = None

    def add(self, op: Operation, hint: str | None = None) -> Operation:
        for o in walk(op):
            o.location = self.location
        self.ops.append(op)
        if hint is not None and op.results:
            op.results[0].name_hint = hint
        return op

    def value(self, op: Operation, hint: str | None = None) -> SSAValue:
        return self.add(op, hint).results[0]

    def const(self, n: int) -> SSAValue:
        """`hir.constant n`, made once, before the outermost loop."""
        root_ = self.root
        if n not in root_.consts:
            root_.consts[n] = root_.value(hir.ConstantOp(n), f"c{n}")
        return root_.consts[n]

    def chunk(self, src: SSAValue, index: SSAValue, chunks: int, dim: int = 0, hint: str | None = None) -> SSAValue:
        if chunks == 1:
            return src
        key = (src, index, chunks, dim)
        if key not in self.views:  # one view per chunk in a block
            self.views[key] = self.value(hir.ChunkOp(src, index, dim, chunks), hint)
        return self.views[key]

    def nested(self) -> "Emitter":
        return Emitter(self.location, self.root)

    def loop(self, lb: int, ub: int, body: Callable[["Emitter", SSAValue], None], hint: str = "c") -> hir.ForOp | None:
        """`hir.for %c = lb to ub` with `body`; nothing when the range is empty."""
        if ub <= lb:
            return None
        op = hir.ForOp(lb, ub)
        op.induction_var.name_hint = hint
        inner = self.nested()
        body(inner, op.induction_var)
        _fill(op.body.block, inner.ops)
        self.add(op)
        return op

    def on_ranks(self, ranks: Sequence[int], body: Callable[["Emitter"], None]) -> None:
        """`hir.if_rank [ranks] { body }`."""
        op = hir.IfRankOp(ranks)
        inner = self.nested()
        body(inner)
        _fill(op.body.block, inner.ops)
        self.add(op)

    def on_stream(self, index: SSAValue, pool: int, main: SSAValue | None) -> SSAValue:
        """Make worker stream `index mod pool` current; it first waits for
        the main stream's work so far when `main` is given."""
        s = self.value(hir.StreamForOp(index, pool), "s")
        self.add(hir.SetCurrentStreamOp(s))
        if main is not None:
            self.add(hir.SyncStreamOp(main))
        return s

    def join(self, main: SSAValue, pool: int, used: int) -> None:
        """Back on the main stream, which waits for the worker streams
        (`joined_at`: where the main stream's work beside them goes)."""
        self.add(hir.SetCurrentStreamOp(main))
        self.joined_at = len(self.ops)

        def body(e: Emitter, c: SSAValue) -> None:
            e.add(hir.SyncStreamOp(e.value(hir.StreamForOp(c, pool), "s")))

        self.loop(0, min(pool, used), body)

    def fence(self, team: Sequence[int], backend: str) -> None:
        token = self.value(hir.BarrierOp(team, backend), "fence")
        self.add(hir.WaitOp(token))

    def close_shared(self, main: SSAValue, fence: Callable[["Emitter"], None], release: SSAValue | None = None) -> None:
        """For the end of the block: on the main stream, the fence after
        which no peer reads this device's shared buffer (`fence` emits it),
        then the release of the buffer (`release`: one of the pipeline's
        own). The buffer is written again only in a later run (or
        iteration), so nothing before it waits for the slowest peer to
        finish its pulls: the device goes on with its own work, and every
        device passes the fence once all are done with the block."""
        self.add(hir.SetCurrentStreamOp(main))
        fence(self)
        if release is not None:
            self.add(hir.DeallocOp(release))


def _fill(block: Block, ops: Sequence[Operation]) -> None:
    terminator = block.last_op
    assert terminator is not None
    for o in ops:
        block.insert_op_before(o, terminator)


def rebuild(op: Operation, replaced: dict[int, SSAValue], acc: SSAValue | None = None) -> Operation:
    """`op` (matmul, linear or copy) on new operands, without its markers;
    a GEMM adds `acc` into its result when given (out = GEMM + acc)."""
    ops = [replaced.get(i, v) for i, v in enumerate(op.operands)]
    if isinstance(op, hir.MatmulOp):
        return hir.MatmulOp(ops[0], ops[1], ops[2], acc)
    if isinstance(op, hir.LinearOp):
        return hir.LinearOp(ops[0], ops[1], ops[-1], ops[2] if len(ops) == 4 else None, acc, op.activation_name)
    assert isinstance(op, hir.CopyOp) and acc is None
    return hir.CopyOp(*ops)


def compute_chunk(b: Emitter, op: Operation, c: SSAValue, chunks: int, out_dim: int) -> None:
    """Chunk c (of `chunks` along output dim `out_dim`) of a GEMM, copy or
    launch, on chunks of the operands it cuts (`chunk_dims`)."""
    cut = chunk_dims(op, out_dim, chunks)
    assert cut is not None
    views = {i: b.chunk(op.operands[i], c, chunks, dim) for i, dim in sorted(cut.items())}
    if isinstance(op, hir.LaunchOp):
        lc = LaunchChunks.of(op, out_dim, chunks)
        assert lc is not None
        n = len(op.ins)
        b.add(lc.build([views.get(i, v) for i, v in enumerate(op.ins)], views[n]))
        return
    b.add(rebuild(op, views))


NodeOf = Callable[[int], int]
"""Rank -> node (`Machine.node_of`: $FUSERC_GPUS_PER_NODE, the job's nodes,
or the links file's `gpus_per_node`)."""


class Ring:
    """The transfers of a ring over `team` (of each team of its family,
    where it has translates). Within one node: the one-sided
    copy (a copy-engine `hir.get`/`hir.put` through a shared handle) as
    given. Across nodes: step by step (`offset` known), each rank whose
    peer is on its node makes the one-sided copy, the others a NCCL
    `hir.send`/`hir.recv` pair, in `hir.if_rank` regions, one per way of
    taking part."""

    def __init__(self, team: tuple[int, ...], node_of: NodeOf, pos: SSAValue):
        self.team = team
        self.node_of = node_of
        self.pos = pos
        # every team of a family (a team with translates): each may lie on nodes its own way
        self.members = list(team.teams()) if getattr(team, "translates", ()) else [tuple(team)]
        self.member_nodes = [[node_of(r) for r in t] for t in self.members]

    @property
    def spans_nodes(self) -> bool:
        return any(len(set(nodes)) > 1 for nodes in self.member_nodes)

    @property
    def d(self) -> int:
        return len(self.team)

    def node_teams(self) -> list[tuple[int, ...]]:
        """The ranks of the team on each node, in team order."""
        teams: list[tuple[int, ...]] = []
        for members, nodes in zip(self.members, self.member_nodes):
            out: dict[int, list[int]] = {}
            for r, n in zip(members, nodes):
                out.setdefault(n, []).append(r)
            teams.extend(tuple(v) for v in out.values())
        return teams

    def fence(self, b: Emitter) -> None:
        """A copy-engine fence: over the team on one node, else one per node
        (only ranks of one node read each other's shared buffers)."""
        if not self.spans_nodes:
            b.fence(self.team, IPC)
            return
        for ranks in self.node_teams():
            if len(ranks) > 1:
                b.on_ranks(ranks, lambda e, ranks=ranks: e.fence(ranks, IPC))

    def move(
        self,
        b: Emitter,
        offset: int | None,
        one_sided: Callable[[Emitter], Operation],
        send: Callable[[Emitter], SSAValue],
        recv: Callable[[Emitter], SSAValue],
        pull: bool,
        mark: Callable[[Operation], Operation],
    ) -> None:
        """One transfer of the ring: each rank receives from position
        `pos + offset` and sends to `pos - offset`. `one_sided` builds the
        copy-engine get (`pull`) or put; `send`/`recv` the views a NCCL pair
        moves. `offset` is None in a loop (the team on one node)."""
        if offset is None or not self.spans_nodes:
            b.add(hir.WaitOp(b.value(mark(one_sided(b)), "tok")))
            return
        d = self.d
        roles: dict[tuple[bool, bool, bool], list[int]] = {}
        for members, nodes in zip(self.members, self.member_nodes):
            for p, rank in enumerate(members):
                recv_local = nodes[p] == nodes[(p + offset) % d]
                send_local = nodes[p] == nodes[(p - offset) % d]
                role = (recv_local if pull else send_local, not send_local, not recv_local)
                roles.setdefault(role, []).append(rank)
        for (local, sends, recvs), ranks in roles.items():

            def body(e: Emitter, local: bool = local, sends: bool = sends, recvs: bool = recvs) -> None:
                tokens = []
                if sends:
                    to = e.value(hir.AddModOp(self.pos, e.const((d - offset) % d), d), "to")
                    tokens.append(e.value(mark(hir.SendOp(send(e), to, self.team, NET)), "tok"))
                if recvs:
                    src = e.value(hir.AddModOp(self.pos, e.const(offset % d), d), "from")
                    tokens.append(e.value(mark(hir.RecvOp(recv(e), src, self.team, NET)), "tok"))
                if local:
                    tokens.append(e.value(mark(one_sided(e)), "tok"))
                for t in tokens:
                    e.add(hir.WaitOp(t))

            b.on_ranks(ranks, body)

    def steps(self, b: Emitter, lb: int, ub: int, body: Callable[[Emitter, SSAValue, int | None], None], hint: str = "c") -> hir.ForOp | None:
        """Steps lb..ub - 1 of the ring: a host loop within one node (the
        body sees no step number), one after the other across nodes (the
        body sees each step's number: its ranks' links differ)."""
        if not self.spans_nodes:
            return b.loop(lb, ub, lambda e, c: body(e, c, None), hint)
        for t in range(lb, ub):
            body(b, b.const(t), t)
        return None


def sum_launch(out: SSAValue, parts: Sequence[SSAValue], accumulate: bool = True) -> hir.LaunchOp:
    """`out += parts[0] + parts[1] + ...` (`accumulate`), else `out =
    parts[0] + parts[1] + ...`, as one launch (one fused kernel)."""
    ins = [out, *parts] if accumulate else list(parts)
    op = hir.LaunchOp(ins, [out])
    args = op.body.block.args
    args[0].name_hint = "sum"
    total: SSAValue = args[0]
    for a in args[1:]:
        a.name_hint = "part"
        add = AddOp.create(operands=[total, a], result_types=[out.type])
        op.body.block.add_op(add)
        total = add.results[0]
    op.body.block.add_op(hir.YieldOp(total))
    return op

"""What stream-pipeline writes: the host IR of each pipeline (docs/passes.md
has it algorithm by algorithm).

`SiteLowering` emits one site's pipeline before its anchor and erases the
ops it replaces. Transfers of the rings go through `Ring`: one-sided
copy-engine gets and puts over CUDA IPC between the ranks of one node, and
NCCL send/recv pairs (MPI on the cpu backend) between ranks of different
nodes; a ring whose team spans nodes (by the cost model's `Machine.node_of`)
unrolls its steps, each step's ranks in `hir.if_rank` regions by the link
each of them uses, and passes its copy-engine fences node by node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import IsTerminator

from fuserc.dialects import hir
from fuserc.dialects.fusion import element_type_of, shape_of
from fuserc.ir import walk
from fuserc.passes.cost_model import CHUNKS, COLLECTIVE, PULL, REDUCE_SCATTER, pulls_beside_fences
from fuserc.passes.host_emit import IPC, Emitter, NodeOf, Ring, compute_chunk, rebuild, sum_launch
from fuserc.passes.schedule import written_later
from fuserc.passes.stream_sites import (
    COMPUTE,
    LOCAL,
    PIPELINE_ATTR,
    Plan,
    Site,
    carry_reshard,
    alloc_in,
    root,
    sole_users,
)


class SiteLowering:
    """Emits the pipeline of one site (docs/passes.md has the host IR of each)."""

    def __init__(self, site: Site, plan: Plan, node_of: NodeOf, beside: Sequence[Operation] = ()):
        self.site = site
        self.plan = plan
        self.node_of = node_of
        self.beside = list(beside)
        """Ops detached from before the site (`schedule.beside_ring`): GEMMs
        that run on the main stream beside the pipeline, before its join,
        and deallocations, after it."""
        self.e = Emitter(site.anchor.location)
        self.closing = Emitter(site.anchor.location)
        """Emitted at the end of the site's block: the fences after which no
        peer reads this device's shared buffers any more, and their release
        (`Emitter.close_shared`)."""
        self.first_loop: hir.ForOp | None = None
        self.marked = False

    def loop(self, lb: int, ub: int, body: Callable[[Emitter, SSAValue], None], e: Emitter | None = None, hint: str = "c") -> None:
        op = (e or self.e).loop(lb, ub, body, hint)
        if op is not None:
            self.mark_plan(op)

    def mark_plan(self, op: Operation) -> None:
        """The plan goes on the pipeline's first loop (or first op)."""
        if not self.marked:
            op.attributes[PIPELINE_ATTR] = self.plan.attr()
            self.marked = True

    def site_name(self, suffix: str) -> str:
        base = alloc_in(root(self.site.buffer), self.site.anchor.parent_block())  # type: ignore[arg-type]
        if base is None:
            base = alloc_in(root(self.site.comm.operands[-1]), self.site.anchor.parent_block())  # type: ignore[union-attr, arg-type]
        assert base is not None
        return f"{base.site}/{suffix}"

    def run(self) -> None:
        site, algorithm = self.site, self.plan.algorithm
        if site.kind == LOCAL:
            self.local()
        elif site.kind == CHUNKS:
            self.chunks_collective() if algorithm == COLLECTIVE else self.chunks_ring()
        elif site.kind == REDUCE_SCATTER:
            if algorithm == COLLECTIVE:
                self.reduce_scatter_collective()
            else:
                self.reduce_scatter_pull() if self.plan.form == PULL else self.reduce_scatter_ring()
        else:
            self.allgather_collective() if algorithm == COLLECTIVE else self.allgather_ring()
        if not self.marked and self.e.ops:  # unrolled across nodes: no loop
            self.mark_plan(next(o for o in self.e.ops if not isinstance(o, hir.ConstantOp)))
        if self.beside:  # the GEMMs before the join, their buffers' deallocations after it
            assert self.e.joined_at is not None
            frees = [o for o in self.beside if isinstance(o, hir.DeallocOp)]
            self.e.ops[self.e.joined_at : self.e.joined_at] = [o for o in self.beside if o not in frees]
            self.e.ops.extend(frees)
        block = site.anchor.parent_block()
        assert block is not None
        late = _deallocs_in_the_way(site, block)
        block.insert_ops_before(self.e.ops, site.anchor)
        for op in late:  # the pipeline still reads these buffers
            op.detach()
            block.insert_op_before(op, site.anchor)
        for op in site.erase:
            op.detach()
            op.erase()
        if self.closing.ops:
            end = block.last_op
            assert end is not None and end.has_trait(IsTerminator)
            block.insert_ops_before(self.closing.ops, end)

    # ---- helpers -------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.plan.chunks // self.site.d

    def reshard(self, op: Operation) -> Operation:
        """Carry the site's `hir.reshard` marker onto a new communication."""
        assert self.site.comm is not None
        return carry_reshard(self.site.comm, op)

    def ring(self, e: Emitter) -> tuple[Ring, SSAValue]:
        pos = e.value(hir.TeamIndexOp(self.site.team), "pos")
        return Ring(self.site.team, self.node_of, pos), pos

    def owner_and_sub(self, e: Emitter, c: SSAValue) -> tuple[SSAValue, SSAValue]:
        """(device c // k, sub-chunk c mod k) of chunk c."""
        if self.k == 1:
            return c, c
        return e.value(hir.DivOp(c, self.k), "dev"), e.value(hir.AddModOp(c, e.const(0), self.k), "sub")

    def gemm_on(self, e: Emitter, rows: SSAValue, out: Callable[[SSAValue], SSAValue], acc: SSAValue | None = None) -> None:
        """The site's GEMMs on a block of rows of their input, each into
        `out(its output buffer)` (plus `acc`, added in the GEMM's epilogue,
        when given)."""
        for gemm in self.site.gemms:  # never one that accumulates already (chunk_dims)
            e.add(rebuild(gemm, {0: rows, len(gemm.operands) - 1: out(gemm.operands[-1])}, acc))

    # ---- local ----------------------------------------------------------------
    def local(self) -> None:
        site, plan, e = self.site, self.plan, self.e
        assert site.gemm is not None
        main = e.value(hir.GetCurrentStreamOp(), "main")

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            compute_chunk(b, site.gemm, c, plan.chunks, site.dim)  # type: ignore[arg-type]

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    # ---- AllGather + GEMM ------------------------------------------------------
    def allgather_collective(self) -> None:
        """Own block copied into the gathered buffer; per chunk c on stream
        c mod N: Broadcast from device c // k, then the GEMM of the chunk."""
        site, plan, e = self.site, self.plan, self.e
        ag = site.comm
        assert isinstance(ag, hir.AllgatherOp)
        x, xg = ag.input, ag.output
        main = e.value(hir.GetCurrentStreamOp(), "main")
        pos = e.value(hir.TeamIndexOp(site.team), "pos")
        e.add(hir.CopyOp(x, e.chunk(xg, pos, site.d, hint="mine")))

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            root_, _ = self.owner_and_sub(b, c)
            xc = b.chunk(xg, c, plan.chunks, hint="xc")
            token = b.value(self.reshard(hir.BroadcastOp(xc, root_, site.team, ag.backend)), "tok")
            b.add(hir.WaitOp(token))
            if site.gemm is not None:
                self.gemm_on(b, xc, lambda y: b.chunk(y, c, plan.chunks, hint="yc"))

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    def allgather_ring(self) -> None:
        """On the main stream the shard is copied into its block of the
        gathered buffer, which peers pull from (a shard made in place needs
        no copy; where the gathered buffer cannot be shared, into a buffer
        of its own); then the local chunks' GEMMs, on the compute stream
        (worker 0), and a copy-engine fence (no SMs) on the main stream
        beside them; every peer chunk is then pulled (a copy-engine get within
        the node, a NCCL send/recv pair across nodes) on one transfer
        stream (worker 1), in the order the GEMMs read them, and the GEMMs
        follow one after the other on the compute stream, each after its
        own transfer. One stream, because a device's peer copies run one
        at a time whatever their streams: on a stream each, a CUDA graph
        ran them in any order (on 4 H200s the GEMMs of the second chunk
        waited for the third chunk's copy). A final
        fence before a later run may overwrite the shared buffer, at the
        end of the block (`Emitter.close_shared`). Without
        a GEMM the chunks are only gathered."""
        site, plan, e, k, d = self.site, self.plan, self.e, self.k, self.site.d
        ag = site.comm
        assert isinstance(ag, hir.AllgatherOp)
        x, xg = ag.input, ag.output
        gemm = site.gemm
        read_later = gemm is None or bool(sole_users(xg, set(site.erase)))
        forwarded = _forward_into_gathered(site)
        if forwarded is not None:
            x = forwarded
        main = e.value(hir.GetCurrentStreamOp(), "main")
        ring, pos = self.ring(e)
        y_mine = {g.operands[-1]: e.chunk(g.operands[-1], pos, d, hint="ymine") for g in site.gemms}
        # Peers pull from a shared buffer written on the main stream before
        # the fence: every pull below waits for main, so no get reads a
        # peer's buffer before that peer has written it in this run. A
        # shard its producer wrote into its block of the gathered buffer
        # needs no copy; any other shard is copied into that block (or,
        # where the gathered buffer cannot be shared, into a buffer of its
        # own) before the local GEMMs start: beside them the copy ran 5x
        # slower (51 us for 16 MiB in a replayed graph on 4 H100s, the
        # GPT layer's backward), and the fence and the first pull waited
        # for it while the GEMM stream ran dry.
        in_gathered = forwarded is not None or _shareable_gathered(site)
        if in_gathered:
            shared = xg
            if forwarded is None:
                e.add(hir.CopyOp(x, e.chunk(xg, pos, d, hint="mine")))
        else:
            shared = e.value(hir.AllocOp(self.site_name("ring"), TensorType(element_type_of(x), list(shape_of(x)))), "xs")
            e.add(hir.CopyOp(x, shared))
        handle = e.value(hir.ShareOp(shared, site.team), "h")
        compute = self.compute_stream(e, main) if gemm is not None else main
        if gemm is not None:

            def local(b: Emitter, c: SSAValue) -> None:
                self.gemm_on(b, b.chunk(x, c, k, hint="xc"), lambda y: b.chunk(y_mine[y], c, k, hint="yc"))

            self.loop(0, k, local)
        e.add(hir.SetCurrentStreamOp(main))
        ring.fence(e)

        def slot(b: Emitter, c: SSAValue, static: int | None) -> tuple[SSAValue, SSAValue, SSAValue]:
            if static is not None:  # the chunk's device and sub-chunk, known
                step, sub = b.const(static // k), b.const(static % k)
            else:
                step, sub = self.owner_and_sub(b, c)
            peer = b.value(hir.AddModOp(pos, step, d), "peer")
            return peer, sub, b.chunk(b.chunk(xg, peer, d, hint="blk"), sub, k, hint="xc")

        transfer = self.transfer_stream(e, k, k, 1)

        def block_of(b: Emitter, peer: SSAValue, sub: SSAValue) -> tuple[SSAValue | None, int | None]:
            """Which block of the peer's shared buffer chunk (peer, sub) is:
            sub-chunk sub of its shard, or of the gathered buffer."""
            if not in_gathered:
                return (sub, k) if k > 1 else (None, None)
            if k == 1:
                return peer, d
            return b.value(hir.AddModOp(self.times(b, peer, k, d * k), sub, d * k), "blk"), d * k

        def pull_and_gemm(b: Emitter, c: SSAValue, static: int | None) -> None:
            peer, sub, xc = slot(b, c, static)
            b.add(hir.SetCurrentStreamOp(transfer))
            b.add(hir.SyncStreamOp(main))
            own = b.const(static % k) if static is not None else None
            ring.move(
                b, static // k if static is not None else None,
                lambda e3: hir.GetOp(handle, peer, xc, IPC, *block_of(e3, peer, sub)),
                send=lambda bb: bb.chunk(x, own, k, hint="xc") if own is not None else x,
                recv=lambda _: xc,
                pull=True, mark=self.reshard,
            )
            if gemm is None:
                return
            b.add(hir.SetCurrentStreamOp(compute))
            b.add(hir.SyncStreamOp(transfer))  # after its get (issued just now, before the next one)
            self.gemm_on(b, xc, lambda y: b.chunk(b.chunk(y, peer, d, hint="yblk"), sub, k, hint="yc"))

        self.mark_loop(ring.steps(e, k, plan.chunks, pull_and_gemm))
        if read_later and not in_gathered:  # the gathered buffer must hold this device's block too
            e.add(hir.SetCurrentStreamOp(main))
            e.add(hir.CopyOp(x, e.chunk(xg, pos, d, hint="mine")))
        e.join(main, plan.streams, plan.chunks)
        self.closing.close_shared(main, ring.fence, None if in_gathered else shared)

    def mark_loop(self, op: Operation | None) -> None:
        if op is not None:
            self.mark_plan(op)

    # ---- a collective per chunk ------------------------------------------------
    def chunks_collective(self) -> None:
        """Per chunk c on stream c mod N: the producers of chunk c, the
        collective of chunk c, then the consumer GEMM of chunk c."""
        site, plan, e = self.site, self.plan, self.e
        pc = site.chunked
        assert pc is not None
        main = e.value(hir.GetCurrentStreamOp(), "main")

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            for op, dim in zip(site.producers, site.producer_dims):
                compute_chunk(b, op, c, plan.chunks, dim)
            inp, out = pc.views(b, c)
            b.add(hir.WaitOp(b.value(pc.comm_on(inp, out), "tok")))
            if site.gemm is not None:
                compute_chunk(b, site.gemm, c, plan.chunks, pc.dims[1])

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    def chunks_ring(self) -> None:
        """An allgather per chunk, by the ring: the shard in a shared buffer,
        one fence; per chunk c on stream c mod N: this device's block of
        chunk c copied into place and the blocks of the d - 1 peers pulled
        (block c of their shards), all issued ahead of the GEMMs; then each
        GEMM after its chunk's copies."""
        site, plan, e, d = self.site, self.plan, self.e, self.site.d
        pc = site.chunked
        assert pc is not None
        x = pc.sources[0]
        main = e.value(hir.GetCurrentStreamOp(), "main")
        ring, pos = self.ring(e)
        block = pc.view_shape(0)  # the shard as its S chunks stacked: block c is chunk c
        stacked = [plan.chunks * block[0], *block[1:]]
        shared = e.value(hir.AllocOp(self.site_name("ring"), TensorType(element_type_of(x), stacked)), "xs")
        e.add(hir.CopyOp(e.value(hir.ViewOp(x, stacked)) if list(shape_of(x)) != stacked else x, shared))
        handle = e.value(hir.ShareOp(shared, site.team), "h")
        ring.fence(e)

        def pull(b: Emitter, c: SSAValue, static: int | None) -> None:
            b.on_stream(c, plan.streams, main)
            mine, xc = pc.views(b, c)
            b.add(hir.CopyOp(mine, b.chunk(xc, pos, d, hint="own")))

            def peer_block(bb: Emitter, t: SSAValue, step: int | None) -> None:
                def piece(e3: Emitter, offset: SSAValue) -> SSAValue:
                    return e3.chunk(xc, e3.value(hir.AddModOp(pos, offset, d), "peer"), d, hint="piece")

                def get(e3: Emitter) -> Operation:
                    peer = e3.value(hir.AddModOp(pos, t, d), "peer")
                    return hir.GetOp(handle, peer, e3.chunk(xc, peer, d, hint="piece"), IPC, c, plan.chunks)

                ring.move(bb, step, get, send=lambda _: mine, recv=lambda e3: piece(e3, t), pull=True, mark=self.reshard)

            ring.steps(b, 1, d, peer_block, hint="t")

        def compute(b: Emitter, c: SSAValue, static: int | None) -> None:
            b.on_stream(c, plan.streams, None)  # after its copies, on the same stream
            assert site.gemm is not None
            compute_chunk(b, site.gemm, c, plan.chunks, pc.dims[1])

        self.mark_loop(ring.steps(e, 0, plan.chunks, pull))
        if site.gemm is not None:
            self.mark_loop(ring.steps(e, 0, plan.chunks, compute))
        e.join(main, plan.streams, plan.chunks)
        self.closing.close_shared(main, ring.fence, shared)

    # ---- GEMM + ReduceScatter --------------------------------------------------
    def reduce_scatter_collective(self) -> None:
        """Per chunk c on stream c mod N: the GEMM of rows chunk c into the
        partial buffer, then a Reduce of it to device c // k."""
        site, plan, e, k = self.site, self.plan, self.e, self.k
        rs = site.comm
        assert isinstance(rs, hir.ReduceScatterOp)
        p, y = rs.input, rs.output
        main = e.value(hir.GetCurrentStreamOp(), "main")

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            pc = b.chunk(p, c, plan.chunks, hint="pc")
            if site.gemm is not None:
                self.gemm_on(b, b.chunk(site.gemm.operands[0], c, plan.chunks, hint="xc"), lambda _: pc)
            root_, sub = self.owner_and_sub(b, c)
            red = hir.ReduceOp(pc, b.chunk(y, sub, k, hint="yc"), root_, site.team, "sum", rs.backend)
            b.add(hir.WaitOp(b.value(self.reshard(red), "tok")))

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    def ring_start(self) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue, Ring, SSAValue, SSAValue]:
        """What both ReduceScatter ring forms begin with: the GEMM's input,
        the partial and output buffers, the main stream, the ring, this
        device's position and the next one's."""
        e, rs = self.e, self.site.comm
        assert isinstance(rs, hir.ReduceScatterOp) and self.site.gemm is not None
        main = e.value(hir.GetCurrentStreamOp(), "main")
        ring, pos = self.ring(e)
        nxt = e.value(hir.AddModOp(pos, e.const(1), self.site.d), "next")
        return self.site.gemm.operands[0], rs.input, rs.output, main, ring, pos, nxt

    def sub_block(
        self, b: Emitter, v: SSAValue, q: SSAValue, j: SSAValue | int, hint: str, blocks: int | None = None
    ) -> SSAValue:
        """Sub-chunk j (of k) of block q (of `blocks`, default d) of `v`
        (the block when k = 1)."""
        block = b.chunk(v, q, blocks or self.site.d, hint=hint if self.k == 1 else f"{hint}blk")
        return block if isinstance(j, int) else b.chunk(block, j, self.k, hint=hint)

    def reduce_scatter_ring(self) -> None:
        """A running sum per destination passed along the ring, added in
        the GEMMs' epilogues (no add kernels). Rows block q (of d) is summed
        by devices q + 1, q + 2, ..., q: at step t device pos computes the
        block of q = pos + 1 + t, plus (t > 0) the sum device pos + 1 put
        there at step t - 1; for t < d - 1 it puts the result into device
        pos - 1's buffer and passes a copy-engine fence (across nodes: a
        NCCL send to pos - 1, which receives it into that place); the last
        step (q = pos) writes the result. Each block is cut into k
        sub-chunks (S = k * d), k independent rings in turn, so a GEMM
        waits for a transfer issued k GEMMs earlier. GEMMs run in order on
        the compute stream, the transfers and fences of sub-ring j on
        transfer stream j.

        Every GEMM writes where its running sum landed, so that the sum is
        read and written in place (an epilogue with C = D: a GEMM writing
        elsewhere would first copy the sum into its output). The sums land
        in the partial buffer, shared (each block is put there once, by the
        next device, and read once), and at step d - 2 straight into the
        output of the device that finishes the block."""
        site, plan, e, d, k = self.site, self.plan, self.e, self.site.d, self.k
        s = plan.chunks
        x, p, y, main, ring, pos, nxt = self.ring_start()
        prv = e.value(hir.AddModOp(pos, e.const(d - 1), d), "prev")
        handle = e.value(hir.ShareOp(p, site.team), "h")
        y_handle = e.value(hir.ShareOp(y, site.team), "hy")
        compute = self.compute_stream(e, main)
        sub = self.sub_block

        def step(b: Emitter, q: SSAValue, t: int | None) -> None:
            """Step t (None: a middle step, 0 < t < d - 2, in a host loop)."""
            first, last = t == 0, t == d - 1

            def chunk(bb: Emitter, j: SSAValue | int) -> None:
                if not first:  # the running sum of step t - 1 of this sub-ring has landed
                    bb.add(hir.SyncStreamOp(self.transfer_stream(bb, j, 0, k)))
                if last:
                    out = y if isinstance(j, int) else bb.chunk(y, j, k, hint="yc")
                else:
                    out = sub(bb, p, q, j, "pc")
                self.gemm_on(bb, sub(bb, x, q, j, "xc"), lambda _: out, None if first else out)
                if last:
                    return
                bb.add(hir.SetCurrentStreamOp(self.transfer_stream(bb, j, 0, k)))
                bb.add(hir.SyncStreamOp(compute))
                into_y = t == d - 2
                if into_y and d == 2:  # (no fence yet in this run: pos - 1 may still read its last output)
                    ring.fence(bb)

                def put(e3: Emitter) -> Operation:
                    if into_y:  # into the output of device pos - 1, which finishes block q
                        return hir.PutOp(out, y_handle, prv, IPC, *((j, k) if k > 1 else (None, None)))
                    index = q if k == 1 else e3.value(hir.AddModOp(self.times(e3, q, k, s), j, s), "slot")
                    return hir.PutOp(out, handle, prv, IPC, index, s)

                def landing(e3: Emitter) -> SSAValue:
                    """Where the sum from pos + 1 lands here: the block this
                    device computes at step t + 1 (its output at t = d - 2)."""
                    if into_y:
                        return y if isinstance(j, int) else e3.chunk(y, j, k, hint="yc")
                    assert t is not None
                    return sub(e3, p, e3.value(hir.AddModOp(pos, e3.const((t + 2) % d), d), "dest"), j, "pc")

                ring.move(bb, 1 if ring.spans_nodes else None, put, send=lambda _: out, recv=landing, pull=False, mark=self.reshard)
                ring.fence(bb)
                bb.add(hir.SetCurrentStreamOp(compute))

            if k == 1:
                chunk(b, 0)
            else:
                b.loop(0, k, chunk, hint="j")

        def at(t: int | None) -> Callable[[Emitter, SSAValue], None]:
            return lambda b, c: step(b, b.value(hir.AddModOp(nxt, c, d), "dest"), t)

        self.loop(0, 1, at(0))
        if ring.spans_nodes:  # each step's ranks take their own links
            for t in range(1, d - 2):
                self.loop(t, t + 1, at(t))
        else:
            self.loop(1, d - 2, at(None))
        if d > 2:
            self.loop(d - 2, d - 1, at(d - 2))
        step(e, pos, d - 1)
        e.join(main, plan.streams, plan.chunks)
        ring.fence(e)

    def reduce_scatter_pull(self) -> None:
        """Every device computes its d partial blocks back to back on the
        compute stream, never waiting: at step t the block of q = pos + 1 +
        t into the shared partial buffer, the last step (q = pos) into the
        output. Each destination pulls its block's partials as they are
        done: after step t, on transfer stream j (sub-chunk j of k), a
        copy-engine fence then a get of block pos from device pos - 1 - t
        (which computed it at its step t) into slot t of a local buffer
        (across nodes that device sends it); with one sub-chunk and a
        third worker stream, the fences run there, each beside the
        previous step's get (`pulls_beside_fences`). Once its own GEMM of
        sub-chunk j is done, stream j adds the d - 1 pulled partials into
        the output (one launch; it overlaps the next own GEMM when k > 1). Unlike the
        running sum, no GEMM waits for a transfer: the price is the final
        add."""
        site, plan, e, d, k = self.site, self.plan, self.e, self.site.d, self.k
        s = plan.chunks
        x, p, y, main, ring, pos, nxt = self.ring_start()
        handle = e.value(hir.ShareOp(p, site.team), "h")
        rows, cols = shape_of(y)[0], list(shape_of(y)[1:])
        pulled = e.value(hir.AllocOp(self.site_name("pulled"), TensorType(element_type_of(y), [(d - 1) * rows, *cols])), "pulled")
        compute = self.compute_stream(e, main)
        sub = self.sub_block
        fences = e.value(hir.StreamForOp(e.const(2), plan.streams), "sf") if pulls_beside_fences(k, plan.streams) else None

        def step(t: int) -> Callable[[Emitter, SSAValue], None]:
            """Step t, in a loop of one iteration (%c = t), so that the peer
            pos - 1 - t is an addition of a constant."""

            def body(b: Emitter, c: SSAValue) -> None:
                q = b.value(hir.AddModOp(nxt, c, d), "dest")
                peer = b.value(hir.AddModOp(pos, b.const((d - 1 - t) % d), d), "from")

                def chunk(bb: Emitter, j: SSAValue | int) -> None:
                    self.gemm_on(bb, sub(bb, x, q, j, "xc"), lambda _: sub(bb, p, q, j, "pc"))
                    transfer = self.transfer_stream(bb, j, 0, k)
                    bb.add(hir.SetCurrentStreamOp(fences or transfer))
                    bb.add(hir.SyncStreamOp(compute))
                    ring.fence(bb)  # every device's GEMM (t, j) is done
                    if fences is not None:  # the fence ran beside the previous step's get
                        bb.add(hir.SetCurrentStreamOp(transfer))
                        bb.add(hir.SyncStreamOp(fences))

                    def get(e3: Emitter) -> Operation:
                        index = pos if k == 1 else e3.value(hir.AddModOp(self.times(e3, pos, k, s), j, s), "blk")
                        return hir.GetOp(handle, peer, slot(e3, c, j), IPC, index, s)

                    ring.move(
                        bb, (d - 1 - t) if ring.spans_nodes else None, get,
                        send=lambda e3: sub(e3, p, q, j, "pc"), recv=lambda e3: slot(e3, c, j),
                        pull=True, mark=self.reshard,
                    )
                    bb.add(hir.SetCurrentStreamOp(compute))

                if k == 1:
                    chunk(b, 0)
                else:
                    b.loop(0, k, chunk, hint="j")

            return body

        def slot(b: Emitter, t: SSAValue, j: SSAValue | int) -> SSAValue:
            """Sub-chunk j of slot t of the pulled partials."""
            return sub(b, pulled, t, j, "slot", d - 1)

        for t in range(d - 1):
            self.loop(t, t + 1, step(t))

        def own(b: Emitter, j: SSAValue | int) -> None:
            yc = y if isinstance(j, int) else b.chunk(y, j, k, hint="yc")
            self.gemm_on(b, sub(b, x, pos, j, "xc"), lambda _: yc)
            b.add(hir.SetCurrentStreamOp(self.transfer_stream(b, j, 0, k)))
            b.add(hir.SyncStreamOp(compute))
            b.add(sum_launch(yc, [slot(b, b.const(t), j) for t in range(d - 1)]))
            b.add(hir.SetCurrentStreamOp(compute))

        if k == 1:
            own(e, 0)
        else:
            e.loop(0, k, own, hint="j")
        e.join(main, plan.streams, plan.chunks)
        self.closing.close_shared(main, ring.fence, pulled)  # no device pulls from this one's partials any more

    @staticmethod
    def times(b: Emitter, q: SSAValue, k: int, modulus: int) -> SSAValue:
        """q * k (mod `modulus`) by k - 1 additions (k is 2 or 4 here)."""
        out = q
        for _ in range(k - 1):
            out = b.value(hir.AddModOp(out, q, modulus), "qk")
        return out

    # ---- streams of the rings -------------------------------------------------
    def compute_stream(self, e: Emitter, main: SSAValue) -> SSAValue:
        """Worker 0, made current after the main stream's work so far: the
        rings run their GEMMs there, one after the other."""
        return e.on_stream(e.const(0), self.plan.streams, main)

    def transfer_stream(self, b: Emitter, c: SSAValue | int, first: int, count: int) -> SSAValue:
        """The stream of transfer c (c = first, ..., first + count - 1; an
        int when known here): workers 1 to N - 1 in turn, never the compute
        stream (worker 0, the only one when N = 1)."""
        n = self.plan.streams
        if n <= 2:  # one transfer stream, or none
            return b.value(hir.StreamForOp(b.const(n - 1), n), "st")
        if isinstance(c, int):
            return b.value(hir.StreamForOp(b.const(1 + (c - first) % (n - 1)), n), "st")
        shift = (1 - first) % n
        if count <= n - 1:  # c - first + 1 < N: no wrap-around
            index = c if shift == 0 else b.value(hir.AddModOp(c, b.const(shift), n), "w")
        else:
            j = b.value(hir.AddModOp(c, b.const((-first) % (n - 1)), n - 1), "j")
            index = b.value(hir.AddModOp(j, b.const(1), n), "w")
        return b.value(hir.StreamForOp(index, n), "st")


_FORWARDABLE_USERS = (*COMPUTE, hir.ChunkOp, hir.ViewOp, hir.TransposeOp, hir.DeallocOp)


def _forward_into_gathered(site: Site) -> SSAValue | None:
    """Where the shard an AllGather ring gathers is a buffer of the block,
    written and read there only by compute ops (and views), and the
    gathered buffer one too: the shard becomes this device's block of the
    gathered buffer (`hir.chunk %xg [team_index]`, the gathered buffer
    allocated first), so its producer writes it in place; returns that
    view (None where not). The ring then needs neither the copy of the
    shard into a buffer its peers pull from (they pull from the gathered
    buffer's blocks) nor the one into the gathered buffer: two copies of
    the shard per run (16 MiB, about 8 us each, for each of the GPT
    layer's [T, H] rings at hidden 4096 x 8192 tokens over 4 GPUs)."""
    ag = site.comm
    assert isinstance(ag, hir.AllgatherOp)
    x, xg = ag.input, ag.output
    if not _shareable_gathered(site):
        return None
    block = site.anchor.parent_block()
    xa, ga = x.owner, xg.owner
    assert block is not None and isinstance(ga, hir.AllocOp)
    if not isinstance(xa, hir.AllocOp) or xa.parent_block() is not block:
        return None
    if written_later(x, site.anchor, site.erase):
        return None  # peers pull from it until the block's closing fence
    site_ops = {o for op in site.erase for o in walk(op)}
    frees = []
    for use in x.uses:
        user = use.operation
        if user in site_ops:
            continue
        if not isinstance(user, _FORWARDABLE_USERS):
            return None
        top = user
        while top.parent_block() is not block:
            parent = top.parent_op()
            if parent is None:
                return None
            top = parent
        if isinstance(user, hir.DeallocOp):
            frees.append(user)
    ga.detach()
    block.insert_op_before(ga, xa)
    pos = hir.TeamIndexOp(site.team)
    view = hir.ChunkOp(xg, pos.results[0], 0, site.d)
    view.results[0].name_hint = x.name_hint
    block.insert_ops_before([pos, view], xa)
    x.replace_all_uses_with(view.results[0])
    xa.detach()
    xa.erase()
    for f in frees:
        f.detach()
        f.erase()
    return view.results[0]


def _shareable_gathered(site: Site) -> bool:
    """Whether an AllGather ring's peers can pull from the gathered buffer
    itself (this device's shard copied into its block first): a buffer of
    the block that no op after the site writes."""
    xg = site.comm.output if site.comm is not None else None
    block = site.anchor.parent_block()
    if xg is None or block is None or not isinstance(xg.owner, hir.AllocOp) or xg.owner.parent_block() is not block:
        return False
    return not written_later(xg, site.anchor, site.erase)


def _deallocs_in_the_way(site: Site, block: Block) -> list[hir.DeallocOp]:
    """hir.dealloc ops between the site's first op and its anchor that give
    back a buffer the site reads: the pipeline runs at the anchor, so they
    move after it."""
    used = {root(v) for op in site.erase for o in walk(op) for v in o.operands}
    unplaced = {op for op in site.erase if op.parent_block() is block and op is not site.anchor}
    # The block is walked from the anchor both ways until each of the site's ops is placed (some,
    # such as a reduce-scatter's wait, follow the anchor): the cost is the site's span, not the block.
    frees: list[hir.DeallocOp] = []
    kept = 0  # the frees up to the site's first op
    back, forward = site.anchor.prev_op, site.anchor.next_op
    while unplaced and (back is not None or forward is not None):
        if back is not None:
            if isinstance(back, hir.DeallocOp) and back.buffer in used:
                frees.append(back)
            if back in unplaced:
                unplaced.discard(back)
                kept = len(frees)
            back = back.prev_op
        if forward is not None:
            unplaced.discard(forward)
            forward = forward.next_op
    return frees[:kept][::-1]

"""Expert parallelism: `fusion.dispatch` and `fusion.combine` whose tokens
(and so the experts' slots) are split over a mesh axis, lowered to host IR
by data-dependent all-to-alls (part of lower-to-host-ir).

The tokens and the experts share the axis: with P positions, position p
holds tokens block p and experts block p (E_l = E/P experts). Nothing is
gathered.

Dispatch, on each rank:
1. the local (token, choice) pairs sorted by expert (a stable sort: each
   expert's pairs in token order), their rows packed in that order, which
   is also the order of the destinations; the pairs counted per expert,
   `counts [E] = [P, E_l]`;
2. `hir.alltoall` of the counts: block p of them (this rank's pairs for
   position p's experts) to position p; every rank then knows the rows it
   will receive per (source position, local expert): the counts per
   (rank, expert) are exchanged before any row moves;
3. `hir.alltoallv` of the rows, split by destination (sum of each block of
   counts), into a buffer bounded by min(T k, E_l T) rows (T the global
   tokens: every pair, or every token for each local expert);
4. `fusion.place_rows` puts the received rows (source by source, expert by
   expert) into the [E_l, T, H] slots: a source's tokens precede the next
   source's, so each expert's rows come in global token order, which is
   dispatch's result block.

Combine is its reverse: the counts again (from the ids, exchanged the same
way), `fusion.pick_rows` packs each slot's rows back in the order they
came, `hir.alltoallv` returns them to their tokens' ranks (exactly the
local pairs' rows, in the order dispatch sent them), and the inverse of
the sort puts each row at its pair. The routing weights are applied by
ordinary local ops after.

The bytes of the all-to-alls depend on the routing: the communication
report gives the bound (the buffers) and the expected bytes of uniform
routing; `fuserc run --trace` records each alltoallv's rows as it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import IntegerAttr, UnitAttr, i64
from xdsl.ir import Operation, SSAValue

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import shape_of, sharding_of
from fuserc.dialects.fusion_builder import make_op
from fuserc.dialects.fusion_dispatch import CombineOp, DispatchOp
from fuserc.passes.reshard_util import inverse
from fuserc.passes.lower_reshard import mesh_teams
from fuserc.passes.ring_attention import Ring

if TYPE_CHECKING:
    from fuserc.passes.lower_to_host_ir import Emitter, _FunctionLowering


Exchange = Ring
"""The all-to-all of one dispatch or combine: its mesh, the axis its tokens
and experts are split over, and that axis's teams (as a ring's)."""


def exchange_of(low: _FunctionLowering, op: Operation) -> Exchange | None:
    """The exchange of a dispatch or combine whose tokens are split over a
    mesh axis of more than one device; None when it computes locally."""
    if not isinstance(op, (DispatchOp, CombineOp)):
        return None
    s = sharding_of(op.ids)
    if s is None:
        return None
    g = len(shape_of(op.ids)) - 2
    splits = s.placement().dims[g]
    if not splits:
        return None
    mesh = low.mesh(op, op.ids)
    if len(splits) != 1 or splits[0].is_stream:
        raise error_at(op, f"'{op.name}': tokens split as {s} are not split over one mesh axis: expert parallelism needs one")
    ptype = splits[0].ptype
    if mesh.axis_size(ptype) == 1:
        return None
    slots = op.results[0] if isinstance(op, DispatchOp) else op.input
    if (sharding_of(slots).placement().dims[0] if sharding_of(slots) else ()) != splits:  # type: ignore[union-attr]
        raise error_at(op, f"'{op.name}': tokens split as {s} but the experts' slots as {sharding_of(slots)}: expert parallelism splits both over one axis")
    if g and shape_of(low.local(op, op.ids))[0] != 1:
        raise error_at(
            op,
            f"'{op.name}': token groups split as {s} leave {shape_of(low.local(op, op.ids))[0]} groups on a device: "
            "expert parallelism by groups needs one group a device (the groups split over the mesh's other axis, "
            "as many as its devices)",
        )
    if len(mesh.shape) > 1 and not g:
        raise error_at(
            op,
            f"'{op.name}': tokens and experts split over {ptype} of a {len(mesh.shape)}-D mesh ({s}): expert "
            "parallelism runs on a mesh of one axis (its tokens and experts split over it); on a 2-D mesh the "
            "experts' slots would hold the tokens of every slice of the other axis",
        )
    return Exchange(mesh, ptype, mesh_teams(mesh, ptype))


class _Emit:
    """The host ops of one dispatch or combine."""

    def __init__(self, low: _FunctionLowering, op: DispatchOp | CombineOp, index: int, ex: Exchange):
        self.low, self.em, self.op, self.index, self.ex = low, low.em, op, index, ex
        self.all = ex.mesh.devices
        self.grouped = len(shape_of(op.ids)) == 3
        """Token groups ([G, T, k] ids): a device holds one group, whose
        dimension the local steps drop (views)."""
        self.ids = self.operand(op.ids)
        self.tokens_l, self.k = shape_of(self.ids)

    def operand(self, v: SSAValue) -> SSAValue:
        """The local block of `v` in logical order."""
        from fuserc.passes.lower_to_host_ir import is_identity, order_of

        buf, order = self.low.values[v], order_of(v)
        if not is_identity(order):
            k = self.op.operands.index(v)
            buf = self.low.relayout(buf, inverse(order), self.em.site(self.index, 0, f"ep/in{k}"), self.all)
        return self.flat(buf, 1 if v is self.op.operands[0] and isinstance(self.op, CombineOp) else 0)

    def flat_out(self, buf: SSAValue) -> SSAValue:
        """Result buffer `buf` without its group dimension (the second of
        slots and counts, the first of combine's rows)."""
        return self.flat(buf, 0 if isinstance(self.op, CombineOp) else 1)

    def flat(self, buf: SSAValue, dim: int) -> SSAValue:
        """`buf` without its group dimension `dim` (of one group: a view)."""
        if not self.grouped:
            return buf
        shape = list(shape_of(buf))
        del shape[dim]
        return self.em.view(buf, shape, self.all)

    def out_buffer(self, r: SSAValue) -> SSAValue:
        """A buffer of result `r`'s local block in logical order (`result`
        lays it out as the program wants it)."""
        from fuserc.passes.lower_to_host_ir import is_identity, order_of

        if is_identity(order_of(r)):
            return self.low.result_buffer(r, self.index, self.all)
        lt = self.low.local(self.op, r)
        return self.alloc(f"out{r.index}", lt.get_shape(), lt.element_type)  # type: ignore[attr-defined]

    def result(self, r: SSAValue, value: SSAValue) -> None:
        """`value` (logical order, from `out_buffer`) as the buffer of `r`."""
        from fuserc.passes.lower_to_host_ir import is_identity, order_of

        order = order_of(r)
        if not is_identity(order):
            value = self.low.relayout(value, order, self.em.site(self.index, r.index, "ep/out"), self.all)  # type: ignore[attr-defined]
        self.low.values[r] = value

    def alloc(self, suffix: str, shape: Sequence[int], elem: Any) -> SSAValue:
        return self.em.alloc(self.em.site(self.index, 0, f"ep/{suffix}"), shape, elem, self.all)

    def landing(self, ins: Sequence[SSAValue], outs: Sequence[SSAValue], build) -> None:
        """The launch that reads what an alltoallv received, marked so that
        `defer_landings` moves it to where its result is first needed."""
        self.launch(ins, outs, build)
        self.em.items[-1][0].attributes[LANDING] = UnitAttr()

    def launch(self, ins: Sequence[SSAValue], outs: Sequence[SSAValue], build) -> None:
        def body(args):
            ops: list[Operation] = []

            def op(name: str, *xs: SSAValue, shape=None, dtype=None, **kw) -> SSAValue:
                o = make_op(name, xs, kw, shape=shape, dtype=dtype)
                ops.append(o)
                return o.results[0]

            return ops, list(build(op, *args))

        self.em.launch(list(ins), list(outs), body, self.all)

    def communicate(self, make) -> None:
        """One communication per team of the axis (`make(team)`), or one for
        a team and its translates (`lower_reshard.mesh_teams`)."""
        for team, tag in self.ex.teams:
            self.em.communicate(make(team), tag)

    # ---- the steps -----------------------------------------------------------
    def route(self, experts: int, ins: Sequence[SSAValue], extra: Sequence[tuple[str, Sequence[int], Any]], build) -> tuple[SSAValue, list[SSAValue]]:
        """Counts this rank's pairs per expert and exchanges the counts
        (steps 1 and 2). One launch reads the ids and `ins` and makes the
        counts and the buffers of `extra` ((suffix, shape, elem)), the latter
        by `build(op, flat, order, *ins)` from the flat ids and their stable
        sort by expert. Returns the received counts [P, E_l] and `extra`'s
        buffers."""
        pairs, p = self.tokens_l * self.k, self.ex.size
        counts = self.alloc("counts", [experts], i64)
        outs = [self.alloc(s, shape, elem) for s, shape, elem in extra]

        def body(op, ids, *args):
            flat = op("reshape", ids, shape=[pairs])
            order = op("argsort", flat, dim=0)
            return [op("bincount", flat, length=experts), *build(op, flat, order, *args)]

        self.launch([self.ids, *ins], [counts, *outs], body)
        got = self.alloc("counts_in", [experts], i64)
        self.communicate(lambda team: hir.AlltoallOp(counts, got, team, self.em.backend))
        return self.em.view(got, [p, experts // p], self.all), outs

    def alltoallv(self, send: SSAValue, send_counts: SSAValue, rows: int) -> SSAValue:
        """`send`'s rows to their positions (split by `send_counts`), into a
        buffer of `rows` rows."""
        recv = self.alloc("rows_in", [rows, shape_of(send)[1]], send.type.element_type)  # type: ignore[attr-defined]
        got = self.alloc("rows_in_counts", [self.ex.size], i64)
        def make(team):
            op = hir.AlltoallvOp(send, send_counts, recv, got, team, self.em.backend)
            op.attributes[hir.MEAN_ROWS_ATTR] = IntegerAttr(self.tokens_l * self.k, i64)
            return op

        self.communicate(make)
        return recv

    def dispatch(self) -> None:
        op = self.op
        assert isinstance(op, DispatchOp)
        x = self.operand(op.input)
        experts, p, k = op.keyword("experts"), self.ex.size, self.k
        local = shape_of(self.low.local(op, op.results[0]))
        e_l, tokens, hidden = local[0], local[-2], local[-1]
        pairs = self.tokens_l * k

        def pack(o, flat, order, xv):
            """The pairs' rows in sorted order, and the rows per position."""
            if len(shape_of(x)) == 3:
                rows = o("reshape", xv, shape=[pairs, hidden])
            else:  # each pair's token
                rows = xv
                token = o("reshape", o("iota", dim=0, shape=[self.tokens_l, k], dtype="i64"), shape=[pairs])
                order = o("index_select", token, order, dim=0)
            n = o("bincount", flat, length=experts)
            return [o("index_select", rows, order, dim=0), o("sum", o("reshape", n, shape=[p, e_l]), dims=[1])]

        elem = x.type.element_type  # type: ignore[attr-defined]
        received, (send, send_counts) = self.route(experts, [x], [("rows_out", [pairs, hidden], elem), ("rows_out_counts", [p], i64)], pack)
        recv = self.alltoallv(send, send_counts, min(tokens * k, e_l * tokens))
        out = self.out_buffer(op.results[0])
        if len(op.results) == 1:
            self.landing([recv, received], [self.flat_out(out)], lambda o, r, c: [o("place_rows", r, c, slots=tokens)])
        else:  # each local expert's rows: what it received from every position
            counts = self.out_buffer(op.results[1])
            places = [self.flat_out(out), self.flat_out(counts)]
            self.landing([recv, received], places, lambda o, r, c: [o("place_rows", r, c, slots=tokens), o("sum", c, dims=[0])])
            self.result(op.results[1], counts)
        self.result(op.results[0], out)

    def combine(self) -> None:
        op = self.op
        assert isinstance(op, CombineOp)
        ye = self.operand(op.input)
        e_l, tokens, hidden = shape_of(ye)
        pairs, p, k = self.tokens_l * self.k, self.ex.size, self.k
        received, (unsort,) = self.route(e_l * p, [], [("unsort", [pairs], i64)], lambda o, flat, order: [o("argsort", order, dim=0)])
        send = self.alloc("rows_out", [min(tokens * k, e_l * tokens), hidden], ye.type.element_type)  # type: ignore[attr-defined]
        send_counts = self.alloc("rows_out_counts", [p], i64)
        rows = shape_of(send)[0]
        self.launch([ye, received], [send, send_counts], lambda o, y, c: [o("pick_rows", y, c, rows=rows), o("sum", c, dims=[1])])
        recv = self.alltoallv(send, send_counts, pairs)
        out = self.out_buffer(op.results[0])

        def back(o, r, inv):
            return [o("reshape", o("index_select", r, inv, dim=0), shape=[self.tokens_l, k, hidden])]

        self.landing([recv, unsort], [self.flat_out(out)], back)
        self.result(op.results[0], out)


LANDING = "hir.ep_landing"
"""Marks (during lowering only) the launch after a dispatch's or combine's
alltoallv that reads the rows received."""


def defer_landings(em: Emitter) -> None:
    """Moves each marked landing launch down to right before the first later
    op that uses its buffers (its result, or what it reads), and drops the
    mark. The alltoallv's wait then goes with it (schedule), so that the
    compute in between (the previous token chunk's grouped GEMMs, when a
    layer dispatches its chunks first) runs beside the transfer."""
    items = em.items
    marked = [op for op, _ in items if LANDING in op.attributes]
    for op in marked:
        del op.attributes[LANDING]
        i = next(k for k, (o, _) in enumerate(items) if o is op)
        roots = {em.root(v) for v in op.operands}
        j = i + 1
        while j < len(items) and not any(em.root(v) in roots for o in items[j][0].walk() for v in o.operands):
            j += 1
        if j > i + 1:
            items.insert(j - 1, items.pop(i))


def lower(low: _FunctionLowering, op: DispatchOp | CombineOp, index: int, ex: Exchange) -> int:
    """The all-to-all form of `op` (module docstring); returns the next op's index."""
    e = _Emit(low, op, index, ex)
    if isinstance(op, DispatchOp):
        e.dispatch()
    else:
        e.combine()
    return index + 1

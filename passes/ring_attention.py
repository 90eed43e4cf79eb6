"""Ring attention: `fusion.sdpa` and `fusion.sdpa_grad` whose sequence is
split over a mesh axis, lowered to host IR (part of lower-to-host-ir).

No buffer ever holds the whole sequence's keys and values. Each rank keeps
its block of queries; the key/value blocks travel around the ring of the
axis's team (`hir.send` to the next position, `hir.recv` from the previous,
issued before the block at hand is attended to, waited on after, so the
transfer overlaps the attention). With d ranks, step j attends to the block
of position (p - j) mod d.

Forward: each step's attention gives a partial output and its log-sum-exp;
they merge into f32 accumulators (`out = out_a e^(lse_a - lse) + out_b
e^(lse_b - lse)`, `lse = logaddexp(lse_a, lse_b)`), cast to the output's
type at the end. The merged log-sum-exp is sdpa's second result, which the
backward reads: each step's `sdpa_grad` on a key/value block with the
*global* statistic and output gives that block's exact share of the
gradients (p = exp(s - lse) and rowsum(g * out) do not depend on the other
blocks). The key/value gradients are accumulated (f32) in buffers that
travel the ring with their blocks; one more step brings each block's sum
home.

Causal (q and k of one length, PyTorch's top-left mask): the block of a
position after this rank's is masked out entirely; the step is skipped on
that rank (its accumulators, in the backward, are passed on unchanged), the
rank's own block is attended to with the causal mask, earlier blocks
without a mask. Which ranks compute at which step is static: each step's
launch runs on the ranks listed for it. Per forward each rank sends (d-1)/d
of k and v (the communication report's `send` lines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import shape_of, sharding_of, stat_type
from fuserc.dialects.fusion_builder import make_op
from fuserc.dialects.fusion_nn import AttentionOp, SdpaOp
from fuserc.passes.reshard_util import inverse
from fuserc.passes.stream_sites import RESHARD_ATTR
from fuserc.sharding import Mesh

if TYPE_CHECKING:
    from fuserc.passes.lower_to_host_ir import _FunctionLowering

SEQ = 2
"""The sequence dimension of q, k, v ([batch, heads, seq, head_dim])."""


@dataclass(frozen=True)
class Ring:
    """The ring of one attention op: its mesh, the axis its sequence is
    split over, and that axis's teams (one per slice of the mesh)."""

    mesh: Mesh
    ptype: str
    teams: list[tuple[int, ...]]

    @property
    def size(self) -> int:
        return len(self.teams[0])

    def ranks(self, positions: Sequence[int]) -> tuple[int, ...]:
        """The ranks at these team positions, over every team."""
        return tuple(sorted(t[p] for t in self.teams for p in positions))


def ring_of(low: _FunctionLowering, op: Operation) -> Ring | None:
    """The ring of an attention op whose query sequence is split over a
    mesh axis of more than one device; None when it computes locally."""
    if not isinstance(op, AttentionOp):
        return None
    s = sharding_of(op.operands[0])
    if s is None:
        return None
    splits = s.placement().dims[SEQ]
    if not splits:
        return None
    mesh = low.mesh(op, op.operands[0])
    if len(splits) != 1 or splits[0].is_stream:
        raise error_at(op, f"'{op.name}': a sequence split {s} is not one mesh axis: ring attention needs one")
    ptype = splits[0].ptype
    if mesh.axis_size(ptype) == 1:
        return None
    if op.options()[0] and shape_of(op.operands[0])[SEQ] != shape_of(op.operands[1])[SEQ]:
        raise error_at(op, f"'{op.name}': causal ring attention needs q and k of one sequence length, got {shape_of(op.operands[0])[SEQ]} and {shape_of(op.operands[1])[SEQ]}")
    return Ring(mesh, ptype, mesh.teams(ptype))


class _Emit:
    """The host ops of one ring attention op."""

    def __init__(self, low: _FunctionLowering, op: AttentionOp, index: int, ring: Ring):
        self.low, self.em, self.op, self.index, self.ring = low, low.em, op, index, ring
        self.all = ring.mesh.devices
        causal, self.scale = op.options()
        self.causal = causal
        em, d = self.em, ring.size
        self.next: dict[tuple[int, ...], SSAValue] = {}
        self.prev: dict[tuple[int, ...], SSAValue] = {}
        # The transfers run on a stream of their own beside the attention.
        self.main = em.emit(hir.GetCurrentStreamOp(), self.all).results[0]
        zero = em.constant(0, self.all)
        self.side = em.emit(hir.StreamForOp(zero, 1), self.all).results[0]
        for team in ring.teams:
            pos = em.team_index(team, team)
            one, back = em.constant(1, team), em.constant(d - 1, team)
            self.next[team] = em.emit(hir.AddModOp(pos, one, d), team).results[0]
            self.prev[team] = em.emit(hir.AddModOp(pos, back, d), team).results[0]

    # ---- buffers ---------------------------------------------------------------
    def alloc(self, like: SSAValue, suffix: str, elem=None) -> SSAValue:
        t = like.type
        return self.em.alloc(
            self.em.site(self.index, 0, f"ring/{suffix}"), shape_of(like), elem or t.element_type, self.all  # type: ignore[attr-defined]
        )

    def operand(self, v: SSAValue) -> SSAValue:
        """The local block of `v` in logical order."""
        buf = self.low.values[v]
        from fuserc.passes.lower_to_host_ir import is_identity, order_of

        order = order_of(v)
        if is_identity(order):
            return buf
        k = self.op.operands.index(v)
        return self.low.relayout(buf, inverse(order), self.em.site(self.index, 0, f"ring/in{k}"), self.all)

    def result(self, r: SSAValue, value: SSAValue) -> None:
        """`value` (logical order) as the buffer of result `r`."""
        from fuserc.passes.lower_to_host_ir import is_identity, order_of

        order = order_of(r)
        if not is_identity(order):
            value = self.low.relayout(value, order, self.em.site(self.index, r.index, "ring/out"), self.all)  # type: ignore[attr-defined]
        self.low.values[r] = value

    # ---- compute ---------------------------------------------------------------
    def launch(self, ins: Sequence[SSAValue], outs: Sequence[SSAValue], build, tag: tuple[int, ...]) -> None:
        def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
            ops: list[Operation] = []

            def op(name: str, *xs: SSAValue, results: int | None = None, shape=None, dtype=None, **kw) -> Operation:
                o = make_op(name, xs, kw, shape=shape, dtype=dtype, results=results)
                ops.append(o)
                return o

            values = build(op, *args)
            return ops, list(values)

        if tag:
            self.em.launch(list(ins), list(outs), body, tag)

    def cast_into(self, src: SSAValue, dst: SSAValue, tag: tuple[int, ...]) -> None:
        elem = dst.type.element_type  # type: ignore[attr-defined]
        self.launch([src], [dst], lambda op, x: [_cast(op, x, elem)], tag)

    def add_into(self, acc: SSAValue, part: SSAValue, tag: tuple[int, ...]) -> None:
        """acc += part (part cast to acc's type)."""
        elem = acc.type.element_type  # type: ignore[attr-defined]
        self.launch([acc, part], [acc], lambda op, a, b: [op("add", a, _cast(op, b, elem)).results[0]], tag)

    def merge(self, acc_o: SSAValue, acc_l: SSAValue, o: SSAValue, lse: SSAValue, tag: tuple[int, ...], rows: SSAValue | None = None) -> None:
        """Fold a partial (o, lse) into the accumulators (module docstring):
        first the output, which reads the old log-sum-exp, then the
        log-sum-exp in place."""
        elem = acc_o.type.element_type  # type: ignore[attr-defined]
        shape = shape_of(acc_o)

        def new_lse(op, a, b):
            m = op("maximum", a, b).results[0]
            ea = op("exp", op("sub", a, m).results[0]).results[0]
            eb = op("exp", op("sub", b, m).results[0]).results[0]
            return op("add", m, op("log", op("add", ea, eb).results[0]).results[0]).results[0]

        def out(op, ao, al, ob, bl):
            lse_ = new_lse(op, al, bl)

            def weight(x):
                w = op("exp", op("sub", x, lse_).results[0]).results[0]
                return _bcast(op, w, shape)

            left = op("mul", ao, weight(al)).results[0]
            right = op("mul", _cast(op, ob, elem), weight(bl)).results[0]
            return [op("add", left, right).results[0]]

        self.launch([acc_o, acc_l, o, lse], [acc_o], out, tag)
        self.launch([acc_l, lse], [acc_l], lambda op, a, b: [new_lse(op, a, b)], tag)

    def attention(self, name: str, ins: Sequence[SSAValue], outs: Sequence[SSAValue], causal: bool, tag: tuple[int, ...]) -> None:
        kw = {"scale": self.scale, "causal": True if causal else None}
        nres = 2 if name == "sdpa" else 3
        self.launch(ins, outs, lambda op, *a: list(op(name, *a, results=nres, **kw).results), tag)

    # ---- the ring --------------------------------------------------------------
    def steps(self) -> list[tuple[int, tuple[int, ...], bool]]:
        """(step, ranks computing it, causal mask) for each step."""
        d, out = self.ring.size, []
        for j in range(d):
            if not self.causal:
                out.append((j, self.ring.ranks(range(d)), False))
            elif j == 0:
                out.append((j, self.ring.ranks(range(d)), True))
            else:  # block p - j is before this rank's block only where p >= j
                out.append((j, self.ring.ranks(range(j, d)), False))
        return out

    def pass_on(self, sends: Sequence[SSAValue], recvs: Sequence[SSAValue], what: str) -> list[tuple[SSAValue, tuple[int, ...]]]:
        """Each of `sends` to the next position and `recvs` from the
        previous, issued now on the side stream once the main stream's
        work so far (what last read the receiving buffers, what wrote the
        sent ones) is done; their tokens, which the main stream waits on
        after the step. `what` names them in the communication report."""
        tokens = []
        em, backend = self.em, self.em.backend
        em.emit(hir.SetCurrentStreamOp(self.side), self.all)
        em.emit(hir.SyncStreamOp(self.main), self.all)
        mark = StringAttr(f"ring {self.op.name.removeprefix('fusion.')} {what}")
        for team in self.ring.teams:
            ops: list[Operation] = [hir.SendOp(b, self.next[team], team, backend) for b in sends]
            ops += [hir.RecvOp(b, self.prev[team], team, backend) for b in recvs]
            for o in ops:
                o.attributes[RESHARD_ATTR] = mark
                em.emit(o, team)
                o.results[0].name_hint = "tok"
                tokens.append((o.results[0], team))
        em.emit(hir.SetCurrentStreamOp(self.main), self.all)
        return tokens

    def wait(self, tokens: Sequence[tuple[SSAValue, tuple[int, ...]]]) -> None:
        for t, team in tokens:
            self.em.emit(hir.WaitOp(t), team)

    def forward(self) -> None:
        op = self.op
        q, k, v = (self.operand(x) for x in op.operands)
        stat = stat_type(q.type.element_type)  # type: ignore[attr-defined]
        o_t = self.em.alloc(self.em.site(self.index, 0, "ring/out_part"), (*shape_of(q)[:3], shape_of(v)[3]), q.type.element_type, self.all)  # type: ignore[attr-defined]
        l_t = self.em.alloc(self.em.site(self.index, 1, "ring/lse_part"), shape_of(q)[:3], stat, self.all)
        acc_o = self.em.alloc(self.em.site(self.index, 0, "ring/acc"), shape_of(o_t), stat, self.all)
        acc_l = self.em.alloc(self.em.site(self.index, 1, "ring/acc"), shape_of(q)[:3], stat, self.all)
        rk = [self.alloc(k, f"k{i}") for i in range(2)]
        rv = [self.alloc(v, f"v{i}") for i in range(2)]
        d = self.ring.size
        for j, tag, causal in self.steps():
            ck, cv = (k, v) if j == 0 else (rk[j % 2], rv[j % 2])
            tokens = self.pass_on([ck, cv], [rk[(j + 1) % 2], rv[(j + 1) % 2]], "k, v") if j < d - 1 else []
            if j == 0:
                self.attention("sdpa", [q, ck, cv], [o_t, acc_l], causal, tag)
                self.cast_into(o_t, acc_o, tag)
            else:
                self.attention("sdpa", [q, ck, cv], [o_t, l_t], causal, tag)
                self.merge(acc_o, acc_l, o_t, l_t, tag)
            self.wait(tokens)
        out = self.alloc(o_t, "out")
        self.cast_into(acc_o, out, self.all)
        self.result(op.results[0], out)
        if len(op.results) > 1:
            self.result(op.results[1], acc_l)

    def backward(self) -> None:
        op = self.op
        q, k, v, o, lse, g = (self.operand(x) for x in op.operands)
        stat = stat_type(q.type.element_type)  # type: ignore[attr-defined]
        dq_t, dk_t, dv_t = self.alloc(q, "dq_part"), self.alloc(k, "dk_part"), self.alloc(v, "dv_part")
        dq = self.alloc(q, "dq_acc", stat)
        dk = [self.alloc(k, f"dk_acc{i}", stat) for i in range(2)]
        dv = [self.alloc(v, f"dv_acc{i}", stat) for i in range(2)]
        rk = [self.alloc(k, f"k{i}") for i in range(2)]
        rv = [self.alloc(v, f"v{i}") for i in range(2)]
        d = self.ring.size
        for j, tag, causal in self.steps():
            ck, cv = (k, v) if j == 0 else (rk[j % 2], rv[j % 2])
            kv_tokens = self.pass_on([ck, cv], [rk[(j + 1) % 2], rv[(j + 1) % 2]], "k, v") if j < d - 1 else []
            self.attention("sdpa_grad", [q, ck, cv, o, lse, g], [dq_t, dk_t, dv_t], causal, tag)
            if j == 0:
                for part, acc in ((dq_t, dq), (dk_t, dk[0]), (dv_t, dv[0])):
                    self.cast_into(part, acc, tag)
            else:
                for part, acc in ((dq_t, dq), (dk_t, dk[j % 2]), (dv_t, dv[j % 2])):
                    self.add_into(acc, part, tag)
            # the block's gradient sums travel on with it (after step d - 1: home)
            g_tokens = self.pass_on([dk[j % 2], dv[j % 2]], [dk[(j + 1) % 2], dv[(j + 1) % 2]], "dk, dv")
            self.wait(kv_tokens)
            self.wait(g_tokens)
        home = d % 2
        results = []
        for r, acc, like in zip(op.results, (dq, dk[home], dv[home]), (q, k, v)):
            buf = self.alloc(like, f"grad{r.index}")
            self.cast_into(acc, buf, self.all)
            results.append((r, buf))
        for r, buf in results:
            self.result(r, buf)


def _cast(op, x: SSAValue, elem) -> SSAValue:
    if x.type.element_type == elem:  # type: ignore[attr-defined]
        return x
    return op("cast", x, dtype=elem).results[0]


def _bcast(op, w: SSAValue, shape: Sequence[int]) -> SSAValue:
    return op("broadcast_in_dim", w, dims=[0, 1, 2], shape=tuple(shape)).results[0]


def lower(low: _FunctionLowering, op: AttentionOp, index: int, ring: Ring) -> int:
    """The ring form of `op` (module docstring); returns the next op's index."""
    e = _Emit(low, op, index, ring)
    if isinstance(op, SdpaOp):
        e.forward()
    else:
        e.backward()
    return index + 1

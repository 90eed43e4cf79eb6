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

Causal (q and k of one length, PyTorch's top-left mask): in the block
layout the last rank would do 2d - 1 times the work of the first. The ring
therefore runs on the zigzag layout, chosen here and not by the user: the
sequence cut into 2d chunks, position i holds chunks i and 2d-1-i, stored
as [2, B, H, S/2d, ...] (each chunk contiguous). q, k and v (in the
backward also the output, its log-sum-exp and cotangent) are laid out so
by one exchange of half-blocks on the way in, the results laid back on
the way out (send/recv marked `zigzag`). At step 0 a rank attends to its
own two chunks with the causal mask; at step j >= 1 the block of position
s = p - j holds chunks s and 2d-1-s: for s < p both of q's chunks see
chunk s whole (k's first half), for s > p only q's second chunk sees, both
of k's chunks; either way c x 2c pairs: every rank does the same work.
The exchange moves O(S) bytes once where the imbalance costs O(S^2) FLOPs
every step; carrying the layout through the program (elementwise ops and
GEMMs do not care how tokens are ordered) would save it, but would need a
placement kind that every op and reshard understands. With an odd local
sequence, causal attention keeps the block layout: the block of a
position after this rank's is masked out entirely and that step is skipped
on the rank (its accumulators, in the backward, are passed on unchanged).

Which ranks compute what at each step is static: each step's launches
run on the ranks listed for them. Per forward each rank receives (d-1)/d
of k and v around the ring (the communication report's `ring` lines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import shape_of, sharding_of, stat_type
from fuserc.dialects.fusion_builder import make_op
from fuserc.dialects.fusion_nn import AttentionOp, SdpaOp
from fuserc.passes.lower_reshard import Teams, mesh_teams
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
    split over, and that axis's teams with the ranks of their regions
    (`lower_reshard.mesh_teams`: one team translated to every slice of the
    mesh, or one per slice)."""

    mesh: Mesh
    ptype: str
    teams: Teams

    @property
    def size(self) -> int:
        return len(self.teams[0][0])

    def ranks(self, positions: Sequence[int]) -> tuple[int, ...]:
        """The ranks at these team positions, over every team."""
        return tuple(sorted(m[p] for t, _ in self.teams for m in t.teams() for p in positions))

    @staticmethod
    def at(team: hir.Team, p: int) -> tuple[int, ...]:
        """The ranks at position p of `team`, in every team of its family."""
        return tuple(sorted(m[p] for m in team.teams()))


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
    return Ring(mesh, ptype, mesh_teams(mesh, ptype))


class _Emit:
    """The host ops of one ring attention op."""

    def __init__(self, low: _FunctionLowering, op: AttentionOp, index: int, ring: Ring):
        self.low, self.em, self.op, self.index, self.ring = low, low.em, op, index, ring
        self.all = ring.mesh.devices
        causal, self.scale = op.options()
        self.causal = causal
        em, d = self.em, ring.size
        local_seq = shape_of(low.values[op.operands[0]])[SEQ]
        self.zig = causal and local_seq % 2 == 0
        """Causal attention runs on the zigzag layout (module docstring)."""
        self.halves = [em.constant(h, self.all) for h in (0, 1)]
        self.team_of = {r: team for team, tag in ring.teams for r in tag}
        self.pos: dict[tuple[int, ...], list[SSAValue]] = {}
        self.next: dict[tuple[int, ...], SSAValue] = {}
        self.prev: dict[tuple[int, ...], SSAValue] = {}
        # The transfers run on a stream of their own beside the attention.
        self.main = em.emit(hir.GetCurrentStreamOp(), self.all).results[0]
        zero = em.constant(0, self.all)
        self.side = em.emit(hir.StreamForOp(zero, 1), self.all).results[0]
        for team, tag in ring.teams:
            pos = em.team_index(team, tag)
            one, back = em.constant(1, tag), em.constant(d - 1, tag)
            self.next[team] = em.emit(hir.AddModOp(pos, one, d), tag).results[0]
            self.prev[team] = em.emit(hir.AddModOp(pos, back, d), tag).results[0]
            if self.zig:
                self.pos[team] = [em.constant(i, tag) for i in range(d)]

    # ---- buffers ---------------------------------------------------------------
    def alloc(self, like: Like, suffix: str, elem: Attribute | None = None) -> SSAValue:
        """A buffer of `like`'s local shape (and type, unless `elem`)."""
        shape, t = _shape_elem(like)
        return self.em.alloc(self.em.site(self.index, 0, f"ring/{suffix}"), shape, elem or t, self.all)

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
        """dst = src, converted to dst's element type (`hir.copy`)."""
        if tag:
            self.em.copy(src, dst, tag)

    def add_into(self, acc: SSAValue, part: SSAValue, tag: tuple[int, ...]) -> None:
        """acc += part (part cast to acc's type)."""
        elem = acc.type.element_type  # type: ignore[attr-defined]
        self.launch([acc, part], [acc], lambda op, a, b: [op("add", a, _cast(op, b, elem)).results[0]], tag)

    def merge(self, acc_o: SSAValue, acc_l: SSAValue, o: SSAValue, lse: SSAValue, tag: tuple[int, ...]) -> None:
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

    # ---- parts of a local tensor in the ring's layout -----------------------------
    def half(self, x: SSAValue, h: int) -> SSAValue:
        """Half h of a zigzag buffer (a contiguous view)."""
        return self.em._view_of(hir.SelectOp(x, self.halves[h], 0), x, self.all)

    def part(self, x: SSAValue, part: int) -> SSAValue:
        """`x` (FULL) or one of its halves, as a buffer."""
        return x if part == FULL else self.half(x, part)

    def attention(
        self, name: str, ins: Sequence[tuple[SSAValue, int]], outs: Sequence[tuple[SSAValue, int]], causal: bool, tag: tuple[int, ...]
    ) -> None:
        """One launch of `name` on parts of the ring's buffers: a whole
        zigzag buffer is seen in sequence order inside the region (its two
        halves side by side), a half as it lies."""
        kw = {"scale": self.scale, "causal": True if causal else None}
        nres = 2 if name == "sdpa" else 3
        whole = [self.zig and p == FULL for _, p in ins]
        wout = [self.zig and p == FULL for _, p in outs]

        def build(op, *args):
            xs = [_merged(op, a) if w else a for a, w in zip(args, whole)]
            rs = op(name, *xs, results=nres, **kw).results
            return [_split(op, r) if w else r for r, w in zip(rs, wout)]

        self.launch([self.part(x, p) for x, p in ins], [self.part(x, p) for x, p in outs], build, tag)

    # ---- the ring --------------------------------------------------------------
    def pieces(self, j: int) -> list[tuple[tuple[int, ...], int, int, bool]]:
        """Step j's attention: (ranks, part of q, part of k and v, causal
        mask), one entry per group of positions doing the same (`step`)."""
        d = self.ring.size
        groups: dict[tuple[int, int, bool], list[int]] = {}
        for p in range(d):
            piece = step(d, p, j, self.causal, self.zig)
            if piece is not None:
                groups.setdefault(piece, []).append(p)
        return [(self.ring.ranks(ps), qp, kp, causal) for (qp, kp, causal), ps in groups.items()]

    def pass_on(self, sends: Sequence[SSAValue], recvs: Sequence[SSAValue], what: str) -> list[tuple[SSAValue, tuple[int, ...]]]:
        """Each of `sends` to the next position and `recvs` from the
        previous, issued now on the side stream once the main stream's
        work so far (what last read the receiving buffers, what wrote the
        sent ones) is done; their tokens, which the main stream waits on
        after the step. `what` names them in the communication report."""
        return self.exchange(
            [(tag, [(b, self.next[team]) for b in sends], [(b, self.prev[team]) for b in recvs]) for team, tag in self.ring.teams],
            f"ring {self.op.name.removeprefix('fusion.')} {what}",
        )

    def exchange(
        self, moves: Sequence[tuple[tuple[int, ...], Sequence[tuple[SSAValue, SSAValue]], Sequence[tuple[SSAValue, SSAValue]]]], mark: str
    ) -> list[tuple[SSAValue, tuple[int, ...]]]:
        """Per (ranks, sends, receives) of `moves`, each (buffer, team
        position) sent or received within the ranks' team, on the side
        stream; their tokens."""
        tokens = []
        em, backend = self.em, self.em.backend
        em.emit(hir.SetCurrentStreamOp(self.side), self.all)
        em.emit(hir.SyncStreamOp(self.main), self.all)
        for ranks, sends, recvs in moves:
            team = self.team_of[ranks[0]]
            ops: list[Operation] = [hir.SendOp(b, peer, team, backend) for b, peer in sends]
            ops += [hir.RecvOp(b, peer, team, backend) for b, peer in recvs]
            for o in ops:
                o.attributes[RESHARD_ATTR] = StringAttr(mark)
                em.emit(o, ranks)
                o.results[0].name_hint = "tok"
                tokens.append((o.results[0], ranks))
        em.emit(hir.SetCurrentStreamOp(self.main), self.all)
        return tokens

    def wait(self, tokens: Sequence[tuple[SSAValue, tuple[int, ...]]]) -> None:
        for t, team in tokens:
            self.em.emit(hir.WaitOp(t), team)

    # ---- the zigzag layout -----------------------------------------------------
    def zig_alloc(self, like: Like, suffix: str, elem: Attribute | None = None) -> SSAValue:
        """A buffer of `like` in the zigzag layout: [2, B, H, S/2, ...]."""
        shape, t = _shape_elem(like)
        zshape = (2, *shape[:SEQ], shape[SEQ] // 2, *shape[SEQ + 1 :])
        return self.em.alloc(self.em.site(self.index, 0, f"ring/{suffix}"), zshape, elem or t, self.all)

    def _owner(self, c: int) -> tuple[int, int]:
        """(position, half) holding chunk c of 2d in the zigzag layout."""
        d = self.ring.size
        return (c, 0) if c < d else (2 * d - 1 - c, 1)

    def to_zig(self, x: SSAValue, name: str) -> SSAValue:
        """The zigzag layout of block-laid `x`: position p's block holds
        chunks 2p and 2p+1 of the sequence's 2d; chunk c goes to position
        c (c < d, first half) or 2d-1-c (second half)."""
        z = self.zig_alloc(x, f"zig/{name}")
        moves, d = [], self.ring.size
        for team, _ in self.ring.teams:
            for p in range(d):
                r = self.ring.at(team, p)
                sends, recvs = [], []
                for h in (0, 1):
                    o, slot = self._owner(2 * p + h)
                    src = self.em.chunk(x, self.halves[h], SEQ, 2, self.all)
                    if o == p:
                        self.em.copy(src, self.half(z, slot), r)
                    else:
                        sends.append((src, self.pos[team][o]))
                for slot, c in ((0, p), (1, 2 * d - 1 - p)):
                    src_pos = c // 2
                    if src_pos != p:
                        recvs.append((self.half(z, slot), self.pos[team][src_pos]))
                moves.append((r, sends, recvs))
        self.wait(self.exchange(moves, f"zigzag {self.op.name.removeprefix('fusion.')} {name}"))
        return z

    def from_zig(self, z: SSAValue, dst: SSAValue, name: str) -> None:
        """`to_zig` undone: `z`'s chunks into block-laid `dst`."""
        moves, d = [], self.ring.size
        for team, _ in self.ring.teams:
            for p in range(d):
                r = self.ring.at(team, p)
                sends, recvs = [], []
                for slot, c in ((0, p), (1, 2 * d - 1 - p)):
                    dest, h = divmod(c, 2)
                    if dest == p:
                        self.em.copy(self.half(z, slot), self.em.chunk(dst, self.halves[h], SEQ, 2, self.all), r)
                    else:
                        sends.append((self.half(z, slot), self.pos[team][dest]))
                for h in (0, 1):
                    o, _ = self._owner(2 * p + h)
                    if o != p:
                        recvs.append((self.em.chunk(dst, self.halves[h], SEQ, 2, self.all), self.pos[team][o]))
                moves.append((r, sends, recvs))
        self.wait(self.exchange(moves, f"zigzag {self.op.name.removeprefix('fusion.')} {name}"))

    def laid(self, x: SSAValue, name: str) -> SSAValue:
        return self.to_zig(x, name) if self.zig else x

    def storage(self, like: Like, suffix: str, elem: Attribute | None = None) -> SSAValue:
        return self.zig_alloc(like, suffix, elem) if self.zig else self.alloc(like, suffix, elem)

    def unlaid(self, x: SSAValue, like: Like, name: str, elem: Attribute | None = None) -> SSAValue:
        """`x` (the ring's layout) cast to `elem` in block layout, a buffer of its own."""
        elem = elem or _shape_elem(like)[1]
        if not self.zig:
            buf = self.alloc(like, f"{name}/out", elem)
            self.cast_into(x, buf, self.all)
            return buf
        cast = x
        if x.type.element_type != elem:  # type: ignore[attr-defined]
            cast = self.zig_alloc(like, f"{name}/cast", elem)
            self.cast_into(x, cast, self.all)
        buf = self.alloc(like, f"{name}/out", elem)
        self.from_zig(cast, buf, name)
        return buf

    # ---- forward and backward ----------------------------------------------------
    def forward(self) -> None:
        op = self.op
        q0, k0, v0 = (self.operand(x) for x in op.operands)
        dtype = q0.type.element_type  # type: ignore[attr-defined]
        stat = stat_type(dtype)
        q, k, v = self.laid(q0, "q"), self.laid(k0, "k"), self.laid(v0, "v")
        out_like = _like((*shape_of(q0)[:3], shape_of(v0)[3]), dtype)
        lse_like = _like(shape_of(q0)[:3], stat)
        o_t, l_t = self.storage(out_like, "out_part"), self.storage(lse_like, "lse_part")
        acc_o, acc_l = self.storage(out_like, "acc_out", stat), self.storage(lse_like, "acc_lse")
        rk = [self.storage(k0, f"k{i}") for i in range(2)]
        rv = [self.storage(v0, f"v{i}") for i in range(2)]
        d = self.ring.size
        for j in range(d):
            ck, cv = (k, v) if j == 0 else (rk[j % 2], rv[j % 2])
            tokens = self.pass_on([ck, cv], [rk[(j + 1) % 2], rv[(j + 1) % 2]], "k, v") if j < d - 1 else []
            for tag, qp, kp, causal in self.pieces(j):
                if j == 0:
                    self.attention("sdpa", [(q, qp), (ck, kp), (cv, kp)], [(o_t, qp), (acc_l, qp)], causal, tag)
                    self.cast_into(o_t, acc_o, tag)
                else:
                    self.attention("sdpa", [(q, qp), (ck, kp), (cv, kp)], [(o_t, qp), (l_t, qp)], causal, tag)
                    self.merge(*(self.part(x, qp) for x in (acc_o, acc_l, o_t, l_t)), tag)
            self.wait(tokens)
        self.result(op.results[0], self.unlaid(acc_o, out_like, "out", dtype))
        if len(op.results) > 1:
            self.result(op.results[1], self.unlaid(acc_l, lse_like, "lse") if self.zig else acc_l)

    def backward(self) -> None:
        op = self.op
        blocks = [self.operand(x) for x in op.operands]
        q0, k0, v0 = blocks[:3]
        q, k, v, o, lse, g = (self.laid(x, n) for x, n in zip(blocks, ("q", "k", "v", "out", "lse", "grad")))
        stat = stat_type(q0.type.element_type)  # type: ignore[attr-defined]
        dq_t, dk_t, dv_t = self.storage(q0, "dq_part"), self.storage(k0, "dk_part"), self.storage(v0, "dv_part")
        dq = self.storage(q0, "dq_acc", stat)
        dk = [self.storage(k0, f"dk_acc{i}", stat) for i in range(2)]
        dv = [self.storage(v0, f"dv_acc{i}", stat) for i in range(2)]
        rk = [self.storage(k0, f"k{i}") for i in range(2)]
        rv = [self.storage(v0, f"v{i}") for i in range(2)]
        d = self.ring.size
        for j in range(d):
            ck, cv = (k, v) if j == 0 else (rk[j % 2], rv[j % 2])
            kv_tokens = self.pass_on([ck, cv], [rk[(j + 1) % 2], rv[(j + 1) % 2]], "k, v") if j < d - 1 else []
            for tag, qp, kp, causal in self.pieces(j):
                ins = [(q, qp), (ck, kp), (cv, kp), (o, qp), (lse, qp), (g, qp)]
                self.attention("sdpa_grad", ins, [(dq_t, qp), (dk_t, kp), (dv_t, kp)], causal, tag)
                parts = ((dq_t, dq, qp), (dk_t, dk[j % 2], kp), (dv_t, dv[j % 2], kp))
                for part, acc, p in parts:
                    if j == 0:
                        self.cast_into(part, acc, tag)
                    else:
                        self.add_into(self.part(acc, p), self.part(part, p), tag)
            # the block's gradient sums travel on with it (after step d - 1: home)
            g_tokens = self.pass_on([dk[j % 2], dv[j % 2]], [dk[(j + 1) % 2], dv[(j + 1) % 2]], "dk, dv")
            self.wait(kv_tokens)
            self.wait(g_tokens)
        home = d % 2
        results = []
        for r, acc, like in zip(op.results, (dq, dk[home], dv[home]), (q0, k0, v0)):
            results.append((r, self.unlaid(acc, like, f"grad{r.index}")))
        for r, buf in results:
            self.result(r, buf)


FULL = -1
"""A part of a local tensor: all of it (else the index of a zigzag half)."""


def step(d: int, p: int, j: int, causal: bool, zig: bool) -> tuple[int, int, bool] | None:
    """What position p of a ring of d attends to at step j (to the
    key/value block of position (p - j) mod d): (part of its q, part of
    the block's k and v, causal mask), or None where it skips the step
    (the module docstring). tools/bench_attention.py runs this schedule on
    one device."""
    if j == 0 or not causal:
        return (FULL, FULL, causal and j == 0)
    if not zig:  # block p - j is before this rank's block only where p >= j
        return (FULL, FULL, False) if p >= j else None
    # zigzag: block s = p - j holds chunks s and 2d-1-s, this rank p and 2d-1-p:
    # s < p: both of q's chunks see chunk s whole; s > p: q's second chunk sees both
    return (FULL, 0, False) if p >= j else (1, FULL, False)


Like = SSAValue | tuple[tuple[int, ...], Attribute]
"""A local buffer, or the (shape, element type) of one."""


def _like(shape: Sequence[int], elem: Attribute) -> Like:
    return (tuple(shape), elem)


def _shape_elem(like: Like) -> tuple[tuple[int, ...], Attribute]:
    if isinstance(like, tuple):
        return like
    return tuple(shape_of(like)), like.type.element_type  # type: ignore[attr-defined]


def _merged(op, x: SSAValue) -> SSAValue:
    """A zigzag buffer [2, B, H, c, ...] seen in sequence order [B, H, 2c, ...]."""
    shape = shape_of(x)
    perm = [1, 2, 0, *range(3, len(shape))]
    t = op("permute", x, dims=perm).results[0]
    return op("reshape", t, shape=(shape[1], shape[2], 2 * shape[3], *shape[4:])).results[0]


def _split(op, x: SSAValue) -> SSAValue:
    """`_merged` undone."""
    shape = shape_of(x)
    t = op("reshape", x, shape=(shape[0], shape[1], 2, shape[2] // 2, *shape[3:])).results[0]
    return op("permute", t, dims=[2, 0, 1, *range(3, len(shape) + 1)]).results[0]


def _cast(op, x: SSAValue, elem) -> SSAValue:
    if x.type.element_type == elem:  # type: ignore[attr-defined]
        return x
    return op("cast", x, dtype=elem).results[0]


def _bcast(op, w: SSAValue, shape: Sequence[int]) -> SSAValue:
    return op("broadcast_in_dim", w, dims=list(range(len(shape) - 1)), shape=tuple(shape)).results[0]


def lower(low: _FunctionLowering, op: AttentionOp, index: int, ring: Ring) -> int:
    """The ring form of `op` (module docstring); returns the next op's index."""
    e = _Emit(low, op, index, ring)
    if isinstance(op, SdpaOp):
        e.forward()
    else:
        e.backward()
    return index + 1

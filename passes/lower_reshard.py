"""Reshards lowered to communications: the table of DESIGN.md section 3.

`lower_set` lowers one pure reshard `fusion.set %x : (A) -> B`. Placement is
what moves data: Stream splits, and splits or partials over mesh axes of size
1, are dropped first (`placement`); equal placements are a local `hir.copy`.

**One mesh.** `plan` finds a sequence of steps, each over one device type p
(teams `Mesh.teams(p)`, one communication op per mesh slice, each with its own
team, all inside the mesh's `hir.if_rank`):

| step | when | host IR |
| --- | --- | --- |
| slice | `-` to p on dim j | per team: `hir.team_index`, `hir.chunk` dim j, `hir.copy` into a new buffer |
| allgather | p on dim i to `-` | `hir.allgather` |
| alltoall | p on dim i to p on dim j | `hir.alltoall` |
| allreduce | `partial = p` to `-` | `hir.allreduce` (op = sum) |
| reduce_scatter | `partial = p` to p on dim j | `hir.reduce_scatter` (op = sum) |

Slices come first (less data to move), then alltoalls, reductions, gathers;
a split always leaves or joins a dimension as its innermost split, so each
step moves whole blocks.

**Layout.** Collectives stack blocks along dim 0. A communicated dimension d
that is outermost in memory (d = 0, or every dimension before it of local
extent 1) is used in place through a `hir.view`; otherwise the blocks are
staged: `blocks_in` copies the local buffer into `[n * C0, C1, ...]` (block k
of dim d first) with a `hir.launch` of `fusion.reshape` + `fusion.permute` +
`fusion.reshape`, and `blocks_out` receives into such a staging buffer and
launches the inverse copy into the result. make-resharding-contiguous makes
communicated dimensions outermost, so staging is the fallback, not the rule.

**Two meshes** (A to B, unless both have the same devices and shape: then they
are one mesh):
- partial on A: `hir.reduce` to the one device of B (root: its team position,
  or position 0 then a send when B's device is not on A); otherwise an
  allreduce on A first;
- A of one device, B replicated on several: `hir.broadcast` over B's devices
  (A's device first when not among them), in place in a buffer made on the
  team; the sender's copy is given back and the value kept on B only;
- A of one device in B, B split on one dimension by one team: `hir.scatter`;
- B of one device in A, A split on one dimension by one team: `hir.gather`;
- anything else: `hir.send`/`hir.recv` pairs of whole blocks or sub-blocks
  (chunk views), each team `[sender, receiver]`; each rank runs its part in
  its own `hir.if_rank [r]`, issuing its sends and receives in one global
  order and waiting at the end (no deadlock with blocking or non-blocking
  point-to-point); a device holding what it needs copies locally.

Every communication (and the copies of a slice) carries
`hir.reshard = "FROM->TO"`: `DIDx->-`, `DIDx->Stream` (the gathered dimension
has a Stream split in B), `-->DIDx`, `DIDx->DIDx` (alltoall), `partial->-`,
`partial->DIDx`, `@A->@B` (between meshes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import PermuteOp, ReshapeOp, SetOp, lookup_mesh, sharding_of
from fuserc.sharding import Mesh, Sharding, Split

if TYPE_CHECKING:
    from fuserc.passes.lower_to_host_ir import Emitter

Shape = tuple[int, ...]
Block_ = tuple[tuple[int, int], ...]
"""A block of a global tensor: (start, size) per dimension."""


class ReshardError(Exception):
    """Why a reshard has no lowering (becomes a diagnostic at the set)."""


# --------------------------------------------------------------------------
# Placement and planning
# --------------------------------------------------------------------------


def placement(s: Sharding, mesh: Mesh) -> Sharding:
    """What decides where data lies: `s` without Stream splits, and without
    splits or partial over mesh axes of size 1 (they move nothing)."""
    dims = tuple(
        tuple(sp for sp in d if not sp.is_stream and mesh.axis_size(sp.ptype) > 1) for d in s.dims
    )
    partial = s.partial if s.partial and mesh.axis_size(s.partial) > 1 else None
    return Sharding(s.mesh, dims, partial)


@dataclass(frozen=True)
class Step:
    """One collective over device type `ptype` (see the module docstring)."""

    kind: str  # slice | allgather | alltoall | allreduce | reduce_scatter
    ptype: str
    src_dim: int | None
    dst_dim: int | None
    after: Sharding


def _prefix(x: list[Split], y: list[Split]) -> bool:
    return len(x) <= len(y) and y[: len(x)] == x


def plan(a: Sharding, b: Sharding) -> list[Step]:
    """Steps taking placement `a` to placement `b` on one mesh."""
    if b.partial and b.partial != a.partial:
        raise ReshardError(f"a value cannot become a partial sum over {b.partial}")
    cur = [list(d) for d in a.dims]
    tgt = [list(d) for d in b.dims]
    part = a.partial
    rank = len(cur)
    steps: list[Step] = []

    def used(p: str) -> bool:
        return part == p or any(sp.ptype == p for d in cur for sp in d)

    def wrong(i: int) -> bool:
        return bool(cur[i]) and not _prefix(cur[i], tgt[i])

    def record(kind: str, p: str, src: int | None, dst: int | None) -> None:
        after = Sharding(a.mesh, tuple(tuple(d) for d in cur), part)
        steps.append(Step(kind, p, src, dst, after))

    for _ in range(8 * (rank + 4)):
        if cur == tgt and part == b.partial:
            return steps
        done = False
        for j in range(rank):  # local slices
            if _prefix(cur[j], tgt[j]) and len(cur[j]) < len(tgt[j]):
                sp = tgt[j][len(cur[j])]
                if not used(sp.ptype):
                    cur[j].append(sp)
                    record("slice", sp.ptype, None, j)
                    done = True
                    break
        if not done:  # a split moving to another dimension
            for i in range(rank):
                if not wrong(i):
                    continue
                sp = cur[i][-1]
                j = next((j for j in range(rank) if j != i and _prefix(cur[j] + [sp], tgt[j])), None)
                if j is not None:
                    cur[i].pop()
                    cur[j].append(sp)
                    record("alltoall", sp.ptype, i, j)
                    done = True
                    break
        if not done and part and part != b.partial:  # partial sums
            p = part
            part = None
            j = next((j for j in range(rank) if _prefix(cur[j] + [Split(p)], tgt[j])), None)
            if j is not None:
                cur[j].append(Split(p))
                record("reduce_scatter", p, None, j)
            else:
                record("allreduce", p, None, None)
            done = True
        if not done:  # gathers
            for i in range(rank):
                if wrong(i):
                    sp = cur[i].pop()
                    record("allgather", sp.ptype, i, None)
                    done = True
                    break
        if not done:
            break
    raise ReshardError("no sequence of collectives reaches the result sharding")


# --------------------------------------------------------------------------
# Blocks outermost: views or staging copies
# --------------------------------------------------------------------------


def _shape(v: SSAValue) -> Shape:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _elem(v: SSAValue) -> Attribute:
    t = v.type
    assert isinstance(t, TensorType)
    return t.element_type


def _reshape(x: SSAValue, shape: Sequence[int]) -> Operation:
    return ReshapeOp.create(operands=[x], result_types=[TensorType(_elem(x), list(shape))])


def _permute(x: SSAValue, perm: Sequence[int]) -> Operation:
    shape = _shape(x)
    return PermuteOp.create(
        operands=[x],
        result_types=[TensorType(_elem(x), [shape[d] for d in perm])],
        properties={"dims": hir.int_array(perm)},
    )


def _stacked(shape: Shape, dim: int, n: int) -> tuple[Shape, Shape]:
    """(C, flat): one of n blocks of `shape` along `dim`, and n such blocks
    stacked along dim 0."""
    c = tuple(e // n if d == dim else e for d, e in enumerate(shape))
    return c, (n * c[0], *c[1:])


def _outermost(shape: Shape, dim: int) -> bool:
    """Blocks along `dim` are contiguous in a row-major buffer of `shape`."""
    return math.prod(shape[:dim]) == 1


def blocks_in(em: Emitter, src: SSAValue, dim: int, n: int, site: str, tag: tuple[int, ...]) -> SSAValue:
    """`src` seen as its n blocks along `dim` stacked along dim 0."""
    shape = _shape(src)
    _, flat = _stacked(shape, dim, n)
    if dim == 0:
        return src
    if _outermost(shape, dim):
        return em.view(src, flat, tag)
    stage = em.alloc(site, flat, _elem(src), tag)
    split = (*shape[:dim], n, shape[dim] // n, *shape[dim + 1 :])
    perm = [dim, *range(dim), *range(dim + 1, len(split))]

    def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
        r1 = _reshape(args[0], split)
        p = _permute(r1.results[0], perm)
        r2 = _reshape(p.results[0], flat)
        return [r1, p, r2], [r2.results[0]]

    em.launch([src], [stage], body, tag)
    return stage


def blocks_out(
    em: Emitter, dst: SSAValue, dim: int, n: int, site: str, tag: tuple[int, ...]
) -> tuple[SSAValue, Callable[[], None]]:
    """A buffer to receive the n blocks of `dst` along `dim` stacked along
    dim 0, and what to run once they are there (a copy into `dst` when
    staged)."""
    shape = _shape(dst)
    c, flat = _stacked(shape, dim, n)
    if dim == 0:
        return dst, lambda: None
    if _outermost(shape, dim):
        return em.view(dst, flat, tag), lambda: None
    stage = em.alloc(site, flat, _elem(dst), tag)
    perm = [*range(1, dim + 1), 0, *range(dim + 1, len(shape) + 1)]

    def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
        r1 = _reshape(args[0], (n, *c))
        p = _permute(r1.results[0], perm)
        r2 = _reshape(p.results[0], shape)
        return [r1, p, r2], [r2.results[0]]

    return stage, lambda: em.launch([stage], [dst], body, tag)


# --------------------------------------------------------------------------
# Blocks between meshes
# --------------------------------------------------------------------------


def _block(s: Sharding, shape: Shape, mesh: Mesh, device: int) -> Block_:
    local = s.local_shape(shape, mesh)
    return tuple(
        (s.dim_indices(d, e, mesh, device)[0] if s.dims[d] else 0, local[d]) for d, e in enumerate(shape)
    )


def _intersect(r: Block_, q: Block_) -> Block_ | None:
    out = []
    for (rs, rn), (qs, qn) in zip(r, q):
        lo, hi = max(rs, qs), min(rs + rn, qs + qn)
        if lo >= hi:
            return None
        out.append((lo, hi - lo))
    return tuple(out)


Spec = tuple[tuple[int, int, int], ...]
"""A sub-block as nested chunks: (dim, index, chunks) per cut dimension."""


def _sub(outer: Block_, inner: Block_) -> Spec:
    spec = []
    for d, ((os_, on), (is_, in_)) in enumerate(zip(outer, inner)):
        if in_ == on:
            continue
        if on % in_ or (is_ - os_) % in_:
            raise ReshardError("the blocks of the two shardings do not nest evenly")
        spec.append((d, (is_ - os_) // in_, on // in_))
    return tuple(spec)


def _contiguous(view: Shape, full: Shape) -> bool:
    """A box of extents `view` inside a row-major `full` is one range."""
    for k in range(len(view) + 1):
        if all(view[d] == 1 for d in range(k)) and all(view[d] == full[d] for d in range(k + 1, len(view))):
            return True
    return False


@dataclass(frozen=True)
class _Transfer:
    sender: int
    receiver: int
    send: Spec  # the part of the sender's local buffer
    recv: Spec  # where it lands in the receiver's local buffer


# --------------------------------------------------------------------------
# One reshard
# --------------------------------------------------------------------------


@dataclass
class _Reshard:
    em: Emitter
    op: SetOp
    index: int
    shape: Shape
    elem: Attribute
    a: Sharding
    b: Sharding
    ma: Mesh
    mb: Mesh
    base_marks: dict[str, Attribute] = field(default_factory=dict)

    def site(self, suffix: str = "") -> str:
        return self.em.site(self.index, 0, suffix)

    def mark(self, text: str) -> None:
        self.em.marks = {**self.base_marks, "hir.reshard": StringAttr(text)}

    def local(self, s: Sharding, mesh: Mesh) -> Shape:
        return s.local_shape(self.shape, mesh)

    def alloc(self, site: str, shape: Sequence[int], tag: tuple[int, ...], owner: tuple[int, ...] | None = None) -> SSAValue:
        return self.em.alloc(site, shape, self.elem, tag, owner)

    def run(self, src: SSAValue) -> SSAValue:
        self.base_marks = dict(self.em.marks)
        for s in (self.a, self.b):
            if not all(s.is_contiguous_block(d) for d in range(s.rank)) and self.a.dims != self.b.dims:
                raise ReshardError("a Stream split outside a device split gives blocks that are not contiguous")
        a, b = placement(self.a, self.ma), placement(self.b, self.mb)
        if self.ma.devices == self.mb.devices and self.ma.shape == self.mb.shape:
            a = Sharding(b.mesh, a.dims, a.partial)
            return self.same_mesh(src, a, b, self.mb, self.site())
        self.mark(f"@{self.ma.name}->@{self.mb.name}")
        return self.cross_mesh(src, a, b)

    # ---- one mesh ---------------------------------------------------------------
    def same_mesh(self, src: SSAValue, a: Sharding, b: Sharding, mesh: Mesh, site: str) -> SSAValue:
        steps = plan(a, b)
        if not steps:
            self.mark("copy")
            out = self.alloc(site, self.local(b, mesh), mesh.devices)
            self.em.copy(src, out, mesh.devices)
            return out
        cur, cur_s = src, a
        for k, step in enumerate(steps):
            last = k == len(steps) - 1
            cur = self.step(step, cur, cur_s, mesh, site if last else f"{site}/s{k}", f"{site}/s{k}")
            cur_s = step.after
        return cur

    def marker(self, step: Step) -> str:
        p = step.ptype
        if step.kind == "slice":
            return f"-->{p}"
        if step.kind == "allgather":
            assert step.src_dim is not None
            streamed = any(sp.is_stream for sp in self.b.dims[step.src_dim])
            return f"{p}->{'Stream' if streamed else '-'}"
        if step.kind == "alltoall":
            return f"{p}->{p}"
        if step.kind == "allreduce":
            return "partial->-"
        return f"partial->{p}"

    def step(self, step: Step, cur: SSAValue, cur_s: Sharding, mesh: Mesh, site: str, aux: str) -> SSAValue:
        em = self.em
        tag = mesh.devices
        p = step.ptype
        n = mesh.axis_size(p)
        teams = mesh.teams(p)
        backend = em.backend
        self.mark(self.marker(step))
        out = self.alloc(site, self.local(step.after, mesh), tag)
        if step.kind == "slice":
            assert step.dst_dim is not None
            for team in teams:
                pos = em.team_index(team, team)
                em.copy(em.chunk(cur, pos, step.dst_dim, n, team), out, team)
        elif step.kind == "allgather":
            assert step.src_dim is not None
            buf, finish = blocks_out(em, out, step.src_dim, n, f"{aux}/out", tag)
            for team in teams:
                em.communicate(hir.AllgatherOp(cur, buf, team, backend), team)
            finish()
        elif step.kind == "alltoall":
            assert step.src_dim is not None and step.dst_dim is not None
            send = blocks_in(em, cur, step.dst_dim, n, f"{aux}/in", tag)
            buf, finish = blocks_out(em, out, step.src_dim, n, f"{aux}/out", tag)
            for team in teams:
                em.communicate(hir.AlltoallOp(send, buf, team, backend), team)
            finish()
        elif step.kind == "allreduce":
            for team in teams:
                em.communicate(hir.AllreduceOp(cur, out, team, "sum", backend), team)
        else:
            assert step.kind == "reduce_scatter" and step.dst_dim is not None
            send = blocks_in(em, cur, step.dst_dim, n, f"{aux}/in", tag)
            for team in teams:
                em.communicate(hir.ReduceScatterOp(send, out, team, "sum", backend), team)
        return out

    # ---- two meshes ---------------------------------------------------------------
    def cross_mesh(self, src: SSAValue, a: Sharding, b: Sharding) -> SSAValue:
        ma, mb = self.ma, self.mb
        if b.partial:
            raise ReshardError(f"a value cannot become a partial sum over {b.partial} on another mesh")
        if a.partial:
            if not a.device_types() and len(ma.teams(a.partial)) == 1 and mb.size == 1:
                return self.reduce_to_one(src, a)
            reduced = a.with_partial(None)
            src = self.same_mesh(src, a, reduced, ma, self.site("reduced"))
            self.mark(f"@{ma.name}->@{mb.name}")
            a = reduced
        if ma.size == 1 and mb.size > 1 and b.is_replicated():
            return self.broadcast(src)
        if ma.size == 1 and ma.devices[0] in mb.devices and (one := self.one_split(b, mb)):
            return self.scatter(src, b, *one)
        if mb.size == 1 and mb.devices[0] in ma.devices and (one := self.one_split(a, ma)):
            return self.gather(src, *one)
        holders = {d: _block(a, self.shape, ma, d) for d in ma.devices}
        return self.transfer(src, holders, b)

    @staticmethod
    def one_split(s: Sharding, mesh: Mesh) -> tuple[str, int] | None:
        """(p, dim) when `s` is one split p, on dim, over a single team."""
        types = s.device_types()
        if s.partial or len(types) != 1 or len(mesh.teams(types[0])) != 1:
            return None
        dim = s.dim_of(types[0])
        assert dim is not None
        return types[0], dim

    def reduce_to_one(self, src: SSAValue, a: Sharding) -> SSAValue:
        """Partial on a one-team mesh to a mesh of one device: hir.reduce."""
        em, ma, mb = self.em, self.ma, self.mb
        assert a.partial is not None
        team = ma.teams(a.partial)[0]
        b_dev = mb.devices[0]
        root = b_dev if b_dev in team else team[0]
        site = self.site() if root == b_dev else self.site("reduced")
        out = self.alloc(site, self.shape, (root,))
        self.mark(f"partial@{ma.name}->@{mb.name}")
        pos = em.constant(team.index(root), team)
        em.communicate(hir.ReduceOp(src, out, pos, team, "sum", em.backend), team)
        if root == b_dev:
            return out
        self.mark(f"@{ma.name}->@{mb.name}")
        return self.transfer(out, {root: tuple((0, e) for e in self.shape)}, Sharding.replicated(mb.name, len(self.shape)))

    def broadcast(self, src: SSAValue) -> SSAValue:
        """One device to a replicated mesh: hir.broadcast in place."""
        em, sender, receivers = self.em, self.ma.devices[0], self.mb.devices
        team = receivers if sender in receivers else (sender, *receivers)
        buf = self.alloc(self.site(), self.shape, team, owner=receivers)
        em.copy(src, buf, (sender,))
        pos = em.constant(team.index(sender), team)
        em.communicate(hir.BroadcastOp(buf, pos, team, em.backend), team)
        if sender in receivers:
            return buf
        em.dealloc(buf, (sender,))
        return em.restrict(buf, receivers)

    def scatter(self, src: SSAValue, b: Sharding, p: str, dim: int) -> SSAValue:
        """One device to a mesh it belongs to, split on one dim: hir.scatter."""
        em, sender, mb = self.em, self.ma.devices[0], self.mb
        team = mb.teams(p)[0]
        send = blocks_in(em, src, dim, len(team), self.site("in"), (sender,))
        out = self.alloc(self.site(), self.local(b, mb), mb.devices)
        pos = em.constant(team.index(sender), team)
        em.communicate(hir.ScatterOp(send, out, pos, team, em.backend), team)
        return out

    def gather(self, src: SSAValue, p: str, dim: int) -> SSAValue:
        """A mesh split on one dim to one of its devices: hir.gather."""
        em, ma, receiver = self.em, self.ma, self.mb.devices[0]
        team = ma.teams(p)[0]
        out = self.alloc(self.site(), self.shape, (receiver,))
        buf, finish = blocks_out(em, out, dim, len(team), self.site("out"), (receiver,))
        pos = em.constant(team.index(receiver), team)
        em.communicate(hir.GatherOp(src, buf, pos, team, em.backend), team)
        finish()
        return out

    def transfer(self, src: SSAValue, holders: dict[int, Block_], b: Sharding) -> SSAValue:
        """Point-to-point: each device of B gets its block from the devices
        holding it (`holders`: device -> the block its `src` buffer holds)."""
        em, mb = self.em, self.mb
        out = self.alloc(self.site(), self.local(b, mb), mb.devices)
        by_block: dict[Block_, list[int]] = {}
        for d, blk in holders.items():
            by_block.setdefault(blk, []).append(d)
        transfers: list[_Transfer] = []
        for pos, r in enumerate(mb.devices):
            want = _block(b, self.shape, mb, r)
            for have, devices in by_block.items():
                common = _intersect(want, have)
                if common is None:
                    continue
                if common == want:
                    send, recv = _sub(have, want), ()
                elif common == have:
                    send, recv = (), _sub(want, have)
                else:
                    raise ReshardError("the blocks of the two shardings overlap only in part")
                sender = r if r in devices else devices[pos % len(devices)]
                transfers.append(_Transfer(sender, r, send, recv))
        ranks = list(dict.fromkeys(x for t in transfers for x in (t.sender, t.receiver)))
        for x in ranks:
            self.transfers_of(x, [t for t in transfers if x in (t.sender, t.receiver)], src, out)
        return out

    def sub_view(self, buf: SSAValue, spec: Spec, tag: tuple[int, ...], const: Callable[[int], SSAValue]) -> SSAValue:
        for dim, index, chunks in spec:
            buf = self.em.chunk(buf, const(index), dim, chunks, tag)
        return buf

    def transfers_of(self, x: int, transfers: list[_Transfer], src: SSAValue, out: SSAValue) -> None:
        """Rank x's part: sends and receives in the global order, then the
        waits, then the copies out of receive staging buffers."""
        em, tag = self.em, (x,)
        tokens: list[SSAValue] = []
        after: list[tuple[SSAValue, SSAValue]] = []
        consts: dict[int, SSAValue] = {}

        def const(n: int) -> SSAValue:
            if n not in consts:
                consts[n] = em.constant(n, tag)
            return consts[n]

        for t in transfers:
            team = (t.sender, t.receiver)
            if t.sender == t.receiver:
                em.copy(self.sub_view(src, t.send, tag, const), self.sub_view(out, t.recv, tag, const), tag)
            elif x == t.sender:
                view = self.sub_view(src, t.send, tag, const)
                if not _contiguous(_shape(view), _shape(src)):
                    stage = self.alloc(self.site(f"send{x}to{t.receiver}"), _shape(view), tag)
                    em.copy(view, stage, tag)
                    view = stage
                op = em.emit(hir.SendOp(view, const(1), team, em.backend), tag, marked=True)
                tokens.append(op.results[0])
            else:
                view = self.sub_view(out, t.recv, tag, const)
                target = view
                if not _contiguous(_shape(view), _shape(out)):
                    target = self.alloc(self.site(f"recv{x}from{t.sender}"), _shape(view), tag)
                    after.append((target, view))
                op = em.emit(hir.RecvOp(target, const(0), team, em.backend), tag, marked=True)
                tokens.append(op.results[0])
        for token in tokens:
            em.emit(hir.WaitOp(token), tag)
        for stage, view in after:
            em.copy(stage, view, tag)


def lower_set(em: Emitter, op: SetOp, src: SSAValue, index: int) -> SSAValue:
    """The local buffer of `op`'s result (present on its mesh's devices),
    computed from `src`, the local buffer of its operand."""
    a, b = sharding_of(op.operands[0]), sharding_of(op.results[0])
    assert a is not None and b is not None
    ma, mb = lookup_mesh(op, a.mesh), lookup_mesh(op, b.mesh)
    assert ma is not None and mb is not None, "the verifier checks that meshes exist"
    t = op.results[0].type
    assert isinstance(t, TensorType)
    reshard = _Reshard(em, op, index, tuple(t.get_shape()), t.element_type, a, b, ma, mb)
    try:
        return reshard.run(src)
    except ReshardError as e:
        raise error_at(op, f"cannot lower 'fusion.set' from {a} to {b}: {e}") from None

"""Reshards lowered to communications: the table of docs/passes.md.

`lower_set` lowers one `fusion.set %x : (A) -> B` on buffers in memory order
(shardings and shape permuted by the buffers' alloc_order). A set that is one
`reshard_util.Step` (`reshard_step`, what make-resharding-contiguous leaves)
is that step; otherwise the steps of `reshard_util.plan_reshard`, each into a
new buffer. Equal placements (Stream splits aside) are a `hir.copy`.

**One mesh.** Each step is over one device type p, with one communication op
for every mesh slice, its team the first slice's with translates to the
others (`Mesh.translates(p)`, in the mesh's region), or, where the slices
are not translates of one another, one op per slice (`Mesh.teams(p)`),
each followed by its wait in the `hir.if_rank` of its team (`mesh_teams`):

A step over a mesh axis of one device (teams of one) communicates nothing
and copies nothing: the result is the operand's buffer.

| step | host IR |
| --- | --- |
| local_slice (`-` to p on dim j) | per team: `hir.team_index`, `hir.chunk` dim j, `hir.copy` into a new buffer; behind Stream splits (to `Stream(S)*p`): both buffers seen (`hir.view`) with dim j split in (S, extent / S), the chunk taken along j + 1 |
| allgather (p on dim i to `-`) | `hir.allgather` |
| alltoall (p from dim i to dim j) | `hir.alltoall` |
| allreduce (`partial = p` to `-`) | `hir.allreduce` (op = sum) |
| reduce_scatter (`partial = p` to p on dim j) | `hir.reduce_scatter` (op = sum) |

A partial sum over several axes (`partial = [DIDy, DIDx]`) is summed by
one allreduce (or reduce-scatter, its blocks in the team's row-major
order: `DIDy*DIDx` on dim j) over the team spanning all of them (the mesh
slices along those axes), or over some of them, leaving a partial over the
rest, where that is cheaper (`reshard_util.plan_reshard`).

**Layout.** Collectives stack blocks along dim 0. A communicated dimension d
that is outermost in memory (d = 0, or every dimension before it of local
extent 1) is used in place (through a `hir.view`); otherwise the blocks are
staged: `blocks_in` copies the buffer into `[n * C0, C1, ...]` (block k of
dim d k-th) with a `hir.launch` of `fusion.reshape`, `fusion.permute`,
`fusion.reshape`, and `blocks_out` receives into such a staging buffer and
launches the inverse copy into the result. make-resharding-contiguous makes
communicated dimensions outermost, so staging is the fallback.

**Two meshes** (steps send_recv, gather, scatter, reduce):
- partial, split nowhere, to a mesh of one device: `hir.reduce` over one
  team (the device's own, or the first team's first device, then a send,
  when it is not on the mesh): every team holds all the summands; a
  partial sum moved as it is: send/recv of each summand to the device at the
  same coordinates; any other partial is first reduced on A (allreduce);
- A of one device, B replicated on several: `hir.broadcast` in place in a
  buffer made on B's devices (and the sender, first, when not among them);
  the sender's copy is given back and the value kept on B only;
- A of one device in B, B split on one dimension by one team: `hir.scatter`;
- B of one device in A, A split on one dimension by one team: `hir.gather`;
- anything else: `hir.send`/`hir.recv` of whole blocks or sub-blocks (chunk
  views; staged when not contiguous), each with team `[sender, receiver]`;
  of several holders of a block, B's k-th device takes the (k mod count)-th,
  so equal meshes pair up device by device. Each rank runs its part in its
  own `hir.if_rank [r]`, issuing its sends and receives in one global order
  and waiting at the end (no deadlock with blocking or non-blocking
  point-to-point); a device holding what it needs copies locally.

Every communication (and the copies of a reshard) carries
`hir.reshard = "FROM->TO"`: `DIDx->-`, `DIDx->Stream` (the gathered dimension
has a Stream split in B), `-->DIDx`, `DIDx->DIDx` (alltoall), `partial->-`,
`partial->DIDx`, `partial@A->@B` (reduce to another mesh), `@A->@B` (between
meshes), `copy`.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr, TensorType, i64
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import PermuteOp, ReshapeOp, SetOp, lookup_mesh, sharding_of
from fuserc.passes.reshard_util import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    LOCAL_SLICE,
    REDUCE_SCATTER,
    Step,
    chunked_dim,
    plan_reshard,
    reshard_step,
)
from fuserc.passes.stream_sites import STREAM_ATTR
from fuserc.sharding import Mesh, Sharding, format_partial, one_or_many
from fuserc.dialects.fusion import element_type_of, shape_of, tensor_type

if TYPE_CHECKING:
    from fuserc.passes.lower_to_host_ir import Emitter

Shape = tuple[int, ...]
Box = tuple[tuple[int, int], ...]
"""A block of a global tensor: (start, size) per dimension."""


class ReshardError(Exception):
    """Why a reshard has no lowering (becomes a diagnostic at the set)."""


# --------------------------------------------------------------------------
# Blocks outermost: views or staging copies
# --------------------------------------------------------------------------


def reshape_op(x: SSAValue, shape: Sequence[int]) -> Operation:
    return ReshapeOp.create(operands=[x], result_types=[tensor_type(element_type_of(x), tuple(shape))])


def permute_op(x: SSAValue, perm: Sequence[int]) -> Operation:
    shape = shape_of(x)
    return PermuteOp.create(
        operands=[x],
        result_types=[tensor_type(element_type_of(x), tuple(shape[d] for d in perm))],
        properties={"dims": hir.int_array(perm)},
    )


def _stacked(shape: Shape, dim: int, n: int) -> tuple[Shape, Shape]:
    """(C, flat): one of n blocks of `shape` along `dim`, and n such blocks
    stacked along dim 0."""
    c = tuple(e // n if d == dim else e for d, e in enumerate(shape))
    return c, (n * c[0], *c[1:])


def _split_dim(shape: Shape, dim: int, outer: int) -> Shape:
    """`shape` with `dim` split into (outer, extent / outer)."""
    return (*shape[:dim], outer, shape[dim] // outer, *shape[dim + 1 :])


def _outermost(shape: Shape, dim: int) -> bool:
    """Blocks along `dim` are contiguous in a row-major buffer of `shape`
    (an empty buffer's blocks are empty: trivially so)."""
    return math.prod(shape[:dim]) == 1 or 0 in shape


def _comm_dims(step: Step) -> tuple[int, int]:
    """The dimensions a collective communicates along in its operand and in
    its result (an alltoall's scatter and gather dims; one dim otherwise)."""
    if step.kind == ALLTOALL:
        assert step.scatter_dim is not None and step.gather_dim is not None
        return step.scatter_dim, step.gather_dim
    dim = step.gather_dim if step.kind == ALLGATHER else step.scatter_dim
    assert dim is not None
    return dim, dim


def _chunk_shape(shape: Shape, dim: int, chunks: int) -> Shape:
    """The shape of one of `chunks` chunks of `shape` along `dim`."""
    return tuple(e // chunks if d == dim else e for d, e in enumerate(shape))


def blocks_in(em: Emitter, src: SSAValue, dim: int, n: int, site: str, tag: tuple[int, ...]) -> SSAValue:
    """`src` seen as its n blocks along `dim` stacked along dim 0."""
    shape = shape_of(src)
    _, flat = _stacked(shape, dim, n)
    if dim == 0:
        return src
    if _outermost(shape, dim):
        return em.view(src, flat, tag)
    stage = em.alloc(site, flat, element_type_of(src), tag)
    split = (*shape[:dim], n, shape[dim] // n, *shape[dim + 1 :])
    perm = [dim, *range(dim), *range(dim + 1, len(split))]

    def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
        r1 = reshape_op(args[0], split)
        p = permute_op(r1.results[0], perm)
        r2 = reshape_op(p.results[0], flat)
        return [r1, p, r2], [r2.results[0]]

    em.launch([src], [stage], body, tag)
    return stage


def blocks_out(
    em: Emitter, dst: SSAValue, dim: int, n: int, site: str, tag: tuple[int, ...]
) -> tuple[SSAValue, Callable[[], None]]:
    """A buffer to receive the n blocks of `dst` along `dim` stacked along
    dim 0, and what to run once they are there (a copy into `dst` when
    staged)."""
    shape = shape_of(dst)
    c, flat = _stacked(shape, dim, n)
    if dim == 0:
        return dst, lambda: None
    if _outermost(shape, dim):
        return em.view(dst, flat, tag), lambda: None
    stage = em.alloc(site, flat, element_type_of(dst), tag)
    perm = [*range(1, dim + 1), 0, *range(dim + 1, len(shape) + 1)]

    def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
        r1 = reshape_op(args[0], (n, *c))
        p = permute_op(r1.results[0], perm)
        r2 = reshape_op(p.results[0], shape)
        return [r1, p, r2], [r2.results[0]]

    return stage, lambda: em.launch([stage], [dst], body, tag)


# --------------------------------------------------------------------------
# Blocks between meshes
# --------------------------------------------------------------------------


def _block(s: Sharding, shape: Shape, mesh: Mesh, device: int) -> Box:
    local = s.local_shape(shape, mesh)
    starts = [s.dim_indices(d, e, mesh, device) if s.dims[d] else () for d, e in enumerate(shape)]
    return tuple((idx[0] if idx else 0, n) for idx, n in zip(starts, local))


def _intersect(r: Box, q: Box) -> Box | None:
    out = []
    for (rs, rn), (qs, qn) in zip(r, q):
        lo, hi = max(rs, qs), min(rs + rn, qs + qn)
        if lo >= hi:
            return None
        out.append((lo, hi - lo))
    return tuple(out)


Spec = tuple[tuple[int, int, int], ...]
"""A sub-block as nested chunks: (dim, index, chunks) per cut dimension."""


def _sub(outer: Box, inner: Box) -> Spec:
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


class _BlockIndex:
    """The blocks of a sharding (a grid: per dimension, disjoint intervals),
    found by the box they meet in time proportional to the answer, not to
    the number of blocks (transfers between big meshes stay linear)."""

    def __init__(self, blocks: list[Box]):
        self.order = {b: i for i, b in enumerate(blocks)}
        rank = len(blocks[0]) if blocks else 0
        self.dims = [sorted({b[d] for b in blocks}) for d in range(rank)]
        self.ends = [[s + n for s, n in iv] for iv in self.dims]

    def meeting(self, box: Box) -> list[Box]:
        """The blocks that share an element with `box`, in the given order."""
        per_dim = []
        for (start, size), intervals, ends in zip(box, self.dims, self.ends):
            i = bisect.bisect_right(ends, start)
            hit = []
            while i < len(intervals) and intervals[i][0] < start + size:
                if intervals[i][1]:
                    hit.append(intervals[i])
                i += 1
            per_dim.append(hit)
        found = [b for b in itertools.product(*per_dim) if b in self.order]
        return sorted(found, key=self.order.__getitem__)


@dataclass(frozen=True)
class _Transfer:
    sender: int
    receiver: int
    send: Spec  # the part of the sender's local buffer
    recv: Spec  # where it lands in the receiver's local buffer


# --------------------------------------------------------------------------
# One reshard
# --------------------------------------------------------------------------


def permuted(s: Sharding, order: Sequence[int]) -> Sharding:
    """`s` for the tensor with its dimensions in `order` (the buffer's)."""
    return s.with_dims([s.dims[d] for d in order])


@dataclass
class _Reshard:
    """One set, in buffer coordinates: shardings and shape permuted by the
    buffer's `alloc_order`, so that the plan works on the memory layout."""

    em: Emitter
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

    def mesh(self, name: str) -> Mesh:
        return self.ma if name == self.ma.name else self.mb

    def local(self, s: Sharding) -> Shape:
        return s.local_shape(self.shape, self.mesh(s.mesh))

    def alloc(self, site: str, shape: Sequence[int], tag: tuple[int, ...]) -> SSAValue:
        return self.em.alloc(site, shape, self.elem, tag)

    def run(self, src: SSAValue) -> SSAValue:
        self.base_marks = dict(self.em.marks)
        meshes = {self.ma.name: self.ma, self.mb.name: self.mb}
        one = reshard_step(self.a, self.b, self.shape, meshes)
        if one is not None:  # what make-resharding-contiguous leaves: one step
            steps: list[tuple[Step, Sharding]] | None = [(one, self.b.placement())]
        else:
            steps = plan_reshard(self.a, self.b, self.shape, meshes)
        if steps is None:
            raise ReshardError("no sequence of communications reaches it (a partial sum is only made by compute)")
        final = self.site()
        if math.prod(self.shape) == 0:  # every block is empty: nothing moves
            return self.alloc(final, self.local(self.b), self.mb.devices)
        if not steps:
            self.mark("copy")
            out = self.alloc(final, self.local(self.b), self.mb.devices)
            self.em.copy(src, out, self.mb.devices)
            return out
        cur, s = src, self.a.placement()
        for k, (step, t) in enumerate(steps):
            site = final if k == len(steps) - 1 else f"{final}/s{k}"
            if s.mesh == t.mesh:
                cur = self.step(step, cur, s, t, site, f"{final}/s{k}")
            else:
                self.mark(f"@{s.mesh}->@{t.mesh}")
                cur = self.cross_mesh(cur, s, t, site, f"{final}/s{k}")
            s = t
        return cur

    # ---- one mesh ---------------------------------------------------------------
    def marker(self, step: Step) -> str:
        p = step.ptype
        if step.kind == LOCAL_SLICE:
            return f"-->{p}"
        if step.kind == ALLGATHER:
            assert step.gather_dim is not None
            streamed = any(sp.is_stream for sp in self.b.dims[step.gather_dim])
            return f"{p}->{'Stream' if streamed else '-'}"
        if step.kind == ALLTOALL:
            return f"{p}->{p}"
        if step.kind == ALLREDUCE:
            return "partial->-"
        return f"partial->{p if isinstance(p, str) else '*'.join(p)}"

    def step(self, step: Step, cur: SSAValue, s: Sharding, t: Sharding, site: str, aux: str) -> SSAValue:
        """One collective on one mesh: one op for every mesh slice (a team
        with translates), or one per slice, each in the `hir.if_rank` of
        its team (`mesh_teams`)."""
        em = self.em
        mesh = self.mesh(t.mesh)
        assert step.ptype is not None
        n = mesh.axis_size(step.ptype)
        if n == 1:  # teams of one device: the blocks are the buffers, unchanged
            return cur
        teams = mesh_teams(mesh, step.ptype)
        self.mark(self.marker(step))
        out = self.alloc(site, self.local(t), mesh.devices)
        if step.kind == LOCAL_SLICE:
            dim = next(d for d in range(s.rank) if s.dims[d] != t.dims[d])
            chunks = math.prod(sp.factor for sp in t.dims[dim] if sp.is_stream)
            for team, tag in teams:
                pos = em.team_index(team, tag)
                if chunks == 1:
                    em.copy(em.chunk(cur, pos, dim, n, tag), out, tag)
                    continue
                # Interleaved (`Stream(S)*p`): block `pos` of each of the S
                # chunks, through views splitting dim into (S, extent / S).
                src, dst = (em.view(v, _split_dim(shape_of(v), dim, chunks), tag) for v in (cur, out))
                em.copy(em.chunk(src, pos, dim + 1, n, tag), dst, tag)
        elif step.kind == ALLGATHER and step.gather_dim in s.interleaved_dims():
            chunks = math.prod(sp.factor for sp in s.dims[step.gather_dim] if sp.is_stream)
            self.collective_chunks(step, cur, out, step.gather_dim, chunks, teams)
        elif (chunked := self.chunked(step, cur, out, s, t)) is not None:
            self.collective_chunks(step, cur, out, *chunked, teams)
        else:
            self.whole(step, cur, out, self.streamed(s), n, teams, aux, mesh.devices)
        return out

    def whole(
        self, step: Step, cur: SSAValue, out: SSAValue, operand: Sharding, n: int, teams: Teams, aux: str, devices: tuple[int, ...]
    ) -> None:
        """One collective on whole buffers, its blocks stacked along dim 0."""
        em, backend = self.em, self.em.backend
        if step.kind == ALLGATHER:
            assert step.gather_dim is not None
            buf, finish = blocks_out(em, out, step.gather_dim, n, f"{aux}/out", devices)
            for team, tag in teams:
                self.communicate(step, operand, hir.AllgatherOp(cur, buf, team, backend), tag)
            finish()
        elif step.kind == ALLTOALL:
            assert step.gather_dim is not None and step.scatter_dim is not None
            send = blocks_in(em, cur, step.scatter_dim, n, f"{aux}/in", devices)
            buf, finish = blocks_out(em, out, step.gather_dim, n, f"{aux}/out", devices)
            for team, tag in teams:
                self.communicate(step, operand, hir.AlltoallOp(send, buf, team, backend), tag)
            finish()
        elif step.kind == ALLREDUCE:
            for team, tag in teams:
                self.communicate(step, operand, hir.AllreduceOp(cur, out, team, "sum", backend), tag)
        elif step.kind == REDUCE_SCATTER:
            assert step.scatter_dim is not None
            send = blocks_in(em, cur, step.scatter_dim, n, f"{aux}/in", devices)
            for team, tag in teams:
                self.communicate(step, operand, hir.ReduceScatterOp(send, out, team, "sum", backend), tag)
        else:
            raise ReshardError(f"step {step.kind} does not stay on one mesh")

    def communicate(self, step: Step, operand: Sharding, op: Operation, tag: tuple[int, ...]) -> None:
        """`op` and its wait, marked with the Stream split it runs under: a
        split on a dimension it communicates along on dim 0 of its operands
        (the stacked blocks), whatever that dimension's place in the
        buffers, where stream-pipeline reads that it cuts what is
        communicated, and says so; an allreduce or reduce-scatter of a
        partial sum whose result has none, the partial's (GEMM + AllReduce
        written on the partial product), where the reduce-scatter does not
        scatter or stage along it."""
        em = self.em
        marks = em.marks
        mark = marks.get(STREAM_ATTR)
        if step.kind != ALLREDUCE and isinstance(mark, ArrayAttr):
            dim, chunks = mark.data
            if isinstance(dim, IntegerAttr) and dim.value.data in _comm_dims(step):
                em.marks = {**marks, STREAM_ATTR: ArrayAttr([IntegerAttr(0, i64), chunks])}
        elif mark is None and step.kind in (ALLREDUCE, REDUCE_SCATTER) and (sd := operand.stream_dim()) is not None:
            if step.kind == ALLREDUCE or 0 < sd[0] != step.scatter_dim:
                em.marks = {**marks, STREAM_ATTR: ArrayAttr([IntegerAttr(sd[0], i64), IntegerAttr(sd[1], i64)])}
        em.communicate(op, tag)
        em.marks = marks

    def streamed(self, s: Sharding) -> Sharding:
        """The operand of a step on placement `s`: the first step's keeps
        its Stream split."""
        return self.a if s == self.a.placement() else s

    def chunked(self, step: Step, cur: SSAValue, out: SSAValue, s: Sharding, t: Sharding) -> tuple[int, int] | None:
        """(dim, S) when `step`'s result (or a reduce-scatter's partial
        operand `s`) has a Stream(S) split on a dimension
        laid out before the one it communicates along, in chunks of extent 1
        (`reshard_util.chunked_dim`): the blocks are contiguous in each
        chunk, not in the whole buffer, so the collective runs per chunk."""
        if self.b.placement() != t.placement():
            return None
        sd = chunked_dim(step, self.b, shape_of(out), self.streamed(s), shape_of(cur))
        if sd is None:
            return None
        ends = _comm_dims(step)
        if all(_outermost(shape_of(v), d) for v, d in zip((cur, out), ends)) or any(sd > d for d in ends):
            return None
        if not all(_outermost(_chunk_shape(shape_of(v), sd, shape_of(v)[sd]), d) for v, d in zip((cur, out), ends)):
            return None
        return sd, shape_of(out)[sd]

    def collective_chunks(self, step: Step, cur: SSAValue, out: SSAValue, dim: int, chunks: int, teams: Teams) -> None:
        """One collective per chunk along `dim` (`hir.for %c = 0 to S`; the
        loop stream-pipeline runs on rotating streams): chunk c of the
        buffer into chunk c of the result, each seen without the dimensions
        before the communicated one, which have extent 1 in a chunk. For
        an interleaved dimension (`Stream(S)*DIDx`, `dim` the gathered one)
        the local buffer holds one block of each of the S stream chunks, in
        chunk order; for a Stream split on another dimension (`chunked`),
        the chunks are its indices."""
        em = self.em
        ends = _comm_dims(step)
        for v, comm_dim in zip((cur, out), ends):
            if not _outermost(_chunk_shape(shape_of(v), dim, chunks), comm_dim):
                raise ReshardError(f"the dimension {comm_dim} it communicates along is not outermost in memory in a chunk")
        for team, tag in teams:
            loop = hir.ForOp(0, chunks)
            c = loop.induction_var
            c.name_hint = "c"
            body: list[Operation] = []
            views: list[SSAValue] = []
            for v, comm_dim in zip((cur, out), ends):
                view = hir.ChunkOp(v, c, dim, chunks)
                body.append(view)
                # only extent-1 dimensions before comm_dim: drop them; an
                # alltoall receives its blocks stacked as it sends them
                shape = shape_of(views[0]) if step.kind == ALLTOALL and views else shape_of(view.result)[comm_dim:]
                if tuple(shape) != shape_of(view.result):
                    body.append(hir.ViewOp(view.result, list(shape)))
                views.append(body[-1].results[0])
            if step.kind == ALLGATHER:
                comm: Operation = hir.AllgatherOp(views[0], views[1], team, em.backend)
            elif step.kind == ALLTOALL:
                comm = hir.AlltoallOp(views[0], views[1], team, em.backend)
            else:
                comm = hir.ReduceScatterOp(views[0], views[1], team, "sum", em.backend)
            for k, v in em.marks.items():
                comm.attributes[k] = v
            comm.results[0].name_hint = "tok"
            block = loop.body.block
            terminator = block.last_op
            assert terminator is not None
            for o in (*body, comm, hir.WaitOp(comm.results[0])):
                block.insert_op_before(o, terminator)
            em.emit(loop, tag)

    # ---- two meshes ---------------------------------------------------------------
    def cross_mesh(self, src: SSAValue, a: Sharding, b: Sharding, site: str, aux: str) -> SSAValue:
        """Mesh A to mesh B: the collective of the module docstring where one
        fits, send/recv of blocks otherwise."""
        ma, mb = self.mesh(a.mesh), self.mesh(b.mesh)
        if b.partial:
            if a.partial != b.partial or a.dims != b.dims:
                raise ReshardError(f"a value cannot become a partial sum over {format_partial(b.partial)} on another mesh")
            return self.summands(src, a, b, site)
        if a.interleaved_dims() and a.dims == b.dims and not a.partial:
            return self.summands(src, a, b, site)  # whole buffers, device by device
        if a.partial:
            if not a.device_types() and mb.size == 1:
                return self.reduce_to_one(src, a, b, site, aux)
            reduced = a.with_partial(None)
            self.mark("partial->-")
            src = self.step(Step(ALLREDUCE, one_or_many(a.partial)), src, a, reduced, f"{aux}/reduced", aux)
            self.mark(f"@{ma.name}->@{mb.name}")
            a = reduced
        if ma.size == 1 and mb.size > 1 and b.is_replicated():
            return self.broadcast(src, ma, mb, site)
        if ma.size == 1 and ma.devices[0] in mb.devices and (one := _one_split(b, mb)):
            return self.scatter(src, b, ma, mb, *one, site, aux)
        if mb.size == 1 and mb.devices[0] in ma.devices and (one := _one_split(a, ma)):
            return self.gather(src, ma, mb, *one, site, aux)
        holders = {d: _block(a, self.shape, ma, d) for d in ma.devices}
        return self.transfer(src, holders, b, mb, site)

    def reduce_to_one(self, src: SSAValue, a: Sharding, b: Sharding, site: str, aux: str) -> SSAValue:
        """Partial, split nowhere, to a mesh of one device: hir.reduce to it
        (or to a team's first device, then a send). Every team over the
        partial axis holds all the summands (the value is replicated over
        the other axes), so one team reduces, the destination's where it
        is on the mesh: one collective whatever the mesh's size, not one
        allreduce per team."""
        em, ma, mb = self.em, self.mesh(a.mesh), self.mesh(b.mesh)
        assert a.partial
        dest = mb.devices[0]
        team = ma.team(dest if ma.has(dest) else ma.at(0), one_or_many(a.partial))
        root = dest if dest in team else team[0]
        if len(team) == 1:  # one summand: it is the sum
            return src if root == dest else self.transfer(src, {root: tuple((0, e) for e in self.shape)}, b, mb, site)
        out = self.alloc(site if root == dest else f"{aux}/reduced", self.shape, (root,))
        self.mark(f"partial@{ma.name}->@{mb.name}")
        pos = em.constant(team.index(root), team)
        em.communicate(hir.ReduceOp(src, out, pos, team, "sum", em.backend), team)
        if root == dest:
            return out
        self.mark(f"@{ma.name}->@{mb.name}")
        return self.transfer(out, {root: tuple((0, e) for e in self.shape)}, b, mb, site)

    def broadcast(self, src: SSAValue, ma: Mesh, mb: Mesh, site: str) -> SSAValue:
        """One device to a replicated mesh: hir.broadcast in place."""
        em, sender, receivers = self.em, ma.devices[0], mb.devices
        team = receivers if sender in receivers else (sender, *receivers)
        buf = em.alloc(site, self.shape, self.elem, team, owner=receivers)
        em.copy(src, buf, (sender,))
        pos = em.constant(team.index(sender), team)
        em.communicate(hir.BroadcastOp(buf, pos, team, em.backend), team)
        if sender in receivers:
            return buf
        em.dealloc(buf, (sender,))
        return em.restrict(buf, receivers)

    def scatter(self, src: SSAValue, b: Sharding, ma: Mesh, mb: Mesh, p: str, dim: int, site: str, aux: str) -> SSAValue:
        """One device to a mesh it belongs to, split on one dim: hir.scatter
        (the input exists on the root only)."""
        em, sender = self.em, ma.devices[0]
        team = mb.teams(p)[0]
        if len(team) == 1:  # the sender is the only receiver: the data is there
            return src
        send = blocks_in(em, src, dim, len(team), f"{aux}/in", (sender,))
        out = self.alloc(site, self.local(b), mb.devices)
        pos = em.constant(team.index(sender), team)
        em.communicate(hir.ScatterOp(send, out, pos, team, em.backend), team)
        return out

    def gather(self, src: SSAValue, ma: Mesh, mb: Mesh, p: str, dim: int, site: str, aux: str) -> SSAValue:
        """A mesh split on one dim to one of its devices: hir.gather (the
        output exists on the root only)."""
        em, receiver = self.em, mb.devices[0]
        team = ma.teams(p)[0]
        if len(team) == 1:  # the receiver is the only sender: the data is there
            return src
        out = self.alloc(site, self.shape, (receiver,))
        buf, finish = blocks_out(em, out, dim, len(team), f"{aux}/out", (receiver,))
        pos = em.constant(team.index(receiver), team)
        em.communicate(hir.GatherOp(src, buf, pos, team, em.backend), team)
        finish()
        return out

    def summands(self, src: SSAValue, a: Sharding, b: Sharding, site: str) -> SSAValue:
        """A value moved as it is, block for block (a partial value's
        summands, or interleaved blocks): each device of B gets the buffer
        of the device of A at its coordinates on the axes the sharding uses."""
        ma, mb = self.mesh(a.mesh), self.mesh(b.mesh)
        types = [*a.device_types(), *a.partial]

        def key(mesh: Mesh, d: int) -> tuple[int, ...]:
            coords = mesh.coords(d)
            return tuple(coords[mesh.axis_of(t)] for t in types)

        by_key: dict[tuple[int, ...], list[int]] = {}
        for d in ma.devices:
            by_key.setdefault(key(ma, d), []).append(d)
        transfers = []
        for pos, r in enumerate(mb.devices):
            devices = by_key[key(mb, r)]
            sender = r if ma.has(r) and key(ma, r) == key(mb, r) else devices[pos % len(devices)]
            transfers.append(_Transfer(sender, r, (), ()))
        out = self.alloc(site, self.local(b), mb.devices)
        self.emit_transfers(transfers, src, out, site)
        return out

    def transfer(self, src: SSAValue, holders: dict[int, Box], b: Sharding, mb: Mesh, site: str) -> SSAValue:
        """Point-to-point: each device of B gets its block from the devices
        holding it (`holders`: device -> the block its `src` buffer holds);
        of several holders, B's k-th device takes the (k mod count)-th, so
        equal meshes pair up device by device."""
        out = self.alloc(site, self.local(b), mb.devices)
        by_block: dict[Box, list[int]] = {}
        for d, blk in holders.items():
            by_block.setdefault(blk, []).append(d)
        overlapping = _BlockIndex(list(by_block))
        transfers: list[_Transfer] = []
        for pos, r in enumerate(mb.devices):
            want = _block(b, self.shape, mb, r)
            for have in overlapping.meeting(want):
                devices = by_block[have]
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
        self.emit_transfers(transfers, src, out, site)
        return out

    def emit_transfers(self, transfers: list[_Transfer], src: SSAValue, out: SSAValue, site: str) -> None:
        """Each rank's part in its own `hir.if_rank [r]`."""
        by_rank: dict[int, list[_Transfer]] = {}
        for t in transfers:
            for x in dict.fromkeys((t.sender, t.receiver)):
                by_rank.setdefault(x, []).append(t)
        for x, mine in by_rank.items():
            self.transfers_of(x, mine, src, out, site)

    def sub_view(self, buf: SSAValue, spec: Spec, tag: tuple[int, ...], const: Callable[[int], SSAValue]) -> SSAValue:
        for dim, index, chunks in spec:
            buf = self.em.chunk(buf, const(index), dim, chunks, tag)
        return buf

    def transfers_of(self, x: int, transfers: list[_Transfer], src: SSAValue, out: SSAValue, site: str) -> None:
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
                if not _contiguous(shape_of(view), shape_of(src)):
                    stage = self.alloc(f"{site}/send{x}to{t.receiver}", shape_of(view), tag)
                    em.copy(view, stage, tag)
                    view = stage
                op = em.emit(hir.SendOp(view, const(1), team, em.backend), tag, marked=True)
                op.results[0].name_hint = "tok"
                tokens.append(op.results[0])
            else:
                view = self.sub_view(out, t.recv, tag, const)
                target = view
                if not _contiguous(shape_of(view), shape_of(out)):
                    target = self.alloc(f"{site}/recv{x}from{t.sender}", shape_of(view), tag)
                    after.append((target, view))
                op = em.emit(hir.RecvOp(target, const(0), team, em.backend), tag, marked=True)
                op.results[0].name_hint = "tok"
                tokens.append(op.results[0])
        for token in tokens:
            em.emit(hir.WaitOp(token), tag)
        for stage, view in after:
            em.copy(stage, view, tag)


Teams = list[tuple[hir.Team, tuple[int, ...]]]
"""The teams of one collective over a mesh axis, each with the ranks whose
`hir.if_rank` runs it."""


def mesh_teams(mesh: Mesh, ptype: str | tuple[str, ...]) -> Teams:
    """The teams over `ptype` (one mesh axis, or several: a partial sum's):
    one team and its translates, run in the region of the whole mesh, where
    the slices are translates of one another forming disjoint teams by
    `hir.Team`'s rule (one op serves every slice, whatever their number);
    otherwise one team per slice, each in its own region."""
    family = mesh.translates(ptype)
    if family is not None and (team := hir.Team(*family)).check() is None:
        return [(team, mesh.devices)]
    return [(hir.Team(team), team) for team in mesh.teams(ptype)]


def _one_split(s: Sharding, mesh: Mesh) -> tuple[str, int] | None:
    """(p, dim) when `s` is one split p, on dim, over a single team."""
    types = s.device_types()
    if s.partial or len(types) != 1 or mesh.team_count(types[0]) != 1:
        return None
    dim = s.dim_of(types[0])
    assert dim is not None
    return types[0], dim


def lower_set(em: Emitter, op: SetOp, src: SSAValue, index: int, order: Sequence[int]) -> SSAValue:
    """The buffer of `op`'s result (present on its mesh's devices) from
    `src`, the buffer of its operand; both are laid out in `order`."""
    a, b = sharding_of(op.operands[0]), sharding_of(op.results[0])
    assert a is not None and b is not None
    ma, mb = lookup_mesh(op, a.mesh), lookup_mesh(op, b.mesh)
    assert ma is not None and mb is not None, "the verifier checks that meshes exist"
    t = op.results[0].type
    assert isinstance(t, TensorType)
    shape = tuple(t.get_shape()[d] for d in order)
    reshard = _Reshard(em, index, shape, t.element_type, permuted(a, order), permuted(b, order), ma, mb)
    try:
        return reshard.run(src)
    except ReshardError as e:
        raise error_at(op, f"cannot lower 'fusion.set' from {a} to {b}: {e}") from None

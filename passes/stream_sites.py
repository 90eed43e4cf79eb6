"""What stream-pipeline reads: the sites of a host program (docs/passes.md).

lower-to-host-ir marks the compute and communication ops made from a fusion
op whose result has a Stream(S) split with `hir.stream = [dim, S]` (dim in
the buffer's memory order) and every communication of a reshard with
`hir.reshard = "FROM->TO"`. A *site* is what stream-pipeline turns into one
pipeline, in one block:

- ALLGATHER (a device's block is a chunk, the headline AllGather + GEMM):
  `hir.allgather %x, %xg` waited at once, then (optionally) a GEMM whose
  input is `%xg`, rows along dim 0; written as `x [DIDx, -]` to `[Stream(S),
  -]` (the allgather or the GEMM marked `[0, S]`).
- REDUCE_SCATTER (GEMM + ReduceScatter): (optionally) a GEMM into `%p`,
  then `hir.reduce_scatter %p, %y` waited at once; written as the partial
  product `[Stream(S), -], partial = DIDx` or the result `[DIDx*Stream(k),
  -]`.
- CHUNKS (a collective per chunk): a collective whose Stream split is on
  another dimension than the one it communicates along (nvFuser's
  `[S, d, M/(S*d), K]`), or an allreduce with a Stream split: either the
  loop of per-chunk collectives lower-to-host-ir made (the chunks' blocks
  are contiguous in each chunk only) or one collective marked
  `hir.stream`; with the compute ops producing its input in the same
  chunks (GEMMs, copies, launches) and a GEMM consuming its output in
  them.
- LOCAL: a GEMM, copy or launch with a Stream split that communicates
  nothing.

Chunk c of a GEMM, copy or launch is computed from chunks of its operands:
`chunk_dims` and `LaunchChunks` say which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fuserc.dialects import hir
from fuserc.dialects.fusion import FusionOp, SliceOp, element_type_of, shape_of
from fuserc.ir import ClassTest, walk
from fuserc.passes import cost_model
from fuserc.passes import sharding_rules as rules
from fuserc.passes.cost_model import ALLGATHER, CHUNKS, REDUCE_SCATTER
from fuserc.passes.reshard_util import element_bytes
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, TensorType, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

STREAM_ATTR = hir.STREAM_ATTR
RESHARD_ATTR = "hir.reshard"
PIPELINE_ATTR = "hir.pipeline"
LOCAL = "local"
GEMM_OPS = (hir.MatmulOp, hir.LinearOp)
COMPUTE = (*GEMM_OPS, hir.CopyOp, hir.LaunchOp)
PER_CHUNK_COMMS = (hir.AllgatherOp, hir.ReduceScatterOp, hir.AllreduceOp, hir.AlltoallOp)
"""Collectives that can run chunk by chunk along a dimension they do not
communicate along (dim 0 of their operands, the allreduce's none)."""


def carry_reshard(source: Operation, op: Operation) -> Operation:
    """Give `op`, a communication made in place of `source`, the
    `hir.reshard` marker `source` has (which reshard it moves bytes of, for
    the communication report); returns `op`."""
    mark = source.attributes.get(RESHARD_ATTR)
    if mark is not None:
        op.attributes[RESHARD_ATTR] = mark
    return op


def stream_mark(op: Operation) -> tuple[int, int] | None:
    """(dim, S) of an op's `hir.stream = [dim, S]` marker."""
    attr = op.attributes.get(STREAM_ATTR)
    if attr is None or not isinstance(attr, ArrayAttr) or len(attr.data) != 2:
        return None
    dim, s = attr.data
    if not isinstance(dim, IntegerAttr) or not isinstance(s, IntegerAttr):
        return None
    return dim.value.data, s.value.data


def gemm_operands(op: Operation) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue | None]:
    """(input, weight/rhs, out, bias) of hir.matmul / hir.linear."""
    if isinstance(op, hir.MatmulOp):
        return op.lhs, op.rhs, op.out, None
    assert isinstance(op, hir.LinearOp)
    return op.input, op.weight, op.out, op.bias


def out_operand(op: Operation) -> SSAValue:
    """The buffer a compute op writes (its last operand; a launch's only out)."""
    if isinstance(op, hir.LaunchOp):
        return op.outs[0]
    return op.operands[-1]


def chunk_dims(op: Operation, out_dim: int, chunks: int = 0) -> dict[int, int] | None:
    """Which operands of compute op `op` are cut, and along which dim, when
    its output is cut along `out_dim` (operand index -> dim; the output's
    own entry included). None when the op cannot be computed by chunks of
    that dimension. Launches: `LaunchChunks` (`chunks` is their S)."""
    if isinstance(op, hir.CopyOp):
        return {0: out_dim, 1: out_dim}
    if isinstance(op, hir.LaunchOp):
        lc = LaunchChunks.of(op, out_dim, chunks) if chunks > 1 else None
        return lc.cut if lc is not None else None
    if not isinstance(op, GEMM_OPS) or op.acc is not None:
        return None  # (a GEMM that accumulates is left whole: no site)
    a, b, out, bias = gemm_operands(op)
    ra, rb, ro = len(shape_of(a)), len(shape_of(b)), len(shape_of(out))
    out_index = len(op.operands) - 1
    if isinstance(op, hir.LinearOp):
        if out_dim < ro - 1:
            return {0: out_dim, out_index: out_dim}
        cut = {1: 0, out_index: out_dim}
        if bias is not None:
            cut[2] = 0
        return cut
    if rb >= 2 and out_dim == ro - 1:  # the columns of rhs
        return {1: rb - 1, out_index: out_dim}
    if ra >= 2 and ra == ro and out_dim == ro - 2:  # the rows of lhs
        return {0: out_dim, out_index: out_dim} if rb <= 2 else None
    if out_dim < ro - 2:  # a batch dim: the operands that have it (not broadcast)
        cut = {out_index: out_dim}
        extent = shape_of(out)[out_dim]
        for i, v in enumerate((a, b)):
            shape = shape_of(v)
            d = out_dim - (ro - len(shape))
            if len(shape) >= 3 and d >= 0 and d < len(shape) - 2 and shape[d] == extent:
                cut[i] = d
            elif len(shape) >= 3 and d >= 0 and d < len(shape) - 2 and shape[d] != 1:
                return None
        return cut if 0 in cut or 1 in cut else None
    return None


def gemm_flops(op: Operation) -> float:
    if not isinstance(op, GEMM_OPS):
        return 0.0
    a, _, out, _ = gemm_operands(op)
    return 2.0 * math.prod(shape_of(out)) * shape_of(a)[-1]


def wait_of(token: SSAValue, block: Block) -> hir.WaitOp | None:
    """The only use of a communication's token: a hir.wait in `block`."""
    uses = list(token.uses)
    if len(uses) != 1:
        return None
    op = uses[0].operation
    return op if isinstance(op, hir.WaitOp) and op.parent_block() is block else None


def alloc_in(value: SSAValue, block: Block) -> hir.AllocOp | None:
    owner = value.owner
    return owner if isinstance(owner, hir.AllocOp) and owner.parent_block() is block else None


def root(v: SSAValue) -> SSAValue:
    """The buffer a view (a chunk, select, reshaped view or transpose) aliases."""
    while _is_view(v.owner):
        v = v.owner.operands[0]
    return v


_is_view = ClassTest(hir.VIEW_OPS)
_is_for, _is_if_rank, _is_per_chunk_comm = ClassTest(hir.ForOp), ClassTest(hir.IfRankOp), ClassTest(PER_CHUNK_COMMS)
_is_allgather, _is_reduce_scatter = ClassTest(hir.AllgatherOp), ClassTest(hir.ReduceScatterOp)


def sole_users(value: SSAValue, allowed: set[Operation]) -> list[Operation]:
    """Users of `value` other than `allowed` and hir.dealloc."""
    return [u.operation for u in value.uses if u.operation not in allowed and not isinstance(u.operation, hir.DeallocOp)]


# --------------------------------------------------------------------------
# Launches in chunks
# --------------------------------------------------------------------------


@dataclass
class LaunchChunks:
    """How a `hir.launch` computes chunk c of its output along `dim`: the
    fusion ops of its region run on chunks, as on the blocks of a sharded
    dimension (`sharding_rules.op_map`: an op computes a chunk of a
    dimension its operands map onto from the chunks of theirs, as it
    computes a device's block); a value that does not map onto it (a
    broadcast operand, a weight) is used whole. A region with an INDEXED
    op (iota, dropout: values that depend on where the block lies) is not
    cut."""

    op: hir.LaunchOp
    chunks: int
    need: dict[SSAValue, int | None]
    """Region value -> the dim it is cut along (None: used whole)."""

    @property
    def cut(self) -> dict[int, int]:
        """Operand index (ins, then the out) -> dim, for the cut ones."""
        out: dict[int, int] = {}
        for i, arg in enumerate(self.op.body.block.args):
            d = self.need.get(arg)
            if d is not None:
                out[i] = d
        out[len(self.op.ins)] = self.out_dim
        return out

    @property
    def out_dim(self) -> int:
        last = self.op.body.block.last_op
        assert last is not None
        d = self.need[last.operands[0]]
        assert d is not None
        return d

    @staticmethod
    def of(op: hir.LaunchOp, dim: int, chunks: int) -> "LaunchChunks | None":
        """The chunking of `op` along output dim `dim`, or None when an op of
        its region cannot be computed by chunks of it."""
        block = op.body.block
        last = block.last_op
        if len(op.outs) != 1 or not isinstance(last, hir.YieldOp) or shape_of(op.outs[0])[dim] % chunks:
            return None
        need: dict[SSAValue, int | None] = {last.operands[0]: dim}
        for o in reversed(list(block.ops)[:-1]):
            if not isinstance(o, FusionOp) or len(o.results) != 1 or o.INDEXED:
                return None  # (an INDEXED op, iota or dropout, places its block by its global types)
            if o.results[0] not in need:
                return None  # a value no one reads
            operands = _operand_dims(o, need[o.results[0]])
            if operands is None:
                return None
            for v, d in zip(o.operands, operands):
                if v in need and need[v] != d:
                    return None  # needed in chunks and whole, or along two dims
                need[v] = d
        lc = LaunchChunks(op, chunks, need)
        try:
            lc._body(Block(arg_types=[lc.chunk_type(a) for a in block.args]).args, verify=True)
        except (VerifyException, ValueError):
            return None
        return lc

    def chunk_type(self, v: SSAValue) -> TensorType:
        t = v.type
        assert isinstance(t, TensorType)
        d = self.need.get(v)
        if d is None:
            return t
        shape = list(t.get_shape())
        shape[d] //= self.chunks
        return TensorType(t.element_type, shape)

    def build(self, ins: Sequence[SSAValue], out: SSAValue) -> hir.LaunchOp:
        """The launch computing one chunk, from `ins` (the chunks of the cut
        operands, the others whole) into `out`."""
        new = hir.LaunchOp(ins, [out])
        ops, results = self._body(new.body.block.args)
        new.body.block.add_ops([*ops, hir.YieldOp(*results)])
        return new

    def _body(self, args: Sequence[SSAValue], verify: bool = False) -> tuple[list[Operation], list[SSAValue]]:
        """The region's ops on chunks, from the region arguments `args`."""
        old = self.op.body.block
        env: dict[SSAValue, SSAValue] = {}
        ops: list[Operation] = []
        for a, b in zip(old.args, args):
            b.name_hint = a.name_hint
            env[a] = b
        for o in list(old.ops)[:-1]:
            assert isinstance(o, FusionOp)
            props = dict(o.properties)
            if isinstance(o, SliceOp):  # a dimension cut in chunks spans its chunk
                limits = o.keyword("limits")
                for d, (before, after) in enumerate(zip(shape_of(o.operands[0]), shape_of(env[o.operands[0]]))):
                    if before != after:
                        limits[d] = after
                props["limits"] = hir.int_array(limits)
            built = type(o).create(
                operands=[env[v] for v in o.operands],
                result_types=[self.chunk_type(o.results[0])],
                properties=props,
                attributes=dict(o.attributes),
            )
            if verify:
                built.verify_()
            built.results[0].name_hint = o.results[0].name_hint
            ops.append(built)
            env[o.results[0]] = built.results[0]
        last = old.last_op
        assert last is not None
        return ops, [env[v] for v in last.operands]


def _operand_dims(op: FusionOp, r: int | None) -> list[int | None] | None:
    """The dims of `op`'s operands cut when its result is cut along `r`
    (None: that operand whole), or None when `op` cannot be computed by
    chunks of `r` (sharding_rules.op_map: only a dimension an operand maps
    onto may be cut; one it reduces or drops may not)."""
    if r is None:
        return [None] * len(op.operands)
    try:
        m = rules.op_map(op)
    except ValueError:
        return None
    if m is None:
        return None
    extent = shape_of(op.results[0])[r]
    out: list[int | None] = []
    for v, targets in zip(op.operands, m.operands):
        shape = shape_of(v)
        if any(t.dim == r and t.kind != rules.MAP for t in targets):
            return None
        mapped = [d for d, t in enumerate(targets) if t.kind == rules.MAP and t.dim == r and shape[d] == extent]
        if len(mapped) > 1:
            return None
        out.append(mapped[0] if mapped else None)
    return out


# --------------------------------------------------------------------------
# Collectives run per chunk
# --------------------------------------------------------------------------


@dataclass
class PerChunk:
    """A collective run chunk by chunk along a dimension it does not
    communicate along: the loop lower-to-host-ir made (`loop`), whose body
    cuts chunk c of each buffer and views it without its leading extent-1
    dimensions, or one collective (`loop` None) cut along `dims`."""

    comm: Operation
    loop: hir.ForOp | None
    sources: tuple[SSAValue, SSAValue]
    """The buffers cut in chunks: the collective's input and output."""
    dims: tuple[int, int]
    chunks: int

    def views(self, b: "ViewEmitter", c: SSAValue) -> tuple[SSAValue, SSAValue]:
        """The collective's input and output for chunk c."""
        hints = ("mine", "xc") if isinstance(self.comm, hir.AllgatherOp) else ("pc", "yc")
        if self.loop is None:
            return tuple(b.chunk(v, c, self.chunks, d, h) for v, d, h in zip(self.sources, self.dims, hints))  # type: ignore[return-value]
        mapping: dict[SSAValue, SSAValue] = {self.loop.induction_var: c}
        for o in self.loop.body.block.ops:
            if o is self.comm:
                break
            if isinstance(o, hir.ChunkOp):  # one view per chunk, shared with the compute around
                key = (mapping.get(o.source, o.source), mapping.get(o.index, o.index), o.chunks, o.dim)
                if key in b.views:
                    mapping[o.result] = b.views[key]
                    continue
            view = b.add(o.clone(mapping, clone_name_hints=False))
            if isinstance(view, hir.ChunkOp):
                b.views[(view.source, view.index, view.chunks, view.dim)] = view.result
        views = tuple(mapping[v] for v in self.comm.operands[:2])
        for v, h in zip(views, hints):
            v.name_hint = h
        return views  # type: ignore[return-value]

    def comm_on(self, inp: SSAValue, out: SSAValue) -> Operation:
        """The collective on new operands, without its hir.stream marker."""
        op = self.comm.clone()
        op.operands = (inp, out)
        op.attributes.pop(STREAM_ATTR, None)
        return op

    @property
    def kind(self) -> str:
        return {
            hir.AllgatherOp: cost_model.ALLGATHER,
            hir.ReduceScatterOp: cost_model.REDUCE_SCATTER,
            hir.AllreduceOp: cost_model.ALLREDUCE,
            hir.AlltoallOp: cost_model.ALLTOALL,
        }[type(self.comm)]

    def view_shape(self, i: int) -> tuple[int, ...]:
        """The shape of the collective's operand i (input, output) in a chunk."""
        if self.loop is not None:
            return shape_of(self.comm.operands[i])
        shape = list(shape_of(self.sources[i]))
        shape[self.dims[i]] //= self.chunks
        return tuple(shape)

    @property
    def outermost(self) -> bool:
        """Chunk c of the input is block c of S of its buffer (the ring
        reads it from a peer's shared copy)."""
        shape = shape_of(self.sources[0])
        return math.prod(shape[: self.dims[0]]) == 1


class ViewEmitter(Protocol):
    """What `PerChunk.views` needs of an emitter (host_emit.Emitter)."""

    views: dict[tuple[SSAValue, SSAValue, int, int], SSAValue]

    def add(self, op: Operation, hint: str | None = None) -> Operation: ...

    def chunk(self, src: SSAValue, index: SSAValue, chunks: int, dim: int = 0, hint: str | None = None) -> SSAValue: ...


def _loop_collective(loop: hir.ForOp, block: Block) -> PerChunk | None:
    """`hir.for %c = 0 to S { chunk/view ops; collective; wait }`, each
    operand of the collective a view of chunk %c of a buffer outside."""
    ops = list(loop.body.block.ops)[:-1]
    if loop.lb != 0 or loop.step != 1 or len(ops) < 2:
        return None
    comm, wait = ops[-2], ops[-1]
    if not isinstance(comm, (hir.AllgatherOp, hir.ReduceScatterOp, hir.AlltoallOp)) or len(comm.team) < 2:
        return None
    if not isinstance(wait, hir.WaitOp) or wait.token is not comm.results[0]:
        return None
    if not all(isinstance(o, (hir.ChunkOp, hir.ViewOp)) for o in ops[:-2]):
        return None
    c, s = loop.induction_var, loop.ub
    sources, dims = [], []
    for v in comm.operands[:2]:
        chunk = None
        while isinstance(v.owner, (hir.ChunkOp, hir.ViewOp)) and loop.is_ancestor(v.owner):
            if isinstance(v.owner, hir.ChunkOp):
                if chunk is not None:
                    return None
                chunk = v.owner
            v = v.owner.source
        if chunk is None or chunk.index is not c or chunk.chunks != s or chunk.source is not v:
            return None
        if isinstance(v.owner, Operation) and loop.is_ancestor(v.owner):
            return None
        sources.append(v)
        dims.append(chunk.dim)
    if any(not _is_buffer_in(v, block) for v in sources[1:]):
        return None
    return PerChunk(comm, loop, (sources[0], sources[1]), (dims[0], dims[1]), s)


def _is_buffer_in(v: SSAValue, block: Block) -> bool:
    return alloc_in(v, block) is not None


def _marked_collective(comm: Operation, block: Block) -> PerChunk | None:
    """One collective marked `hir.stream = [d, S]` whose chunks along d do
    not cut the dimension it communicates along: its input and output are
    cut along d alike (dims after the communicated one keep their index
    through lower-to-host-ir's views)."""
    mark = stream_mark(comm)
    if mark is None or not isinstance(comm, PER_CHUNK_COMMS) or len(comm.team) < 2:
        return None
    d, s = mark
    if s < 2 or (d == 0 and not isinstance(comm, hir.AllreduceOp)):
        return None
    inp, out = comm.operands[0], comm.operands[1]
    if wait_of(comm.results[0], block) is None:
        return None
    for v in (inp, out):
        shape = shape_of(v)
        if d >= len(shape) or shape[d] % s or (v is out and not _is_buffer_in(root(v), block)):
            return None
    if shape_of(inp)[d] != shape_of(out)[d]:
        return None
    return PerChunk(comm, None, (inp, out), (d, d), s)


# --------------------------------------------------------------------------
# Sites
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How a site runs: algorithm, S = chunks, the stream pool, and why."""

    algorithm: str
    chunks: int
    streams: int
    reason: str
    form: str = ""  # the GEMM+ReduceScatter ring's form (cost_model.RING_FORMS)
    idle: float = 0.0
    """Seconds of the pipeline, by the cost model, past its GEMMs' (its
    compute stream waiting for transfers and fences)."""

    def attr(self) -> DictionaryAttr:
        fields: dict[str, Attribute] = {
            "algorithm": StringAttr(self.algorithm),
            "chunks": IntegerAttr(self.chunks, i64),
            "streams": IntegerAttr(self.streams, i64),
        }
        if self.form:
            fields["form"] = StringAttr(self.form)
        fields["reason"] = StringAttr(self.reason)
        return DictionaryAttr(fields)


@dataclass
class Site:
    """A pipelining opportunity: a communication and its GEMM, or a local op."""

    kind: str
    anchor: Operation  # new ops go before it
    erase: list[Operation]  # replaced ops (users first)
    gemm: Operation | None  # the GEMM (ALLGATHER, REDUCE_SCATTER, CHUNKS' consumer), or the local op
    written: int | None  # S of a Stream split the user wrote (None: not split)
    comm: Operation | None = None
    team: tuple[int, ...] = ()
    dim: int = 0  # local sites: the output dim
    chunked: PerChunk | None = None  # CHUNKS: the collective per chunk
    producers: list[Operation] = field(default_factory=list)
    """CHUNKS: compute ops making the collective's input in the same chunks,
    first to last (each one's output is the next one's cut input)."""
    more_gemms: list[Operation] = field(default_factory=list)
    """ALLGATHER: further GEMMs reading the same gathered rows (q, k and v of
    attention), run on each chunk after `gemm`."""
    producer_dims: list[int] = field(default_factory=list)  # the output dim each one is cut along

    @property
    def d(self) -> int:
        return len(self.team)

    @property
    def buffer(self) -> SSAValue:
        """The gathered input (allgather), the partial product
        (reduce-scatter), the collective's larger buffer (per chunk)."""
        assert self.comm is not None
        if self.chunked is not None:
            inp, out = self.chunked.sources
            return inp if self.chunked.kind == REDUCE_SCATTER else out
        if self.kind == REDUCE_SCATTER:
            return self.comm.operands[0]
        return self.comm.operands[1]

    @property
    def gemms(self) -> list[Operation]:
        """The site's GEMMs, in program order."""
        return [self.gemm, *self.more_gemms] if self.gemm is not None else []

    @property
    def marked(self) -> list[Operation]:
        """The ops of the site that carry a Stream split (what a plan of
        `none` explains)."""
        return [o for o in self.erase if stream_mark(o) is not None or isinstance(o, hir.ForOp)]

    def cost_site(self) -> cost_model.Site:
        buf = self.buffer
        assert isinstance(buf.type, TensorType)
        nbytes = math.prod(shape_of(buf)) * element_bytes(buf.type)
        flops = sum(gemm_flops(o) for o in [*self.producers, *self.gemms])
        if self.chunked is None:
            return cost_model.Site(self.kind, flops, nbytes, str(element_type_of(buf)), self.d)
        compute = cost_model.BEFORE if self.producers else cost_model.AFTER if self.gemm is not None else ""
        return cost_model.Site(CHUNKS, flops, nbytes, str(element_type_of(buf)), self.d, self.chunked.kind, compute)


def find_sites(func: Operation) -> list[Site]:
    """The sites of a host program, in program order (an op joins one site)."""
    sites: list[Site] = []
    taken: set[Operation] = set()
    for block in host_blocks(func):
        order = {op: i for i, op in enumerate(block.ops)}
        for op in list(block.ops):
            site = None
            if _is_for(op) and (pc := _loop_collective(op, block)) is not None:
                site = _chunks_site(pc, op, block, order)
            elif _is_per_chunk_comm(op) and (pc := _marked_collective(op, block)) is not None:
                site = _chunks_site(pc, op, block, order)
            elif _is_allgather(op):
                site = _allgather_site(op, block, order)
            elif _is_reduce_scatter(op):
                site = _reduce_scatter_site(op, block, order)
            if site is not None and not (set(site.erase) & taken):
                sites.append(site)
                taken.update(site.erase)
        for op in block.ops:
            mark = stream_mark(op)
            if op in taken or mark is None or not isinstance(op, COMPUTE):
                continue
            dim, s = mark
            if 0 <= dim < len(shape_of(out_operand(op))) and s > 1 and _chunks_evenly(op, dim, s):
                sites.append(Site(LOCAL, op, [op], op, s, dim=dim))
                taken.add(op)
    return sites


def _chunks_evenly(op: Operation, out_dim: int, s: int) -> bool:
    """Every buffer `op` is cut into is cut into `s` equal chunks (a copy of
    one device's block of a Stream-split value need not be: the block of
    `[DIDx]` on another mesh is 3 rows of a `[Stream(2)]` result of 6)."""
    cut = chunk_dims(op, out_dim, s)
    return cut is not None and all(shape_of(op.operands[i])[d] % s == 0 for i, d in cut.items())


def host_blocks(func: Operation) -> list[Block]:
    """The function's block and those of its hir.if_rank regions (not loop
    bodies: their ops already run per iteration); none for a declaration."""
    out: list[Block] = []
    stack = list(func.regions[0].blocks)[:1]
    while stack:
        block = stack.pop()
        out.append(block)
        for op in block.ops:
            if _is_if_rank(op):
                stack.append(op.body.block)
    return out


def _allgather_site(ag: hir.AllgatherOp, block: Block, order: dict[Operation, int]) -> Site | None:
    wait = wait_of(ag.token, block)
    if wait is None or alloc_in(ag.output, block) is None or len(ag.team) < 2:
        return None
    xg = ag.output
    own = stream_mark(ag)
    written = own[1] if own is not None and own[0] == 0 else None
    users = [u.operation for u in xg.uses if isinstance(u.operation, GEMM_OPS) and u.index == 0]
    gemms = sorted((g for g in users if g.parent_block() is block and order[g] > order[wait]), key=order.__getitem__)
    gemms = [g for g in gemms if _rows_of_input(g)]
    if gemms and any(order.get(u, -1) < order[gemms[0]] for u in sole_users(xg, {ag, *gemms})):
        gemms = []  # read between the gather and the GEMM
    if gemms:
        marks = [m for m in (stream_mark(g) for g in gemms) if m is not None]
        if marks:  # a Stream split written on a GEMM: that GEMM alone, as written
            gemms = [next(g for g in gemms if stream_mark(g) is not None)]
            written = marks[0][1]
        else:
            gemms = [gemms[0], *[g for g in gemms[1:] if _movable_to(g, gemms[0], block, order)]]
    if not gemms:  # the gather alone: only as the user asked, chunk c from one device
        if written is None:
            return None
        return Site(ALLGATHER, wait, [wait, ag], None, written, ag, ag.team)
    first, more = gemms[0], gemms[1:]
    allocs = [g.operands[-1].owner for g in more if order[g.operands[-1].owner] > order[first]]  # type: ignore[index]
    for a in allocs:  # the later GEMMs' outputs, allocated before the pipeline
        a.detach()
        block.insert_op_before(a, first)
        order[a] = order[first] - 0.5  # type: ignore[assignment]
    return Site(ALLGATHER, first, [*more[::-1], first, wait, ag], first, written, ag, ag.team, more_gemms=more)


def _rows_of_input(gemm: Operation) -> bool:
    """The GEMM's rows are the rows of its input (its input may be cut by
    rows into chunks, each giving those rows of its output)."""
    cut = chunk_dims(gemm, 0)
    mark = stream_mark(gemm)
    return cut is not None and 0 in cut and 1 not in cut and (mark is None or mark[0] == 0)


def _movable_to(gemm: Operation, anchor: Operation, block: Block, order: dict[Operation, int]) -> bool:
    """`gemm` can run at `anchor` instead: its other operands are defined
    before it (its output may be an allocation, which moves along)."""
    for i, v in enumerate(gemm.operands):
        owner = v.owner
        if i == 0 or not isinstance(owner, Operation) or owner.parent_block() is not block:
            continue
        if order[owner] > order[anchor] and not (i == len(gemm.operands) - 1 and isinstance(owner, hir.AllocOp)):
            return False
    return True


def _reduce_scatter_site(rs: hir.ReduceScatterOp, block: Block, order: dict[Operation, int]) -> Site | None:
    wait = wait_of(rs.token, block)
    if wait is None or rs.reduction_op != "sum" or len(rs.team) < 2:
        return None
    p = rs.input
    if alloc_in(p, block) is None:
        return None
    d = len(rs.team)
    rs_mark = stream_mark(rs)
    written = rs_mark[1] * d if rs_mark is not None and rs_mark[0] == 0 else None
    gemm = _gemm_into(p, rs, block, order)
    if gemm is not None:
        mark = stream_mark(gemm)
        if mark is not None and mark[0] != 0:
            gemm = None
        elif mark is not None and written is None:
            written = mark[1]
    if gemm is None:
        if written is None:
            return None
        return Site(REDUCE_SCATTER, rs, [wait, rs], None, written, rs, rs.team)
    return Site(REDUCE_SCATTER, rs, [wait, rs, gemm], gemm, written, rs, rs.team)


def _gemm_into(p: SSAValue, rs: Operation, block: Block, order: dict[Operation, int]) -> Operation | None:
    """The GEMM (no bias) writing `p`, read only by the reduce-scatter."""
    gemms = [u.operation for u in p.uses if isinstance(u.operation, GEMM_OPS) and u.operation.operands[-1] is p]
    if len(gemms) != 1 or gemms[0].parent_block() is not block or order[gemms[0]] > order[rs]:
        return None
    gemm = gemms[0]
    if isinstance(gemm, hir.LinearOp) and gemm.bias is not None:
        return None  # the bias would be summed d times
    if sole_users(p, {gemm, rs}):
        return None
    cut = chunk_dims(gemm, 0)
    if cut is None or 0 not in cut or 1 in cut:
        return None
    return gemm


def _chunks_site(pc: PerChunk, op: Operation, block: Block, order: dict[Operation, int]) -> Site:
    """A collective per chunk, with the compute making its input and the
    GEMM reading its output in the same chunks, where there are."""
    comm = pc.comm
    team = comm.team  # type: ignore[attr-defined]
    erase: list[Operation] = [op] if pc.loop is not None else [w for w in [wait_of(comm.results[0], block)] if w] + [op]
    producers, pdims = _producers(pc, op, block, order)
    consumer = _consumer(pc, op, block, order)
    anchor = consumer if consumer is not None else op
    erase = ([consumer] if consumer is not None else []) + erase + producers[::-1]
    return Site(CHUNKS, anchor, erase, consumer, pc.chunks, comm, team, chunked=pc, producers=producers, producer_dims=pdims)


def _producers(pc: PerChunk, op: Operation, block: Block, order: dict[Operation, int]) -> tuple[list[Operation], list[int]]:
    """The chain of compute ops making the collective's input in chunks
    along its dim, first to last, and the output dim each is cut along:
    each writes the buffer the next one (or the collective) cuts, carries
    the same Stream split, and nothing else reads that buffer."""
    chain: list[Operation] = []
    dims: list[int] = []
    buf, dim, readers, limit = pc.sources[0], pc.dims[0], set(walk(op)), op
    while alloc_in(buf, block) is not None:
        writers = [u.operation for u in buf.uses if isinstance(u.operation, COMPUTE) and out_operand(u.operation) is buf]
        if len(writers) != 1 or writers[0].parent_block() is not block or order[writers[0]] > order[limit]:
            break
        prod = writers[0]
        cut = chunk_dims(prod, dim, pc.chunks) if stream_mark(prod) == (dim, pc.chunks) else None
        if cut is None or sole_users(buf, {prod, *readers}):
            break
        chain.append(prod)
        dims.append(dim)
        out_index = len(prod.ins) if isinstance(prod, hir.LaunchOp) else len(prod.operands) - 1
        inputs = [(i, d) for i, d in cut.items() if i != out_index and prod.operands[i] is not buf]
        if len(inputs) != 1:
            break
        i, dim = inputs[0]
        buf, readers, limit = prod.operands[i], {prod}, prod
    return chain[::-1], dims[::-1]


def _consumer(pc: PerChunk, op: Operation, block: Block, order: dict[Operation, int]) -> Operation | None:
    """A GEMM reading the gathered output (rows or batches cut along its
    chunk dim, the weight whole), with the same Stream split, with nothing
    else reading the output in between."""
    if not isinstance(pc.comm, hir.AllgatherOp):
        return None
    out, dim = pc.sources[1], pc.dims[1]
    users = [u.operation for u in out.uses if isinstance(u.operation, GEMM_OPS) and u.index == 0]
    gemm = next((g for g in users if g.parent_block() is block and order[g] > order[op]), None)
    if gemm is None or stream_mark(gemm) != (dim, pc.chunks):
        return None
    if any(order.get(u, -1) < order[gemm] for u in sole_users(out, {gemm, *walk(op)})):
        return None
    cut = chunk_dims(gemm, dim)
    if cut is None or cut.get(0) != dim or 1 in cut:
        return None
    return gemm


def launch_reason(op: hir.LaunchOp, dim: int, chunks: int) -> str:
    """Why a launch with a Stream split runs whole."""
    names = sorted({o.name for o in op.body.block.ops if not isinstance(o, hir.YieldOp)})
    return (
        f"not pipelined: the launch of {', '.join(names)} is not computed by chunks of dim {dim} "
        f"(an op of it reduces, reorders or reshapes that dimension), so it runs whole"
    )


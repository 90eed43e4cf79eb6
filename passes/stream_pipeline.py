"""stream-pipeline: ops with a Stream(S) split become host loops over S
chunks on rotating streams (DESIGN.md section 3 pass 4; docs/passes.md).

Input: host programs from lower-to-host-ir, whose ops carry the markers of
docs/passes.md: `hir.stream = [dim, S]` on the compute and communication ops
of a fusion op whose result has a Stream(S) split, `hir.reshard = "FROM->TO"`
on communications. The pass finds *sites*, each in one block:

- AllGather + GEMM: `hir.allgather %x, %xg` (waited at once), then a
  `hir.matmul`/`hir.linear` whose input (lhs) is `%xg`, rows along dim 0.
  Written by the user as `x [DIDx, -]` to `y [Stream(S), -]`
  (`hir.reshard = "DIDx->Stream"`, the GEMM marked `hir.stream = [0, S]`).
- GEMM + ReduceScatter: a `hir.matmul`/`hir.linear` (no bias) into `%p`,
  then `hir.reduce_scatter %p, %y` (waited at once). Written by the user as
  a partial product with a Stream split, `[Stream(S), -], partial = DIDx`,
  resharded to `[DIDx, -]` (the GEMM marked `hir.stream = [0, S]`), or as
  the result `[DIDx*Stream(k), -]` (S = k * d).
- Local: any other `hir.matmul`, `hir.linear` or `hir.copy` with
  `hir.stream = [dim, S]`: chunks of its output on rotating streams.

In both communication sites S = k * d, d the team size: chunk c belongs to
device c // k (chunk i lives on rank i when S = d). Each site runs by one
algorithm (option `algorithm`): `collective` (per chunk a Broadcast with
root = the chunk's device, or a Reduce to it, and the GEMM), `ring` (one-sided
copy-engine gets of each peer's chunk through a shared buffer; for
GEMM+ReduceScatter, form `sum`, a running sum passed along the ring, or
form `pull`, each destination pulling its partial blocks), or `none`;
`auto` asks the cost model (`cost_model.py`), which may also pipeline a
site the user did not split. Each pipeline's first loop carries
`hir.pipeline = {algorithm, chunks, streams, reason}` (and `form`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    LocationAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import element_type_of, shape_of
from fuserc.passes import cost_model
from fuserc.passes.reshard_util import element_bytes
from fuserc.passes.cost_model import (
    ALGORITHMS,
    ALLGATHER,
    COLLECTIVE,
    NONE,
    PULL,
    REDUCE_SCATTER,
    RING,
    RING_FORMS,
    Machine,
)

AUTO = "auto"
STREAM_ATTR = "hir.stream"
RESHARD_ATTR = "hir.reshard"
PIPELINE_ATTR = "hir.pipeline"
MAX_STREAMS = 8
"""Default stream pool: one stream per chunk, at most this many."""
AUTO_CHUNKS_PER_DEVICE = (1, 2, 4)
"""k of the S = k * d the cost model tries where S is its to choose."""

LOCAL = "local"
IPC = "cuda_ipc"
"""The rings' transport: copy-engine puts/gets and fences of stream memory
operations (no SMs), within one node."""
GEMM_OPS = (hir.MatmulOp, hir.LinearOp)


# --------------------------------------------------------------------------
# Reading the input
# --------------------------------------------------------------------------


def stream_mark(op: Operation) -> tuple[int, int] | None:
    """(dim, S) of an op's `hir.stream = [dim, S]` marker."""
    attr = op.attributes.get(STREAM_ATTR)
    if not isinstance(attr, ArrayAttr) or len(attr.data) != 2:
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


def chunk_dims(op: Operation, out_dim: int) -> dict[int, int] | None:
    """Which operands of compute op `op` are cut, and along which dim, when
    its output is cut along `out_dim` (operand index -> dim; the output's
    own entry included). None when the op cannot be computed by chunks of
    that dimension."""
    if isinstance(op, hir.CopyOp):
        return {0: out_dim, 1: out_dim}
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
    if ra >= 2 and rb <= 2 and ra == ro and out_dim <= ro - 2:  # rows or lhs batch
        return {0: out_dim, out_index: out_dim}
    return None


def gemm_flops(op: Operation) -> float:
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


@dataclass
class Site:
    """A pipelining opportunity: a communication and its GEMM, or a local op."""

    kind: str
    anchor: Operation  # new ops go before it
    erase: list[Operation]  # replaced ops (users first)
    gemm: Operation
    written: int | None  # S of a Stream split the user wrote (None: not split)
    comm: Operation | None = None
    team: tuple[int, ...] = ()
    dim: int = 0  # local sites: the output dim
    outer: bool = False
    """An allgather per chunk (`[Stream(S)*DIDx, -]` to `[Stream(S), -]`):
    `comm` is the allgather inside the loop of S chunks."""

    @property
    def d(self) -> int:
        return len(self.team)

    @property
    def buffer(self) -> SSAValue:
        """The gathered input (allgather) or the partial product (reduce-scatter)."""
        assert self.comm is not None
        if self.kind == REDUCE_SCATTER:
            return self.comm.operands[0]
        out = self.comm.operands[1]
        return out.owner.source if self.outer and isinstance(out.owner, hir.ChunkOp) else out

    def cost_site(self) -> cost_model.Site:
        buf = self.buffer
        assert isinstance(buf.type, TensorType)
        nbytes = math.prod(shape_of(buf)) * element_bytes(buf.type)
        kind = cost_model.ALLGATHER_OUTER if self.outer else self.kind
        return cost_model.Site(kind, gemm_flops(self.gemm), nbytes, str(element_type_of(buf)), self.d)


def find_sites(func: FuncOp) -> list[Site]:
    """The sites of a host program, in program order (an op joins one site)."""
    sites: list[Site] = []
    taken: set[Operation] = set()
    for block in _blocks(func):
        order = {op: i for i, op in enumerate(block.ops)}
        for op in list(block.ops):
            site = None
            if isinstance(op, hir.AllgatherOp):
                site = _allgather_site(op, block, order)
            elif isinstance(op, hir.ForOp):
                site = _outer_allgather_site(op, block, order)
            elif isinstance(op, hir.ReduceScatterOp):
                site = _reduce_scatter_site(op, block, order)
            if site is not None and not (set(site.erase) & taken):
                sites.append(site)
                taken.update(site.erase)
        for op in block.ops:
            mark = stream_mark(op)
            if op in taken or mark is None or not isinstance(op, (*GEMM_OPS, hir.CopyOp)):
                continue
            dim, s = mark
            if 0 <= dim < len(shape_of(op.operands[-1])) and chunk_dims(op, dim) is not None and s > 1:
                sites.append(Site(LOCAL, op, [op], op, s, dim=dim))
                taken.add(op)
    return sites


def _blocks(func: FuncOp) -> list[Block]:
    """The function's block and those of its hir.if_rank regions (not loop
    bodies: their ops already run per iteration)."""
    out: list[Block] = []
    stack = [func.body.block]
    while stack:
        block = stack.pop()
        out.append(block)
        for op in block.ops:
            if isinstance(op, hir.IfRankOp):
                stack.append(op.body.block)
    return out


def _sole_users(value: SSAValue, allowed: set[Operation]) -> list[Operation]:
    """Users of `value` other than `allowed` and hir.dealloc."""
    return [u.operation for u in value.uses if u.operation not in allowed and not isinstance(u.operation, hir.DeallocOp)]


def _allgather_site(ag: hir.AllgatherOp, block: Block, order: dict[Operation, int]) -> Site | None:
    wait = wait_of(ag.token, block)
    if wait is None or alloc_in(ag.output, block) is None or len(ag.team) < 2:
        return None
    xg = ag.output
    users = [u.operation for u in xg.uses if isinstance(u.operation, GEMM_OPS) and u.index == 0]
    gemm = next((g for g in users if g.parent_block() is block and order[g] > order[wait]), None)
    if gemm is None:
        return None
    if any(order.get(u, -1) < order[gemm] for u in _sole_users(xg, {ag, gemm})):
        return None  # read between the gather and the GEMM
    cut = chunk_dims(gemm, 0)
    if cut is None or 0 not in cut or 1 in cut:
        return None  # the rows of the GEMM are not the rows of its input
    mark = stream_mark(gemm)
    written = None
    if mark is not None:
        if mark[0] != 0:
            return None  # the Stream split is on another dim: a local site
        written = mark[1]
    return Site(ALLGATHER, gemm, [gemm, wait, ag], gemm, written, ag, ag.team)


def _outer_allgather_site(loop: hir.ForOp, block: Block, order: dict[Operation, int]) -> Site | None:
    """`hir.for %c = 0 to S { %a = chunk %x [%c]; %b = chunk %xg [%c];
    allgather %a, %b; wait }` (each along dim 0, S chunks), then a GEMM of
    `%xg` marked `hir.stream = [0, S]`."""
    ops = list(loop.body.block.ops)
    if loop.lb != 0 or loop.step != 1 or len(ops) != 5:
        return None
    ca, cb, ag, wait, _ = ops
    s = loop.ub
    c = loop.induction_var
    if not (
        isinstance(ca, hir.ChunkOp) and isinstance(cb, hir.ChunkOp) and isinstance(ag, hir.AllgatherOp)
        and isinstance(wait, hir.WaitOp) and wait.token is ag.token
        and ag.input is ca.result and ag.output is cb.result and len(ag.team) >= 2
        and all(v.index is c and v.dim == 0 and v.chunks == s for v in (ca, cb))
    ):  # fmt: skip
        return None
    x, xg = ca.source, cb.source
    if alloc_in(xg, block) is None or isinstance(x.owner, Operation) and loop.is_ancestor(x.owner):
        return None
    users = [u.operation for u in xg.uses if isinstance(u.operation, GEMM_OPS) and u.index == 0]
    gemm = next((g for g in users if g.parent_block() is block and order[g] > order[loop]), None)
    if gemm is None or stream_mark(gemm) != (0, s):
        return None
    if any(order.get(u, -1) < order[gemm] for u in _sole_users(xg, {cb, gemm})):
        return None
    cut = chunk_dims(gemm, 0)
    if cut is None or 0 not in cut or 1 in cut:
        return None
    return Site(ALLGATHER, gemm, [gemm, loop], gemm, s, ag, ag.team, outer=True)


def _reduce_scatter_site(rs: hir.ReduceScatterOp, block: Block, order: dict[Operation, int]) -> Site | None:
    wait = wait_of(rs.token, block)
    if wait is None or rs.reduction_op != "sum" or len(rs.team) < 2:
        return None
    p = rs.input
    if alloc_in(p, block) is None:
        return None
    gemms = [u.operation for u in p.uses if isinstance(u.operation, GEMM_OPS) and u.operation.operands[-1] is p]
    if len(gemms) != 1 or gemms[0].parent_block() is not block or order[gemms[0]] > order[rs]:
        return None
    gemm = gemms[0]
    if isinstance(gemm, hir.LinearOp) and gemm.bias is not None:
        return None  # the bias would be summed d times
    if _sole_users(p, {gemm, rs}):
        return None
    cut = chunk_dims(gemm, 0)
    if cut is None or 0 not in cut or 1 in cut:
        return None
    d = len(rs.team)
    written = None
    mark, rs_mark = stream_mark(gemm), stream_mark(rs)
    if rs_mark is not None and rs_mark[0] == 0:
        written = rs_mark[1] * d
    elif mark is not None:
        if mark[0] != 0:
            return None
        written = mark[1]
    return Site(REDUCE_SCATTER, rs, [wait, rs, gemm], gemm, written, rs, rs.team)


# --------------------------------------------------------------------------
# Emitting
# --------------------------------------------------------------------------


class Emitter:
    """Builds a list of ops at one location; `loop` nests a body."""

    def __init__(self, location: LocationAttr, root: "Emitter | None" = None):
        self.location = location
        self.ops: list[Operation] = []
        self.root = root or self
        self.consts: dict[int, SSAValue] = {}

    def add(self, op: Operation, hint: str | None = None) -> Operation:
        for o in op.walk():
            o.location = self.location
        self.ops.append(op)
        if hint is not None and op.results:
            op.results[0].name_hint = hint
        return op

    def value(self, op: Operation, hint: str | None = None) -> SSAValue:
        return self.add(op, hint).results[0]

    def const(self, n: int) -> SSAValue:
        """`hir.constant n`, made once, before the outermost loop."""
        root = self.root
        if n not in root.consts:
            root.consts[n] = root.value(hir.ConstantOp(n), f"c{n}")
        return root.consts[n]

    def chunk(self, src: SSAValue, index: SSAValue, chunks: int, dim: int = 0, hint: str | None = None) -> SSAValue:
        if chunks == 1:
            return src
        return self.value(hir.ChunkOp(src, index, dim, chunks), hint)

    def loop(self, lb: int, ub: int, body: Callable[["Emitter", SSAValue], None], hint: str = "c") -> hir.ForOp | None:
        """`hir.for %c = lb to ub` with `body`; nothing when the range is empty."""
        if ub <= lb:
            return None
        op = hir.ForOp(lb, ub)
        op.induction_var.name_hint = hint
        inner = Emitter(self.location, self.root)
        body(inner, op.induction_var)
        block = op.body.block
        terminator = block.last_op
        assert terminator is not None
        for o in inner.ops:
            block.insert_op_before(o, terminator)
        self.add(op)
        return op

    def on_stream(self, index: SSAValue, pool: int, main: SSAValue | None) -> SSAValue:
        """Make worker stream `index mod pool` current; it first waits for
        the main stream's work so far when `main` is given."""
        s = self.value(hir.StreamForOp(index, pool), "s")
        self.add(hir.SetCurrentStreamOp(s))
        if main is not None:
            self.add(hir.SyncStreamOp(main))
        return s

    def join(self, main: SSAValue, pool: int, used: int) -> None:
        """Back on the main stream, which waits for the worker streams."""
        self.add(hir.SetCurrentStreamOp(main))

        def body(e: Emitter, c: SSAValue) -> None:
            e.add(hir.SyncStreamOp(e.value(hir.StreamForOp(c, pool), "s")))

        self.loop(0, min(pool, used), body)

    def fence(self, team: Sequence[int], backend: str) -> None:
        token = self.value(hir.BarrierOp(team, backend), "fence")
        self.add(hir.WaitOp(token))


def rebuild(op: Operation, replaced: dict[int, SSAValue], acc: SSAValue | None = None) -> Operation:
    """`op` (matmul, linear or copy) on new operands, without its markers;
    a GEMM adds `acc` into its result when given (out = GEMM + acc)."""
    ops = [replaced.get(i, v) for i, v in enumerate(op.operands)]
    if isinstance(op, hir.MatmulOp):
        return hir.MatmulOp(ops[0], ops[1], ops[2], acc)
    if isinstance(op, hir.LinearOp):
        return hir.LinearOp(ops[0], ops[1], ops[-1], ops[2] if len(ops) == 4 else None, acc)
    assert isinstance(op, hir.CopyOp) and acc is None
    return hir.CopyOp(*ops)


@dataclass(frozen=True)
class Plan:
    """How a site runs: algorithm, S = chunks, the stream pool, and why."""

    algorithm: str
    chunks: int
    streams: int
    reason: str
    form: str = ""  # the GEMM+ReduceScatter ring's form (cost_model.RING_FORMS)

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


class SiteLowering:
    """Emits the pipeline of one site (docs/passes.md has the host IR of each)."""

    def __init__(self, site: Site, plan: Plan):
        self.site = site
        self.plan = plan
        self.e = Emitter(site.anchor.location)
        self.first_loop: hir.ForOp | None = None

    def loop(self, lb: int, ub: int, body: Callable[[Emitter, SSAValue], None], e: Emitter | None = None) -> None:
        op = (e or self.e).loop(lb, ub, body)
        if op is not None and self.first_loop is None:
            self.first_loop = op
            op.attributes[PIPELINE_ATTR] = self.plan.attr()

    def site_name(self, suffix: str) -> str:
        base = alloc_in(self.site.buffer, self.site.anchor.parent_block())  # type: ignore[arg-type]
        assert base is not None
        return f"{base.site}/{suffix}"

    def run(self) -> None:
        site = self.site
        if site.kind == LOCAL:
            self.local()
        elif site.kind == ALLGATHER and site.outer:
            self.outer_collective() if self.plan.algorithm == COLLECTIVE else self.outer_ring()
        elif site.kind == ALLGATHER:
            self.allgather_collective() if self.plan.algorithm == COLLECTIVE else self.allgather_ring()
        elif self.plan.algorithm == COLLECTIVE:
            self.reduce_scatter_collective()
        else:
            self.reduce_scatter_pull() if self.plan.form == PULL else self.reduce_scatter_ring()
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

    # ---- helpers -------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.plan.chunks // self.site.d

    def reshard(self, op: Operation) -> Operation:
        """Carry the site's `hir.reshard` marker onto a new communication."""
        assert self.site.comm is not None
        mark = self.site.comm.attributes.get(RESHARD_ATTR)
        if mark is not None:
            op.attributes[RESHARD_ATTR] = mark
        return op

    def owner_and_sub(self, e: Emitter, c: SSAValue) -> tuple[SSAValue, SSAValue]:
        """(device c // k, sub-chunk c mod k) of chunk c."""
        if self.k == 1:
            return c, c
        return e.value(hir.DivOp(c, self.k), "dev"), e.value(hir.AddModOp(c, e.const(0), self.k), "sub")

    def gemm_on(self, e: Emitter, rows: SSAValue, out: SSAValue, acc: SSAValue | None = None) -> None:
        """The site's GEMM on a block of rows of its input into `out` (plus
        `acc`, added in the GEMM's epilogue, when given)."""
        gemm = self.site.gemm  # never one that accumulates already (chunk_dims)
        e.add(rebuild(gemm, {0: rows, len(gemm.operands) - 1: out}, acc))

    # ---- local ----------------------------------------------------------------
    def local(self) -> None:
        site, plan, e = self.site, self.plan, self.e
        cut = chunk_dims(site.gemm, site.dim)
        assert cut is not None
        main = e.value(hir.GetCurrentStreamOp(), "main")

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            views = {i: b.chunk(site.gemm.operands[i], c, plan.chunks, dim) for i, dim in sorted(cut.items())}
            b.add(rebuild(site.gemm, views))

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    # ---- AllGather + GEMM ------------------------------------------------------
    def allgather_collective(self) -> None:
        """Own block copied into the gathered buffer; per chunk c on stream
        c mod N: Broadcast from device c // k, then the GEMM of the chunk."""
        site, plan, e = self.site, self.plan, self.e
        ag = site.comm
        assert isinstance(ag, hir.AllgatherOp)
        x, xg, y = ag.input, ag.output, site.gemm.operands[-1]
        main = e.value(hir.GetCurrentStreamOp(), "main")
        pos = e.value(hir.TeamIndexOp(site.team), "pos")
        e.add(hir.CopyOp(x, e.chunk(xg, pos, site.d, hint="mine")))

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            root, _ = self.owner_and_sub(b, c)
            xc = b.chunk(xg, c, plan.chunks, hint="xc")
            token = b.value(self.reshard(hir.BroadcastOp(xc, root, site.team, ag.backend)), "tok")
            b.add(hir.WaitOp(token))
            self.gemm_on(b, xc, b.chunk(y, c, plan.chunks, hint="yc"))

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    def allgather_ring(self) -> None:
        """The local chunks' GEMMs first, on the compute stream (worker 0),
        with no wait. On the main stream the shard is copied into a shared
        buffer (issued just before them) and a copy-engine fence (no SMs)
        passed; every peer chunk is
        then pulled by a copy-engine get on a transfer stream (workers 1..),
        all issued ahead, and the GEMMs follow one after the other on the
        compute stream, each after its own get. A final fence before a
        later run may overwrite the shared buffer."""
        site, plan, e, k, d = self.site, self.plan, self.e, self.k, self.site.d
        ag = site.comm
        assert isinstance(ag, hir.AllgatherOp)
        x, xg, y = ag.input, ag.output, site.gemm.operands[-1]
        read_later = bool(_sole_users(xg, set(site.erase)))
        main = e.value(hir.GetCurrentStreamOp(), "main")
        pos = e.value(hir.TeamIndexOp(site.team), "pos")
        y_mine = e.chunk(y, pos, d, hint="ymine")
        compute = self.compute_stream(e, main)
        # The copy into the shared buffer and the fence run on the main
        # stream: every pull below waits for main, so no get reads a peer's
        # buffer before that peer has written it in this run. The copy is
        # issued before the local GEMMs (which do not wait for it), so that
        # it is not starved of SMs by them.
        e.add(hir.SetCurrentStreamOp(main))
        shared = e.value(hir.AllocOp(self.site_name("ring"), TensorType(element_type_of(x), list(shape_of(x)))), "xs")
        e.add(hir.CopyOp(x, shared))
        handle = e.value(hir.ShareOp(shared, site.team), "h")
        e.add(hir.SetCurrentStreamOp(compute))

        def local(b: Emitter, c: SSAValue) -> None:
            self.gemm_on(b, b.chunk(x, c, k, hint="xc"), b.chunk(y_mine, c, k, hint="yc"))

        self.loop(0, k, local)
        e.add(hir.SetCurrentStreamOp(main))
        e.fence(site.team, IPC)

        def slot(b: Emitter, c: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
            step, sub = self.owner_and_sub(b, c)
            peer = b.value(hir.AddModOp(pos, step, d), "peer")
            return peer, sub, b.chunk(b.chunk(xg, peer, d, hint="blk"), sub, k, hint="xc")

        def pull(b: Emitter, c: SSAValue) -> None:
            b.add(hir.SetCurrentStreamOp(self.transfer_stream(b, c, k, plan.chunks - k)))
            b.add(hir.SyncStreamOp(main))
            peer, sub, dst = slot(b, c)
            block = (sub, k) if k > 1 else (None, None)
            get = hir.GetOp(handle, peer, dst, IPC, *block)
            b.add(hir.WaitOp(b.value(self.reshard(get), "tok")))

        def gemm(b: Emitter, c: SSAValue) -> None:
            b.add(hir.SyncStreamOp(self.transfer_stream(b, c, k, plan.chunks - k)))  # after its get
            peer, sub, xc = slot(b, c)
            self.gemm_on(b, xc, b.chunk(b.chunk(y, peer, d, hint="yblk"), sub, k, hint="yc"))

        self.loop(k, plan.chunks, pull)
        e.add(hir.SetCurrentStreamOp(compute))
        self.loop(k, plan.chunks, gemm)
        if read_later:  # the gathered buffer must hold this device's block too
            e.add(hir.SetCurrentStreamOp(main))
            e.add(hir.CopyOp(x, e.chunk(xg, pos, d, hint="mine")))
        e.join(main, plan.streams, plan.chunks)
        e.fence(site.team, IPC)
        e.add(hir.DeallocOp(shared))

    # ---- an AllGather per chunk (Stream(S)*DIDx) -------------------------------
    def outer_collective(self) -> None:
        """Per chunk c on stream c mod N: the Allgather of this device's
        block of chunk c into chunk c of the gathered buffer, then the GEMM."""
        site, plan, e = self.site, self.plan, self.e
        ag = site.comm
        assert isinstance(ag, hir.AllgatherOp)
        x, xg, y = _outer_source(ag), site.buffer, site.gemm.operands[-1]
        main = e.value(hir.GetCurrentStreamOp(), "main")

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            xc = b.chunk(xg, c, plan.chunks, hint="xc")
            gather = hir.AllgatherOp(b.chunk(x, c, plan.chunks, hint="mine"), xc, site.team, ag.backend)
            b.add(hir.WaitOp(b.value(self.reshard(gather), "tok")))
            self.gemm_on(b, xc, b.chunk(y, c, plan.chunks, hint="yc"))

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    def outer_ring(self) -> None:
        """The shard in a shared buffer, one fence; per chunk c on stream c
        mod N: this device's block of chunk c copied into place and the
        blocks of the d - 1 peers pulled (block c of their shards), all
        issued ahead of the GEMMs; then each GEMM after its chunk's copies."""
        site, plan, e, d = self.site, self.plan, self.e, self.site.d
        ag = site.comm
        assert isinstance(ag, hir.AllgatherOp)
        x, xg, y = _outer_source(ag), site.buffer, site.gemm.operands[-1]
        main = e.value(hir.GetCurrentStreamOp(), "main")
        pos = e.value(hir.TeamIndexOp(site.team), "pos")
        shared = e.value(hir.AllocOp(self.site_name("ring"), TensorType(element_type_of(x), list(shape_of(x)))), "xs")
        e.add(hir.CopyOp(x, shared))
        handle = e.value(hir.ShareOp(shared, site.team), "h")
        e.fence(site.team, IPC)

        def pull(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            xc = b.chunk(xg, c, plan.chunks, hint="xc")
            b.add(hir.CopyOp(b.chunk(x, c, plan.chunks, hint="mine"), b.chunk(xc, pos, d, hint="own")))

            def peer_block(bb: Emitter, t: SSAValue) -> None:
                peer = bb.value(hir.AddModOp(pos, t, d), "peer")
                get = hir.GetOp(handle, peer, bb.chunk(xc, peer, d, hint="piece"), IPC, c, plan.chunks)
                bb.add(hir.WaitOp(bb.value(self.reshard(get), "tok")))

            b.loop(1, d, peer_block, hint="t")

        def compute(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, None)  # after its copies, on the same stream
            xc = b.chunk(xg, c, plan.chunks, hint="xc")
            self.gemm_on(b, xc, b.chunk(y, c, plan.chunks, hint="yc"))

        self.loop(0, plan.chunks, pull)
        self.loop(0, plan.chunks, compute)
        e.join(main, plan.streams, plan.chunks)
        e.fence(site.team, IPC)
        e.add(hir.DeallocOp(shared))

    # ---- GEMM + ReduceScatter --------------------------------------------------
    def reduce_scatter_collective(self) -> None:
        """Per chunk c on stream c mod N: the GEMM of rows chunk c into the
        partial buffer, then a Reduce of it to device c // k."""
        site, plan, e, k = self.site, self.plan, self.e, self.k
        rs = site.comm
        assert isinstance(rs, hir.ReduceScatterOp)
        x, p, y = site.gemm.operands[0], rs.input, rs.output
        main = e.value(hir.GetCurrentStreamOp(), "main")

        def body(b: Emitter, c: SSAValue) -> None:
            b.on_stream(c, plan.streams, main)
            pc = b.chunk(p, c, plan.chunks, hint="pc")
            self.gemm_on(b, b.chunk(x, c, plan.chunks, hint="xc"), pc)
            root, sub = self.owner_and_sub(b, c)
            red = hir.ReduceOp(pc, b.chunk(y, sub, k, hint="yc"), root, site.team, "sum", rs.backend)
            b.add(hir.WaitOp(b.value(self.reshard(red), "tok")))

        self.loop(0, plan.chunks, body)
        e.join(main, plan.streams, plan.chunks)

    def ring_start(self) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue, SSAValue, SSAValue]:
        """What both ReduceScatter ring forms begin with: the GEMM's input,
        the partial and output buffers, the main stream, this device's
        position and the next one's."""
        e, rs = self.e, self.site.comm
        assert isinstance(rs, hir.ReduceScatterOp)
        main = e.value(hir.GetCurrentStreamOp(), "main")
        pos = e.value(hir.TeamIndexOp(self.site.team), "pos")
        nxt = e.value(hir.AddModOp(pos, e.const(1), self.site.d), "next")
        return self.site.gemm.operands[0], rs.input, rs.output, main, pos, nxt

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
        pos - 1's buffer and passes a copy-engine fence; the last step
        (q = pos) writes the result. Each block is cut into k sub-chunks
        (S = k * d), k independent rings in turn, so a GEMM waits for a
        transfer issued k GEMMs earlier. GEMMs run in order on the compute
        stream, the puts and fences of sub-ring j on transfer stream j.

        Every GEMM writes where its running sum landed, so that the sum is
        read and written in place (an epilogue with C = D: a GEMM writing
        elsewhere would first copy the sum into its output). The sums land
        in the partial buffer, shared (each block is put there once, by the
        next device, and read once), and at step d - 2 straight into the
        output of the device that finishes the block."""
        site, plan, e, d, k = self.site, self.plan, self.e, self.site.d, self.k
        s = plan.chunks
        x, p, y, main, pos, nxt = self.ring_start()
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
                self.gemm_on(bb, sub(bb, x, q, j, "xc"), out, None if first else out)
                if last:
                    return
                bb.add(hir.SetCurrentStreamOp(self.transfer_stream(bb, j, 0, k)))
                bb.add(hir.SyncStreamOp(compute))
                if t == d - 2:  # into the output of device pos - 1, which finishes block q
                    if d == 2:  # (no fence yet in this run: pos - 1 may still read its last output)
                        bb.fence(site.team, IPC)
                    put = hir.PutOp(out, y_handle, prv, IPC, *((j, k) if k > 1 else (None, None)))
                else:
                    index = q if k == 1 else bb.value(hir.AddModOp(self.times(bb, q, k, s), j, s), "slot")
                    put = hir.PutOp(out, handle, prv, IPC, index, s)
                bb.add(hir.WaitOp(bb.value(self.reshard(put), "tok")))
                bb.fence(site.team, IPC)
                bb.add(hir.SetCurrentStreamOp(compute))

            if k == 1:
                chunk(b, 0)
            else:
                b.loop(0, k, chunk, hint="j")

        def at(t: int | None) -> Callable[[Emitter, SSAValue], None]:
            return lambda b, c: step(b, b.value(hir.AddModOp(nxt, c, d), "dest"), t)

        self.loop(0, 1, at(0))
        self.loop(1, d - 2, at(None))
        if d > 2:
            self.loop(d - 2, d - 1, at(d - 2))
        step(e, pos, d - 1)
        e.join(main, plan.streams, plan.chunks)
        e.fence(site.team, IPC)

    def reduce_scatter_pull(self) -> None:
        """Every device computes its d partial blocks back to back on the
        compute stream, never waiting: at step t the block of q = pos + 1 +
        t into the shared partial buffer, the last step (q = pos) into the
        output. Each destination pulls its block's partials as they are
        done: after step t, on transfer stream j (sub-chunk j of k), a
        copy-engine fence then a get of block pos from device pos - 1 - t
        (which computed it at its step t) into slot t of a local buffer.
        Once its own GEMM of sub-chunk j is done, stream j adds the d - 1
        pulled partials into the output (one launch; it overlaps the next
        own GEMM when k > 1). Unlike the running sum, no GEMM waits for a
        transfer: the price is the final add."""
        site, plan, e, d, k = self.site, self.plan, self.e, self.site.d, self.k
        s = plan.chunks
        x, p, y, main, pos, nxt = self.ring_start()
        handle = e.value(hir.ShareOp(p, site.team), "h")
        rows, cols = shape_of(y)[0], list(shape_of(y)[1:])
        pulled = e.value(hir.AllocOp(self.site_name("pulled"), TensorType(element_type_of(y), [(d - 1) * rows, *cols])), "pulled")
        compute = self.compute_stream(e, main)
        sub = self.sub_block

        def step(t: int) -> Callable[[Emitter, SSAValue], None]:
            """Step t, in a loop of one iteration (%c = t), so that the peer
            pos - 1 - t is an addition of a constant."""

            def body(b: Emitter, c: SSAValue) -> None:
                q = b.value(hir.AddModOp(nxt, c, d), "dest")
                peer = b.value(hir.AddModOp(pos, b.const((d - 1 - t) % d), d), "from")

                def chunk(bb: Emitter, j: SSAValue | int) -> None:
                    self.gemm_on(bb, sub(bb, x, q, j, "xc"), sub(bb, p, q, j, "pc"))
                    bb.add(hir.SetCurrentStreamOp(self.transfer_stream(bb, j, 0, k)))
                    bb.add(hir.SyncStreamOp(compute))
                    bb.fence(site.team, IPC)  # every device's GEMM (t, j) is done
                    index = pos if k == 1 else bb.value(hir.AddModOp(self.times(bb, pos, k, s), j, s), "blk")
                    get = hir.GetOp(handle, peer, slot(bb, c, j), IPC, index, s)
                    bb.add(hir.WaitOp(bb.value(self.reshard(get), "tok")))
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
            self.gemm_on(b, sub(b, x, pos, j, "xc"), yc)
            b.add(hir.SetCurrentStreamOp(self.transfer_stream(b, j, 0, k)))
            b.add(hir.SyncStreamOp(compute))
            b.add(_sum_launch(yc, [slot(b, b.const(t), j) for t in range(d - 1)]))
            b.add(hir.SetCurrentStreamOp(compute))

        if k == 1:
            own(e, 0)
        else:
            e.loop(0, k, own, hint="j")
        e.join(main, plan.streams, plan.chunks)
        e.fence(site.team, IPC)  # no device pulls from this one's partials any more
        e.add(hir.DeallocOp(pulled))

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


def _root(v: SSAValue) -> SSAValue:
    """The buffer a view aliases."""
    while isinstance(v.owner, (hir.ChunkOp, hir.ViewOp, hir.SelectOp)):
        v = v.owner.source
    return v


def _deallocs_in_the_way(site: Site, block: Block) -> list[hir.DeallocOp]:
    """hir.dealloc ops between the site's first op and its anchor that give
    back a buffer the site reads: the pipeline runs at the anchor, so they
    move after it."""
    used = {_root(v) for op in site.erase for o in op.walk() for v in o.operands}
    ops = list(block.ops)
    start = min(ops.index(op) for op in site.erase if op.parent_block() is block)
    end = ops.index(site.anchor)
    return [op for op in ops[start:end] if isinstance(op, hir.DeallocOp) and op.buffer in used]


def _outer_source(ag: hir.AllgatherOp) -> SSAValue:
    """The local shard whose chunks the per-chunk allgather gathers."""
    chunk = ag.input.owner
    assert isinstance(chunk, hir.ChunkOp)
    return chunk.source


def _sum_launch(out: SSAValue, parts: Sequence[SSAValue]) -> hir.LaunchOp:
    """`out += parts[0] + parts[1] + ...` as one launch (one fused kernel)."""
    from fuserc.dialects.fusion import AddOp

    op = hir.LaunchOp([out, *parts], [out])
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


# --------------------------------------------------------------------------
# Deciding
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamPipeline(ModulePass):
    """Pipelines every Stream split (and, with `auto`, sites that pay) into
    host loops over chunks on rotating streams (DESIGN.md section 3 pass 4).

    Options: `algorithm` (auto|collective|ring|none), `num_streams` (the
    worker stream pool; 0: one per chunk, at most 8), `chunks` (S for sites
    without a written Stream split; None: the cost model's choice), `links`
    (a links JSON file for the cost model; empty: $FUSERC_LINKS or
    ~/.cache/fuserc/links.json, else documented defaults), `ring_form`
    (auto|sum|pull: the GEMM+ReduceScatter ring's form; auto: the cost
    model's choice)."""

    name = "stream-pipeline"

    algorithm: str = AUTO
    num_streams: int = 0
    chunks: int | None = None
    links: str = ""
    ring_form: str = AUTO

    def __post_init__(self) -> None:
        if self.ring_form not in (AUTO, *RING_FORMS):
            raise ValueError(f"ring-form must be one of auto, {', '.join(RING_FORMS)}, got '{self.ring_form}'")
        if self.algorithm not in (AUTO, *ALGORITHMS):
            raise ValueError(f"algorithm must be one of auto, {', '.join(ALGORITHMS)}, got '{self.algorithm}'")
        if self.num_streams < 0:
            raise ValueError(f"num-streams must be >= 0 (0: one per chunk), got {self.num_streams}")
        if self.chunks is not None and self.chunks < 1:
            raise ValueError(f"chunks must be positive, got {self.chunks}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.algorithm == NONE:
            return
        machine: Machine | None = None
        for func in [f for f in op.body.block.ops if isinstance(f, FuncOp) and hir.is_host_program(f)]:
            for site in find_sites(func):
                if site.kind != LOCAL and machine is None:
                    try:
                        machine = cost_model.load_machine(self.links or None)
                    except ValueError as e:
                        raise error_at(site.anchor, f"stream-pipeline: {e}") from None
                plan = self.plan(site, machine)
                if plan is None:
                    continue
                SiteLowering(site, plan).run()

    def streams(self, chunks: int) -> int:
        return self.num_streams or min(chunks, MAX_STREAMS)

    def plan(self, site: Site, machine: Machine | None) -> Plan | None:
        """The plan of a site, or None to leave it as it is."""
        if site.kind == LOCAL:
            assert site.written is not None
            return Plan("local", site.written, self.streams(site.written), "Stream split of a local op")
        assert machine is not None
        options = self.chunk_options(site)
        if not options:
            return None
        algorithms = [COLLECTIVE, RING] if self.algorithm == AUTO else [self.algorithm]
        if self.algorithm == AUTO:  # a written split too: pipelining must not lose
            algorithms = [NONE, *algorithms]
        if not machine.one_node(site.team):  # CUDA IPC reaches the GPUs of one node only
            if self.algorithm == RING:
                raise error_at(
                    site.anchor,
                    f"stream-pipeline: the ring pulls chunks over CUDA IPC within one node, but team "
                    f"{list(site.team)} spans nodes of {machine.gpus_per_node} GPUs (gpus_per_node, "
                    f"{machine.source}): use algorithm=collective",
                )
            algorithms = [a for a in algorithms if a != RING]
        requested = site.written is not None or self.algorithm != AUTO
        forms = RING_FORMS if self.ring_form == AUTO else (self.ring_form,)
        best, reason = cost_model.choose(machine, site.cost_site(), algorithms, options, requested, forms)
        if self.algorithm != AUTO:
            reason = f"algorithm = {self.algorithm} requested; {reason}"
        if best.algorithm == NONE:
            if site.written is not None:  # say why the written split is not pipelined
                site.anchor.attributes[PIPELINE_ATTR] = Plan(NONE, 1, 0, reason).attr()
            return None
        return Plan(best.algorithm, best.chunks, self.streams(best.chunks), reason, best.form)

    def chunk_options(self, site: Site) -> list[int]:
        """The S values a site may use: the written split, the `chunks`
        option, or those the cost model tries; each a multiple of the team
        size that cuts the rows evenly (a diagnostic otherwise)."""
        d = site.d
        rows = shape_of(site.buffer)[0]
        if site.written is not None:
            s, what = site.written, f"Stream({site.written})"
        elif self.chunks is not None:
            s, what = self.chunks, f"chunks = {self.chunks}"
        else:
            return [k * d for k in AUTO_CHUNKS_PER_DEVICE if rows % (k * d) == 0]
        role = "rows gathered from" if site.kind == ALLGATHER else "partial sum scattered over"
        if s % d and not site.outer:
            raise error_at(
                site.anchor,
                f"stream-pipeline: {what} does not fit the {role} the {d} devices of team {list(site.team)}: "
                f"S must be a multiple of {d} (chunk c belongs to device c * {d} / S)",
            )
        if rows % s:
            raise error_at(
                site.anchor,
                f"stream-pipeline: {what} does not split the {rows} rows of {site.buffer.type} evenly",
            )
        return [s]

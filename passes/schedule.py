"""Collectives scheduled by dependencies: a communication runs beside the
compute that does not need its result (Transformer Engine's bulk overlap:
a backward's weight-gradient GEMM beside the gather of the activation it
needs, or beside the reduce-scatter of the input gradient).

The last step of stream-pipeline, on every host program, for each
collective of a function's block whose token has one wait in that block
(the ones no pipelined site took):
- it starts as early as its buffers allow: right after the last op before
  it that touches them (reads or writes its input or output, or a view of
  either), with its output's allocation;
- it runs on a worker stream (`hir.stream_for 0 mod 1`), after an event of
  the main stream recorded where it starts (its input is ready there);
- its wait sits right before the first later op that touches its buffers
  (a read of its output, a write or deallocation of its input; an
  alltoallv's deallocations of its own buffers right after its wait go
  down with it, as nothing else reads the rows it sent).
A collective with no compute to overlap (no GEMM, kernel or copy would
run between its start and its wait) is left as it is. Before that, the
compute a collective needs is moved ahead of the compute it does not
need (since the last communication, wait or stream switch): the input
gradient's GEMMs run before the weight gradients', so that its
reduce-scatter runs beside them (Megatron-LM's order). Before all that,
`share_compute` gives a collective with no GEMM beside it the GEMMs the
collective before it can spare (by the cost model's times). Ops with
regions count as touching what their regions touch. docs/passes.md shows
the host IR before and after.
"""

from __future__ import annotations

from collections.abc import Collection

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import IsTerminator

from fuserc.dialects import hir
from fuserc.dialects.fusion import AddOp, FusionOp, element_type_of, shape_of
from fuserc.dialects.fusion_reduction import ReductionOp
from fuserc.ir import ClassTest, walk
from fuserc.passes.cost_model import Machine
from fuserc.passes.stream_sites import GEMM_OPS, carry_reshard, gemm_flops
from fuserc.passes.stream_sites import root as _root

SCHEDULED = (hir.AllgatherOp, hir.ReduceScatterOp, hir.AllreduceOp, hir.AlltoallOp, hir.AlltoallvOp)
"""Collectives whose start and wait move (not sends, puts or fences: their
peers' order matters)."""
is_scheduled = ClassTest(SCHEDULED)

POOL = 1
"""The worker stream pool of scheduled collectives: one stream, so that they
keep their order (every rank must issue them in the same order)."""


def _touched(op: Operation) -> set[SSAValue]:
    """The buffers (roots) `op` and the ops of its regions use (read off
    xDSL's fields: `o.operands` makes a view per call, and a miss of an
    isinstance check against an attribute class is a Python call)."""
    return {_root(v) for o in walk(op) for v in o._operands if type(v._type) is TensorType}


_READS_ONLY = (hir.AllocOp, hir.SelectOp, hir.ChunkOp, hir.ViewOp, hir.TransposeOp, hir.ConstantOp)


def _written(op: Operation) -> set[SSAValue]:
    """The buffers (roots) `op` and the ops of its regions write (a
    deallocation counts as a write): a compute op's outputs, a
    communication's buffers; every tensor it touches for an op not known
    here."""
    out: set[SSAValue] = set()
    for o in walk(op):
        kind = _WRITES.get(type(o))
        if kind is None:
            kind = _WRITES[type(o)] = next((k for k, classes in enumerate(_WRITE_KINDS) if isinstance(o, classes)), len(_WRITE_KINDS))
        if kind == 0:
            out.add(_root(o.out))  # type: ignore[attr-defined]
        elif kind == 1:
            out.add(_root(o.dest))  # type: ignore[attr-defined]
        elif kind == 2:
            out.update(_root(v) for v in o.outs)  # type: ignore[attr-defined]
        elif kind == 3:
            out.add(_root(o.buffer))  # type: ignore[attr-defined]
        elif kind == len(_WRITE_KINDS):
            out.update(_root(v) for v in o._operands if type(v._type) is TensorType)
    return out


_WRITE_KINDS: tuple[tuple[type[Operation], ...], ...] = ((hir.MatmulOp, hir.LinearOp), (hir.CopyOp,), (hir.LaunchOp,), (hir.DeallocOp,), _READS_ONLY)
"""What `_written` reads of an op, by the first of these it is: its out, its
dest, its outs, its buffer, nothing; else every tensor operand."""
_WRITES: dict[type[Operation], int] = {}
"""Each op class's place in `_WRITE_KINDS`, decided once per class."""


def _touching(roots: Collection[SSAValue], block: Block) -> set[Operation]:
    """The ops of `block` that touch (`_touched`) a buffer of `roots`,
    found from the buffers' uses and their views', not by walking the
    block: a buffer has a few users, a block of a large program thousands
    of ops."""
    out: set[Operation] = set()
    stack = list(roots)
    while stack:
        v = stack.pop()
        for use in v.uses:
            op: Operation | None = use.operation
            if isinstance(op, hir.VIEW_OPS) and use.index == 0:
                stack.extend(op.results)  # a view's root is its operand's
            while op is not None and op.parent is not block:
                op = op.parent_op()
            if op is not None:
                out.add(op)
    return out


def written_later(buffer: SSAValue, after: Operation, ignore: Collection[Operation] = ()) -> bool:
    """Whether an op of `after`'s block after it (not in `ignore`) writes
    `buffer` (its root) other than by deallocating it: a buffer peers pull
    from in this run must keep its contents until the block's closing
    fence. Only the ops using the buffer or its views can write it: those
    are found through its uses, and the block is walked from `after` in
    both directions only until each is placed, so a query costs the
    buffer's uses and their distance from `after`, not the block."""
    target, block = _root(buffer), after.parent_block()
    writers = {
        o
        for o in (_touching([target], block) if block is not None else ())
        if o is not after and o not in ignore and not isinstance(o, hir.DeallocOp) and not o.has_trait(IsTerminator) and target in _written(o)
    }
    forward, backward = after.next_op, after.prev_op
    while writers and forward is not None:
        if forward in writers:
            return True
        writers.discard(backward)
        forward, backward = forward.next_op, backward.prev_op if backward is not None else None
    return False


def _computes(op: Operation) -> bool:
    """Work a collective can run beside (allocations, views and stream
    bookkeeping are none: moving a collective past only those costs a
    stream switch and gains nothing)."""
    return _is_compute(op) or bool(op.regions) and any(_is_compute(o) for o in walk(op))


def _communicates(op: Operation) -> bool:
    """`op` is or holds a collective or a transfer through NCCL or MPI:
    another one must not run at the same time on the communicator (NCCL
    kernels of one communicator on two streams may deadlock), so scheduled
    collectives do not move past it. Copy-engine transfers (CUDA IPC) may."""
    if not op.regions:  # the usual op: no walk
        return _is_communication(op) and op.backend != "cuda_ipc"  # type: ignore[attr-defined]
    return any(_is_communication(o) and o.backend != "cuda_ipc" for o in walk(op))


def _definitions(comm: Operation, block: Block) -> set[Operation]:
    """The ops of `block` defining what `comm` reads, transitively (views,
    selects, constants of its operands)."""
    out: set[Operation] = set()
    todo = list(comm.operands)
    while todo:
        owner = todo.pop().owner
        if isinstance(owner, Operation) and owner.parent_block() is block and owner not in out:
            out.add(owner)
            todo.extend(owner.operands)
    return out


def _wait_of(comm: Operation, block: Block) -> hir.WaitOp | None:
    uses = list(comm.results[0].uses) if comm.results else []
    if len(uses) != 1 or not isinstance(uses[0].operation, hir.WaitOp):
        return None
    wait = uses[0].operation
    return wait if wait.parent_block() is block else None


def overlap_collectives(block: Block) -> int:
    """Schedule the collectives of `block` (module docstring); how many moved.
    Each one walks its neighbours through the block's links, so the cost is
    the size of its window, not of the block."""
    moved = 0
    last = block.last_op
    for comm in [o for o in block.ops if is_scheduled(o)]:
        wait = _wait_of(comm, block)
        if wait is None:
            continue
        _needed_first(comm)
        buffers = _buffers(comm)
        allocs = [v.owner for v in comm.operands if isinstance(v.owner, hir.AllocOp) and v.owner.parent_block() is block]
        needed = _definitions(comm, block)
        before: list[Operation] = []  # the ops the collective moves above, nearest first
        prev = comm.prev_op
        while prev is not None:
            if prev not in allocs and (prev in needed or _touched(prev) & buffers or _communicates(prev)):
                break
            before.append(prev)
            prev = prev.prev_op
        before.reverse()
        freed = _freed_after(comm, wait, buffers)
        for f in freed:  # an alltoallv's own buffers, given back after its wait wherever it goes
            f.detach()
        after = _sinks_past(wait, buffers, last)  # the ops its wait moves below
        nxt = after[-1].next_op if after else wait.next_op
        passed = [o for o in before if o not in allocs]
        if nxt is None or not any(_computes(o) for o in passed + after):
            Rewriter.insert_op(freed, InsertPoint.after(wait))
            continue  # nothing to overlap with
        anchor = passed[0] if passed else comm
        lifted = before[before.index(anchor) + 1 :] if passed else []
        _move(comm, wait, [a for a in dict.fromkeys(allocs) if a in lifted], anchor, nxt)
        Rewriter.insert_op(freed, InsertPoint.after(wait))
        moved += 1
    return moved


def _freed_after(comm: Operation, wait: Operation, buffers: set[SSAValue]) -> list[Operation]:
    """The deallocations right after an alltoallv's wait of buffers only it
    used (its rows sent and the counts: expert parallelism's dispatch and
    combine), which go below its wait with it rather than keep it there."""
    if not isinstance(comm, hir.AlltoallvOp):
        return []
    out: list[Operation] = []
    nxt = wait.next_op
    while isinstance(nxt, hir.DeallocOp) and _root(nxt.buffer) in buffers:
        out.append(nxt)
        nxt = nxt.next_op
    return out


def _buffers(comm: Operation) -> set[SSAValue]:
    """The buffers (roots) a collective reads and writes."""
    return {_root(v) for v in comm.operands if isinstance(v.type, TensorType)}


def _sinks_past(wait: Operation, buffers: set[SSAValue], last: Operation | None) -> list[Operation]:
    """The ops after a collective's `wait` that its wait may move below:
    up to the first that touches its `buffers` or communicates, or `last`."""
    out: list[Operation] = []
    nxt = wait.next_op
    while nxt is not None and nxt is not last and not (_touched(nxt) & buffers) and not _communicates(nxt):
        out.append(nxt)
        nxt = nxt.next_op
    return out


def _spare_gemms(comm: Operation) -> list[Operation]:
    """The GEMMs of `comm`'s window that it does not need (`_needed_first`
    runs them beside it), in order."""
    window = _window(comm)
    cone = _cone(comm, window)
    return [o for o in window if o not in cone and isinstance(o, GEMM_OPS)]


def share_compute(block: Block, machine: Machine) -> int:
    """Before `overlap_collectives`: a collective that would have no compute
    beside it takes GEMMs from the collective before it, where that one has
    more than it needs to hide its transfer (`KEEP` times the cost model's
    time); how many GEMMs moved. A collective whose transfer is mostly
    latency (under twice NCCL's) takes none. In a backward, the weight gradients that a reduce-scatter
    does not need all run beside it; one of them then runs beside the
    gather that follows (the next block's cotangent) instead. A GEMM moves
    from its place before the earlier collective to just before the later
    one, with the deallocations right after it of buffers it used last,
    only where it commutes with every op between (it reads no value they
    make, neither writes what the other touches, no stream op or other
    communication lies between), so the result is the same."""
    moved = 0
    comms = [o for o in block.ops if is_scheduled(o) and _wait_of(o, block) is not None]
    for prev, comm in zip(comms, comms[1:]):
        need = _transfer(comm, machine)
        have = _beside(comm, block, machine)
        if have >= need or need < 2 * machine.nccl_latency_us * 1e-6:
            continue  # hidden already, or too small to be worth a GEMM's move
        free = _spare_gemms(prev)
        spare = sum(gemm_time(o, machine) for o in free) - KEEP * _transfer(prev, machine)
        for gemm in reversed(free):
            t = gemm_time(gemm, machine)
            if have >= need or t > spare:
                break
            unit = _movable(gemm, comm)
            if unit is None:
                continue
            for o in unit:
                o.detach()
            for o in unit:
                Rewriter.insert_op(o, InsertPoint.before(comm))
            spare -= t
            have += t
            moved += 1
    return moved


KEEP = 1.5
"""The GEMM time a collective keeps beside it, over its modeled transfer:
the GPT layer's NCCL reduce-scatters on 4 H200s took up to 1.7x the cost
model's time, and a collective left uncovered stalls the main stream at
its wait."""


def gemm_time(op: Operation, machine: Machine) -> float:
    return machine.gemm(gemm_flops(op), str(element_type_of(op.operands[-1])))


def _transfer(comm: Operation, machine: Machine) -> float:
    """The collective's time by the cost model (NCCL's bus bytes)."""
    team = comm.team  # type: ignore[attr-defined]
    return machine.nccl(float(comm.wire_bytes()), not machine.one_node(team))  # type: ignore[attr-defined]


def _beside(comm: Operation, block: Block, machine: Machine) -> float:
    """The GEMM time `overlap_collectives` would give `comm`: GEMMs of its
    window it does not need, and those its wait moves below."""
    wait = _wait_of(comm, block)
    after = _sinks_past(wait, _buffers(comm), block.last_op) if wait is not None else []
    return sum(gemm_time(o, machine) for o in [*_spare_gemms(comm), *after] if isinstance(o, GEMM_OPS))


def _between(first: Operation, last: Operation) -> list[Operation] | None:
    """The ops after `first` and before `last` in their block; None when
    `last` does not follow `first` there."""
    out: list[Operation] = []
    op = first.next_op
    while op is not None and op is not last:
        out.append(op)
        op = op.next_op
    return out if op is not None else None


def _frees(used: set[SSAValue], ops: list[Operation]) -> list[Operation]:
    """The deallocations among `ops` of the buffers in `used`."""
    return [o for o in ops if isinstance(o, hir.DeallocOp) and _root(o.buffer) in used]


def _movable(gemm: Operation, comm: Operation) -> list[Operation] | None:
    """`gemm` and the deallocations of buffers it used last, if together
    they can move to just before `comm` (later in the same block) without
    changing what any op computes; else None."""
    used = _touched(gemm)
    results = set(gemm.results)
    between = _between(gemm, comm)
    if between is None:
        return None
    frees = _frees(used, between)
    for o in between:
        if o in frees:
            freed = _root(o.buffer)  # type: ignore[attr-defined]
            if any(freed in _touched(x) for x in between[: between.index(o)] if x not in frees):
                return None  # the buffer is used after the GEMM: not its last use
            continue
        if isinstance(o, hir.WaitOp):
            continue  # a wait orders the main stream after a collective: the GEMM may run after it
        if _bounds(o) or _communicates(o) and not is_scheduled(o):
            return None
        if results & {v for x in walk(o) for v in x.operands}:
            return None
        if _written(gemm) & _touched(o) or used & _written(o):
            return None
    return [gemm, *frees]


_BOUNDARY = (hir.WaitOp, hir.GetCurrentStreamOp, hir.SetCurrentStreamOp, hir.StreamForOp, hir.SyncStreamOp, hir.RecordEventOp, hir.WaitEventOp)
"""Ops compute is never moved across: a wait guards buffers its token
does not name, and stream switches belong to the ops around them."""


def _bounds(op: Operation) -> bool:
    """`op` is or holds a boundary: a pipeline's join (`hir.for` of
    `hir.sync_stream`s) orders the compute after it behind the worker
    streams' writes, which name no buffer in the join itself."""
    return _is_boundary(op) or bool(op.regions) and any(_is_boundary(o) for o in walk(op))


_is_boundary = ClassTest(_BOUNDARY)
_is_communication, _is_compute, _is_reduce_scatter = ClassTest(hir.CommunicationOp), ClassTest(hir.COMPUTE_OPS), ClassTest(hir.ReduceScatterOp)
_is_barrier, _is_wait, _is_dealloc, _is_launch = ClassTest(hir.BarrierOp), ClassTest(hir.WaitOp), ClassTest(hir.DeallocOp), ClassTest(hir.LaunchOp)
_is_get_stream, _is_set_stream = ClassTest(hir.GetCurrentStreamOp), ClassTest(hir.SetCurrentStreamOp)
"""The classes the schedule's walks test every op against, each decided once per class (`ClassTest`)."""


def _needed_first(comm: Operation) -> None:
    """Reorder the ops between the last boundary (a communication, a wait,
    a stream op) and `comm` so that those `comm` depends on come first, in
    their order, then `comm`'s turn, then the others, in their order. An op
    depends on an earlier one that defines a value it reads or touches a
    buffer it touches (transitively); the others touch nothing the moved
    ones touch, so the order of their effects is kept."""
    window = _window(comm)
    if len(window) < 2:
        return
    cone = _cone(comm, window)
    rest = [o for o in window if o not in cone]
    if not cone or not any(_computes(o) for o in rest) or window.index(rest[0]) > max(window.index(c) for c in cone):
        return  # nothing to run beside the collective, or already in that order
    for o in rest:
        o.detach()
    for o in rest:
        Rewriter.insert_op(o, InsertPoint.before(comm))


def _window(comm: Operation) -> list[Operation]:
    """The ops between the last boundary (a communication, a wait, a stream
    op) and `comm`, in order."""
    window: list[Operation] = []
    prev = comm.prev_op
    while prev is not None and not _bounds(prev) and not _communicates(prev):
        window.append(prev)
        prev = prev.prev_op
    window.reverse()
    return window


def _cone(comm: Operation, window: list[Operation]) -> set[Operation]:
    """The ops of `window` that `comm` depends on, transitively."""
    cone: set[Operation] = set()
    need_values = {v for o in walk(comm) for v in o._operands}
    cone_touched, cone_written = _touched(comm), _written(comm)
    for op in reversed(window):
        touched, written = _touched(op), _written(op)
        if set(op.results) & need_values or written & cone_touched or touched & cone_written:
            cone.add(op)
            need_values |= {v for o in walk(op) for v in o._operands}
            cone_touched |= touched
            cone_written |= written
    return cone


def _move(comm: Operation, wait: Operation, lifted: list[Operation], anchor: Operation, end: Operation) -> None:
    """The collective (on the worker stream, its output allocations
    `lifted` first) before `anchor`, its wait before `end`."""
    for a in lifted:  # allocations the collective moves above
        a.detach()
        Rewriter.insert_op(a, InsertPoint.before(anchor))
    main = hir.GetCurrentStreamOp()
    ready = hir.RecordEventOp()
    index = hir.ConstantOp(0)
    side = hir.StreamForOp(index, POOL)
    Rewriter.insert_op([main, ready, index, side, hir.SetCurrentStreamOp(side), hir.WaitEventOp(ready)], InsertPoint.before(anchor))
    if anchor is not comm:
        comm.detach()
        Rewriter.insert_op(comm, InsertPoint.before(anchor))
    Rewriter.insert_op(hir.SetCurrentStreamOp(main), InsertPoint.after(comm))
    wait.detach()
    Rewriter.insert_op(wait, InsertPoint.before(end))


def pull_beside(block: Block, machine: Machine) -> int:
    """After `overlap_collectives`: a sum reduce-scatter it put on the
    worker stream beside GEMMs, over ranks of one node, whose pulls those
    GEMMs cover by the cost model (`pull_time`), is done by copy engines
    instead of NCCL: on the same stream, the partial sum is shared, a
    copy-engine fence passed (every member's partial sum is complete), each
    device gets its block of every peer's partial sum into a buffer of
    d - 1 blocks, one by one, and one launch adds them to its own block
    into the output. The main stream waits for the worker stream where it
    waited for the collective; a closing fence at the end of the block
    keeps the partial sum from being written again (in a later run) before
    every peer has pulled from it. NCCL's kernels take SMs from the GEMMs
    beside them: on 4 H200s the GPT layer's weight-gradient GEMMs took
    1.5-2x their time while its reduce-scatter ran beside them; copy
    engines take none, the final add a pass over d + 1 blocks. Returns how
    many reduce-scatters changed."""
    changed = 0
    for rs in [o for o in block.ops if _is_reduce_scatter(o)]:
        team = rs.team
        if rs.backend != "nccl" or rs.reduction_op != "sum" or len(team) < 2 or not machine.one_node(team):
            continue
        wait, streams = _wait_of(rs, block), _worker_of(rs)
        alloc = rs.input.owner
        if wait is None or streams is None or not isinstance(alloc, hir.AllocOp) or alloc.parent_block() is not block:
            continue
        if written_later(rs.input, rs):
            continue  # peers may still pull from it when it is written
        transfer = _transfer(rs, machine)
        beside = sum(gemm_time(o, machine) for o in _between(rs, wait) or [] if isinstance(o, GEMM_OPS))
        if transfer < 2 * machine.nccl_latency_us * 1e-6 or beside < pull_time(rs, machine):
            continue  # mostly latency, or pulls the GEMMs would not cover
        if machine.beside_nccl(beside, transfer) - beside <= _add_time(rs, machine):
            continue  # NCCL slows the GEMMs less than the pulls' add costs
        side, main = streams
        Rewriter.insert_op(hir.SyncStreamOp(side), InsertPoint.before(wait))
        wait.detach()
        wait.erase()
        _pulls(rs, alloc, main, block)
        changed += 1
    return changed


def pull_time(rs: hir.ReduceScatterOp, machine: Machine) -> float:
    """A reduce-scatter by pulls: a fence, d - 1 gets of a block one after
    the other, the add of d blocks into one."""
    d = len(rs.team)
    block = float(rs.wire_bytes()) / (d - 1)
    return machine.ipc_fence(d) + (d - 1) * machine.copy_engine(block) + _add_time(rs, machine)


def _add_time(rs: hir.ReduceScatterOp, machine: Machine) -> float:
    """The pulls' add: d blocks read, one written (on SMs)."""
    d = len(rs.team)
    return machine.local((d + 1) * float(rs.wire_bytes()) / (d - 1))


def _worker_of(comm: Operation) -> tuple[SSAValue, SSAValue] | None:
    """(worker stream, main stream) of a collective `_move` put on the
    worker stream: `hir.set_current_stream %side; hir.wait_event %e;
    comm; hir.set_current_stream %main`."""
    ready, after = comm.prev_op, comm.next_op
    switch = ready.prev_op if ready is not None else None
    if not (isinstance(ready, hir.WaitEventOp) and isinstance(switch, hir.SetCurrentStreamOp)):
        return None
    if not isinstance(after, hir.SetCurrentStreamOp) or not isinstance(switch.operands[0].owner, hir.StreamForOp):
        return None
    return switch.operands[0], after.operands[0]


def _pulls(rs: hir.ReduceScatterOp, alloc: hir.AllocOp, main: SSAValue, block: Block) -> None:
    """The ops replacing `rs` (see `pull_beside`) and its closing fence."""
    from fuserc.passes.host_emit import IPC, Emitter, sum_launch  # here: a program without pulls needs none of it

    team, d = rs.team, len(rs.team)  # with its translates: each team pulls within itself
    p, y = rs.input, rs.output
    e = Emitter(rs.location)
    handle = e.value(hir.ShareOp(p, team), "h")
    e.fence(team, IPC)
    pos = e.value(hir.TeamIndexOp(team), "pos")
    rows, cols = shape_of(y)[0], list(shape_of(y)[1:])
    pulled = e.value(hir.AllocOp(f"{alloc.site}/pulled", TensorType(element_type_of(y), [(d - 1) * rows, *cols])), "pulled")
    slots = []
    for t in range(1, d):
        peer = e.value(hir.AddModOp(pos, e.const(t), d), "peer")
        slot = e.chunk(pulled, e.const(t - 1), d - 1, hint="slot")
        get = carry_reshard(rs, hir.GetOp(handle, peer, slot, IPC, pos, d))
        e.add(hir.WaitOp(e.value(get, "tok")))
        slots.append(slot)
    e.add(sum_launch(y, [e.chunk(p, pos, d, hint="mine"), *slots], accumulate=False))
    Rewriter.insert_op(e.ops, InsertPoint.before(rs))
    rs.detach()
    rs.erase()
    closing = Emitter(e.location)
    closing.close_shared(main, lambda c: c.fence(team, IPC), pulled)
    end = block.last_op
    assert end is not None and end.has_trait(IsTerminator)
    Rewriter.insert_op(closing.ops, InsertPoint.before(end))


def _fence_at(op: Operation) -> hir.WaitOp | None:
    """The wait of `op` when `op` is a fence: `%f = hir.barrier ...; hir.wait %f`."""
    if not _is_barrier(op) or len(list(op.results[0].uses)) != 1:
        return None
    wait = op.next_op
    return wait if isinstance(wait, hir.WaitOp) and wait.operands[0] is op.results[0] else None


def merge_fences(block: Block) -> int:
    """Drop a fence that follows another one on the same stream over the
    same team with nothing but deallocations and stream switches between
    (the closing fences of a block's pipelines, one per shared buffer): a
    fence passes once every member's earlier work on its stream is done, so
    the first one orders all that the second would, and each costs a round
    of flags between the GPUs (about 25 us on 4 H200s). Streams are told
    apart by following the block's `hir.get_current_stream` and
    `hir.set_current_stream`s; an op whose regions switch streams leaves an
    unknown one current. Returns how many fences were dropped."""
    current: object = object()  # the stream current on entry
    ids: dict[SSAValue, object] = {}
    last: tuple[object, ...] | None = None  # the fence that covers a next one, while nothing but frees follow it
    dropped = 0
    for op in list(block.ops):
        if op.parent is None:
            continue  # the wait of a fence dropped below
        if _is_get_stream(op):
            ids[op.stream] = current
            continue
        if _is_set_stream(op):
            current = ids.get(op.operands[0]) or object()
            continue
        wait = _fence_at(op)
        if wait is not None:
            key = (op.properties["team"], op.properties["backend"], current)
            if key == last:
                for o in (wait, op):
                    o.detach()
                    o.erase()
                dropped += 1
            last = key
            continue
        if _is_dealloc(op) or _is_wait(op) and _is_barrier(op.operands[0].owner):
            continue  # a fence's own wait
        if op.regions and any(_is_set_stream(o) for o in walk(op)):
            current = object()
        last = None
    return dropped


BESIDE_WINDOW = 64
"""How many ops before a ring pipeline `beside_ring` looks for GEMMs."""


def beside_ring(
    anchor: Operation, site_ops: list[Operation], idle: float, machine: Machine, placed: set[Operation]
) -> list[Operation]:
    """GEMMs before a ring pipeline (whose ops go before `anchor`) that it
    can run beside it, on the main stream while its compute stream waits
    for transfers: the nearest first, until their time covers `idle` (the
    cost model's time of the ring past its GEMMs'). Each is detached with
    the deallocations of buffers it used last, in program order, for
    `SiteLowering` to put before the pipeline's join. A GEMM moves only
    where it commutes with every op up to the pipeline and with the
    site's own ops (`_delayable`), so the results are the same; one
    placed beside an earlier pipeline (in `placed`, which this adds to)
    stays there. In a
    backward, the weight gradients of the MLP (no later op needs them but
    the return) fill the ring that gathers the attention's cotangent, whose
    GEMMs are a quarter of its copies' time."""
    if idle <= 0:
        return []
    chosen: list[Operation] = []
    have, op, seen = 0.0, anchor.prev_op, 0
    while op is not None and have < idle and seen < BESIDE_WINDOW:
        prev, seen = op.prev_op, seen + 1
        if isinstance(op, GEMM_OPS) and op not in placed:
            unit = _delayable(op, anchor, site_ops)
            if unit is not None:
                for o in unit:
                    o.detach()
                chosen = unit + chosen
                placed.add(op)
                have += gemm_time(op, machine)
        op = prev
    return chosen


def _delayable(gemm: Operation, anchor: Operation, site_ops: list[Operation]) -> list[Operation] | None:
    """`gemm` and the deallocations of buffers it uses, if together they
    can move past every op up to `anchor` and past `site_ops` without
    changing what any op computes: none of those ops touches its output or
    writes its inputs. Stream switches and communications between do not
    matter: the GEMM is local and runs on the main stream where it lands."""
    used, out = _touched(gemm), _written(gemm)
    between = _between(gemm, anchor)
    if between is None:
        return None
    frees = _frees(used, between)
    for o in [*between, *site_ops]:
        if o in frees:
            continue
        if out & _touched(o) or used & _written(o):
            return None
    return [gemm, *frees]


def _sum_of(op: Operation) -> SSAValue | None:
    """The output of `op` when it is a launch that only adds buffers of its
    output's type (`host_emit.sum_launch`: a pull's final add), else None."""
    if not _is_launch(op) or len(op.outs) != 1:
        return None
    out = op.outs[0]
    body = list(op.body.block.ops)
    if len(body) < 2 or not all(isinstance(o, AddOp) and o.results[0].type == out.type for o in body[:-1]):
        return None
    if any(a.type != out.type for a in op.body.block.args):
        return None
    return out


def _keeps_its_kernel(launch: hir.LaunchOp) -> bool:
    """A region that should not take more inputs: one with a kernel of its
    own (attention, a row normalization's Triton kernel), or one reducing
    over rows (a norm's backward: Inductor computes that reduction in a
    kernel of its own, reading the inputs again, `launch_regions.reads_back`)."""
    for o in launch.body.block.ops:
        if isinstance(o, FusionOp) and (o.ALONE or o.rowwise() is not None):
            return True
        if isinstance(o, ReductionOp) and len(shape_of(o.operands[0])) - 1 not in o.reduced():
            return True
    return False


def fold_sums(block: Block) -> int:
    """Fold each sum launch of `block` (a pull's final add of the partial
    blocks, `sum_launch`) into the launch that reads its output next, when
    that launch is its only reader: the reader adds the blocks itself (one
    kernel reads the d blocks instead of one writing the sum and another
    reading it back; 15-20 us at [2048, 4096] bf16 before the forward's
    layer_norm and residual add). Only a sum with no compute between it
    and its reader: one that runs beside GEMMs (the schedule's pulls, a
    ring's GEMMs put beside it) costs the main stream nothing where it is.
    Sound because the sum ran before the reader (the program ordered it
    so), so its operands were ready there too: they must stay as they are
    until the reader, so nothing between the two may touch them or the
    output but deallocations (moved past the reader), and nothing after
    the reader but deallocations. The output's buffer goes when the reader
    no longer needs it. Returns how many."""
    folded = 0
    for op in list(block.ops):
        out = _sum_of(op)
        if out is None or op.parent is None:
            continue
        assert isinstance(op, hir.LaunchOp)
        roots = {_root(v) for v in (*op.ins, out)}
        reader, frees, nxt = None, [], op.next_op
        while nxt is not None and reader is None:
            hit = _touched(nxt) & roots
            if isinstance(nxt, hir.DeallocOp) and _root(out) not in hit:
                frees.extend([nxt] if hit else [])
            elif isinstance(nxt, hir.LaunchOp) and hit:
                reader = nxt
            elif hit or _computes(nxt):
                break  # (compute between: the sum runs beside it, where the reader could not)
            nxt = nxt.next_op
        if reader is None or out in reader.outs or _keeps_its_kernel(reader) or out not in reader.ins:
            continue
        users = _touching(roots, block)
        if any(o in users and not isinstance(o, hir.DeallocOp) for o in _after(reader)):
            continue  # read or written later: the sum is needed as it is
        reader = _fold(op, reader)
        for f in reversed(frees):
            f.detach()
            block.insert_op_after(f, reader)
        if _root(out) is out and out not in op.ins:  # nothing reads the output's buffer any more
            for use in [u.operation for u in out.uses]:
                if isinstance(use, hir.DeallocOp):
                    use.detach()
                    use.erase()
        op.detach()
        op.erase()
        if not list(out.uses) and isinstance(out.owner, hir.AllocOp):
            out.owner.detach()
            out.owner.erase()
        folded += 1
    return folded


def _after(op: Operation) -> list[Operation]:
    """The ops after `op` in its block."""
    out, nxt = [], op.next_op
    while nxt is not None:
        out.append(nxt)
        nxt = nxt.next_op
    return out


def _fold(sum_op: hir.LaunchOp, reader: hir.LaunchOp) -> hir.LaunchOp:
    """`reader` rebuilt (returned, in its place) to read the sum's operands
    in place of its output, the sum's adds first in its region."""
    out = sum_op.outs[0]
    ins: list[SSAValue] = []
    for v in reader.ins:
        ins.extend(sum_op.ins if v is out else [v])
    new = hir.LaunchOp(ins, list(reader.outs))
    new.attributes.update(reader.attributes)
    args, old = iter(new.body.block.args), reader.body.block
    for v, arg in zip(reader.ins, list(old.args)):
        if v is not out:
            a = next(args)
            a.name_hint = arg.name_hint
            arg.replace_all_uses_with(a)
            continue
        env = {s: next(args) for s in sum_op.body.block.args}
        for s, a in env.items():
            a.name_hint = s.name_hint
        for o in list(sum_op.body.block.ops)[:-1]:
            clone = o.clone(value_mapper=env)
            new.body.block.add_op(clone)
            env.update(zip(o.results, clone.results))
        last = sum_op.body.block.last_op
        assert last is not None
        arg.replace_all_uses_with(env[last.operands[0]])
    for o in list(old.ops):
        o.detach()
        new.body.block.add_op(o)
    Rewriter.replace_op(reader, new, [])
    return new

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
  (a read of its output, a write or deallocation of its input).
A collective with no compute to overlap (no GEMM, kernel or copy would
run between its start and its wait) is left as it is. Before that, the
compute a collective needs is moved ahead of the compute it does not
need (since the last communication, wait or stream switch): the input
gradient's GEMMs run before the weight gradients', so that its
reduce-scatter runs beside them (Megatron-LM's order). Ops with regions
count as touching what their regions touch. docs/passes.md shows the host IR before and after.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from fuserc.dialects import hir

SCHEDULED = (hir.AllgatherOp, hir.ReduceScatterOp, hir.AllreduceOp, hir.AlltoallOp)
"""Collectives whose start and wait move (not sends, puts or fences: their
peers' order matters)."""

POOL = 1
"""The worker stream pool of scheduled collectives: one stream, so that they
keep their order (every rank must issue them in the same order)."""


def _root(v: SSAValue) -> SSAValue:
    """The buffer a view or chunk is a part of."""
    while isinstance(v.owner, (hir.ViewOp, hir.ChunkOp)):
        v = v.owner.operands[0]
    return v


def _touched(op: Operation) -> set[SSAValue]:
    """The buffers (roots) `op` and the ops of its regions use."""
    return {_root(v) for o in op.walk() for v in o.operands if isinstance(v.type, TensorType)}


_READS_ONLY = (hir.AllocOp, hir.SelectOp, hir.ChunkOp, hir.ViewOp, hir.ConstantOp)


def _written(op: Operation) -> set[SSAValue]:
    """The buffers (roots) `op` and the ops of its regions write (a
    deallocation counts as a write): a compute op's outputs, a
    communication's buffers; every tensor it touches for an op not known
    here."""
    out: set[SSAValue] = set()
    for o in op.walk():
        if isinstance(o, (hir.MatmulOp, hir.LinearOp)):
            out.add(_root(o.out))
        elif isinstance(o, hir.CopyOp):
            out.add(_root(o.dest))
        elif isinstance(o, hir.LaunchOp):
            out.update(_root(v) for v in o.outs)
        elif isinstance(o, hir.DeallocOp):
            out.add(_root(o.buffer))
        elif not isinstance(o, _READS_ONLY):
            out.update(_root(v) for v in o.operands if isinstance(v.type, TensorType))
    return out


def _computes(op: Operation) -> bool:
    """Work a collective can run beside (allocations, views and stream
    bookkeeping are none: moving a collective past only those costs a
    stream switch and gains nothing)."""
    return any(isinstance(o, hir.COMPUTE_OPS) for o in op.walk())


def _communicates(op: Operation) -> bool:
    """`op` is or holds a collective or a transfer through NCCL or MPI:
    another one must not run at the same time on the communicator (NCCL
    kernels of one communicator on two streams may deadlock), so scheduled
    collectives do not move past it. Copy-engine transfers (CUDA IPC) may."""
    return any(isinstance(o, hir.CommunicationOp) and o.backend != "cuda_ipc" for o in op.walk())


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
    for comm in [o for o in block.ops if isinstance(o, SCHEDULED)]:
        wait = _wait_of(comm, block)
        if wait is None:
            continue
        _needed_first(comm)
        buffers = {_root(v) for v in comm.operands if isinstance(v.type, TensorType)}
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
        after: list[Operation] = []  # the ops its wait moves below
        nxt = wait.next_op
        while nxt is not None and nxt is not last and not (_touched(nxt) & buffers) and not _communicates(nxt):
            after.append(nxt)
            nxt = nxt.next_op
        passed = [o for o in before if o not in allocs]
        if nxt is None or not any(_computes(o) for o in passed + after):
            continue  # nothing to overlap with
        anchor = passed[0] if passed else comm
        lifted = before[before.index(anchor) + 1 :] if passed else []
        _move(comm, wait, [a for a in dict.fromkeys(allocs) if a in lifted], anchor, nxt)
        moved += 1
    return moved


_BOUNDARY = (hir.WaitOp, hir.GetCurrentStreamOp, hir.SetCurrentStreamOp, hir.StreamForOp, hir.SyncStreamOp, hir.RecordEventOp, hir.WaitEventOp)
"""Ops compute is never moved across: a wait guards buffers its token
does not name, and stream switches belong to the ops around them."""


def _bounds(op: Operation) -> bool:
    """`op` is or holds a boundary: a pipeline's join (`hir.for` of
    `hir.sync_stream`s) orders the compute after it behind the worker
    streams' writes, which name no buffer in the join itself."""
    return any(isinstance(o, _BOUNDARY) for o in op.walk())


def _needed_first(comm: Operation) -> None:
    """Reorder the ops between the last boundary (a communication, a wait,
    a stream op) and `comm` so that those `comm` depends on come first, in
    their order, then `comm`'s turn, then the others, in their order. An op
    depends on an earlier one that defines a value it reads or touches a
    buffer it touches (transitively); the others touch nothing the moved
    ones touch, so the order of their effects is kept."""
    window: list[Operation] = []
    prev = comm.prev_op
    while prev is not None and not _bounds(prev) and not _communicates(prev):
        window.append(prev)
        prev = prev.prev_op
    if len(window) < 2:
        return
    window.reverse()
    cone: set[Operation] = set()
    need_values = {v for o in comm.walk() for v in o.operands}
    cone_touched, cone_written = _touched(comm), _written(comm)
    for op in reversed(window):
        touched, written = _touched(op), _written(op)
        if set(op.results) & need_values or written & cone_touched or touched & cone_written:
            cone.add(op)
            need_values |= {v for o in op.walk() for v in o.operands}
            cone_touched |= touched
            cone_written |= written
    rest = [o for o in window if o not in cone]
    if not cone or not any(_computes(o) for o in rest) or window.index(rest[0]) > max(window.index(c) for c in cone):
        return  # nothing to run beside the collective, or already in that order
    for o in rest:
        o.detach()
    for o in rest:
        Rewriter.insert_op(o, InsertPoint.before(comm))


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

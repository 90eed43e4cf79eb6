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
run between its start and its wait) is left as it is. Ops with regions
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

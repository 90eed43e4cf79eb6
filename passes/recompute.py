"""Recomputation under a memory budget: what the forward saves for the
backward, trimmed to fit, the rest computed again in the backward.

autodiff's `budget` option calls `fit` on the pair it derived. The
saved tensors (what `@main_fwd` returns after main's results, `@main_bwd`'s
first arguments) take memory from the forward until the backward has read
them; arguments of main returned as they are (weights) take none. While
the saved tensors of one rank take more than the budget, one op of the
forward is moved to the backward: the op whose results free the most
saved bytes per unit of work to redo, counting the operands it then needs
saved (a layer_norm's or a gelu's output goes first: its input is saved
already and it costs one pass over memory; then the GEMMs, whose inputs
are saved too). An op is recomputed from saved tensors, main's arguments
or other recomputed ops, never through a communication (`fusion.set`
saved reduced) or a partial sum. In the backward each recomputed op is
placed just before its first reader, so a layer's recomputed values live
only while its gradients are computed, as activation checkpointing does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from fuserc.dialects.fusion import FusionOp, LinearOp, MatmulOp, PermuteOp, ReshapeOp, SetOp, shape_of, sharding_of
from fuserc.dialects.fusion_nn import AttentionOp
from fuserc.passes.reshard_util import element_bytes

MEMORY_FLOPS = 200.0
"""Flops worth one byte moved (a GPU's GEMM peak over its memory
bandwidth, about 200 on an H100/H200): the work of redoing a memory-bound
op is counted as its bytes times this."""

RATIO_TIE = 0.05
"""Moves whose bytes freed per unit of work are within this fraction of
the best one's count as equally good; the largest of them goes first (a
layer_norm's output and its statistics against a gelu's four times larger
output: the gelu)."""


def fit(fwd: FuncOp, bwd: FuncOp, results: int, budget: int, meshes: Mapping[str, object]) -> list[Operation]:
    """Make the saved tensors of `fwd` (after its first `results` results)
    and `bwd` (its first arguments) take at most `budget` bytes per rank
    where recomputation can, moving ops into `bwd`; the forward ops chosen."""
    ret = fwd.body.block.last_op
    assert isinstance(ret, ReturnOp)
    saved = list(ret.operands[results:])
    args = list(bwd.body.block.args[: len(saved)])
    size = _Size(meshes)
    kept: dict[SSAValue, None] = dict.fromkeys(saved)
    chosen: list[Operation] = []
    redone: set[Operation] = set()

    def ready(v: SSAValue) -> bool:
        return v in kept or v.owner in redone

    def move(op: Operation) -> tuple[float, float, list[Operation], list[SSAValue]] | None:
        """(bytes freed, work, ops, operands to save) of recomputing `op`
        with the views (reshapes, permutes) its operands are made by."""
        group, need, todo = [op], [], list(op.operands)
        while todo:
            v = todo.pop()
            if ready(v) or v in need:
                continue
            if isinstance(v.owner, (ReshapeOp, PermuteOp)) and v.owner not in group:
                group.append(v.owner)
                todo += v.owner.operands
            else:
                need.append(v)
        if not all(_redoable(o) for o in group) or not all(_savable(v) for v in need):
            return None
        made = {r for o in group for r in o.results}
        freed = sum(size.of(r) for r in made if r in kept and not isinstance(r, BlockArgument))
        added = sum(size.of(v) for v in need if not isinstance(v, BlockArgument))
        return freed - added, sum(_work(o, size) for o in group), group, need

    while sum(size.of(v) for v in kept if not isinstance(v, BlockArgument)) > budget:
        moves = [m for op in dict.fromkeys(v.owner for v in kept if not isinstance(v, BlockArgument)) if (m := move(op)) is not None and m[0] > 0]  # type: ignore[arg-type]
        if not moves:
            break
        top = max(m[0] / m[1] for m in moves)
        # Among the moves about as cheap per byte as the best, the one that frees the most: fewer ops redone.
        _, _, group, need = max((m for m in moves if m[0] / m[1] >= (1 - RATIO_TIE) * top), key=lambda m: m[0])
        for op in group:
            redone.add(op)
            chosen.append(op)
            for r in op.results:
                kept.pop(r, None)
        kept.update(dict.fromkeys(need))
    if chosen:
        _rewrite(fwd, bwd, ret, saved, args, [v for v in kept if v not in set(saved)], chosen)
    return chosen


class _Size:
    """Bytes per rank of a value, as its sharding lays it out."""

    def __init__(self, meshes: Mapping[str, object]):
        self.meshes = meshes

    def of(self, v: SSAValue | Attribute) -> int:
        t = v.type if isinstance(v, SSAValue) else v
        if not isinstance(t, TensorType):
            return 0
        shape = shape_of(t)
        s = sharding_of(t)
        n = math.prod(s.local_shape(shape, self.meshes[s.mesh])) if s is not None and s.mesh in self.meshes else math.prod(shape)
        return n * element_bytes(t)


def _redoable(op: Operation) -> bool:
    """A pure fusion op that is no communication of its own (a reshard's
    `fusion.set` is one: the backward would move its bytes again)."""
    return isinstance(op, FusionOp) and not isinstance(op, SetOp) and not op.regions and all(isinstance(r.type, TensorType) for r in op.results)


def _savable(v: SSAValue) -> bool:
    """Whether the forward can return `v` for the backward as it is (a
    partial sum would need a reduction: a communication)."""
    s = sharding_of(v.type) if isinstance(v.type, TensorType) else None
    return isinstance(v.type, TensorType) and (s is None or not s.partial)


def _work(op: Operation, size: _Size) -> float:
    """Flops of redoing `op`, memory-bound ops by the bytes they move."""
    flops = 0.0
    if isinstance(op, (MatmulOp, LinearOp)):
        flops = 2.0 * math.prod(shape_of(op.results[0])) * shape_of(op.operands[0])[-1]
    elif isinstance(op, AttentionOp):
        b, h, sq, d = shape_of(op.operands[0])
        flops = 4.0 * b * h * sq * shape_of(op.operands[1])[2] * d
    moved = sum(size.of(v) for v in (*op.operands, *op.results))
    return flops + MEMORY_FLOPS * max(moved, 1)


def _sink(block: Block, ops: set[Operation]) -> None:
    """Move each of `ops`, and the views of their results the backward
    made (a saved projection's heads: `fusion.reshape`, `fusion.permute`),
    to just before its first reader, last first: a recomputed value lives
    from there only (an op nothing reads is erased)."""
    for o in block.ops:
        if isinstance(o, (ReshapeOp, PermuteOp)) and any(v.owner in ops for v in o.operands):
            ops.add(o)
    for o in reversed([o for o in block.ops if o in ops]):
        readers = [u.operation for r in o.results for u in r.uses]
        if not readers:
            Rewriter.erase_op(o)
            continue
        position = {x: i for i, x in enumerate(block.ops)}
        o.detach()
        Rewriter.insert_op(o, InsertPoint.before(min(readers, key=position.__getitem__)))


def _rewrite(
    fwd: FuncOp, bwd: FuncOp, ret: ReturnOp, saved: list[SSAValue], args: list[BlockArgument], more: list[SSAValue], chosen: list[Operation]
) -> None:
    """Return `more` from the forward too, clone the `chosen` ops into the
    backward before their first readers, and drop the saved tensors that
    nothing reads any more from both functions."""
    block = bwd.body.block
    results = len(ret.operands) - len(saved)
    new_args = [block.insert_arg(v.type, len(saved) + i) for i, v in enumerate(more)]  # never partial (_savable)
    to_bwd: dict[SSAValue, SSAValue] = {**dict(zip(saved, args)), **dict(zip(more, new_args))}
    first = block.first_op
    assert first is not None
    order = {o: i for i, o in enumerate(fwd.body.block.ops)}
    clones: list[Operation] = []
    for op in sorted(chosen, key=order.__getitem__):
        fresh = {v: to_bwd[v] for v in op.operands if v in to_bwd}
        c = op.clone(value_mapper=fresh)
        Rewriter.insert_op(c, InsertPoint.before(first))
        for r, cr in zip(op.results, c.results):
            if r in to_bwd:  # the saved tensor it made: read from the clone now
                to_bwd[r].replace_all_uses_with(cr)
            to_bwd[r] = cr
        clones.append(c)
    _sink(block, set(clones))
    keep = [i for i, a in enumerate([*args, *new_args]) if a.uses]
    values = [*saved, *more]
    for a in [*args, *new_args]:
        if not a.uses:
            block.erase_arg(a)
    outs = [*ret.operands[:results], *(values[i] for i in keep)]
    new_ret = ReturnOp(*outs)
    new_ret.location = ret.location
    Rewriter.replace_op(ret, new_ret)
    fwd.update_function_type()
    bwd.update_function_type()

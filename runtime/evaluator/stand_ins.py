"""Region results that stand for their output buffers (`Backend.launch_made`).

A kernel without an output argument (torch._grouped_mm, attention) makes
its result in memory of its own; copying it into the region's output
buffer is a pass over it for nothing. The evaluator lets the result
stand for the buffer for the rest of the run where nothing can tell: the
buffer is allocated in the launch's block and read or viewed by nothing
before the launch (`replaceable`), the program shares no buffer with
peers and switches no streams, and the result is laid out as the buffer
in a storage of its own (`own_memory`). Such a buffer is not taken at its
`hir.alloc` (`Later`, `taken_at_launch`): the launch takes it only where
no result stands for it, so the plan's block and the result are never
held side by side. A standing result's memory goes back at the buffer's
`hir.dealloc` (with every view of it: `views_of`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, SSAValue

from fuserc.dialects import hir


def views_of(v: SSAValue) -> list[SSAValue]:
    """The values that view `v` (`hir.VIEW_OPS`, in turn)."""
    out: list[SSAValue] = []
    stack = [v]
    while stack:
        for use in stack.pop().uses:
            if isinstance(use.operation, hir.VIEW_OPS):
                out.append(use.operation.results[0])
                stack.append(use.operation.results[0])
    return out


Spec = tuple[tuple[int, ...], tuple[int, ...], Any, Any]
"""A buffer's shape, strides, dtype and device."""


def spec_of(t: Any) -> Spec:
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


def own_memory(value: Any, spec: Spec, taken: set[int]) -> bool:
    """`value` may stand for a buffer of `spec`: its layout (shape, strides,
    dtype, device: what the kernels that read it were built for) and a
    storage of its own, exactly its size, that no input or other result
    holds."""
    if spec_of(value) != spec:
        return False
    storage = value.untyped_storage()
    return (
        value.numel() > 0 and value.storage_offset() == 0 and storage.nbytes() == value.numel() * value.element_size()
        and storage.data_ptr() not in taken
    )


@dataclass(frozen=True)
class Later:
    """A `hir.alloc`'s buffer not taken yet: its launch makes a result to
    stand for it (`taken_at_launch`), and takes the buffer only where none
    can."""

    site: str
    shape: tuple[int, ...]
    dtype: Any
    storage: int | None

    def spec(self, device: Any) -> Spec:
        """The buffer's layout (contiguous, as the allocation cache makes it)."""
        strides, step = [], 1
        for n in reversed(self.shape):
            strides.append(step)
            step *= max(n, 1)
        return (self.shape, tuple(reversed(strides)), self.dtype, device)


def taken_at_launch(alloc: hir.AllocOp, makes_results: Callable[[Block], bool]) -> bool:
    """Whether `alloc`'s buffer is an output of a launch whose region the
    backend runs by kernels that make their results (`makes_results`) and
    whose result may stand for it (`replaceable`): nothing needs it
    before that launch."""
    v = alloc.result
    for use in v.uses:
        op = use.operation
        if isinstance(op, hir.LaunchOp) and v in op.outs and makes_results(op.body.block):
            return replaceable(op)[list(op.outs).index(v)]
    return False


def replaceable(op: hir.LaunchOp) -> tuple[bool, ...]:
    """For each output buffer of a launch, whether a result in memory of its
    own may stand for it: a buffer allocated (`hir.alloc`) in the launch's
    block, read or viewed by nothing before the launch and not by the
    launch itself as an input, in a program that shares no buffer with
    peers (`hir.share`: a registration is kept with its cached buffer) and
    switches no streams (a result let go at its dealloc must be read on
    the stream that made it only)."""
    block = op.parent_block()
    if block is None or not single_stream(op):
        return (False,) * len(op.outs)
    order = _positions(block)
    here = order[op]
    out: list[bool] = []
    for v in op.outs:
        alloc = v.owner
        ok = isinstance(alloc, hir.AllocOp) and alloc.parent_block() is block and v not in op.ins
        ok = ok and list(op.outs).count(v) == 1
        for w in (v, *views_of(v)) if ok else ():
            for use in w.uses:
                user = use.operation
                while user is not None and user.parent_block() is not block:
                    user = user.parent_op()
                if user is None or (user is not op and order.get(user, -1) <= here):
                    ok = False
        out.append(ok)
    return tuple(out)


_POSITIONS: "weakref.WeakKeyDictionary[Any, dict[Operation, int]]" = weakref.WeakKeyDictionary()
_SINGLE: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def _positions(block: Any) -> dict[Operation, int]:
    """Each op's place in its block (found once per block)."""
    found = _POSITIONS.get(block)
    if found is None:
        found = _POSITIONS[block] = {o: i for i, o in enumerate(block.ops)}
    return found


def single_stream(op: Operation) -> bool:
    """The function holding `op` (or `op` itself, a function) shares no
    buffer and switches no stream (found once per function)."""
    func = op
    while func.parent_op() is not None and not isinstance(func, FuncOp):
        func = func.parent_op()  # type: ignore[assignment]
    found = _SINGLE.get(func)
    if found is None:
        kinds = (hir.ShareOp, hir.SetCurrentStreamOp, hir.StreamForOp)
        found = _SINGLE[func] = not any(isinstance(o, kinds) for o in func.walk())
    return found

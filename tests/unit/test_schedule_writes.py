"""schedule.written_later, which finds a buffer's writers through its uses
(and its views' uses) and walks the block only as far as they lie, against
its definition: a walk of every op after the given one (`_written`)."""

from __future__ import annotations

from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation
from xdsl.traits import IsTerminator

from fuserc.dialects import hir
from fuserc.ir import parse
from fuserc.passes.schedule import _root, _written, written_later

T, H = "tensor<8x8xf32>", "tensor<4x8xf32>"
PROGRAM = f"""builtin.module {{
  func.func @main(%a: {T}) -> {T} attributes {{hir.host}} {{
    %x = hir.alloc "x" : {T}
    %y = hir.alloc "y" : {T}
    %z = hir.alloc "z" : {T}
    hir.matmul %a, %a, %x : {T}, {T}, {T}
    %c0 = hir.constant 0 : index
    %xc = hir.chunk %x [%c0] dim = 0 chunks = 2 : ({T}, index) -> {H}
    hir.matmul %x, %a, %y : {T}, {T}, {T}
    %yc = hir.chunk %y [%c0] dim = 0 chunks = 2 : ({T}, index) -> {H}
    hir.copy %yc, %xc : {H}, {H}
    hir.matmul %y, %a, %z : {T}, {T}, {T}
    hir.for %i = 0 to 2 {{
      hir.copy %z, %y : {T}, {T}
    }}
    hir.dealloc %x : {T}
    hir.dealloc %z : {T}
    func.return %y : {T}
  }}
}}"""


def _reference(buffer, after: Operation, ignore: set[Operation]) -> bool:
    target, op = _root(buffer), after.next_op
    while op is not None:
        if op not in ignore and not isinstance(op, hir.DeallocOp) and not op.has_trait(IsTerminator) and target in _written(op):
            return True
        op = op.next_op
    return False


def test_written_later_matches_its_definition() -> None:
    module = parse(PROGRAM, "writes.mlir")
    func = next(op for op in module.ops if isinstance(op, FuncOp))
    ops = list(func.body.block.ops)
    buffers = [op.results[0] for op in ops if isinstance(op, (hir.AllocOp, hir.ChunkOp))] + list(func.body.block.args)
    loop = next(op for op in ops if isinstance(op, hir.ForOp))
    answers = set()
    for buffer in buffers:
        for after in ops:
            for ignore in (set(), {loop}):
                want = _reference(buffer, after, ignore)
                assert written_later(buffer, after, ignore) == want, (buffer.name_hint, after.name, ignore)
                answers.add(want)
    assert answers == {True, False}
    copy_into_x = next(op for op in ops if isinstance(op, hir.CopyOp))
    x = ops[0].results[0]
    assert written_later(x, ops[3]) and not written_later(x, copy_into_x)  # through the view %xc; the dealloc is no write
    y = ops[1].results[0]
    assert written_later(y, copy_into_x) and not written_later(y, copy_into_x, {loop})  # inside hir.for

"""Launch regions that PyTorch's own kernels run instead of generated ones.

- A lone attention op (`ALONE`): runtime/kernels/attention.py, on both backends.
- A lone op whose `torch_alone()` fact says PyTorch's kernel outruns
  Inductor's (the erf gelu: the GPT layer's MLP activation, a region of
  its own between the MLP's two GEMM pipelines): the op's `torch_out`
  (its aten `out=` kernel) writing a contiguous output buffer (no copy;
  aten's gelu wrote a transposed `out=` wrongly on the CPU, so such a
  buffer keeps Inductor's kernel), on the cuda backend; and a lone
  concat (`torch.cat`: data movement, whose generated kernel builds slowly).
  The cpu backend runs every region with PyTorch's kernels anyway.
- A region of slices of its arguments only (`slices_of`: the replicated
  parameters' gradients cut out of the one buffer they were reduced in):
  one `torch._foreach_copy_` of the slices into the output buffers (one
  launch on cuda). It moves data and computes nothing, and its slices'
  offsets say where each parameter sits in the buffer, which differs from
  layer to layer: a generated kernel would be built anew for every layer.
- A region holding an op with a kernel of its own that reads data on the
  host (`ALONE` and `torch_alone()`: the grouped GEMM's group ends where
  torch._grouped_mm does not apply), which a traced kernel would bake in:
  op by op with PyTorch, its permutes and reshapes as views; its values
  are handed back as torch made them (`Backend.launch_made`), to stand
  for the output buffers instead of being copied into them.

Such regions need no generated kernel (`runs_region`: the kernel builds
skip them) and, like any aten kernel, are captured in CUDA graphs.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
from xdsl.ir import Block, BlockArgument, SSAValue

from fuserc.dialects.fusion import FusionOp, SliceOp
from fuserc.runtime.kernels import attention
from fuserc.runtime.backends.backend import Contexts


def lone_op(body: Block) -> FusionOp | None:
    """The op of a region that is one `torch_alone` op of its arguments,
    its result yielded, else None (found once per region: every launch
    asks)."""
    if body not in _LONE:
        _LONE[body] = _lone(body)
    return _LONE[body]


def _lone(body: Block) -> FusionOp | None:
    ops = list(body.ops)
    if len(ops) != 2 or not isinstance(ops[0], FusionOp) or not ops[0].torch_alone():
        return None
    op, yielded = ops
    if list(op.operands) != list(body.args) or list(yielded.operands) != list(op.results):
        return None
    return op


_LONE: weakref.WeakKeyDictionary[Block, FusionOp | None] = weakref.WeakKeyDictionary()
"""Each region's lone op, for as long as its program's IR lives."""


def slices_of(body: Block) -> list[tuple[int, tuple[slice, ...]]] | None:
    """For each yielded value of a region made of `fusion.slice`s of its
    arguments only, (the argument, its index); None for any other region
    (found once per region)."""
    if body not in _SLICES:
        _SLICES[body] = _slices(body)
    return _SLICES[body]


def _slices(body: Block) -> list[tuple[int, tuple[slice, ...]]] | None:
    *ops, yielded = list(body.ops)
    if not ops or not all(isinstance(op, SliceOp) and isinstance(op.input, BlockArgument) and op.input.block is body for op in ops):
        return None
    found: dict[SSAValue, tuple[int, tuple[slice, ...]]] = {}
    for op in ops:
        assert isinstance(op, SliceOp) and isinstance(op.input, BlockArgument)
        found[op.results[0]] = (op.input.index, tuple(slice(a, b) for a, b in zip(op.keyword("starts"), op.keyword("limits"))))
    if not all(v in found for v in yielded.operands):
        return None
    return [found[v] for v in yielded.operands]


_SLICES: weakref.WeakKeyDictionary[Block, list[tuple[int, tuple[slice, ...]]] | None] = weakref.WeakKeyDictionary()


def eager_region(body: Block) -> bool:
    """Whether the region holds an op run by its own PyTorch kernel that no
    trace may stand for (`ALONE` and `torch_alone()`); found once per
    region (every launch asks)."""
    found = _EAGER.get(body)
    if found is None:
        found = _EAGER[body] = any(isinstance(o, FusionOp) and o.ALONE and o.torch_alone() for o in body.ops)
    return found


_EAGER: weakref.WeakKeyDictionary[Block, bool] = weakref.WeakKeyDictionary()


def runs_region(body: Block) -> bool:
    """Whether `run_region` runs this region (no generated kernel needed)."""
    return attention.runs_region(body) or lone_op(body) is not None or slices_of(body) is not None or eager_region(body)


def _copy_slices(body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> bool:
    """A region of slices (`slices_of`) as one copy of every slice; False
    when it is not one, or an output overlaps an operand."""
    cuts = slices_of(body)
    if cuts is None:
        return False
    from fuserc.runtime.kernels.cuda_regions import aliases_of

    if aliases_of((*ins, *outs)) != tuple(range(len(ins) + len(outs))):
        return False  # an output shares memory with another operand: op by op
    sources = [ins[i][index] for i, index in cuts]
    if any(s.shape != o.shape or s.dtype != o.dtype for s, o in zip(sources, outs, strict=True)):
        return False
    torch._foreach_copy_(list(outs), sources)
    return True


def run_region(
    body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], contexts: Contexts | None = None
) -> bool:
    """Run the region with PyTorch's kernels; False (nothing run) when it is
    none of those (the module docstring) or its buffers do not fit.
    `contexts` says where the local blocks of its INDEXED ops lie."""
    if attention.run_region(body, ins, outs) or _copy_slices(body, ins, outs):
        return True
    if eager_region(body):
        from fuserc.runtime.backends.cpu import launch_with_torch

        launch_with_torch(body, ins, outs, contexts, views=True)
        return True
    op = lone_op(body)
    if op is None or len(outs) != 1 or not outs[0].is_contiguous():
        return False
    if not op.torch_fits(list(ins), outs[0]):
        return False
    op.torch_out(list(ins), outs[0])
    return True

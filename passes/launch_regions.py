"""Launch regions: which local ops lower-to-host-ir computes in one
`hir.launch` (one generated kernel, or as few as Inductor makes of the
region's graph on cuda: runtime/kernels/cuda_regions.py).

A region is a run of consecutive local ops of one set of devices that are
not GEMMs, layout ops or reshards (elementwise ops, reductions,
normalizations, ...), with at most `MAX_REGION_OUTS` values used after it.
So `gelu(x*y+z)*sigmoid(z)` is one region, a layer norm written as mean,
sub, mul, mean, rsqrt, mul is one, and so is a norm's whole backward (its
row statistics, the input's cotangent, the weight's and the bias's column
sums) with the residual add after it. A set that moves nothing (the
same blocks on every device: a reshard on a mesh of one device, or
between equal placements) is in a region as the identity it is, so a
program written for d devices keeps its regions at d = 1.

Before regions are formed, `hoist` moves each such op up to right after the
op making its last operand when that op is in a region too: a bias's
gradient (the sum over rows of a cotangent) then sits with the elementwise
ops making that cotangent (gelu's derivative), across the GEMMs that the
derivative rules emitted in between, and one kernel reads the cotangent
once for both. Ops are pure, so moving one earlier than its users keeps
the program's meaning.

A softmax, log_softmax or cross_entropy over rows (`FusionOp.rowwise`) and
an op with a kernel of its own (`FusionOp.ALONE`: attention) are regions
of their own. A reduction over outer dimensions of a value that its region
would also yield starts a region of its own (`reads_back`), reading the
value from its buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.ir import Operation, SSAValue

from fuserc.dialects.fusion import (
    FusionOp,
    LinearOp,
    MatmulOp,
    PermuteOp,
    ReshapeOp,
    SetOp,
    alloc_order_of,
    lookup_mesh,
    sharding_of,
)
from fuserc.dialects.fusion_reduction import ReductionOp

MAX_REGION_OPS = 64
"""The most ops one launch region takes (bounds the search)."""

MAX_REGION_OUTS = 8
"""The most values one launch region makes for later ops (a norm's backward
makes four: the input's cotangent, the weight's and the bias's, and the
bias gradient of the GEMM before it)."""

HOIST_WINDOW = 32
"""How many ops up an op is moved at most (bounds the search)."""


def alone(op: Operation) -> bool:
    """`op` is a launch region of its own: a softmax, log_softmax or
    cross_entropy over rows, which the cuda backend computes in one pass
    when nothing else is in its region (FusionOp.rowwise), or an op run by
    a kernel of its own (FusionOp.ALONE: attention)."""
    return isinstance(op, FusionOp) and (op.ALONE or op.rowwise() is not None)


def reads_back(run: Sequence[Operation], op: Operation) -> bool:
    """`op` reduces over outer dimensions (not the innermost one of its
    memory order) a value that `run` makes and later ops use too: it then
    reads that value back in a region of its own. Inductor computes such a
    reduction apart from the kernel that stores the value (a split
    reduction over rows), computing the value once more inside it: the erf
    GELU's backward at 4096 x 8192 (the gradient of the MLP's bias) took
    76 us so on an H200, 19 us reading the stored value back."""
    if not isinstance(op, ReductionOp):
        return False
    v = op.operands[0]
    if v.owner not in run or not any(u.operation is not op and u.operation not in run for u in v.uses):
        return False
    return alloc_order_of(v)[-1] not in op.reduced()


def region_outputs(chain: Sequence[Operation]) -> list[SSAValue]:
    """The values of `chain` (consecutive ops) used after it, in order; the
    last op's always (a region yields at least its last op's results)."""
    inside = set(chain)
    outs = [r for o in chain[:-1] for r in o.results if any(u.operation not in inside for u in r.uses)]
    return [*outs, *chain[-1].results]


def aliases(chain: Sequence[Operation]) -> list[Operation]:
    """The sets of `chain` that move nothing of a value made before it:
    that value's buffer, no op in the region."""
    made: set[SSAValue] = set()
    out = []
    for o in chain:
        if moves_nothing(o) and o.operands[0] not in made:
            out.append(o)
        else:
            made.update(o.results)
    return out


def same_buffer(v: SSAValue, chain: Sequence[Operation]) -> SSAValue:
    """The value of `chain` whose buffer `v` is: through the sets that move
    nothing (`moves_nothing`) made inside the chain, `v` itself otherwise."""
    inside = set(chain)
    while isinstance(v.owner, Operation) and v.owner in inside and moves_nothing(v.owner):
        v = v.owner.operands[0]
    return v


def moves_nothing(op: Operation) -> bool:
    """A set whose result is its operand's blocks as they are on every
    device (a reshard on a mesh of one device, or between equal
    placements, in one memory order): no communication, no copy needed."""
    if not isinstance(op, SetOp):
        return False
    a, b = sharding_of(op.operands[0]), sharding_of(op.results[0])
    if a is None or b is None or a.mesh != b.mesh or b.stream_dim() is not None:
        return False
    if alloc_order_of(op.operands[0]) != alloc_order_of(op.results[0]):
        return False
    mesh = lookup_mesh(op, a.mesh)
    if mesh is not None and len(mesh.devices) == 1:
        return True
    return a.placement() == b.placement() and a.partial == b.partial


def computes(op: Operation, resharding: Callable[[Operation], bool]) -> bool:
    """`op` can join a launch region: a local op that is not a GEMM or a
    layout op, or a set that moves nothing."""
    if moves_nothing(op):
        return True
    return (
        isinstance(op, FusionOp)
        and not isinstance(op, (SetOp, PermuteOp, ReshapeOp, MatmulOp, LinearOp))
        and not resharding(op)
    )


def hoist(
    ops: list[Operation], resharding: Callable[[Operation], bool], devices: Callable[[Operation], tuple[int, ...]]
) -> list[Operation]:
    """`ops` with each region op moved up to right after the op making its
    last operand, when that op is a region op of the same devices too
    (module docstring)."""
    out: list[Operation] = []
    where: dict[SSAValue, int] = {}
    for op in ops:
        k = len(out)
        if computes(op, resharding) and not alone(op) and op.results:
            last = max((where[v] for v in op.operands if v in where), default=-1)
            if 0 <= last < k - 1 and k - 1 - last <= HOIST_WINDOW:
                maker, between = out[last], out[last + 1 : k]

                def joins(o: Operation) -> bool:
                    return computes(o, resharding) and not alone(o) and devices(o) == devices(op)

                if joins(maker) and not all(joins(o) for o in between):  # else it is in the maker's run already
                    k = last + 1
        out.insert(k, op)
        for i in range(k, len(out)):
            for r in out[i].results:
                where[r] = i
    return out


def local_region(
    ops: Sequence[Operation], i: int, resharding: Callable[[Operation], bool],
    devices: Callable[[Operation], tuple[int, ...]],
) -> list[Operation]:
    """The longest run of consecutive region ops from `i` on one set of
    devices with at most MAX_REGION_OUTS values used after it; a lone op
    (`alone`) is a region of its own."""
    run: list[Operation] = []
    tag = devices(ops[i]) if ops[i].results else None
    while i + len(run) < len(ops) and len(run) < MAX_REGION_OPS:
        nxt = ops[i + len(run)]
        if run and not (computes(nxt, resharding) and devices(nxt) == tag):
            break
        if run and (alone(nxt) or reads_back(run, nxt)):
            break
        run.append(nxt)
        if alone(nxt):
            break
    for n in range(len(run), 1, -1):
        if len(region_outputs(run[:n])) <= MAX_REGION_OUTS:
            return run[:n]
    return run[:1]

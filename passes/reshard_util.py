"""Pure reshards and memory layouts: the vocabulary make-resharding-contiguous
establishes and lower-to-host-ir reads.

A *pure reshard* is a `fusion.set` whose operand and result differ only in
sharding. `reshard_step` names the one communication it is (docs/passes.md's
table), or None when it changes several things at once; `plan_reshard`
decomposes any change of placement into a cheapest chain of such steps.
Steps work on placements (`Sharding.placement`): Stream splits inside the
device splits of their dimension are dropped; one outside a device split
(`Stream(S)*DIDx`) interleaves the device blocks and stays. Such an
*interleaved* dimension is made only by a local slice adding its innermost
device split (each device copies its block of every stream chunk) and left
only by the allgather of that split (one allgather per stream chunk); no
split is moved off it or onto it (alltoall), scattered or reduce-scattered
onto it.

A buffer's memory layout is the `alloc_order` attribute of the op producing
it (`fuserc.dialects.fusion.alloc_order_of`): see `ALLOC_ORDER` there.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float64Type,
    IntegerType,
    TensorType,
)
from xdsl.ir import Operation

from fuserc.ir import Numbering, walk
from fuserc.sharding import DEVICE_TYPES, Mesh, Sharding, Split, one_or_many

Shape = tuple[int, ...]
Meshes = Mapping[str, Mesh]

# --------------------------------------------------------------------------
# Memory layout (the alloc_order attribute lives in the fusion dialect)
# --------------------------------------------------------------------------


def outermost(order: Sequence[int], dim: int, local_shape: Shape, chunked: int | None = None) -> bool:
    """`dim` is outermost in memory up to dimensions of local extent 1, so
    that its blocks are contiguous chunks of the buffer (always, in an empty
    buffer: its blocks are empty). With `chunked`, a dimension cut into
    chunks of extent 1 (a Stream split whose collective runs chunk by chunk)
    may also come first: the blocks are contiguous within each chunk."""
    return 0 in local_shape or all(local_shape[d] == 1 or d == chunked for d in order[: list(order).index(dim)])


def chunked_dim(
    step: Step, result: Sharding, local_shape: Shape, operand: Sharding | None = None, operand_shape: Shape | None = None
) -> int | None:
    """The dimension whose Stream split makes `step` run chunk by chunk
    with its blocks contiguous in each chunk whatever comes first in
    memory: an allgather, reduce-scatter or alltoall whose result has
    Stream(S) on another, not interleaved, dimension of local extent S
    (chunks of extent 1, nvFuser's `[S, d, M/(S*d), K]`). A reduce-scatter
    whose result has no Stream split takes its partial operand's
    (`operand`, of local shape `operand_shape`): GEMM + ReduceScatter
    written on the partial product, `[Stream(S), d, m, N], partial = DIDx`
    to `[-, DIDx, -, -]`. None otherwise."""
    if step.kind not in (ALLGATHER, REDUCE_SCATTER, ALLTOALL):
        return None
    split, shape = result, local_shape
    if result.stream_dim() is None and step.kind == REDUCE_SCATTER and operand is not None and operand_shape is not None:
        split, shape = operand, operand_shape
    sd = split.stream_dim()
    if sd is None:
        return None
    dim, chunks = sd
    if dim in (step.gather_dim, step.scatter_dim) or dim in split.interleaved_dims():
        return None
    return dim if shape[dim] == chunks else None


def inverse(perm: Sequence[int]) -> tuple[int, ...]:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


# --------------------------------------------------------------------------
# Reshard steps
# --------------------------------------------------------------------------

LOCAL_SLICE = "local_slice"
ALLGATHER = "allgather"
ALLTOALL = "alltoall"
ALLREDUCE = "allreduce"
REDUCE_SCATTER = "reduce_scatter"
SEND_RECV = "send_recv"
GATHER = "gather"
SCATTER = "scatter"
REDUCE = "reduce"


@dataclass(frozen=True)
class Step:
    """One pure reshard.

    kind: LOCAL_SLICE (add a split innermost on a dimension, also behind
    Stream splits, `-` to `Stream(S)*p`: no traffic),
    ALLGATHER (remove the innermost split of a dimension), ALLTOALL (move the
    innermost split of gather_dim to innermost on scatter_dim), ALLREDUCE
    (partial to not partial), REDUCE_SCATTER (partial to a split innermost on
    scatter_dim), SEND_RECV (the same sharding on another mesh: send/recv
    pairs or a broadcast), GATHER / SCATTER (to another mesh, removing /
    adding one split), REDUCE (partial to a mesh of one device).
    ptype: the parallel type the step works over (the team's mesh axis);
    a tuple of types for an allreduce, reduce-scatter or reduce over several
    axes of a partial sum (the team spans them, `Mesh.team`), which leaves
    the value partial over the partial's other axes, if any.
    scatter_dim: dimension of the operand cut into blocks for different
    devices; gather_dim: dimension of the result along which blocks from
    different devices are concatenated (None: no such dimension)."""

    kind: str
    ptype: str | tuple[str, ...] | None = None
    scatter_dim: int | None = None
    gather_dim: int | None = None

    @property
    def communicates(self) -> bool:
        return self.kind != LOCAL_SLICE


def _with_dim(s: Sharding, dim: int, splits: tuple[Split, ...]) -> Sharding:
    return s.with_dims([splits if i == dim else d for i, d in enumerate(s.dims)])


def _on(s: Sharding, mesh: str) -> Sharding:
    return Sharding(mesh, s.dims, s.partial)


def _same_axes(a: Mesh, b: Mesh, types: Sequence[str]) -> bool:
    """Every type in `types` names axes of equal size on both meshes."""
    try:
        return all(a.axis_size(t) == b.axis_size(t) for t in types)
    except ValueError:
        return False


def _moves(s: Sharding, shape: Shape, meshes: Meshes, goal: Sharding) -> Iterator[tuple[Step, Sharding]]:
    """Every single step from placement `s` (`Sharding.placement`) toward
    placement `goal`: mesh changes only to its mesh. An interleaved
    dimension (a Stream split outside a device split) is only gathered, and
    made only toward `goal`'s, by local slices adding the device splits of
    its prefixes (each device takes its block of every stream chunk)."""
    target_mesh = goal.mesh
    mesh = meshes[s.mesh]
    rank = len(shape)
    used = set(s.device_types()) | set(s.partial)
    interleaved = set(s.interleaved_dims())
    plain = [d for d in range(rank) if d not in interleaved]

    def valid(t: Sharding) -> bool:
        return not t.errors(shape, meshes.get(t.mesh))

    free = [p for p in DEVICE_TYPES[: mesh.rank] if p not in used]
    for p in free:
        for d in plain:
            t = _with_dim(s, d, s.dims[d] + (Split(p),))
            if valid(t):
                yield Step(LOCAL_SLICE, p), t
        for d in goal.interleaved_dims() if goal.mesh == s.mesh else []:
            for k, split in enumerate(goal.dims[d]):
                splits = goal.dims[d][: k + 1]  # an interleaved prefix ending in p
                if split.ptype != p or not any(sp.is_stream for sp in splits):
                    continue
                if _with_dim(s, d, splits[:-1]).placement() == s:
                    t = _with_dim(s, d, splits)
                    if valid(t):
                        yield Step(LOCAL_SLICE, p), t
    for d in range(rank):
        if not s.dims[d]:
            continue
        p = s.dims[d][-1].ptype
        t = _with_dim(s, d, s.dims[d][:-1]).placement()
        yield Step(ALLGATHER, p, gather_dim=d), t
        if d in interleaved:
            continue
        for j in plain:
            if j != d:
                t2 = _with_dim(t, j, t.dims[j] + (Split(p),))
                if valid(t2):
                    yield Step(ALLTOALL, p, scatter_dim=j, gather_dim=d), t2
    for part in _reductions(s.partial):
        # over all the partial's axes, or (of a partial over several) some
        # of them: the rest stays partial
        p = one_or_many(part)
        t = s.with_partial(tuple(q for q in s.partial if q not in part))
        yield Step(ALLREDUCE, p), t
        for d in plain:
            t2 = _with_dim(t, d, t.dims[d] + tuple(Split(q) for q in part))
            if valid(t2):
                yield Step(REDUCE_SCATTER, p, scatter_dim=d), t2
    if target_mesh == s.mesh or target_mesh not in meshes:
        return
    dst = meshes[target_mesh]
    types = s.device_types()
    moved = _on(s, target_mesh)
    if _same_axes(mesh, dst, types + list(s.partial)) and valid(moved):
        yield Step(SEND_RECV), moved
    if s.partial:
        if not types and dst.size == 1:
            yield Step(REDUCE, one_or_many(s.partial)), _on(s.with_partial(None), target_mesh)
        return
    for d in plain:
        if s.dims[d]:
            p = s.dims[d][-1].ptype
            t = _on(_with_dim(s, d, s.dims[d][:-1]), target_mesh)
            if _same_axes(mesh, dst, t.device_types()) and valid(t):
                yield Step(GATHER, p, gather_dim=d), t
    if _same_axes(mesh, dst, types) and not interleaved:
        for p in DEVICE_TYPES[: dst.rank]:
            if p in types:
                continue
            for d in range(rank):
                t = _on(_with_dim(s, d, s.dims[d] + (Split(p),)), target_mesh)
                if valid(t):
                    yield Step(SCATTER, p, scatter_dim=d), t


def _reductions(partial: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The sets of a partial's axes one allreduce or reduce-scatter may sum
    over: all of them (one collective over the team spanning them), and,
    of a partial over several, each smaller non-empty set (the sum
    decomposed, one axis after another)."""
    return [c for k in range(len(partial), 0, -1) for c in itertools.combinations(partial, k)]


def reshard_step(src: Sharding, dst: Sharding, shape: Shape, meshes: Meshes) -> Step | None:
    """The single step a set from `src` to `dst` is, or None when it is not
    one (same placement: a local copy; or several changes)."""
    a, b = src.placement(), dst.placement()
    if a == b or a.mesh not in meshes:
        return None
    return _step(a, b, tuple(shape), meshes[a.mesh], meshes.get(b.mesh))


@functools.lru_cache(maxsize=4096)
def _step(a: Sharding, b: Sharding, shape: Shape, mesh: Mesh, target: Mesh | None) -> Step | None:
    """`reshard_step` between placements, once per its inputs: the moves
    read the two meshes alone, and a program reshards few pairs of
    placements many times (each pass and each check asks again)."""
    meshes = {a.mesh: mesh} if target is None else {a.mesh: mesh, b.mesh: target}
    for step, t in _moves(a, shape, meshes, b):
        if t == b:
            return step
    return None


def element_bytes(t: TensorType) -> int:
    e = t.element_type
    if isinstance(e, IntegerType):
        return max(1, e.width.data // 8)
    if isinstance(e, (Float16Type, BFloat16Type)):
        return 2
    if isinstance(e, Float64Type):
        return 8
    return 4  # f32


def local_elements(s: Sharding, shape: Shape, meshes: Meshes) -> int:
    return math.prod(s.local_shape(shape, meshes[s.mesh]))


def step_cost(step: Step, src: Sharding, dst: Sharding, shape: Shape, meshes: Meshes) -> float:
    """Elements one device moves (a bandwidth estimate for choosing plans):
    a collective's wire factor (its hir op's `wire_factor`, nccl-tests' bus
    bytes) of the larger buffer; the root's receives for the rest."""
    from fuserc.dialects import hir

    ls, ld = local_elements(src, shape, meshes), local_elements(dst, shape, meshes)
    n = meshes[src.mesh].axis_size(step.ptype) if step.ptype and step.kind != SCATTER else 1
    collectives = {
        ALLGATHER: (hir.AllgatherOp, ld),
        ALLTOALL: (hir.AlltoallOp, ls),
        REDUCE_SCATTER: (hir.ReduceScatterOp, ls),
        ALLREDUCE: (hir.AllreduceOp, ls),
    }
    if step.kind == LOCAL_SLICE:
        return 0.0
    if step.kind in collectives:
        op, elements = collectives[step.kind]
        return float(op.wire_factor(n) * elements)
    if step.kind == REDUCE:
        return float(ls * n)
    return float(ld)  # SEND_RECV, GATHER, SCATTER


def plan_reshard(
    src: Sharding, dst: Sharding, shape: Shape, meshes: Meshes
) -> list[tuple[Step, Sharding]] | None:
    """A cheapest chain of steps from `src`'s placement to `dst`'s (each with
    the placement it reaches), fewest steps among equals; [] when the
    placements are equal; None when no chain exists (a partial sum cannot
    be made by communication)."""
    a, b = src.placement(), dst.placement()
    if a == b:
        return []
    if a.mesh not in meshes or b.mesh not in meshes:
        return None
    plan = _plan(a, b, tuple(shape), meshes[a.mesh], meshes[b.mesh])
    return None if plan is None else list(plan)


@functools.lru_cache(maxsize=4096)
def _plan(a: Sharding, b: Sharding, shape: Shape, mesh: Mesh, target: Mesh) -> tuple[tuple[Step, Sharding], ...] | None:
    """`plan_reshard` between placements, once per its inputs (as `_step`:
    the search reads the two meshes alone)."""
    meshes = {a.mesh: mesh, b.mesh: target}
    tie = itertools.count()
    heap: list[tuple[float, int, int, Sharding]] = [(0.0, 0, next(tie), a)]
    best: dict[Sharding, tuple[float, int]] = {a: (0.0, 0)}
    prev: dict[Sharding, tuple[Sharding, Step]] = {}
    while heap:
        cost, steps, _, s = heapq.heappop(heap)
        if (cost, steps) != best[s]:
            continue
        if s == b:
            path: list[tuple[Step, Sharding]] = []
            while s in prev:
                p, step = prev[s]
                path.append((step, s))
                s = p
            return tuple(path[::-1])
        for step, t in _moves(s, shape, meshes, b):
            key = (cost + step_cost(step, s, t, shape, meshes), steps + 1)
            if t not in best or key < best[t]:
                best[t] = key
                prev[t] = (s, step)
                heapq.heappush(heap, (key[0], key[1], next(tie), t))
    return None


def plan_cost(plan: Sequence[tuple[Step, Sharding]], src: Sharding, shape: Shape, meshes: Meshes, elem_bytes: int) -> float:
    total, s = 0.0, src.placement()
    for step, t in plan:
        total += step_cost(step, s, t, shape, meshes)
        s = t
    return total * elem_bytes


def mesh_table(module: Operation) -> dict[str, Mesh]:
    """Every `fusion.mesh` of `module`, by name."""
    from fuserc.dialects.fusion import MeshOp

    return {m.sym_name.data: m.model for m in walk(module) if isinstance(m, MeshOp)}


class Resharding:
    """`sharding_rules.is_resharding`, remembered by op signature (name,
    operand and result types, properties) for one pass over one module
    (whose meshes do not change meanwhile): programs repeat the same ops on
    the same types, layer after layer."""

    def __init__(self) -> None:
        self._known: dict[tuple, bool] = {}
        self.signature = Numbering().signature
        """An op's signature (name, operand and result types, properties) in
        numbers: ops of equal signature in one module are decided alike
        (its meshes are fixed)."""

    def __call__(self, op: Operation) -> bool:
        from fuserc.passes.sharding_rules import is_resharding

        key = self.signature(op)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = is_resharding(op)
        return found


"""How shardings flow through each fusion op.

Each op says how its operand dimensions relate to its result in its
`sharding_map()` (an `interfaces.OpMap`: MAP, DROP, CONTRACT or STAT per
operand dimension, see `fuserc.dialects.interfaces.Target`); reshape relates
groups of dimensions, not single ones (`reshape_sharding`). From those maps
come the three rules the passes share, so that they agree:

- `local_result`: the placement the op computes from its operands with no
  communication, or None when the operands do not fit together (a contracted
  dimension split on one operand only, two operands split differently, a
  parallel type landing twice on the result, a split on a DROP dimension, or
  on a STAT dimension: the op then expands into ops that communicate);
- `forward`: the sharding propagation gives an undecided result. Operands are
  taken in priority order (matmul: rhs, then lhs; linear: weight, bias, input,
  as nvFuser; elementwise: the operand with the most device splits, ties to
  the first), each adding its splits to result dimensions still whole with
  parallel types not yet used (a STAT dimension's split stays, as MAP's);
- `required_operands`: the operand placements under which the op computes a
  given result locally (backward propagation, and what a resharding op's
  operands must be resharded to).

`computes_locally` compares a result with `local_result` (dimensions a
broadcast creates may be split any way); `is_resharding(op)` is its negation
on the op's own types: communication must be inserted.

Partial sums: an op makes one when a contracted dimension is split
(`OpMap.contracts`: matmul, linear without bias, sum, embedding), over
every mesh axis its splits use (`DIDy*DIDx` on the tokens of a weight
gradient: `partial = [DIDy, DIDx]`). Linear
ops carry partial operands to their result (`OpMap.carries`): ALL (add,
sub, neg, cast, set, permute, reshape, broadcast_in_dim, slice, concat,
sum: every operand partial over the same types) or ONE (matmul, linear
without bias, mul: at most one operand partial). Any other op needs its
partial operands reduced first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.ir import Operation

from fuserc.dialects.fusion import FusionOp, lookup_mesh, shape_of, sharding_of
from fuserc.dialects.interfaces import ALL, CONTRACT, DROP, MAP, ONE, RESHAPE, STAT, OpMap
from fuserc.sharding import Mesh, Sharding, Split, axis_order

Shape = tuple[int, ...]
MeshLookup = Callable[[str], "Mesh | None"]


def op_map(op: FusionOp) -> OpMap | None:
    """The dimension map of `op` (None for reshape, see `reshape_sharding`)."""
    m = op.sharding_map()
    return None if m == RESHAPE else m  # type: ignore[return-value]


def is_reshape(op: FusionOp) -> bool:
    return op.sharding_map() == RESHAPE


# --------------------------------------------------------------------------
# Reshape
# --------------------------------------------------------------------------


def reshape_groups(src: Shape, dst: Shape) -> list[tuple[list[int], list[int]]]:
    """Minimal groups of source and result dimensions with equal element
    counts; a dimension of extent 1 forms its own group when it can."""
    if 0 in src or 0 in dst:
        return [(list(range(len(src))), list(range(len(dst))))]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        a1 = i < len(src) and src[i] == 1
        b1 = j < len(dst) and dst[j] == 1
        if a1 and not b1:
            groups.append(([i], []))
            i += 1
            continue
        if b1 and not a1:
            groups.append(([], [j]))
            j += 1
            continue
        ins, outs = [i], [j]
        pa, pb = src[i], dst[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ins.append(i)
                pa *= src[i]
                i += 1
            else:
                outs.append(j)
                pb *= dst[j]
                j += 1
        groups.append((ins, outs))
    return groups


def reshape_sharding(
    s: Sharding, src: Shape, dst: Shape, mesh: Mesh, exact: bool
) -> Sharding | None:
    """`s` (of a tensor of shape `src`) carried through a reshape to `dst`.

    A dimension kept as is keeps its splits. In a group that splits or merges
    dimensions, the group's splits must cut it into contiguous blocks: those
    of its outermost dimensions, each but the last split whole (a [G, T]
    split [DIDy, DIDx] with G = |DIDy| is the merged [G T] split
    DIDy*DIDx). They go to the result's outermost dimensions in order,
    outermost first: a dimension takes them all when its extent divides by
    their factor, else a leading run whose factor is its extent (`DIDy*DIDx`
    on [G T] to [G, T] with G = |DIDy|: [DIDy, DIDx]). Splits that fit no
    such way are dropped, the dimensions becoming whole; with `exact`, a
    dropped split means the reshape is not local: None."""
    s = s.placement()
    dims: list[tuple[Split, ...]] = [() for _ in dst]
    size = lambda splits: math.prod(sp.size(mesh) for sp in splits)  # noqa: E731
    for ins, outs in reshape_groups(src, dst):
        if not any(s.dims[d] for d in ins):
            continue
        if len(ins) == 1 and len(outs) == 1:
            dims[outs[0]] = s.dims[ins[0]]
            continue
        flat, whole = _group_splits([d for d in ins if src[d] != 1 or s.dims[d]], s, src, size)
        if not whole and exact:
            return None
        for o in [d for d in outs if dst[d] != 1]:
            if not flat:
                break
            if dst[o] % size(flat) == 0:
                dims[o], flat = flat, ()
                break
            lead = next((i for i in range(1, len(flat)) if size(flat[:i]) == dst[o]), None)
            if lead is None:
                break
            dims[o], flat = flat[:lead], flat[lead:]
        if flat and exact:
            return None
    return Sharding(s.mesh, tuple(dims), s.partial)


def _group_splits(ins: list[int], s: Sharding, src: Shape, size: Callable[[tuple[Split, ...]], int]) -> tuple[tuple[Split, ...], bool]:
    """The splits of a reshape group's source dimensions `ins` that cut the
    flattened group into contiguous blocks (those of its outermost
    dimensions, each but the last split whole), and whether that is all of
    them."""
    flat: tuple[Split, ...] = ()
    for n, d in enumerate(ins):
        if not s.dims[d]:
            return flat, not any(s.dims[e] for e in ins[n:])
        flat += s.dims[d]
        if size(s.dims[d]) != src[d]:
            return flat, not any(s.dims[e] for e in ins[n + 1 :])
    return flat, True


# --------------------------------------------------------------------------
# The three rules
# --------------------------------------------------------------------------


def _carried_partial(m: OpMap, operands: Sequence[Sharding | None]) -> tuple[bool, tuple[str, ...]]:
    """(ok, partial) carried from the operands' partials: ok is False when
    the op cannot compute locally on them."""
    partials = [s.partial for s in operands if s is not None and s.partial]
    if not partials:
        return True, ()
    if m.carries == ALL and len(partials) == len(operands) and len(set(partials)) == 1:
        return True, partials[0]
    if m.carries == ONE and len(partials) == 1:
        return True, partials[0]
    return False, ()


def _valid_types(dims: Sequence[tuple[Split, ...]], partial: tuple[str, ...]) -> bool:
    used = [s.ptype for d in dims for s in d] + list(partial)
    return len(used) == len(set(used))


def local_result(op: FusionOp, operands: Sequence[Sharding], mesh_of: MeshLookup) -> Sharding | None:
    """The placement `op` computes locally from operands placed as `operands`
    (None: the operands do not fit together, communication is needed)."""
    ops = [s.placement() for s in operands]
    if len({s.mesh for s in ops}) != 1:
        return None
    mesh_name = ops[0].mesh
    if is_reshape(op):
        mesh = mesh_of(mesh_name)
        if mesh is None:
            return None
        return reshape_sharding(ops[0], shape_of(op.operands[0]), shape_of(op.results[0]), mesh, True)
    m = op_map(op)
    assert m is not None
    dims: list[tuple[Split, ...] | None] = [None] * m.result_rank
    contracted: tuple[Split, ...] | None = None
    for s, targets in zip(ops, m.operands):
        mine: tuple[Split, ...] = ()
        for d, t in enumerate(targets):
            splits = s.dims[d]
            if t.kind == CONTRACT:
                mine += splits
                continue
            if t.kind == STAT and splits:  # statistics across devices: `expand`
                return None
            if t.kind == DROP:
                if splits:
                    return None
                splits = ()
            if t.dim is None:
                continue
            if dims[t.dim] is None:
                dims[t.dim] = splits
            elif dims[t.dim] != splits:
                return None
        if any(t.kind == CONTRACT for t in targets):
            if contracted is None:
                contracted = mine
            elif contracted != mine:
                return None
    ok, partial = _carried_partial(m, ops)
    if not ok:
        return None
    if contracted:
        if not m.contracts or partial or any(sp.is_stream for sp in contracted):
            return None
        partial = tuple(sp.ptype for sp in contracted)
    final = [d or () for d in dims]
    if not _valid_types(final, partial):
        return None
    return Sharding(mesh_name, tuple(final), partial)


def _fits(dims: list[tuple[Split, ...]], shape: Shape, mesh: Mesh | None) -> list[tuple[Split, ...]]:
    """Drop the splits of dimensions whose extent they do not divide."""
    if mesh is None:
        return dims
    out = []
    for d, extent in zip(dims, shape):
        factor = math.prod(s.size(mesh) for s in d)
        out.append(d if factor and extent % factor == 0 else ())
    return out


def _priority(m: OpMap, operands: Sequence[Sharding | None]) -> list[int]:
    known = [i for i in range(len(operands)) if operands[i] is not None]
    if m.priority is not None:
        return [i for i in m.priority if i in known]

    def key(i: int) -> tuple[int, int]:
        s = operands[i]
        assert s is not None
        return (-len(s.device_types()), i)

    return sorted(known, key=key)


def forward(op: FusionOp, operands: Sequence[Sharding | None], mesh_of: MeshLookup) -> Sharding | None:
    """The sharding propagation gives `op`'s undecided result from the
    operands it knows (None where none is known). Equal to `local_result`
    whenever that exists."""
    ops = [s.placement() if s is not None else None for s in operands]
    res_shape = shape_of(op.results[0])
    if is_reshape(op):
        src = ops[0]
        mesh = mesh_of(src.mesh) if src is not None else None
        if src is None or mesh is None:
            return None
        return reshape_sharding(src, shape_of(op.operands[0]), res_shape, mesh, False)
    m = op_map(op)
    assert m is not None
    order = _priority(m, ops)
    if not order:
        return None
    mesh_name = ops[order[0]].mesh  # type: ignore[union-attr]
    same = [s if s is not None and s.mesh == mesh_name else None for s in ops]
    # ALL needs every operand's partial; ONE only the known ones'.
    complete = all(s is not None for s in same)
    partial = _carried_partial(m, same)[1] if complete or m.carries == ONE else ()
    if partial and m.carries == ONE and any(q is not None and not q.partial and set(partial) & set(q.device_types()) for q in same):
        # a product of a partial and an operand split over the same devices
        # (exp(y) [-, DIDx] * sum(g) partial): the split wins, the partial
        # operand is reduced, rather than gathering the split one
        partial = ()
    used: set[str] = set(partial)
    maker = None  # the operand whose contracted splits make the partial
    dims: list[tuple[Split, ...]] = [() for _ in range(m.result_rank)]
    for i in order:
        s = same[i]
        if s is None:
            continue
        for d, t in enumerate(m.operands[i]):
            splits = s.dims[d]
            types = {sp.ptype for sp in splits}
            if not splits or types & used:
                continue
            if t.kind in (MAP, STAT) and t.dim is not None and not dims[t.dim]:
                dims[t.dim] = splits
                used |= types
            elif t.kind == CONTRACT and m.contracts and (not partial or maker == i) and not any(sp.is_stream for sp in splits):
                # one operand's contracted splits, over every axis they use
                # (`DIDy*DIDx` on one dimension, or on two summed ones)
                partial, maker = (*partial, *(sp.ptype for sp in splits)), i
                used |= types
    return Sharding(mesh_name, tuple(_fits(dims, res_shape, mesh_of(mesh_name))), axis_order(partial))


def required_operands(
    op: FusionOp, result: Sharding, mesh_of: MeshLookup, current: Sequence[Sharding | None] | None = None
) -> list[Sharding]:
    """Operand placements under which `op` computes `result` locally (as far
    as one exists: a partial result of an op that cannot make one is given
    operands without partial). A partial result of an op carrying ONE
    partial operand (a product) keeps it on the operand `current` (where
    the operands are now) has partial over that type, if exactly one."""
    r = result.placement()
    shapes = [shape_of(v) for v in op.operands]
    mesh = mesh_of(r.mesh)
    if is_reshape(op):
        if mesh is None:
            return [Sharding.replicated(r.mesh, len(shapes[0]))]
        back = reshape_sharding(r, shape_of(op.results[0]), shapes[0], mesh, False)
        assert back is not None
        return [back]
    m = op_map(op)
    assert m is not None
    contract = r.partial if r.partial and _can_contract(m, shapes, r.partial, mesh) else ()
    carried = r.partial if r.partial and not contract and m.carries == ALL else ()
    holders = [k for k, s in enumerate(current or ()) if s is not None and s.partial == r.partial]
    one = holders[0] if r.partial and not contract and m.carries == ONE and len(holders) == 1 else None
    out: list[Sharding] = []
    for k, (shape, targets) in enumerate(zip(shapes, m.operands)):
        dims: list[tuple[Split, ...]] = []
        placed = False
        for d, t in enumerate(targets):
            if t.kind in (MAP, STAT) and t.dim is not None:
                dims.append(r.dims[t.dim])
            elif t.kind == CONTRACT and contract and not placed and _divides(shape[d], contract, mesh):
                dims.append(tuple(Split(p) for p in contract))
                placed = True
            else:
                dims.append(())
        out.append(Sharding(r.mesh, tuple(_fits(dims, shape, mesh)), r.partial if k == one else carried))
    return out


def _divides(extent: int, ptype: str | Sequence[str], mesh: Mesh | None) -> bool:
    if mesh is None:
        return False
    try:
        return extent % mesh.axis_size(ptype) == 0
    except ValueError:
        return False


def can_make_partial(op: FusionOp, ptype: str | Sequence[str], mesh: Mesh | None) -> bool:
    """`op` can contract a dimension into a partial sum over `ptype` (one
    device type or several) after resharding its operands: matmul, linear
    without bias and sum, with a contracted dimension the mesh axes divide."""
    if is_reshape(op):
        return False
    m = op_map(op)
    return m is not None and _can_contract(m, [shape_of(v) for v in op.operands], ptype, mesh)


def _can_contract(m: OpMap, shapes: Sequence[Shape], ptype: str | Sequence[str], mesh: Mesh | None) -> bool:
    """Some contracted dimension can be split over `ptype` (all its axes)."""
    return m.contracts and any(
        t.kind == CONTRACT and _divides(shape[d], ptype, mesh)
        for shape, targets in zip(shapes, m.operands)
        for d, t in enumerate(targets)
    )


def carries_partial(op: FusionOp) -> str:
    """ALL, ONE or NONE: how `op` passes partial operands to its result."""
    if is_reshape(op):
        return ALL
    m = op_map(op)
    assert m is not None
    return m.carries


# --------------------------------------------------------------------------
# Resharding
# --------------------------------------------------------------------------


def is_resharding(op: Operation) -> bool:
    """True when `op`'s result placement (`Sharding.placement`) differs from
    what it computes locally from its operands' placements (nvFuser's
    truth table: same mesh and parallel types: no; another mesh or type:
    yes; a sum over a split dimension: local result partial, so yes unless
    the result is that partial sum). Ops other than fusion tensor ops are
    never resharding. Needs every tensor of `op` to have a sharding."""
    if not isinstance(op, FusionOp) or not op.results:
        return False
    values = [*op.operands, op.results[0]]
    shardings = [sharding_of(v) for v in values]
    if all(s is None for s in shardings):
        return False
    if any(s is None for s in shardings):
        raise ValueError(f"{op.name} has tensors without a sharding: run propagate-shardings first")
    res = shardings[-1]
    assert res is not None

    def mesh_of(name: str) -> Mesh | None:
        return lookup_mesh(op, name)

    return not computes_locally(op, shardings[:-1], res, mesh_of)  # type: ignore[arg-type]


def computes_locally(
    op: FusionOp, operands: Sequence[Sharding], result: Sharding, mesh_of: MeshLookup
) -> bool:
    """`op` makes `result` (its `Sharding.placement`) from operands placed as
    `operands` with no communication. Broadcast dimensions of the result may
    be split any way: each device makes its block of them itself."""
    if not operands:  # a constant, an iota: each device makes its block itself
        return True
    res = result.placement()
    local = local_result(op, [_over_devices(s, mesh_of(s.mesh)) for s in operands], mesh_of)
    if local is None:
        return False
    m = op_map(op)
    if m is not None:
        dims = list(local.dims)
        for r in m.free_dims():
            dims[r] = res.dims[r]
        if _valid_types(dims, local.partial):
            local = local.with_dims(dims)
    mesh = mesh_of(res.mesh)
    return _over_devices(local, mesh).same_placement(_over_devices(res, mesh))


def _over_devices(s: Sharding, mesh: Mesh | None) -> Sharding:
    """`s` without its device splits over mesh axes of one device: they
    place nothing (`[DIDy*Stream(2)]` on a mesh [1, 2] is `[Stream(2)]`),
    on the result as on the operands (an operand's gather pipelined along
    the result's `DIDz*Stream(2)` keeps its DIDz)."""
    if mesh is None or s.mesh != mesh.name:
        return s
    ones = {p for p in ("DIDx", "DIDy", "DIDz")[: len(mesh.shape)] if mesh.axis_size(p) == 1}
    if not ones:
        return s
    dims = [tuple(x for x in d if x.is_stream or x.ptype not in ones) for d in s.dims]
    return s.with_dims(dims).with_partial(tuple(p for p in s.partial if p not in ones))

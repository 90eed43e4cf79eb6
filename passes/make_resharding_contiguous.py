"""make-resharding-contiguous: split every resharding op into local compute
and pure reshards, and lay buffers out so that communication is contiguous
docs/passes.md has the full contract.

Input: every tensor of a sharded function has a sharding (run
propagate-shardings first); functions with no sharding at all are left alone.

Output contract (what lower-to-host-ir may rely on), checked by
`check_contract` at the end of the pass:

1. Every fusion op other than a placement-changing `fusion.set` is LOCAL:
   `sharding_rules.is_resharding(op)` is false, i.e. each device computes
   its block of the result by applying the op to its operands' local blocks
   (a contraction over a dimension split on both operands gives `partial`).
2. Every `fusion.set` whose operand and result placements differ is a PURE
   RESHARD of exactly one `reshard_util.Step`: operand and result have the
   same shape and element type and the sharding changes one thing, for which
   a communication exists (DIDx->- allgather, -->DIDx local slice, DIDx on
   dim i -> DIDx on dim j alltoall, partial->- allreduce, partial->DIDx
   reduce-scatter, mesh A -> mesh B send/recv, gather, scatter or reduce;
   DIDx->Stream(S) on one dimension is an allgather whose result carries the
   Stream split: pipelined). A set of equal placements is a local copy.
   `reshard_util.reshard_step` names the step.
3. Contiguity: in a pure reshard that communicates, the operand buffer and
   the result buffer have the same `alloc_order` (reshard_util.ALLOC_ORDER),
   and the dimension cut into blocks (the step's scatter_dim, on the operand)
   or along which blocks are concatenated (gather_dim, on the result) is
   outermost in memory up to dimensions of local extent 1. So every block a
   device sends or receives is one contiguous chunk, laid out alike on both
   sides. The layout is chosen on the op producing the operand where it is
   free (any op result without a user-given alloc_order); where it is not (a
   function argument is row-major, or the value already has another layout
   that a communication needs), a `fusion.permute` (the transpose) moves the
   dimension out, the set works on the permuted tensor, and a second
   permute with `alloc_order` (a relabelling of the same memory) restores
   the logical dimension order. An alltoall between two dimensions of local
   extent > 1 has no such layout: the moved dimension is split in two by a
   `fusion.reshape` first, so that the alltoall works on a dimension of
   local extent 1 (see `_Layouts.split_alltoall`).

The layout: `alloc_order = array<i64: p...>` on an op with one tensor result
says its local block is allocated as the contiguous buffer of the local
shape permuted by p (outermost first) and the logical result is that buffer
viewed through the inverse permutation; absent means row-major; function
arguments are row-major. lower-to-host-ir allocates and lowers by it. The
pass rejects a malformed one on its input (`reshard_util.alloc_order_errors`).

Decomposition of a resharding op (not a set): candidate local result
placements L are the op's local result on its current operands, the
declared result R, and sharding_rules.forward from all operands and from each
one alone; each L needs operands resharded to
sharding_rules.required_operands(L) and a reshard L -> R after. The
candidate with the least communication wins (reshard_util.plan_reshard's
estimate), then fewer reshard steps, then the smaller local result (less
redundant compute). One exception keeps the headline pipelined
AllGather+GEMM: when R has a Stream(S) split on a dimension whose operand
block must be gathered, that candidate wins and the gathering set's result
carries the Stream split. A linear with a bias whose contraction is split
becomes a linear without bias (partial), the reduction, then a broadcast
bias add. Stream splits of a declared result stay on it; a local op whose
result is later resharded gets the result's Stream splits where its own
placement allows. A set changing several things becomes a chain of
single-step sets (reshard_util.plan_reshard), the original set last.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fuserc.diagnostics import Diagnostic, error_at, location_of
from fuserc.dialects import hir
from fuserc.dialects.fusion import (
    ALLOC_ORDER,
    alloc_order_attr,
    alloc_order_errors,
    alloc_order_of,
    FusionOp,
    PermuteOp,
    ReshapeOp,
    SetOp,
    shape_of,
    sharding_of,
    ShardingAttr,
    tensor_type,
    with_sharding,
)
from fuserc.ir import walk
from fuserc.passes import sharding_rules as rules
from fuserc.passes.reshard_util import (
    ALLTOALL,
    Resharding,
    SCATTER,
    chunked_dim,
    Meshes,
    Shape,
    Step,
    element_bytes,
    inverse,
    local_elements,
    mesh_table,
    outermost,
    plan_cost,
    plan_reshard,
    reshard_step,
)
from fuserc.sharding import Mesh, Sharding, Split

_NEEDS_SHARDINGS = "make-resharding-contiguous needs every tensor sharded (run propagate-shardings first)"


@dataclass(frozen=True)
class MakeReshardingContiguous(ModulePass):
    """Local compute plus single-step, contiguous reshards (module docstring)."""

    name = "make-resharding-contiguous"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for o in walk(op):
            errs = alloc_order_errors(o)
            if errs:
                raise error_at(o, f"'{o.name}' op {errs[0]}")
        meshes = mesh_table(op)
        resharding = Resharding()
        for func in [f for f in walk(op) if isinstance(f, FuncOp)]:
            if func.is_declaration or "hir.host" in func.attributes:
                continue
            hir.check_fusion_function(func)
            if not _is_sharded(func):
                continue
            _require_shardings(func)
            split_resharding_ops(func, meshes, resharding)
            _split_multi_step_sets(func, meshes)
            _Layouts(meshes).run(func)
        problems = check_contract(op, resharding)
        if problems:  # a bug of this pass, not of the program
            raise Diagnostic("make-resharding-contiguous broke its contract: " + "; ".join(problems))


def split_resharding_ops(
    func: FuncOp, meshes: Meshes, resharding: Resharding | None = None, made: dict[tuple[SSAValue, Sharding], SSAValue] | None = None
) -> None:
    """Steps 1 and 2 of the pass on one function: expanded forms, then
    local compute plus reshard sets, equal reshards shared (propagate-shardings'
    search prices a plan with it). `made`: reshards that exist already
    (value and placement -> the set's result), which ops reuse for free."""
    resharding = resharding or Resharding()
    _expand_nonlocal(func, meshes, resharding)
    _Decomposer(meshes, resharding, made).run(func)
    _share_equal_sets(func)
    _bucket_returned_reductions(func, meshes)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _share_equal_sets(func: FuncOp) -> None:
    """One reshard per value and sharding: q, k and v of attention read one
    gathered copy of their input, not three. The first set of a block
    dominates the later ones. A set whose result has a Stream split stays
    one per user: it is a pipelined site with its own consumer."""
    for block in func.body.blocks:
        first: dict[tuple[SSAValue, TensorType], SetOp] = {}
        for o in list(block.ops):
            if not isinstance(o, SetOp):
                continue
            s = sharding_of(o.results[0])
            if s is None or s.stream_dim() is not None:
                continue
            kept = first.setdefault((o.operands[0], o.results[0].type), o)
            if kept is not o:
                o.results[0].replace_all_uses_with(kept.results[0])
                Rewriter.erase_op(o)


BUCKET_ELEMENTS = 1 << 22
"""Largest partial sum (elements) that joins a bucket of returned reductions."""


def _bucket_returned_reductions(func: FuncOp, meshes: Meshes) -> None:
    """The AllReduces of small replicated partial sums that are only
    returned (the gradients of a layer's norm weights and biases) become
    one: their values flattened and concatenated (a linear op: still
    partial), one set, then slices of the reduced buffer; one bucket per
    mesh, partial type and element type, as DDP buckets gradients. A
    collective's latency is paid once, not per parameter."""
    block = func.body.block
    ret = block.last_op
    if not isinstance(ret, ReturnOp):
        return
    groups: dict[tuple, list[SetOp]] = {}
    for o in block.ops:
        if not isinstance(o, SetOp):
            continue
        src, dst = sharding_of(o.operands[0]), sharding_of(o.results[0])
        shape = shape_of(o.results[0])
        if src is None or dst is None or not src.partial or dst.partial or src.mesh != dst.mesh:
            continue
        if src.mesh in meshes and meshes[src.mesh].size == 1:
            continue  # no collective to share: a bucket would only copy
        if any(d for d in src.dims) or any(d for d in dst.dims) or math.prod(shape) > BUCKET_ELEMENTS:
            continue
        if not o.results[0].uses or any(u.operation is not ret for u in o.results[0].uses):
            continue
        groups.setdefault((src.mesh, src.partial, o.results[0].type.element_type), []).append(o)  # type: ignore[union-attr]
    from fuserc.dialects.fusion_builder import FusionBuilder

    for (mesh, ptype, elem), sets in groups.items():
        if len(sets) < 2:
            continue
        b = FusionBuilder(ret)
        partial = Sharding(mesh, ((),), ptype)

        def typed(v: SSAValue, sharding: Sharding) -> SSAValue:
            return Rewriter.replace_value_with_new_type(v, with_sharding(v.type, sharding))  # type: ignore[arg-type]

        flat = []
        for st in sets:
            v = st.operands[0]
            flat.append(v if len(shape_of(v)) == 1 else typed(b.op("reshape", v, shape=[math.prod(shape_of(v))]), partial))
        reduced = typed(b.op("set", typed(b.op("concat", *flat, dim=0), partial)), partial.with_partial(None))
        start = 0
        for st in sets:
            shape = list(shape_of(st.results[0]))
            n = math.prod(shape)
            whole = typed(b.op("slice", reduced, starts=[start], limits=[start + n]), Sharding.replicated(mesh, 1))
            if len(shape) != 1:
                whole = typed(b.op("reshape", whole, shape=shape), Sharding.replicated(mesh, len(shape)))
            whole.name_hint = st.results[0].name_hint
            st.results[0].replace_all_uses_with(whole)
            Rewriter.erase_op(st)
            start += n


def _tensor_values(func: FuncOp) -> list[SSAValue]:
    args = [a for b in func.body.blocks for a in b.args]
    res = [r for o in walk(func.body) for r in o.results]
    return [v for v in [*args, *res] if isinstance(v.type, TensorType)]


def _is_sharded(func: FuncOp) -> bool:
    types = [*func.function_type.inputs.data, *func.function_type.outputs.data]
    types += [v.type for v in _tensor_values(func)]
    return any(isinstance(t, TensorType) and isinstance(t.encoding, ShardingAttr) for t in types)


def _require_shardings(func: FuncOp) -> None:
    for i, a in enumerate(func.args):
        if isinstance(a.type, TensorType) and sharding_of(a) is None:
            raise error_at(func, f"argument #{i} of @{func.sym_name.data} has no sharding: {_NEEDS_SHARDINGS}")
    for op in walk(func.body):
        for i, v in enumerate([*op.operands, *op.results]):
            if isinstance(v.type, TensorType) and sharding_of(v) is None:
                what = f"operand #{i}" if i < len(op.operands) else "its result"
                raise error_at(op, f"'{op.name}' op: {what} has no sharding: {_NEEDS_SHARDINGS}")


def _ints(values: tuple[int, ...] | list[int]) -> ArrayAttr:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


def _typed(elem, shape: Shape, sharding: Sharding) -> TensorType:
    return tensor_type(elem, tuple(shape), sharding)


def _permuted(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    """`t` permuted by `perm` (result dim k = dim perm[k]), sharding too."""
    s = sharding_of(t)
    assert s is not None
    shape = shape_of(t)
    ps = Sharding(s.mesh, tuple(s.dims[p] for p in perm), s.partial)
    return _typed(t.element_type, tuple(shape[p] for p in perm), ps)


def _insert_before(anchor: Operation, *ops: Operation) -> None:
    Rewriter.insert_op(list(ops), InsertPoint.before(anchor))


def _new_set(value: SSAValue, result_type: TensorType, at: Operation) -> SetOp:
    return SetOp.create(operands=[value], result_types=[result_type], location=at.location)


def _with_dim(s: Sharding, dim: int, splits: tuple[Split, ...]) -> Sharding:
    return s.with_dims([splits if i == dim else d for i, d in enumerate(s.dims)])


def _stream_splits(splits: tuple[Split, ...]) -> tuple[Split, ...]:
    return tuple(s for s in splits if s.is_stream)


def _where(op: Operation, message: str) -> str:
    loc = location_of(op)
    return f"{loc}: {message}" if loc else message


# --------------------------------------------------------------------------
# 1. Ops that need statistics across devices -> their expanded forms
# --------------------------------------------------------------------------

_MAX_EXPANSION_ROUNDS = 8
"""An expansion may make ops that expand in turn (a layer_norm's means);
each round expands what the last one made."""


def _expand_nonlocal(func: FuncOp, meshes: Meshes, resharding: Resharding) -> None:
    """Replace each resharding op that has an expanded form for its
    operands' shardings (`FusionOp.expand`: a layer_norm over a split hidden
    dimension, a linear with a bias and a split contraction, a cross_entropy
    over a split vocabulary, ...) by that form, whose ops then compute
    locally or reduce across devices; the new values get shardings as
    propagate-shardings gives them, the result keeps the op's."""
    from fuserc.dialects.fusion_builder import FusionBuilder
    from fuserc.passes.propagate_shardings import propagate_function

    for _ in range(_MAX_EXPANSION_ROUNDS):
        expanded = False
        for op in [o for o in walk(func.body) if isinstance(o, FusionOp) and not isinstance(o, SetOp)]:
            if any(sharding_of(v) is None for v in (*op.operands, *op.results)) or not resharding(op):
                continue
            if 0 in shape_of(op.results[0]):  # nothing to compute: no statistics (no max of nothing)
                expanded |= _empty_as_set(op)
                continue
            b = FusionBuilder(op, meshes.get)
            values = op.expand(b)
            if values is None:
                continue
            values = values if isinstance(values, tuple) else (values,)
            assert len(values) == len(op.results)
            for value, old in zip(values, op.results):
                assert isinstance(value.type, TensorType) and shape_of(value) == shape_of(old)
                value = Rewriter.replace_value_with_new_type(value, old.type)
                value.name_hint = old.name_hint
                old.replace_all_uses_with(value)
            op.detach()
            op.erase()
            expanded = True
        if not expanded:
            return
        propagate_function(func, search=False)
    raise error_at(func, "make-resharding-contiguous: op expansions do not terminate")


def _empty_as_set(op: FusionOp) -> bool:
    """An op with an empty result computes nothing: where an operand has the
    result's shape and element type (a softmax, a norm), the op becomes a
    set of it (a reshard of no data) instead of an expansion whose
    statistics would reduce nothing. False when there is no such operand
    (a set makes no partial sum: a partial result of nothing is then the
    op's own, a contraction of nothing, decomposed as any other)."""
    rtype = op.results[0].type
    partial = sharding_of(op.results[0]).partial  # type: ignore[union-attr]
    same = [
        v for v in op.operands
        if isinstance(v.type, TensorType) and shape_of(v) == shape_of(rtype) and v.type.element_type == rtype.element_type  # type: ignore[union-attr]
        and partial in ((), sharding_of(v).partial)  # type: ignore[union-attr]
    ]  # fmt: skip
    if not same or any(r.uses for r in op.results[1:]):  # a used second result (sdpa's log-sum-exp) has no such set
        return False
    s = _new_set(same[0], rtype, op)  # type: ignore[arg-type]
    _insert_before(op, s)
    s.results[0].name_hint = op.results[0].name_hint
    op.results[0].replace_all_uses_with(s.results[0])
    Rewriter.erase_op(op)
    return True


# --------------------------------------------------------------------------
# 2. Resharding ops -> local compute + reshard sets
# --------------------------------------------------------------------------


@dataclass(order=True, frozen=True)
class _Cost:
    """Candidates compare by: keeps a pipelined gather (0) or not (1),
    leaves the op's weights (`FusionOp.WEIGHTS`) where the user placed them
    (0) or moves them (1: as in nvFuser, a matmul/linear follows its
    weight's sharding, so a row-parallel layer stays a GEMM + ReduceScatter,
    which stream-pipeline can overlap, instead of gathering the weights; an
    embedding table split over its vocabulary is never gathered), sums over a device
    split by a reduction (0) or by moving the split off the summed
    dimension with an alltoall first (1: the same bytes, but nvFuser and
    MLIR reduce-scatter the partial sum; an alltoall is for a transpose of
    a split), communicated bytes,
    number of reshard steps (each a collective's latency), local result
    elements (redundant compute), order tried."""

    stream: int
    weight: int
    transpose: int
    traffic: float
    steps: int
    compute: int
    index: int


class _Decomposer:
    """Rewrites each resharding op of a function into reshard sets around
    the op, which then computes locally (module docstring: the choice)."""

    def __init__(self, meshes: Meshes, resharding: Resharding, made: dict[tuple[SSAValue, Sharding], SSAValue] | None = None):
        self.meshes = meshes
        self.resharding = resharding
        self.chosen: dict[tuple, tuple[Sharding, list[Sharding]] | None] = {}
        """Op signature and reusable reshards -> its choice (the same ops recur layer after layer)."""
        self.made: dict[tuple[SSAValue, Sharding], SSAValue] = dict(made or {})
        """Reshards of a value to a placement made so far (program order: each
        dominates what follows), which later ops reuse instead of resharding
        again: a weight gradient's transpose of an activation gathered for its
        data gradient reads that gathered copy."""

    def mesh_of(self, name: str) -> Mesh | None:
        return self.meshes.get(name)

    def run(self, func: FuncOp) -> None:
        for op in [o for o in walk(func.body) if isinstance(o, FusionOp) and not isinstance(o, SetOp)]:
            self.decompose(op)

    def valid(self, s: Sharding, shape: Shape) -> bool:
        return not s.errors(shape, self.meshes.get(s.mesh))

    def local(self, op: FusionOp, operands: list[Sharding], hint: Sharding) -> Sharding | None:
        """Local result placement, broadcast dimensions taken from `hint`."""
        local = rules.local_result(op, operands, self.mesh_of)
        m = rules.op_map(op)
        if local is None or m is None or not m.free_dims() or hint.mesh != local.mesh:
            return local
        dims = list(local.dims)
        for r in m.free_dims():
            dims[r] = hint.dims[r]
        cand = local.with_dims(dims)
        return cand if self.valid(cand, shape_of(op.results[0])) else local

    def decompose(self, op: FusionOp) -> None:
        if not self.resharding(op):
            return
        result = sharding_of(op.results[0])
        assert result is not None
        current = [sharding_of(v).placement() for v in op.operands]  # type: ignore[union-attr]
        avail = self.available(op)
        key = (self.resharding.signature(op), avail)
        if key not in self.chosen:
            self.chosen[key] = self.choose(op, current, result, avail)
        choice = self.chosen[key]
        if choice is None:
            raise error_at(op, self.failure(op, result))
        local, wanted = choice
        self.reshard_operands(op, current, wanted, result)
        self.reshard_result(op, local, result)

    def failure(self, op: FusionOp, result: Sharding) -> str:
        ins = ", ".join(str(sharding_of(v)) for v in op.operands)
        msg = (
            f"'{op.name}' op cannot be split into local compute and reshards: no placement of "
            f"its operands ({ins}) computes a result that communication turns into {result}"
        )
        if result.partial:
            msg += " (a partial sum comes only from a contraction, or from a linear op on partial operands)"
        return msg

    def available(self, op: FusionOp) -> tuple[frozenset[Sharding], ...]:
        """Per operand, the placements it was resharded to already."""
        return tuple(frozenset(p for (v, p) in self.made if v is operand) for operand in op.operands)

    def choose(
        self, op: FusionOp, current: list[Sharding], result: Sharding, avail: tuple[frozenset[Sharding], ...] = ()
    ) -> tuple[Sharding, list[Sharding]] | None:
        """(local result placement, operand placements) of the best candidate;
        an operand reshard in `avail` (made already) costs nothing."""
        target = result.placement()
        rshape = shape_of(op.results[0])
        shapes = [shape_of(v) for v in op.operands]
        nbytes = [element_bytes(v.type) for v in op.operands]  # type: ignore[arg-type]
        cands: list[Sharding] = []
        for c in [
            self.local(op, current, target),
            target,
            rules.forward(op, current, self.mesh_of),
            *(rules.forward(op, [s if k == i else None for k, s in enumerate(current)], self.mesh_of) for i in range(len(current))),
        ]:
            if c is not None and c not in cands:
                cands.append(c)
        best: tuple[_Cost, Sharding, list[Sharding]] | None = None
        for index, cand in enumerate(cands):
            if not self.valid(cand, rshape):
                continue
            wanted = [q.placement() for q in rules.required_operands(op, cand, self.mesh_of, current)]
            if len(wanted) != len(current) or any(not self.valid(q, s) for q, s in zip(wanted, shapes)):
                continue
            if self.local(op, wanted, cand) != cand:
                continue
            before = [plan_reshard(o, q, s, self.meshes) for o, q, s in zip(current, wanted, shapes)]
            after = plan_reshard(cand, target, rshape, self.meshes)
            if after is None or any(p is None for p in before):
                continue
            total = plan_cost(after, cand, rshape, self.meshes, element_bytes(op.results[0].type))  # type: ignore[arg-type]
            total += sum(
                0.0 if k < len(avail) and w in avail[k] else plan_cost(p, o, s, self.meshes, b)  # type: ignore[arg-type]
                for k, (p, o, w, s, b) in enumerate(zip(before, current, wanted, shapes, nbytes))
            )
            steps = len(after) + sum(len(p) for p in before)  # type: ignore[arg-type]
            cost = _Cost(
                0 if self.gathers_stream_dim(op, current, wanted, result) else 1,
                1 if any(wanted[i] != current[i] for i in op.WEIGHTS) else 0,
                self.transposes_summed(op, before),  # type: ignore[arg-type]
                total,
                steps,
                local_elements(cand, rshape, self.meshes),
                index,
            )
            if best is None or cost < best[0]:
                best = (cost, cand, wanted)
        return None if best is None else (best[1], best[2])

    @staticmethod
    def transposes_summed(op: FusionOp, plans: list[list[tuple[Step, Sharding]]]) -> int:
        """1 when an operand's reshard moves a device split off a dimension
        the op contracts (an alltoall whose gathered dimension is summed)."""
        m = rules.op_map(op)
        if m is None or not m.contracts:
            return 0
        for targets, plan in zip(m.operands, plans):
            for step, _ in plan:
                if step.kind == ALLTOALL and targets[step.gather_dim].kind == rules.CONTRACT:  # type: ignore[index]
                    return 1
        return 0

    def stream_targets(self, op: FusionOp, k: int, current: Sharding, wanted: Sharding, result: Sharding) -> list[int]:
        """Dimensions of operand k mapped to the result's Stream dimension
        when the reshard of operand k gathers their device split (the
        AllGather + GEMM of `x [DIDx, -]` to `[Stream(S), -]`) or gathers
        another dimension while these have a chunk of extent 1 (nvFuser's
        explicit device dimension, `x [S, DIDx, m, K]` to `[Stream(S), -,
        -, -]`: one allgather per chunk). Not when the Stream split
        interleaves device blocks: that is placement."""
        sd = result.stream_dim()
        m = rules.op_map(op)
        if sd is None or m is None or sd[0] in result.interleaved_dims():
            return []
        targets = m.operands[k]
        mapped = [d for d, t in enumerate(targets) if t.kind == rules.MAP and t.dim == sd[0]]
        gathered = [d for d in range(wanted.rank) if len(wanted.dims[d]) < len(current.dims[d])]
        if any(d in gathered for d in mapped):
            # the gathered operand takes the result's splits: only where they
            # place it as wanted (`[DIDx]` -> `[Stream(S)]`, not a result
            # `[DIDx*Stream(S)]`, whose dimension is not gathered at all)
            splits = result.dims[sd[0]]
            return [d for d in mapped if d in gathered and _with_dim(wanted, d, splits).placement() == wanted]
        only_gathers = all(len(w) <= len(c) for w, c in zip(wanted.dims, current.dims)) and not current.partial
        if gathered and only_gathers and all(targets[d].kind == rules.MAP for d in gathered):
            local = current.local_shape(shape_of(op.operands[k]), self.meshes[current.mesh])
            return [d for d in mapped if not current.dims[d] and local[d] == sd[1]]
        return []

    def gathers_stream_dim(self, op: FusionOp, current: list[Sharding], wanted: list[Sharding], result: Sharding) -> bool:
        return any(self.stream_targets(op, k, c, w, result) for k, (c, w) in enumerate(zip(current, wanted)))

    def reshard_operands(self, op: FusionOp, current: list[Sharding], wanted: list[Sharding], result: Sharding) -> None:
        made = self.made
        sd = result.stream_dim()
        for k, (value, cur, want) in enumerate(zip(list(op.operands), current, wanted)):
            if cur == want:
                continue
            target = want
            dims = self.stream_targets(op, k, cur, want, result)
            if dims and sd is not None:
                streamed = want.with_dims([result.dims[sd[0]] if d in dims else x for d, x in enumerate(want.dims)])
                if self.valid(streamed, shape_of(value)):
                    target = streamed
            if (value, target) not in made:
                s = _new_set(value, with_sharding(value.type, target), op)  # type: ignore[arg-type]
                _insert_before(op, s)
                made[(value, target)] = s.results[0]
            op.operands[k] = made[(value, target)]
            if target != want:  # a pipelined gather belongs to its consumer alone
                del made[(value, target)]

    def reshard_result(self, op: FusionOp, local: Sharding, result: Sharding) -> None:
        if local == result.placement():
            return
        first = self.with_streams(local, result, shape_of(op.results[0]))
        # The results after the first lie as it does (FusionOp.more_shardings).
        for old, want in zip(list(op.results), [first, *op.more_shardings(first)]):
            rtype = old.type
            assert isinstance(rtype, TensorType)
            hint = old.name_hint
            computed = Rewriter.replace_value_with_new_type(old, with_sharding(rtype, want))
            s = _new_set(computed, rtype, op)
            Rewriter.insert_op(s, InsertPoint.after(op))
            computed.replace_uses_with_if(s.results[0], lambda use, s=s: use.operation is not s)
            s.results[0].name_hint = hint
            computed.name_hint = f"{hint}_local" if hint else None

    def with_streams(self, local: Sharding, result: Sharding, shape: Shape) -> Sharding:
        """`local` with `result`'s Stream splits where they fit: the local op
        is then computed in the same chunks as its reshard."""
        placed = result.placement()
        dims = []
        for d, (mine, theirs, want) in enumerate(zip(local.dims, result.dims, placed.dims)):
            if not _stream_splits(theirs):
                dims.append(mine)
            elif mine == want:
                dims.append(theirs)
            elif not mine:
                dims.append(_stream_splits(theirs))
            else:
                dims.append(mine)
        out = local.with_dims(dims)
        return out if self.valid(out, shape) else local


# --------------------------------------------------------------------------
# 3. Multi-step sets -> chains of single steps
# --------------------------------------------------------------------------


def _split_multi_step_sets(func: FuncOp, meshes: Meshes) -> None:
    for s in [o for o in walk(func.body) if isinstance(o, SetOp)]:
        src, dst = sharding_of(s.operands[0]), sharding_of(s.results[0])
        assert src is not None and dst is not None
        shape = shape_of(s.results[0])
        if src.same_placement(dst) or reshard_step(src, dst, shape, meshes) is not None:
            continue
        plan = plan_reshard(src, dst, shape, meshes)
        if plan is None:
            why = (
                "a partial sum is made only by a contraction (matmul, linear, sum), never by communication"
                if dst.partial and dst.partial != src.partial
                else "no sequence of communications reaches it"
            )
            raise error_at(s, f"'fusion.set' op cannot reshard {src} to {dst}: {why}")
        value = s.operands[0]
        for _, placement in plan[:-1]:
            step = _new_set(value, with_sharding(value.type, placement), s)  # type: ignore[arg-type]
            _insert_before(s, step)
            value = step.results[0]
        s.operands[0] = value


# --------------------------------------------------------------------------
# 4. Layouts
# --------------------------------------------------------------------------


Constraint = tuple[SSAValue, int, "int | None"]
"""(value, dim, chunked): dim must be outermost in value's buffer, up to
dimensions of local extent 1 and the Stream-split dimension `chunked`
(`reshard_util.outermost`)."""


def _constraints(step: Step, src: SSAValue, dst: SSAValue, meshes: Meshes) -> list[Constraint]:
    """What `step` asks of the layouts of its operand and result. None over
    a mesh axis of one device (no blocks)."""
    s_operand, s_result = sharding_of(src), sharding_of(dst)
    assert s_operand is not None and s_result is not None
    mesh = meshes[s_result.mesh if step.kind == SCATTER else s_operand.mesh]
    if step.ptype is not None and mesh.axis_size(step.ptype) == 1:
        return []
    local = {v: s.local_shape(shape_of(v), meshes[s.mesh]) for v, s in ((src, s_operand), (dst, s_result))}
    chunked = chunked_dim(step, s_result, local[dst], s_operand, local[src])
    out: list[Constraint] = []
    if step.scatter_dim is not None:
        out.append((src, step.scatter_dim, chunked))
    if step.gather_dim is not None:
        out.append((dst, step.gather_dim, chunked))
    return out


class _Layouts:
    """Chooses alloc_orders. A communicating set ties its operand's and
    result's layouts (one class, union-find); a class is fixed when it holds
    a function argument or a user-given alloc_order, and collects the
    outermost-dimension constraints of its sets."""

    def __init__(self, meshes: Meshes):
        self.meshes = meshes
        self.parent: dict[SSAValue, SSAValue] = {}
        self.order: dict[SSAValue, tuple[int, ...]] = {}
        self.fixed: dict[SSAValue, bool] = {}
        self.cons: dict[SSAValue, list[Constraint]] = {}

    # ---- classes ----------------------------------------------------------
    def find(self, v: SSAValue) -> SSAValue:
        if v not in self.parent:
            self.parent[v] = v
            self.order[v] = alloc_order_of(v)
            # One alloc_order lays out every result of a multi-result op: kept row-major here.
            self.fixed[v] = isinstance(v, BlockArgument) or (
                isinstance(v, OpResult) and (ALLOC_ORDER in v.op.attributes or len(v.op.results) > 1)
            )
            self.cons[v] = []
        root = v
        while self.parent[root] is not root:
            root = self.parent[root]
        while self.parent[v] is not root:
            self.parent[v], v = root, self.parent[v]
        return root

    def assign(self, v: SSAValue, order: tuple[int, ...]) -> None:
        """A new value whose layout this pass chose (not fixed)."""
        self.parent[v], self.order[v], self.fixed[v], self.cons[v] = v, order, False, []

    def local_shape(self, v: SSAValue) -> Shape:
        s = sharding_of(v)
        assert s is not None
        return s.local_shape(shape_of(v), self.meshes[s.mesh])

    def satisfies(self, order: tuple[int, ...], cons: list[Constraint]) -> bool:
        return all(outermost(order, d, self.local_shape(v), c) for v, d, c in cons)

    def candidates(self, rank: int, cons: list[Constraint], current: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Orders to try, least change first: the current one, row-major,
        then constrained dimensions first (after dims of local extent 1)."""
        ident = tuple(range(rank))
        dims = list(dict.fromkeys(d for _, d, _ in cons))
        units = [d for d in ident if cons and all(self.local_shape(v)[d] == 1 for v, _, _ in cons)]
        out = [current, ident]
        for perm in itertools.permutations(dims):
            for head in (list(perm), [u for u in units if u not in perm] + list(perm)):
                out.append(tuple(head + [d for d in ident if d not in head]))
        return list(dict.fromkeys(out))

    def pick(self, a: SSAValue, b: SSAValue, cons: list[Constraint]) -> tuple[int, ...] | None:
        fixed = [x for x in (a, b) if self.fixed[x]]
        if len(fixed) == 2 and self.order[a] != self.order[b]:
            return None
        if fixed:
            order = self.order[fixed[0]]
            return order if self.satisfies(order, cons) else None
        rank = len(self.order[a])
        return next((o for o in self.candidates(rank, cons, self.order[a]) if self.satisfies(o, cons)), None)

    # ---- the walk ------------------------------------------------------------
    def run(self, func: FuncOp) -> None:
        for s in [o for o in walk(func.body) if isinstance(o, SetOp)]:
            self.visit(s)
        for v in list(self.parent):
            if not isinstance(v, OpResult) or v.op.parent is None or ALLOC_ORDER in v.op.attributes:
                continue
            order = self.order[self.find(v)]
            if order != tuple(range(len(order))):
                v.op.attributes[ALLOC_ORDER] = alloc_order_attr(order)

    def visit(self, s: SetOp) -> None:
        src, dst = s.operands[0], s.results[0]
        ssrc, sdst = sharding_of(src), sharding_of(dst)
        assert ssrc is not None and sdst is not None
        step = reshard_step(ssrc, sdst, shape_of(src), self.meshes)
        if step is None or not step.communicates:
            return
        own = _constraints(step, src, dst, self.meshes)
        a, b = self.find(src), self.find(dst)
        if self.fixed[b] and not self.satisfies(self.order[b], own):
            raise error_at(
                s,
                f"'fusion.set' op {ALLOC_ORDER} = {list(self.order[b])} keeps the dim its {step.kind} "
                "communicates along from being outermost in memory; drop it or put that dim first",
            )
        cons = self.cons[a] + self.cons[b] + own
        order = self.pick(a, b, cons)
        if order is not None:
            self.parent[b] = a
            self.order[a], self.fixed[a], self.cons[a] = order, self.fixed[a] or self.fixed[b], cons
            return
        rank = len(shape_of(src))
        ident = tuple(range(rank))
        wished = self.order[b] if self.fixed[b] else ident
        own_orders = [o for o in self.candidates(rank, own, wished) if self.satisfies(o, own)]
        if own_orders:
            self.transpose(s, own_orders[0])
        else:
            self.split_alltoall(s, step)

    # ---- rewrites ------------------------------------------------------------
    def transpose(self, s: SetOp, perm: tuple[int, ...]) -> None:
        """permute(perm) (the transpose) -> the set on the permuted tensor ->
        permute back, laid out as `perm`: a view of the set's buffer."""
        src, dst = s.operands[0], s.results[0]
        t = PermuteOp.create(operands=[src], result_types=[_permuted(src.type, perm)], properties={"dims": _ints(perm)}, location=s.location)  # type: ignore[arg-type]
        t.results[0].name_hint = f"{src.name_hint}_t" if src.name_hint else None
        if perm == tuple(range(len(perm))):  # a copy into row-major suffices
            _insert_before(s, t)
            s.operands[0] = t.results[0]
            self.visit(s)
            return
        moved = _new_set(t.results[0], _permuted(dst.type, perm), s)  # type: ignore[arg-type]
        back = PermuteOp.create(operands=[moved.results[0]], result_types=[dst.type], properties={"dims": _ints(inverse(perm))}, location=s.location)
        self.replace(s, [t, moved, back])
        self.assign(back.results[0], perm)
        self.visit(moved)

    def split_alltoall(self, s: SetOp, step: Step) -> None:
        """An alltoall of dim i to dim j where both have local extent > 1:
        no layout has j outermost on the operand and i outermost on the
        result. Reshape j into (G, E/G) with G its number of blocks on the
        result, transpose (G, i) to the front and run the alltoall from i to
        the G dimension, whose local extent on the result is 1; permute and
        reshape back, both views."""
        src, dst = s.operands[0], s.results[0]
        ssrc, sdst = sharding_of(src), sharding_of(dst)
        assert ssrc is not None and sdst is not None and step.gather_dim is not None and step.scatter_dim is not None
        i, j = step.gather_dim, step.scatter_dim
        shape = shape_of(src)
        mesh = self.meshes[sdst.mesh]
        blocks = math.prod(sp.size(mesh) for sp in sdst.placement().dims[j])
        split = shape[:j] + (blocks, shape[j] // blocks) + shape[j + 1 :]

        def lifted(sh: Sharding, streams: bool = False) -> Sharding:
            """`sh` on the split shape; with `streams`, its Stream splits
            kept: those of j (inside its device splits, `DIDx*Stream(k)`)
            on the inner dimension E/G, the others where they are."""
            p = sh.placement()
            dims, inner = p.dims, ()
            if streams:
                dims = sh.dims
                if len(sh.dims[j]) > len(p.dims[j]) and sh.dims[j][: len(p.dims[j])] == p.dims[j]:
                    inner = sh.dims[j][len(p.dims[j]) :]
            return Sharding(p.mesh, dims[:j] + (p.dims[j], inner) + dims[j + 1 :], p.partial)

        elem = src.type.element_type  # type: ignore[attr-defined]
        i2 = i if i < j else i + 1
        result = lifted(sdst, streams=True)
        if result.errors(split, mesh):
            result = lifted(sdst)
        sd, head = result.stream_dim(), (j, i2)
        if sd is not None and sd[0] not in head and not result.interleaved_dims() and result.local_shape(split, mesh)[sd[0]] == sd[1]:
            head = (sd[0], j, i2)  # chunks of extent 1 first: an alltoall per chunk
        perm = head + tuple(k for k in range(len(split)) if k not in head)
        x = ReshapeOp.create(operands=[src], result_types=[_typed(elem, split, lifted(ssrc))], location=s.location)
        t = PermuteOp.create(operands=[x.results[0]], result_types=[_permuted(x.results[0].type, perm)], properties={"dims": _ints(perm)}, location=s.location)  # type: ignore[arg-type]
        moved = _new_set(t.results[0], _permuted(_typed(elem, split, result), perm), s)
        back = PermuteOp.create(operands=[moved.results[0]], result_types=[_typed(elem, split, result)], properties={"dims": _ints(inverse(perm))}, location=s.location)
        y = ReshapeOp.create(operands=[back.results[0]], result_types=[dst.type], location=s.location)
        self.replace(s, [x, t, moved, back, y])
        self.assign(back.results[0], perm)
        self.assign(y.results[0], tuple(k if k < j else k - 1 for k in perm if k != j))
        self.visit(moved)

    def replace(self, s: SetOp, ops: list[Operation]) -> None:
        _insert_before(s, *ops)
        s.results[0].replace_all_uses_with(ops[-1].results[0])
        Rewriter.erase_op(s)


# --------------------------------------------------------------------------
# The contract
# --------------------------------------------------------------------------


def check_contract(module: ModuleOp, resharding: Resharding | None = None) -> list[str]:
    """Every way `module` breaks the output contract of this pass (module
    docstring), one message each, located; empty when it holds."""
    meshes = mesh_table(module)
    resharding = resharding or Resharding()
    problems: list[str] = []
    for op in walk(module):
        problems += [_where(op, f"'{op.name}' op {e}") for e in alloc_order_errors(op)]
    for func in [f for f in walk(module) if isinstance(f, FuncOp)]:
        if func.is_declaration or "hir.host" in func.attributes or not _is_sharded(func):
            continue
        for i, a in enumerate(func.args):
            if isinstance(a.type, TensorType) and sharding_of(a) is None:
                problems.append(_where(func, f"argument #{i} of @{func.sym_name.data} has no sharding"))
        for op in walk(func.body):
            if any(isinstance(v.type, TensorType) and sharding_of(v) is None for v in op.results):
                problems.append(_where(op, f"'{op.name}' op result has no sharding"))
                continue
            if not isinstance(op, FusionOp) or any(sharding_of(v) is None for v in op.operands):
                continue
            if isinstance(op, SetOp):
                problems += _check_set(op, meshes)
            elif resharding(op):
                ins = ", ".join(str(sharding_of(v)) for v in op.operands)
                problems.append(_where(op, f"'{op.name}' op is resharding ({ins} -> {sharding_of(op.results[0])})"))
    return problems


def _check_set(s: SetOp, meshes: Meshes) -> list[str]:
    src, dst = s.operands[0], s.results[0]
    ssrc, sdst = sharding_of(src), sharding_of(dst)
    assert ssrc is not None and sdst is not None
    if ssrc.same_placement(sdst):
        return []
    shape = shape_of(src)
    if shape != shape_of(dst) or src.type.element_type != dst.type.element_type:  # type: ignore[attr-defined]
        return [_where(s, "'fusion.set' op reshard changes the shape or element type")]
    step = reshard_step(ssrc, sdst, shape, meshes)
    if step is None:
        return [_where(s, f"'fusion.set' op from {ssrc} to {sdst} is not a single-step reshard")]
    if not step.communicates:
        return []
    out = []
    osrc, odst = alloc_order_of(src), alloc_order_of(dst)
    if osrc != odst:
        out.append(_where(s, f"'fusion.set' op {step.kind}: operand alloc_order {list(osrc)} differs from result's {list(odst)}"))
    layouts = _Layouts(meshes)
    for v, d, c in _constraints(step, src, dst, meshes):
        if not outermost(alloc_order_of(v), d, layouts.local_shape(v), c):
            side = "operand" if v is src else "result"
            out.append(_where(s, f"'fusion.set' op {step.kind} over dim {d} of its {side}: dim {d} is not outermost in memory"))
    return out

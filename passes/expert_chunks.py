"""chunk-experts: the token chunks of an expert-parallel layer, so that the
all-to-alls of one chunk run beside the grouped GEMMs of another.

A chain `fusion.dispatch %x, %ids` -> the experts' ops on its slots ->
`fusion.combine %ye, %ids` whose tokens are split over a mesh axis of d > 1
devices (expert parallelism: passes/expert_parallel.py) becomes S chains,
chunk c taking every S-th token from token c (so each device's block of
tokens is cut alike, and the cuts are local reshapes and slices): every
chunk is dispatched first, then each chunk's experts and its combine, and
the chunks' combined rows are laid back in token order. The lowering places
the rows an all-to-all received where they are first used, so chunk c+1's
dispatch runs beside chunk c's grouped GEMMs and chunk c's combine beside
chunk c+1's.

The chain's ops between dispatch and combine must each compute a slot's
row from that row alone (so that a chunk's slots, which hold other rows in
other places, give the same rows back): `grouped_matmul` of the slots by
the experts' weights and the dispatch's row counts, and pointwise ops whose
other operands do not vary along the slots' rows; none of its values may
be used outside it. Chains of token groups ([G, T, k] ids) are left as
they are.

S is the option `token-chunks` where given (1: no chunking), else the cost
model's choice (`cost_model.moe_chunks`: each chunk's all-to-alls beside
the other chunks' GEMMs, against one chunk). The pass runs after
propagate-shardings (it reads the token split and gives its ops their
shardings) and inside `autodiff`, before the derivation: the backward of
a chunked layer is chunked too, its dispatches (the combines' transposes)
moved as early as their operands allow and each combine right after its
chunk's GEMMs (`hoist`). A chunk's dispatch carries `fusion.token_chunks =
S`: a chain already in chunks is not cut again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i64
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import FusionOp, MeshOp, ShardingAttr, shape_of, sharding_of
from fuserc.dialects.fusion_mesh import tensor_type
from fuserc.dialects.fusion_builder import ELEMENT_TYPES, make_op
from fuserc.dialects.fusion_dispatch import CombineOp, DispatchOp
from fuserc.dialects.fusion_moe import GroupedMatmulOp
from fuserc.passes import cost_model
from fuserc.passes.reshard_util import element_bytes
from fuserc.sharding import Mesh, Sharding

CHUNKS_ATTR = "fusion.token_chunks"
"""On each chunk's dispatch: the chunk count of its layer (not cut again);
on the module: the count `autodiff{token-chunks=N}` was given, which the
pass then keeps to (`module_chunks`)."""


@dataclass(frozen=True)
class ChunkExperts(ModulePass):
    """Cuts each expert-parallel dispatch -> experts -> combine chain into
    token chunks (module docstring). `token_chunks`: the count (1: none);
    None: the cost model's choice."""

    name = "chunk-experts"

    token_chunks: int | None = None

    def __post_init__(self) -> None:
        check_chunks(self.token_chunks)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        meshes = {m.sym_name.data: m.model for m in op.ops if isinstance(m, MeshOp)}
        forced = self.token_chunks if self.token_chunks is not None else module_chunks(op)
        for func in [f for f in op.ops if isinstance(f, FuncOp) and not f.is_declaration and not hir.is_host_program(f)]:
            chunk_function(func, meshes, forced)


def module_chunks(module: ModuleOp) -> int | None:
    """The chunk count `autodiff{token-chunks=N}` left on the module
    (`CHUNKS_ATTR`), which this pass keeps to where its own option is unset:
    the forward and backward it derived are cut as it cut the layer."""
    attr = module.attributes.get(CHUNKS_ATTR)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def note_chunks(module: ModuleOp, count: int | None) -> None:
    """Leave a forced chunk count on the module (`module_chunks`)."""
    if count is not None:
        module.attributes[CHUNKS_ATTR] = IntegerAttr(count, i64)


def check_chunks(count: int | None) -> None:
    """The option `token-chunks` (of this pass and of autodiff) is positive or unset."""
    if count is not None and count < 1:
        raise ValueError(f"token-chunks must be positive, got {count}")


@dataclass
class Chain:
    """One dispatch, the ops on its slots in program order, its combine."""

    dispatch: DispatchOp
    body: list[Operation]
    combine: CombineOp
    ranks: int
    """The devices of the axis the tokens are split over."""

    def tokens(self) -> int:
        """The tokens each device holds."""
        return shape_of(self.dispatch.ids)[0] // self.ranks


def chunk_function(func: FuncOp, meshes: dict[str, Mesh], forced: int | None) -> bool:
    """Cuts every chain of `func` in chunks (`forced`, else the cost
    model's count); whether any was cut."""
    machine: list[cost_model.Machine] = []
    cut = False
    for d in [o for o in func.body.block.ops if isinstance(o, DispatchOp)]:
        chain = chain_of(d, meshes)
        if chain is None:
            continue
        if forced is None:
            if not machine:
                try:
                    machine.append(cost_model.load_machine())
                except cost_model.LinksFileError as e:  # located in the file, not the program
                    raise e.diagnostic("chunk-experts") from None
                except ValueError as e:
                    raise error_at(d, f"chunk-experts: {e}") from None
            k, row_bytes, gemms, elem = _work(chain)
            chunks = cost_model.moe_chunks(machine[0], chain.tokens(), k, row_bytes, gemms, chain.ranks, elem)[0]
        else:
            chunks = forced
            if chain.tokens() % chunks:
                raise error_at(
                    d,
                    f"chunk-experts: token-chunks = {chunks} does not divide the {chain.tokens()} tokens each of "
                    f"the {chain.ranks} devices holds ({sharding_of(d.ids)})",
                )
        if chunks > 1:
            _cut(chain, chunks)
            cut = True
    return cut


def chain_of(d: DispatchOp, meshes: dict[str, Mesh]) -> Chain | None:
    """The chain starting at `d` when its tokens are split over an axis of
    more than one device and it can be cut (module docstring)."""
    if CHUNKS_ATTR in d.attributes or len(shape_of(d.ids)) != 2:
        return None
    s, xs = sharding_of(d.ids), sharding_of(d.input)
    if s is None or xs is None or s.partial or xs.partial or len(s.dims[0]) != 1 or s.dims[0][0].is_stream:
        return None
    if xs.dims[0] != s.dims[0] or any(s.dims[1:]) or s.mesh not in meshes:
        return None
    ranks = meshes[s.mesh].axis_size(s.dims[0][0].ptype)
    if ranks == 1 or shape_of(d.ids)[0] % ranks:
        return None
    slots = shape_of(d.results[0])[:2]
    counts = d.results[1] if len(d.results) == 2 else None
    inside: set[SSAValue] = set(d.results)
    body: list[Operation] = []
    combine: CombineOp | None = None
    op = d.next_op
    while op is not None and combine is None:
        if any(v in inside for v in op.operands):
            if isinstance(op, CombineOp):
                if op.ids is not d.ids or op.input not in inside:
                    return None
                combine = op
            elif _row_wise(op, inside, slots, counts):
                body.append(op)
                inside.update(op.results)
            else:
                return None
        op = op.next_op
    if combine is None:
        return None
    mine = {d, *body, combine}
    if any(use.operation not in mine for v in inside for use in v.uses):
        return None
    return Chain(d, body, combine, ranks)


def _row_wise(op: Operation, inside: set[SSAValue], slots: tuple[int, ...], counts: SSAValue | None) -> bool:
    """Each row of `op`'s slot-shaped result comes from the same row of its
    operands in the chain (`inside`) and from operands that do not vary
    along the rows."""
    if isinstance(op, GroupedMatmulOp):
        return op.lhs in inside and op.rhs not in inside and counts is not None and op.offsets is counts and len(shape_of(op.lhs)) == 3
    if not (isinstance(op, FusionOp) and getattr(op, "POINTWISE", False) and len(op.results) == 1):
        return False
    out = shape_of(op.results[0])
    if out[:2] != slots:
        return False
    for v in op.operands:
        shape = shape_of(v)
        if v in inside:
            if shape[:2] != slots:
                return False
        elif len(shape) >= len(out) - 1 and shape[len(shape) - len(out) + 1] != 1:
            return False  # an operand of its own along the slots' rows
    return True


def _work(chain: Chain) -> tuple[int, int, list[float], str]:
    """(k, bytes of a token's row, the flops per row of each grouped GEMM,
    element type) of a chain."""
    x = chain.dispatch.input.type
    assert isinstance(x, TensorType)
    elem = next((n for n, t in ELEMENT_TYPES.items() if t == x.element_type), "f32")
    flops = [2.0 * shape_of(o.lhs)[-1] * shape_of(o.results[0])[-1] for o in chain.body if isinstance(o, GroupedMatmulOp)]
    return shape_of(chain.dispatch.ids)[1], shape_of(x)[-1] * element_bytes(x), flops, elem


# ---- the rewrite ------------------------------------------------------------


def _cut(chain: Chain, chunks: int) -> None:
    """`chain` as `chunks` chains (module docstring)."""
    d, combine = chain.dispatch, chain.combine
    ids = [_take(d.ids, c, chunks, d) for c in range(chunks)]
    dispatches = []
    for c in range(chunks):
        x = _take(d.input, c, chunks, d)
        new = _like(d, [x, ids[c]], chunks, c)
        new.attributes[CHUNKS_ATTR] = IntegerAttr(chunks, i64)
        Rewriter.insert_op(new, InsertPoint.before(d))
        dispatches.append(new)
    outs = []
    for c in range(chunks):
        values: dict[SSAValue, SSAValue] = dict(zip(d.results, dispatches[c].results))
        for o in [*chain.body, combine]:
            operands = [values.get(v, v) for v in o.operands]
            if o is combine:
                operands[1] = ids[c]
            new = _like(o, operands, chunks, c)
            Rewriter.insert_op(new, InsertPoint.before(combine))
            values.update(zip(o.results, new.results))
        outs.append(values[combine.results[0]])
    merged = _merge(outs, combine)
    combine.results[0].replace_all_uses_with(merged)
    for o in reversed([d, *chain.body, combine]):
        Rewriter.erase_op(o)


def _like(op: Operation, operands: Sequence[SSAValue], chunks: int, c: int) -> Operation:
    """A copy of `op` on chunk c's `operands`: the token extent of its
    results (the slots' rows; combine's tokens) divided by `chunks`."""
    dim = 0 if isinstance(op, CombineOp) else 1
    types = []
    for r in op.results:
        t = r.type
        assert isinstance(t, TensorType)
        shape = list(t.get_shape())
        if len(shape) > dim + 1:
            shape[dim] //= chunks
        types.append(tensor_type(t.element_type, tuple(shape), sharding_of(t)))
    new = type(op).create(operands=list(operands), result_types=types, properties=dict(op.properties), attributes=dict(op.attributes))
    new.location = op.location  # type: ignore[attr-defined]
    for old, r in zip(op.results, new.results):
        r.name_hint = f"{old.name_hint}_c{c}" if old.name_hint else None
    return new


def _take(v: SSAValue, c: int, chunks: int, before: Operation) -> SSAValue:
    """Chunk c of `v` [T, ...] (tokens c, c + chunks, ...): a reshape to
    [T / chunks, chunks, ...], a slice and a reshape back, all local."""
    shape = shape_of(v)
    rows, rest = shape[0] // chunks, list(shape[1:])
    s = sharding_of(v)
    assert s is not None
    wide = _op("reshape", [v], s, shape=[rows, chunks, *rest], extra=1, before=before)
    one = _op("slice", [wide], s, kw={"starts": [0, c] + [0] * len(rest), "limits": [rows, c + 1, *rest]}, extra=1, before=before)
    out = _op("reshape", [one], s, shape=[rows, *rest], before=before)
    out.name_hint = f"{v.name_hint}_c{c}" if v.name_hint else None
    return out


def _merge(outs: Sequence[SSAValue], combine: CombineOp) -> SSAValue:
    """The chunks' combined rows [T / S, k, H] laid back in token order
    [T, k, H]: as a stack [T / S, S, k, H] reshaped."""
    s = sharding_of(combine.results[0])
    assert s is not None
    rows, *rest = shape_of(outs[0])
    tall = [_op("reshape", [o], s, shape=[rows, 1, *rest], extra=1, before=combine) for o in outs]
    stack = _op("concat", tall, s, kw={"dim": 1}, extra=1, before=combine)
    return _op("reshape", [stack], s, shape=list(shape_of(combine.results[0])), before=combine)


def _op(
    name: str, operands: Sequence[SSAValue], s: Sharding, *, before: Operation, shape: Sequence[int] | None = None,
    kw: dict | None = None, extra: int = 0,
) -> SSAValue:
    """A new fusion op before `before`, its result sharded as `s` with
    `extra` whole dimensions after the first (the chunk index)."""
    placed = s.with_dims([s.dims[0], *[()] * extra, *s.dims[1:]])
    new = make_op(name, operands, kw or {}, shape=shape, result_encoding=ShardingAttr.get(placed))
    new.location = before.location  # type: ignore[attr-defined]
    Rewriter.insert_op(new, InsertPoint.before(before))
    return new.results[0]


# ---- the backward's order -----------------------------------------------------


def hoist(block: Block) -> None:
    """Every dispatch and combine of `block` moved up to right after the
    last op defining one of its operands: a chunked layer's backward then
    dispatches every chunk's cotangents first and combines each chunk right
    after its GEMMs, as its forward does."""
    for op in [o for o in block.ops if isinstance(o, (DispatchOp, CombineOp))]:
        last = _last_definition(op, block)
        if last is not op.prev_op:
            op.detach()
            if last is None:
                block.insert_op_before(op, block.first_op)  # type: ignore[arg-type]
            else:
                block.insert_op_after(op, last)


def _last_definition(op: Operation, block: Block) -> Operation | None:
    defs: Iterable[Operation] = (v.owner for v in op.operands if isinstance(v.owner, Operation) and v.owner.parent is block)
    prev, found = op.prev_op, set(defs)
    while prev is not None and prev not in found:
        prev = prev.prev_op
    return prev

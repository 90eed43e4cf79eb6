"""lower-to-host-ir: each fusion function becomes a host program (docs/hir.md).

Input (what make-resharding-contiguous guarantees): every tensor has a
sharding, and every op is either *local* (`sharding_rules.is_resharding` is
false: each rank computes its result block from its operand blocks) or a
pure reshard `fusion.set` (lowered by `lower_reshard`).

Output, per function: a `func.func` with the `hir.host` unit attribute, local
argument/result types and `hir.global` attributes holding the global sharded
types. In its body, for each fusion op in order:
- allocations: `hir.alloc "F/I/R"` (function F, op index I, result R; buffers
  a reshard needs on the way get a suffix, results copied at the return
  `F/return/K`), so each site string is unique and stable across compiles;
- compute: `hir.matmul` / `hir.linear` for matmul and linear (their local
  computation is the same GEMM on the local blocks), `hir.copy` for a set that
  moves no data, and `hir.launch` with the fusion ops on local types for the
  rest, in launch regions of several ops (`launch_regions`);
- deallocation: `hir.dealloc` of each allocated buffer right after its last
  use (through views), never of arguments nor of returned buffers.

Ranks outside a mesh: all work on a mesh's tensors is wrapped in
`hir.if_rank [mesh devices]` (consecutive ops on the same ranks share one
region; values used later leave it through `hir.yield`). On a 2-D mesh a
collective within every mesh slice is one op whose team has translates, in
the mesh's region (so is a local slice's `hir.team_index`); where the
slices are not translates of one another (ids not equally spaced), one op
per slice, each with its wait in the `hir.if_rank [team]` of its team.
Transfers between meshes are wrapped per rank (`hir.if_rank [r]`). So every
op runs exactly on the ranks that own its tensors, without relying on the
evaluator skipping ops with absent operands (but for the root-only operands
of scatter, gather and reduce, absent elsewhere as docs/hir.md allows).

Stream splits: before stream-pipeline, an op whose result has a `Stream(S)`
split on dimension d lowers to its unpipelined form; its hir compute and
communication ops carry the discardable attribute `hir.stream = [d, S]`.
Communications of a reshard carry `hir.reshard = "FROM->TO"` (see
`lower_reshard`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    LocationAttr,
    ModuleOp,
    TensorType,
    UnknownLoc,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import (
    ALLOC_ORDER,
    GLOBAL_ATTR,
    alloc_order_of,
    FusionOp,
    LinearOp,
    lookup_mesh,
    MatmulOp,
    PermuteOp,
    ReshapeOp,
    SetOp,
    shape_of,
    sharding_of,
    SliceOp,
    tensor_type,
)
from fuserc.dialects.fusion_dispatch import CombineOp, DispatchOp
from fuserc.dialects.fusion_nn import AttentionOp
from fuserc.ir import ClassTest, walk
from fuserc.passes import launch_regions, local_layouts, lower_reshard
from fuserc.passes.lower_reshard import permute_op
from fuserc.passes.reshard_util import inverse
from fuserc.passes.reshard_util import Resharding, mesh_table
from fuserc.sharding import Mesh

Tag = tuple[int, ...] | None
"""The ranks that run an op of the flat program; None: every rank (the op is
a per-rank region or the return)."""

BACKENDS = hir.BACKENDS

_RINGED, _EXCHANGED = ClassTest(AttentionOp), ClassTest((DispatchOp, CombineOp))
"""The ops that `ring_attention` and `expert_parallel` may lower, which are
imported for them only (most programs have neither)."""


# --------------------------------------------------------------------------
# The flat program being built
# --------------------------------------------------------------------------


class Emitter:
    """Builds a host program as a flat list of ops, each tagged with the ranks
    that run it; records allocations and views for the deallocation analysis.
    `wrap_rank_regions` later turns runs of equal tags into hir.if_rank."""

    def __init__(self, func_name: str, backend: str):
        self.func_name = func_name
        self.backend = backend
        self.items: list[tuple[Operation, Tag]] = []
        self.owner: dict[SSAValue, tuple[int, ...]] = {}
        """Buffer from hir.alloc -> the ranks where its dealloc runs."""
        self.source: dict[SSAValue, SSAValue] = {}
        """View or restriction -> the value it aliases."""
        self.views: set[SSAValue] = set()
        self.location: LocationAttr = UnknownLoc()
        self.marks: dict[str, Attribute] = {}
        """Attributes put on the compute and communication ops of the fusion
        op being lowered (hir.stream, hir.reshard)."""

    # ---- basics -----------------------------------------------------------
    def emit(self, op: Operation, tag: Tag, marked: bool = False) -> Operation:
        for o in walk(op):
            o.location = self.location
        if marked:
            for k, v in self.marks.items():
                op.attributes[k] = v
        self.items.append((op, tag))
        return op

    def site(self, index: int | str, result: int | str = 0, suffix: str = "") -> str:
        """`F/I/R(/suffix)`: the allocation site of result R of op I."""
        return f"{self.func_name}/{index}/{result}" + (f"/{suffix}" if suffix else "")

    def alloc(
        self, site: str, shape: Sequence[int], elem: Attribute, tag: tuple[int, ...],
        owner: tuple[int, ...] | None = None,
    ) -> SSAValue:
        """A buffer made on `tag`'s ranks and given back on `owner`'s (default:
        the same ranks) after its last use."""
        op = self.emit(hir.AllocOp(site, tensor_type(elem, tuple(shape))), tag)
        value = op.results[0]
        self.owner[value] = tag if owner is None else owner
        return value

    def constant(self, n: int, tag: Tag) -> SSAValue:
        value = self.emit(hir.ConstantOp(n), tag).results[0]
        value.name_hint = f"c{n}"
        return value

    def team_index(self, team: Sequence[int], tag: Tag) -> SSAValue:
        value = self.emit(hir.TeamIndexOp(team), tag).results[0]
        value.name_hint = "pos"
        return value

    def dealloc(self, value: SSAValue, tag: Tag) -> None:
        self.emit(hir.DeallocOp(value), tag)

    # ---- views --------------------------------------------------------------
    def _view_of(self, op: Operation, src: SSAValue, tag: Tag) -> SSAValue:
        self.emit(op, tag)
        value = op.results[0]
        self.source[value] = src
        self.views.add(value)
        return value

    def view(self, src: SSAValue, shape: Sequence[int], tag: Tag) -> SSAValue:
        if tuple(shape_of(src)) == tuple(shape):
            return src
        return self._view_of(hir.ViewOp(src, list(shape)), src, tag)

    def transpose(self, src: SSAValue, tag: Tag) -> SSAValue:
        return self._view_of(hir.TransposeOp(src), src, tag)

    def chunk(self, src: SSAValue, index: SSAValue, dim: int, chunks: int, tag: Tag) -> SSAValue:
        if chunks == 1:
            return src
        return self._view_of(hir.ChunkOp(src, index, dim, chunks), src, tag)

    def restrict(self, value: SSAValue, ranks: Sequence[int]) -> SSAValue:
        """`value` kept only on `ranks` (absent elsewhere): a result-carrying
        hir.if_rank, so that a buffer made on a whole team becomes the value
        of the receivers only."""
        op = hir.IfRankOp(ranks, [value.type])
        op.body.block.add_op(hir.YieldOp(value))
        self.emit(op, None)
        out = op.results[0]
        self.source[out] = value
        return out

    # ---- compute and communication -------------------------------------------
    def copy(self, src: SSAValue, dst: SSAValue, tag: Tag) -> None:
        self.emit(hir.CopyOp(src, dst), tag, marked=True)

    def communicate(self, op: Operation, tag: Tag) -> SSAValue:
        """A communication, then its wait (the unpipelined form); returns the token."""
        self.emit(op, tag, marked=True)
        token = op.results[0]
        token.name_hint = "tok"
        self.emit(hir.WaitOp(token), tag)
        return token

    def launch(
        self,
        ins: Sequence[SSAValue],
        outs: Sequence[SSAValue],
        body: Callable[[Sequence[BlockArgument]], tuple[list[Operation], list[SSAValue]]],
        tag: Tag,
    ) -> None:
        """hir.launch of the fusion ops `body` builds on the region arguments."""
        op = hir.LaunchOp(ins, outs)
        block = op.body.block
        ops, results = body(block.args)
        block.add_ops(ops)
        block.add_op(hir.YieldOp(*results))
        self.emit(op, tag, marked=True)

    def root(self, value: SSAValue) -> SSAValue:
        """The buffer (or argument) a value aliases."""
        while value in self.source:
            value = self.source[value]
        return value


def local_type(t: TensorType, mesh: Mesh) -> TensorType:
    """The type of the block a device of the tensor's mesh holds."""
    s = sharding_of(t)
    assert s is not None
    return tensor_type(t.element_type, tuple(s.local_shape(t.get_shape(), mesh)))


def order_of(value: SSAValue) -> tuple[int, ...]:
    """The memory order of the value's buffer (its producer's alloc_order;
    row-major for arguments)."""
    return alloc_order_of(value) if isinstance(value.type, TensorType) else ()


def is_identity(order: Sequence[int]) -> bool:
    return tuple(order) == tuple(range(len(order)))


def moves_nothing(perm: Sequence[int], shape: Sequence[int]) -> bool:
    """Permuting a row-major buffer of `shape` by `perm` keeps every element
    in place: the dimensions of extent > 1 keep their order."""
    big = [d for d in perm if shape[d] != 1]
    return big == sorted(big)


def stream_marks(value: SSAValue) -> dict[str, Attribute]:
    """`hir.stream = [d, S]` when the value's sharding has a Stream(S) split;
    d is the dimension of its buffer (its alloc_order applied)."""
    s = sharding_of(value)
    sd = s.stream_dim() if s is not None else None
    if sd is None:
        return {}
    dim = order_of(value).index(sd[0])
    return {hir.STREAM_ATTR: ArrayAttr([IntegerAttr(dim, i64), IntegerAttr(sd[1], i64)])}


# --------------------------------------------------------------------------
# Rank regions and deallocation (on the flat program)
# --------------------------------------------------------------------------


def _top_index(items: Sequence[tuple[Operation, Tag]]) -> dict[Operation, int]:
    """Every op (nested ones too) -> the index of the flat item holding it."""
    top: dict[Operation, int] = {}
    for i, (op, _) in enumerate(items):
        for o in walk(op):
            top[o] = i
    return top


def _buffers_used(op: Operation) -> Sequence[SSAValue]:
    """The values `op` reads or writes; a wait uses the buffers of the
    communication it completes (they stay in use until then)."""
    if type(op) is hir.WaitOp and isinstance(op.token.owner, Operation):
        return op.token.owner.operands
    return op.operands


def place_deallocs(em: Emitter, keep: set[SSAValue]) -> None:
    """A hir.dealloc of each buffer after the last op using it or a view of it,
    on the buffer's owner ranks; buffers in `keep` (returned) are kept."""
    top = _top_index(em.items)
    last: dict[SSAValue, int] = {}
    for value in em.owner:
        assert isinstance(value.owner, Operation)
        last[value] = top[value.owner]
    for i, (op, _) in enumerate(em.items):
        for o in walk(op):
            for v in _buffers_used(o):
                r = em.root(v)
                if r in last:
                    last[r] = max(last[r], i)
    after: dict[int, list[SSAValue]] = {}
    for value, i in last.items():
        if value in keep:
            continue
        # Given back on other ranks than the last user's: after the run of
        # ops of those ranks (one region), not in its middle.
        tag = em.items[i][1]
        if tag is not None and em.owner[value] != tag:
            while i + 1 < len(em.items) and em.items[i + 1][1] == tag:
                i += 1
        after.setdefault(i, []).append(value)
    items = em.items
    em.items = []
    for i, item in enumerate(items):
        em.items.append(item)
        # Those of the same ranks first: they stay in the region just closed.
        for value in sorted(after.get(i, []), key=lambda v: em.owner[v] != item[1]):
            em.items.append((hir.DeallocOp(value), em.owner[value]))
            em.items[-1][0].location = item[0].location


def wrap_rank_regions(items: Sequence[tuple[Operation, Tag]]) -> list[Operation]:
    """Each maximal run of ops with the same ranks becomes one hir.if_rank;
    values used after the run leave it through hir.yield."""
    top = _top_index(items)
    out: list[Operation] = []
    i = 0
    while i < len(items):
        op, tag = items[i]
        if tag is None:
            out.append(op)
            i += 1
            continue
        j = i
        while j < len(items) and items[j][1] == tag:
            j += 1
        run = [o for o, _ in items[i:j]]

        def later(use, end=j) -> bool:
            return top.get(use.operation, -1) >= end

        escaping = [r for o in run for r in o.results if any(later(u) for u in r.uses)]
        region = hir.IfRankOp(tag, [v.type for v in escaping])
        region.location = run[0].location
        block = region.body.block
        if escaping:
            block.add_ops(run)
            block.add_op(hir.YieldOp(*escaping))
        else:
            terminator = block.last_op
            assert terminator is not None
            for o in run:
                block.insert_op_before(o, terminator)
        for v, new in zip(escaping, region.results):
            new.name_hint = v.name_hint
            v.replace_uses_with_if(new, later)
        out.append(region)
        i = j
    return out


# --------------------------------------------------------------------------
# One function
# --------------------------------------------------------------------------


def _check_annotated(func: FuncOp) -> None:
    """Every tensor must have a sharding (propagate-shardings decides them)."""
    for i, t in enumerate(func.function_type.inputs.data):
        if isinstance(t, TensorType) and sharding_of(t) is None:
            raise error_at(
                func, f"argument #{i} of @{func.sym_name.data} has no sharding: run propagate-shardings first"
            )
    for i, t in enumerate(func.function_type.outputs.data):
        if isinstance(t, TensorType) and sharding_of(t) is None:
            raise error_at(
                func, f"result #{i} of @{func.sym_name.data} has no sharding: run propagate-shardings first"
            )
    for op in walk(func):
        if op is func:
            continue
        for v in (*op.operands, *op.results):
            if isinstance(v.type, TensorType) and sharding_of(v) is None:
                raise error_at(
                    op, f"'{op.name}' has a tensor without a sharding: run propagate-shardings first"
                )


def _sharding_text(op: Operation) -> str:
    ins = ", ".join(str(sharding_of(v)) for v in op.operands)
    return f"operands {ins} and result {sharding_of(op.results[0])}"


class _Buffers(dict[SSAValue, SSAValue]):
    """Each fusion value's hir buffer (or view), indexed back by the
    buffer each lives in (`held_in`)."""

    def __init__(self, root: Callable[[SSAValue], SSAValue]):
        super().__init__()
        self._root = root
        self._by_root: dict[SSAValue, list[SSAValue]] = {}

    def __setitem__(self, value: SSAValue, buf: SSAValue) -> None:
        super().__setitem__(value, buf)
        self._by_root.setdefault(self._root(buf), []).append(value)

    def held_in(self, buf: SSAValue) -> list[SSAValue]:
        """The values ever given a view of `buf` (one given another buffer
        since stays listed: check its current one)."""
        return self._by_root.get(buf, [])


@dataclass
class _FunctionLowering:
    """The lowering state of one function."""

    func: FuncOp
    backend: str
    meshes: dict[str, Mesh]
    resharding: Resharding
    values: _Buffers = field(init=False)
    position: dict[Operation, int] = field(default_factory=dict)
    """The place of each op of the function in the order it is lowered."""
    local_types: dict[tuple[Attribute, str], TensorType] = field(default_factory=dict)
    """(global type, mesh) -> local type: programs repeat their types."""
    local_ops: set[tuple] = field(default_factory=set)
    """Signatures of local forms already verified."""
    exchanged: bool = False
    """Whether an expert-parallel exchange was lowered (its landings move after)."""

    def __post_init__(self) -> None:
        self.em = Emitter(self.func.sym_name.data, self.backend)
        self.values = _Buffers(self.em.root)

    # ---- helpers ------------------------------------------------------------
    def mesh(self, op: Operation, value: SSAValue | Attribute) -> Mesh:
        s = sharding_of(value)
        assert s is not None
        mesh = self.meshes.get(s.mesh) or lookup_mesh(op, s.mesh)
        assert mesh is not None, "the verifier checks that meshes exist"
        return mesh

    def devices(self, op: Operation, value: SSAValue) -> tuple[int, ...]:
        return self.mesh(op, value).devices

    def op_devices(self, op: Operation) -> tuple[int, ...]:
        """The devices that compute `op` (its first result's mesh)."""
        return self.devices(op, op.results[0]) if op.results else ()

    def local(self, op: Operation, value: SSAValue) -> TensorType:
        t = value.type
        assert isinstance(t, TensorType)
        mesh = self.mesh(op, value)
        key = (t, mesh.name)
        if key not in self.local_types:
            self.local_types[key] = local_type(t, mesh)
        return self.local_types[key]

    def buffer_type(self, op: Operation, value: SSAValue) -> TensorType:
        """The local block in the buffer's memory order."""
        lt = self.local(op, value)
        shape = lt.get_shape()
        return tensor_type(lt.element_type, tuple(shape[d] for d in order_of(value)))

    def result_buffer(self, result: SSAValue, index: int, tag: tuple[int, ...]) -> SSAValue:
        """The buffer of `result` (of the op at `index`)."""
        assert isinstance(result, OpResult)
        bt = self.buffer_type(result.op, result)
        return self.em.alloc(self.em.site(index, result.index), bt.get_shape(), bt.element_type, tag)

    def begin(self, op: Operation) -> None:
        self.em.location = op.location
        self.em.marks = stream_marks(op.results[0]) if op.results else {}

    def relayout(self, src: SSAValue, perm: Sequence[int], site: str, tag: tuple[int, ...]) -> SSAValue:
        """A copy of buffer `src` with its dimensions permuted by `perm`."""
        shape = shape_of(src)
        assert isinstance(src.type, TensorType)
        out = self.em.alloc(site, [shape[d] for d in perm], src.type.element_type, tag)

        def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
            p = permute_op(args[0], perm)
            return [p], [p.results[0]]

        self.em.launch([src], [out], body, tag)
        return out

    # ---- the walk -------------------------------------------------------------
    def run(self) -> FuncOp:
        func = self.func
        _check_annotated(func)
        local_layouts.choose(func)
        in_types = []
        for t in func.function_type.inputs.data:
            in_types.append(local_type(t, self.mesh(func, t)) if isinstance(t, TensorType) else t)
        block = Block(arg_types=in_types)
        for old, new in zip(func.body.block.args, block.args):
            new.name_hint = old.name_hint
            self.values[old] = new
        ops = self.hoist_epilogues(launch_regions.hoist(list(func.body.block.ops), self.resharding, self.op_devices))
        self.position = {op: k for k, op in enumerate(ops)}
        returned: list[SSAValue] = []
        i = 0
        while i < len(ops):
            op = ops[i]
            self.begin(op)
            if isinstance(op, ReturnOp):
                returned = self.lower_return(op)
                i += 1
            elif isinstance(op, FusionOp):
                start, i = i, self.lower_fusion(ops, i)
                for old in (r for o in ops[start:i] for r in o.results):
                    new = self.values.get(old)
                    if new is not None and new.name_hint is None:
                        new.name_hint = old.name_hint
            else:
                raise error_at(op, f"'{op.name}' cannot be lowered to host IR (only fusion ops and func.return)")
        keep = {self.em.root(v) for v in returned}
        if self.exchanged:
            from fuserc.passes import expert_parallel

            expert_parallel.defer_landings(self.em)
        place_deallocs(self.em, keep)
        body = wrap_rank_regions(self.em.items)
        block.add_ops(body)
        return self._host_func(block, [v.type for v in returned])

    def _host_func(self, block: Block, out_types: list[Attribute]) -> FuncOp:
        func = self.func
        old_args = func.arg_attrs.data if func.arg_attrs is not None else None
        old_res = func.res_attrs.data if func.res_attrs is not None else None
        ins, outs = func.function_type.inputs.data, func.function_type.outputs.data

        def attrs(old, types) -> ArrayAttr[DictionaryAttr]:
            out = []
            for k, t in enumerate(types):
                base = dict(old[k].data) if old is not None else {}
                if isinstance(t, TensorType):
                    base[hir.GLOBAL_ATTR] = t
                out.append(DictionaryAttr(base))
            return ArrayAttr(out)

        new = FuncOp(
            func.sym_name.data,
            ([a.type for a in block.args], out_types),
            Region(block),
            func.sym_visibility,
            arg_attrs=attrs(old_args, ins),
            res_attrs=attrs(old_res, outs),
        )
        for k, v in func.attributes.items():
            new.attributes.setdefault(k, v)
        hir.mark_host_program(new)
        new.location = func.location
        return new

    def whole_view(self, value: SSAValue) -> bool:
        """`value` is its buffer reshaped (`hir.view`s only): all of it."""
        while value in self.em.source:
            if value in self.em.views and not isinstance(value.owner, hir.ViewOp):
                return False
            value = self.em.source[value]
        return True

    def lower_return(self, op: ReturnOp) -> list[SSAValue]:
        """Results are buffers of their own: a part of a buffer (a chunk, a
        transposed view) or a value returned twice is copied into a fresh
        buffer first; a reshaped buffer is returned as it is, and so is an
        argument (the runtime hands the caller's own input back: a forward
        that saves its weights for the backward copies none of them)."""
        out: list[SSAValue] = []
        seen: set[SSAValue] = set()
        for k, v in enumerate(op.operands):
            new = self.values[v]
            if isinstance(v.type, TensorType):
                root = self.em.root(new)
                tag = self.devices(op, v)
                site = self.em.site("return", k)
                order = order_of(v)
                if not is_identity(order):
                    new = self.relayout(new, inverse(order), site, tag)
                elif (isinstance(root, BlockArgument) and new is not root) or not self.whole_view(new) or root in seen:
                    lt = self.local(op, v)
                    buf = self.em.alloc(site, lt.get_shape(), lt.element_type, tag)
                    self.em.copy(new, buf, tag)
                    new = buf
                seen.add(self.em.root(new))
            out.append(new)
        self.em.emit(ReturnOp(*out), None)
        return out

    def lower_fusion(self, ops: list[Operation], i: int) -> int:
        """Lower the fusion op at `i` (with the elementwise ops chained after
        it); returns the index of the next op to lower."""
        op = ops[i]
        assert isinstance(op, FusionOp)
        if isinstance(op, SetOp):
            src, order = self.values[op.operands[0]], order_of(op.results[0])
            before = order_of(op.operands[0])
            if launch_regions.moves_nothing(op):  # the same blocks in the same order: the same buffer
                self.values[op.results[0]] = src
                return i + 1
            if before != order:
                perm = [inverse(before)[d] for d in order]
                src = self.relayout(src, perm, self.em.site(i, 0, "relayout"), self.devices(op, op.operands[0]))
            self.values[op.results[0]] = lower_reshard.lower_set(self.em, op, src, i, order)
            return i + 1
        if self.resharding(op):
            raise error_at(
                op,
                f"'{op.name}' is a resharding op ({_sharding_text(op)}): "
                "run make-resharding-contiguous first",
            )
        tag = self.devices(op, op.results[0])
        row_major = all(is_identity(order_of(v)) for v in (*op.operands, op.results[0]))
        if isinstance(op, PermuteOp):
            return self.lower_permute(op, i, tag)
        if isinstance(op, ReshapeOp):
            return self.lower_reshape(op, i, tag)
        if isinstance(op, (MatmulOp, LinearOp)) and (row_major or local_layouts.transposable(op)):
            return self.lower_gemm(op, ops, i, tag)
        if _RINGED(op):
            from fuserc.passes import ring_attention

            if (ring := ring_attention.ring_of(self, op)) is not None:
                return ring_attention.lower(self, op, i, ring)  # type: ignore[arg-type]
        if _EXCHANGED(op):
            from fuserc.passes import expert_parallel

            if (ex := expert_parallel.exchange_of(self, op)) is not None:
                self.exchanged = True
                return expert_parallel.lower(self, op, i, ex)  # type: ignore[arg-type]
        chain = launch_regions.local_region(ops, i, self.resharding, self.op_devices)
        self.lower_launch(chain, i)
        return i + len(chain)

    def lower_gemm(self, op: MatmulOp | LinearOp, ops: list[Operation], i: int, tag: tuple[int, ...]) -> int:
        """A GEMM, with the op after it in its epilogue where one fits
        (`epilogue`): the residual add `gemm + r` as the GEMM's accumulator
        (written over `r`'s buffer when nothing reads `r` after: a GEMM that
        accumulates into another buffer first copies the accumulator there,
        0.03 ms for 64 MiB on an H200), a tanh GELU after a linear with a
        bias as cuBLASLt's activation."""
        nxt, kind = self.epilogue(op, ops, i)
        last = nxt if nxt is not None else op
        acc = None
        if kind == "acc":
            assert nxt is not None
            other = next(v for v in nxt.operands if v is not op.results[0])
            acc = self.values[other]
        if acc is not None and self.last_read(other, acc, i + 2):
            out = acc  # the sum is written over its last addend (no copy of it into a new buffer first)
        else:
            out = self.result_buffer(last.results[0], i + (nxt is not None), tag)
        activation = "gelu_tanh" if kind == "gelu_tanh" else None
        if isinstance(op, MatmulOp):
            a, b = (self.gemm_operand(v, tag) for v in op.operands)
            if not is_identity(order_of(op.results[0])):  # the buffer holds the product transposed: b^T a^T
                a, b = self.gemm_operand(op.rhs, tag, True), self.gemm_operand(op.lhs, tag, True)
            self.em.emit(hir.MatmulOp(a, b, out, acc), tag, marked=True)
        else:
            x, w = self.values[op.input], self.values[op.weight]
            bias = self.values[op.bias] if op.bias is not None else None
            self.em.emit(hir.LinearOp(x, w, out, bias, acc, activation), tag, marked=True)
        self.values[last.results[0]] = out
        return i + 1 + (nxt is not None)

    def last_read(self, value: SSAValue, buf: SSAValue, start: int) -> bool:
        """Whether `buf`, the buffer of `value` (which has one use, here), is
        an allocation that no value read by the ops from position `start` on
        lives in (a permute or set that moves nothing makes a value of its
        operand's buffer). The values in `buf` come from `values`' index by
        buffer, so the question costs their uses, not the function."""
        if len(list(value.uses)) != 1 or not isinstance(buf.owner, hir.AllocOp):
            return False
        return not any(
            v is not value and self.em.root(self.values[v]) is buf and any(self.position.get(u.operation, -1) >= start for u in v.uses)
            for v in self.values.held_in(buf)
        )

    def gemm_operand(self, v: SSAValue, tag: tuple[int, ...], transposed: bool = False) -> SSAValue:
        """The buffer of 2-D `v` as a GEMM reads it (`transposed`: v^T): the
        buffer itself where its memory order gives that, else its
        `hir.transpose` view (cuBLAS's transpose flag, no copy)."""
        buf = self.values[v]
        return buf if is_identity(order_of(v)) != transposed else self.em.transpose(buf, tag)

    def epilogue(self, op: MatmulOp | LinearOp, ops: list[Operation], i: int) -> tuple[Operation | None, str | None]:
        """(the next op, "acc" | "gelu_tanh") when it can run in the GEMM's
        epilogue (`epilogue_kind`)."""
        if i + 1 >= len(ops):
            return None, None
        nxt = ops[i + 1]
        kind = self.epilogue_kind(op, nxt)
        return (nxt, kind) if kind is not None else (None, None)

    def epilogue_kind(self, op: Operation, nxt: Operation) -> str | None:
        """"acc" | "gelu_tanh" when `nxt`, right after GEMM `op`, can run in
        its epilogue: it is the only use of the GEMM's result, neither is
        resharded or Stream-split, and the GEMM's operands come from no
        resharding (a GEMM beside a communication stays a plain GEMM, which
        stream-pipeline can cut into chunks). A bias and an accumulator do
        not share cuBLAS's epilogue, so a linear with a bias takes no add."""
        if not isinstance(op, (MatmulOp, LinearOp)):
            return None
        r = op.results[0]
        if not isinstance(nxt, FusionOp) or r.get_user_of_unique_use() is not nxt or self.resharding(nxt) or stream_marks(r) or stream_marks(nxt.results[0]):
            return None
        if any(isinstance(v.owner, SetOp) for v in op.operands):
            return None
        if not all(is_identity(order_of(v)) for v in (*nxt.operands, nxt.results[0])):
            return None
        plain = not isinstance(op, LinearOp) or op.bias is None
        if nxt.name == "fusion.add" and plain and all(v.type == r.type for v in (*nxt.operands, nxt.results[0])):
            return "acc"
        if nxt.name == "fusion.gelu" and not plain and nxt.form == "tanh" and nxt.results[0].type == r.type:
            return "gelu_tanh"
        return None

    def hoist_epilogues(self, ops: list[Operation]) -> list[Operation]:
        """`ops` with each add that can be a GEMM's accumulator moved up to
        right after the GEMM, across the ops between (pure, and none makes
        its other operand): autodiff sums a value's gradient contributions
        after other work (the backward's three data-gradient GEMMs of Q, K
        and V, then the bias gradients, then their sum), where the adds
        would each read and write a whole activation (0.05 ms each at
        4096 x 8192 on an H200) instead of riding in the next GEMM."""
        key = {o: float(k) for k, o in enumerate(ops)}  # the place in the order; a moved add goes to its GEMM's + 0.5
        kept = [0]  # kept[k]: how many of ops[:k] an add may not move across
        for o in ops:
            kept.append(kept[-1] + (not isinstance(o, FusionOp) or bool(self.resharding(o))))
        for i, gemm in enumerate(ops):
            if not isinstance(gemm, (MatmulOp, LinearOp)):
                continue
            user = gemm.results[0].get_user_of_unique_use()
            if user is None or user.name != "fusion.add" or user not in key:
                continue
            j = int(key[user])  # an add moves once, up to its own GEMM: its place is still its first
            if j <= i + 1 or self.epilogue_kind(gemm, user) != "acc":
                continue
            if any(key.get(v.owner, -1.0) > i for v in user.operands if v is not gemm.results[0]):  # type: ignore[arg-type]
                continue  # its other operand is made after the GEMM
            if kept[j] - kept[i + 1]:
                continue
            key[user] = i + 0.5
        return sorted(ops, key=key.__getitem__)

    def lower_permute(self, op: PermuteOp, index: int, tag: tuple[int, ...]) -> int:
        """A permute is a relabelling of its operand's buffer when the
        result's alloc_order undoes it (no copy), a permuting copy otherwise."""
        x, r = op.operands[0], op.results[0]
        inv = inverse(order_of(x))
        dims, out_order = op.keyword("dims"), order_of(r)
        perm = [inv[dims[out_order[k]]] for k in range(len(out_order))]
        src = self.values[x]
        if is_identity(perm):
            self.values[r] = src
        elif moves_nothing(perm, shape_of(src)):
            self.values[r] = self.em.view(src, self.buffer_type(op, r).get_shape(), tag)
        else:
            self.values[r] = self.relayout(src, perm, self.em.site(index), tag)
        return index + 1

    def lower_reshape(self, op: ReshapeOp, index: int, tag: tuple[int, ...]) -> int:
        """A reshape of a buffer in row-major order (up to dimensions of
        extent 1) into one is a view; otherwise a launch copies."""
        x, r = op.operands[0], op.results[0]
        if all(
            moves_nothing(order_of(v), self.local(op, v).get_shape()) for v in (x, r)
        ):
            self.values[r] = self.em.view(self.values[x], self.buffer_type(op, r).get_shape(), tag)
            return index + 1
        self.lower_launch([op], index)
        return index + 1

    def lower_launch(self, chain: list[Operation], index: int) -> None:
        """One hir.launch computing `chain` on local blocks, yielding each
        value that later ops use (`region_outputs`)."""
        position = {r: index + k for k, o in enumerate(chain) for r in o.results}
        aliases = launch_regions.aliases(chain)
        for o in aliases:
            self.values[o.results[0]] = self.values[o.operands[0]]
        first = chain[0]
        chain = [o for o in chain if o not in aliases]
        last = chain[-1]
        self.begin(last)
        self.em.location = first.location
        tag = self.devices(last, last.results[0])
        inside = {r for o in chain for r in o.results}
        ins: list[SSAValue] = []
        for o in chain:
            for v in o.operands:
                if v not in inside and v not in ins:
                    ins.append(v)
        outputs = launch_regions.region_outputs(chain)
        results = list(dict.fromkeys(launch_regions.same_buffer(r, chain) for r in outputs))
        outs = [self.result_buffer(r, position[r], tag) for r in results]

        def body(args: Sequence[BlockArgument]) -> tuple[list[Operation], list[SSAValue]]:
            env: dict[SSAValue, SSAValue] = {}
            built: list[Operation] = []
            for old, arg in zip(ins, args):
                arg.name_hint = old.name_hint
                env[old] = arg
                if not is_identity(order_of(old)):  # buffer order -> logical
                    built.append(permute_op(arg, inverse(order_of(old))))
                    env[old] = built[-1].results[0]
            for o in chain:
                new = self.local_op(o, [env[v] for v in o.operands])
                built.append(new)
                for old_r, new_r in zip(o.results, new.results):
                    new_r.name_hint = old_r.name_hint
                    env[old_r] = new_r
            yielded = []
            for r in results:
                value = env[r]
                if not is_identity(order_of(r)):  # logical -> buffer order
                    built.append(permute_op(value, order_of(r)))
                    value = built[-1].results[0]
                yielded.append(value)
            return built, yielded

        self.em.launch([self.values[v] for v in ins], outs, body, tag)
        for r, out in zip(results, outs):
            self.values[r] = out
        for r in outputs:  # a set that moves nothing: its operand's buffer
            self.values[r] = self.values[launch_regions.same_buffer(r, chain)]

    def local_op(self, op: Operation, operands: list[SSAValue]) -> Operation:
        """`op` on local blocks: the same fusion op with local types (a slice
        keeps its bounds on whole dimensions and spans each split one)."""
        assert isinstance(op, FusionOp)
        props = dict(op.properties)
        if isinstance(op, SliceOp):
            src = op.operands[0]
            glob, loc = shape_of(src), shape_of(operands[0])
            starts, limits = op.keyword("starts"), op.keyword("limits")
            for d in range(len(glob)):
                if loc[d] != glob[d]:
                    limits[d] = loc[d]
            props["starts"] = hir.int_array(starts)
            props["limits"] = hir.int_array(limits)
        attrs = {k: v for k, v in op.attributes.items() if k != ALLOC_ORDER}
        attrs.update(op.lowered_attributes())
        if op.INDEXED:  # where its local blocks lie: the global types
            attrs[GLOBAL_ATTR] = ArrayAttr([v.type for v in (*op.operands, op.results[0])])
        new = type(op).create(
            operands=operands,
            result_types=[self.local(op, r) for r in op.results],
            properties=props,
            attributes=attrs,
        )
        new.location = op.location
        key = (self.resharding.signature(new), self.resharding.signature(op))
        if key not in self.local_ops:  # ops of one signature verify alike
            try:
                new.verify_()
            except VerifyException as e:
                raise error_at(
                    op, f"'{op.name}' cannot be computed on local blocks ({_sharding_text(op)}): {e}"
                ) from None
            self.local_ops.add(key)
        return new


# --------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class LowerToHostIR(ModulePass):
    """Turns every fusion function into a host program (docs/passes.md,
    pass 3). Option `backend` (nccl, cuda_ipc, mpi) is the backend named on
    every communication."""

    name = "lower-to-host-ir"

    backend: str = "nccl"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got '{self.backend}'")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewriter = Rewriter()
        meshes, resharding = mesh_table(op), Resharding()
        for func in [f for f in op.body.block.ops if isinstance(f, FuncOp)]:
            if func.is_declaration or hir.is_host_program(func):
                continue
            hir.check_fusion_function(func)
            new = _FunctionLowering(func, self.backend, meshes, resharding).run()
            rewriter.replace_op(func, new, new_results=[])

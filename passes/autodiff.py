"""autodiff: the forward and backward functions of a fusion function.

From `@main` (option `entry`) the pass derives, beside it:
- `@main_fwd`: main's arguments; returns main's results, then the tensors
  the backward needs (`save = activations`: the values the derivative rules
  read; `save = inputs`: exactly main's arguments, in order, and the
  backward recomputes the rest);
- `@main_bwd`: the saved tensors, then one cotangent per result of main;
  returns the gradient of every floating-point argument, in argument order.

Differentiation is at global shapes, before partitioning: every op's rule
is its own `vjp` (the op classes in dialects/fusion_*.py); the ops it builds
have no sharding and are propagated later like any program. The shardings
main's values get from propagation are kept on the saved tensors (so the
two functions agree on them; a partial one is saved reduced), cotangents
are sharded like main's results (whole where a result is a partial sum),
the ops of each op's derivative are located at the op, and each gradient
is set to its argument's sharding: a gradient that comes out partial (a
replicated weight used by sharded rows) is reduced there. Expert-parallel
layers are cut into token chunks first (passes/expert_chunks.py, option
`token_chunks`), so that the backward's all-to-alls are per chunk too.
`@main` is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fuserc.diagnostics import Diagnostic, error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import (
    FusionOp, LinearOp, MatmulOp, MeshOp, PermuteOp, ReshapeOp, SetOp, is_float, shape_of, sharding_of, with_sharding,
)
from fuserc.dialects.fusion_builder import FusionBuilder
from fuserc.dialects.fusion_grad import zeros
from fuserc.passes.expert_chunks import check_chunks, chunk_function, hoist, note_chunks
from fuserc.passes.reshard_util import inverse
from fuserc.sharding import Mesh, Sharding

SAVES = ("activations", "inputs")


def _is_float(v: SSAValue) -> bool:
    return isinstance(v.type, TensorType) and is_float(v.type.element_type)


@dataclass(frozen=True)
class Autodiff(ModulePass):
    """Derives `@<entry>_fwd` and `@<entry>_bwd` (module docstring)."""

    name = "autodiff"
    entry: str = "main"
    save: str = "activations"
    gathered_mib: int = -1
    """With save = activations: MiB per device the saved gathered copies of
    GEMM inputs may take (-1: no limit, as PyTorch's autograd saves the
    gathered input of a sequence-parallel GEMM); past it, the backward
    gathers the rest again."""
    budget: int = -1
    """With save = activations: MiB per device the saved tensors may take
    (-1: no limit); past it, the backward recomputes what does not fit
    (passes/recompute.py)."""
    token_chunks: int | None = None
    """The token chunks of each expert-parallel layer (chunk-experts, run on
    the propagated function before the derivation, so that the backward is
    chunked too); None: the cost model's choice."""

    def __post_init__(self) -> None:
        if self.save not in SAVES:
            raise ValueError(f"save must be one of {', '.join(SAVES)}, got '{self.save}'")
        if self.gathered_mib < -1:
            raise ValueError(f"gathered-mib must be -1 (no limit) or a size in MiB, got {self.gathered_mib}")
        if self.budget < -1:
            raise ValueError(f"budget must be -1 (no limit) or a size in MiB, got {self.budget}")
        check_chunks(self.token_chunks)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = {f.sym_name.data: f for f in op.ops if isinstance(f, FuncOp)}
        main = funcs.get(self.entry)
        if main is None:
            have = ", ".join(f"@{n}" for n in funcs) or "none"
            raise Diagnostic(f"autodiff: no function @{self.entry} to differentiate (entry = {self.entry}; functions: {have})")
        if main.is_declaration:
            raise error_at(main, f"autodiff: @{self.entry} is a declaration (no body): nothing to differentiate")
        if "hir.host" in main.attributes:
            raise error_at(main, f"autodiff: @{self.entry} is a host program; autodiff differentiates fusion functions")
        hir.check_fusion_function(main)
        for name in (f"{self.entry}_fwd", f"{self.entry}_bwd"):
            if name in funcs:
                raise error_at(funcs[name], f"autodiff: @{name} exists already")
        src = _propagated(op, main)
        meshes = {m.sym_name.data: m.model for m in op.ops if isinstance(m, MeshOp)}
        chunked = chunk_function(src, meshes, self.token_chunks)
        note_chunks(op, self.token_chunks)
        _for_derivative(src)
        if self.save == "activations":
            _gather_explicitly(op, src, self.gathered_mib)
        fwd, bwd = _Derivation(src, self.entry, self.save, meshes.get).run()
        if chunked:
            hoist(bwd.body.block)
        if self.save == "activations" and self.budget >= 0:
            from fuserc.passes.recompute import fit

            fit(fwd, bwd, len(main.get_return_op().operands), self.budget * 2**20, meshes)  # type: ignore[union-attr]
        for f in (fwd, bwd):
            _unread_results_dropped(f.body.block)
        Rewriter.insert_op(fwd, _after(main))
        Rewriter.insert_op(bwd, _after(fwd))


def _whole(t: Attribute) -> Attribute:
    """`t` with its partial sum reduced, its splits kept: the type of a
    cotangent of a partial result (the transpose of summing the devices'
    parts hands each device the whole cotangent) and of a partial
    activation saved for the backward (a function input is never partial)."""
    s = sharding_of(t)
    if s is None or not s.partial or not isinstance(t, TensorType):
        return t
    return with_sharding(t, s.with_partial(None))


def _after(op: Operation) -> InsertPoint:
    return InsertPoint.after(op)


def _for_derivative(func: FuncOp) -> None:
    """Each op in the form its derivative rule reads (`for_derivative`: an
    sdpa with its log-sum-exp as a second result)."""
    for o in list(func.body.block.ops):
        new = o.for_derivative() if isinstance(o, FusionOp) else None
        if new is not None:
            base = o.results[0].name_hint
            for k, r in enumerate(new.results):
                more = f"{base}_{new.RESULTS[k].rstrip('?')}" if base else None
                r.name_hint = o.results[k].name_hint if k < len(o.results) else more
            Rewriter.replace_op(o, new, new_results=list(new.results[: len(o.results)]))


def _propagated(module: ModuleOp, main: FuncOp) -> FuncOp:
    """A copy of `main` with every value's sharding decided (where the
    module has a mesh): the types the derived functions keep."""
    if not any(isinstance(o, MeshOp) for o in module.ops):
        return main.clone()
    from fuserc.passes.propagate_shardings import propagate_function

    scratch = ModuleOp([o.clone() for o in module.ops if isinstance(o, MeshOp)] + [main.clone()])
    func = next(o for o in scratch.ops if isinstance(o, FuncOp))
    propagate_function(func)
    func.detach()
    return func


def _gather_explicitly(module: ModuleOp, func: FuncOp, budget_mib: int) -> None:
    """Make the gathers of GEMM inputs (the AllGather of a sequence-parallel
    GEMM, as make-resharding-contiguous will split it) explicit `fusion.set`s
    of the propagated function, one per value and placement, so that a
    weight gradient reads the gathered copy the forward made (saved, like
    any value a rule reads) instead of gathering it again: no value is
    gathered twice across the forward and the backward. The copies are
    kept in program order while they fit `budget_mib` per device (-1: all);
    the backward gathers the others again (recomputation traded for memory).
    The set's own derivative is the transposed reshard (a ReduceScatter of
    the partial input gradient)."""
    from fuserc.passes.reshard_util import ALLGATHER, element_bytes, local_elements, plan_reshard
    from fuserc.passes.sharding_search import PlanCost

    mesh_ops = [o for o in module.ops if isinstance(o, MeshOp)]
    if not mesh_ops:
        return
    meshes = {m.sym_name.data: m.model for m in mesh_ops}
    known = {v: s for v in _tensor_values(func) if (s := sharding_of(v)) is not None}
    cost = PlanCost(meshes, mesh_ops)
    budget = None if budget_mib < 0 else budget_mib * 2**20
    used = 0
    made: dict[tuple[SSAValue, Sharding], SSAValue] = {}
    for op in [o for o in func.body.block.ops if isinstance(o, FusionOp) and o.WEIGHTS]:
        part = cost.op_part(op, known)
        if part is None:
            continue
        for k, placement, _ in part[1]:
            value, src = op.operands[k], known.get(op.operands[k])
            if k in op.WEIGHTS or src is None:
                continue
            plan = plan_reshard(src, placement, shape_of(value), meshes)
            if not plan or any(step.kind != ALLGATHER for step, _ in plan):
                continue
            if (value, placement) not in made:
                size = local_elements(placement, shape_of(value), meshes) * element_bytes(value.type)  # type: ignore[arg-type]
                if budget is not None and used + size > budget:
                    continue
                used += size
                gather = SetOp.create(operands=[value], result_types=[with_sharding(value.type, placement)])  # type: ignore[arg-type]
                gather.location = op.location
                Rewriter.insert_op(gather, InsertPoint.before(op))
                made[(value, placement)] = gather.results[0]
            op.operands[k] = made[(value, placement)]


def _tensor_values(func: FuncOp) -> list[SSAValue]:
    args = list(func.body.block.args)
    return [v for v in [*args, *(r for o in func.body.block.ops for r in o.results)] if isinstance(v.type, TensorType)]


class _Derivation:
    def __init__(self, src: FuncOp, entry: str, save: str, mesh_of: Callable[[str], Mesh | None]):
        self.src, self.entry, self.save, self.mesh_of = src, entry, save, mesh_of
        self.ret = src.body.block.last_op
        assert isinstance(self.ret, ReturnOp)

    def run(self) -> tuple[FuncOp, FuncOp]:
        src = self.src
        args = list(src.body.block.args)
        results = list(self.ret.operands)
        # The backward: main's body again, then the derivative rules, in reverse.
        block = Block(arg_types=[a.type for a in args] + [_whole(v.type) for v in results])
        primal, cts = list(block.args[: len(args)]), list(block.args[len(args) :])
        to_bwd: dict[SSAValue, SSAValue] = dict(zip(args, primal))
        forward = [o.clone(value_mapper=to_bwd) for o in src.body.block.ops if o is not self.ret]
        for o in forward:
            block.add_op(o)
        anchor = ReturnOp()
        anchor.location = self.ret.location
        block.add_op(anchor)
        b = FusionBuilder(before=anchor, mesh_of=self.mesh_of)  # the rules may ask how a value is split (`FusionBuilder.local`)
        adjoint: dict[SSAValue, SSAValue] = {}

        def accumulate(v: SSAValue, g: SSAValue) -> None:
            adjoint[v] = b.op("add", adjoint[v], g) if v in adjoint else g

        for v, ct in zip(results, cts):
            if _is_float(v):
                accumulate(to_bwd[v], ct)
        for o in reversed(forward):
            g = adjoint.get(o.results[0]) if o.results else None
            for k, r in enumerate(o.results[1:], 1):
                if r in adjoint:
                    raise error_at(o, f"autodiff: '{o.name}' has no derivative through its result #{k}")
            if g is None or not isinstance(o, FusionOp) or not _is_float(o.results[0]):
                continue
            anchor.location = o.location  # the ops of its derivative are located at the op
            for operand, grad in zip(o.operands, o.vjp(b, g)):
                if grad is not None and _is_float(operand):
                    accumulate(operand, grad)
        anchor.location = self.ret.location
        grads = [b.op("set", adjoint[p] if p in adjoint else zeros(b, p), placed_as=p) for p in primal if _is_float(p)]
        final = ReturnOp(*grads)
        Rewriter.replace_op(anchor, final)
        backward = set(b.created)
        _common_subexpressions(block, backward)
        backward = {o for o in backward if o.parent is block}
        saved = self._saved(block, primal, forward, backward)
        paths = _row_major_ends(saved, primal, forward) if self.save == "activations" else {}
        saved = list(dict.fromkeys(paths[v][0] if v in paths else v for v in saved))
        kept = set(saved)
        saved = [v for v in [*primal, *(r for o in forward for r in o.results)] if v in kept]
        _dead_code(block)
        bwd_args = [_whole(v.type) for v in saved] + [c.type for c in cts]
        if self.save == "activations":
            fresh = [block.insert_arg(_whole(v.type), len(block.args)) for v in saved]
            arg_of = dict(zip(saved, fresh))
            first = next(o for o in block.ops if o in backward or o is final)
            for v, (end, steps) in paths.items():  # the value again, as views of the saved end
                b2 = FusionBuilder(before=first)
                value = arg_of[end]
                for kind, arg in steps:
                    value = b2.op(kind, value, **arg)
                v.replace_uses_with_if(value, lambda use: use.operation in backward or use.operation is final)
            for v, new in zip(saved, fresh):
                v.replace_uses_with_if(new, lambda use: use.operation in backward or use.operation is final)
            _dead_code(block)
            _reorder_args(block, fresh + cts)  # the saved tensors first, then the cotangents
            for a in list(primal):
                block.erase_arg(a)
        bwd = FuncOp(f"{self.entry}_bwd", FunctionType.from_lists(bwd_args, [g.type for g in grads]), Region(block))
        fwd = self._forward(saved, to_bwd)
        return fwd, bwd

    def _saved(self, block: Block, primal: list[BlockArgument], forward: list[Operation], backward: set[Operation]) -> list[SSAValue]:
        """What the backward reads of the forward: main's arguments with
        save = inputs; otherwise every forward value a rule reads, in
        forward order (arguments first)."""
        if self.save == "inputs":
            return list(primal)
        used = {v for o in backward for v in o.operands}
        values = [*primal, *(r for o in forward for r in o.results)]
        return [v for v in values if v in used and (not isinstance(v, BlockArgument) or v in primal)]

    def _forward(self, saved: list[SSAValue], to_bwd: dict[SSAValue, SSAValue]) -> FuncOp:
        """main again, returning its results and then the saved tensors."""
        src = self.src
        to_fwd: dict[SSAValue, SSAValue] = {}
        block = Block(arg_types=[a.type for a in src.body.block.args])
        to_fwd.update(zip(src.body.block.args, block.args))
        for o in src.body.block.ops:
            if o is not self.ret:
                block.add_op(o.clone(value_mapper=to_fwd))
        from_bwd = {v: k for k, v in to_bwd.items()}
        outs = [to_fwd[v] for v in self.ret.operands] + [to_fwd[from_bwd[v]] for v in saved]
        ret = ReturnOp(*outs)
        ret.location = self.ret.location
        block.add_op(ret)
        b = FusionBuilder(before=ret)
        for i in range(len(self.ret.operands), len(outs)):
            if _whole(outs[i].type) != outs[i].type:  # a partial sum is saved reduced (_whole)
                outs[i] = ret.operands[i] = b.op("set", outs[i], placed_as=outs[i])
        return FuncOp(f"{self.entry}_fwd", FunctionType.from_lists([a.type for a in block.args], [v.type for v in outs]), Region(block))


def _row_major_ends(saved: list[SSAValue], primal: list[BlockArgument], forward: list[Operation]) -> dict[SSAValue, tuple[SSAValue, list[tuple[str, dict]]]]:
    """For each saved value made from another by permutes and reshapes (the
    heads of a projection, [B, H, S, D], and the projection [B*S, H*D]):
    the value of its chain that a GEMM reads or makes, or an argument,
    which lies row-major in memory, and the permutes and reshapes that
    make the saved value from it again. Saving that end instead costs the
    backward views, not copies: a permuted value returned by the forward
    would be laid out row-major by a copy, and read back by a permuting
    one."""
    links: dict[SSAValue, list[tuple[SSAValue, str, dict]]] = {}
    anchors: set[SSAValue] = set(primal)
    for o in forward:
        if isinstance(o, (MatmulOp, LinearOp)):
            anchors.update(o.operands)
            anchors.update(o.results)
        if isinstance(o, (PermuteOp, ReshapeOp)):
            x, r = o.operands[0], o.results[0]
            if isinstance(o, PermuteOp):
                dims = o.keyword("dims")
                there, back = ("permute", {"dims": dims}), ("permute", {"dims": inverse(dims)})
            else:
                there, back = ("reshape", {"shape": list(shape_of(r))}), ("reshape", {"shape": list(shape_of(x))})
            links.setdefault(x, []).append((r, *there))
            links.setdefault(r, []).append((x, *back))
    kept = set(saved)
    out: dict[SSAValue, tuple[SSAValue, list[tuple[str, dict]]]] = {}
    for v in saved:
        if v in anchors or v not in links:
            continue
        # Breadth first from v; the path found leads from v to the end, so it is walked back.
        seen: dict[SSAValue, tuple[SSAValue, str, dict] | None] = {v: None}
        frontier, ends = [v], []
        while frontier:
            nxt = []
            for u in frontier:
                for w, kind, arg in links.get(u, []):
                    if w not in seen:
                        seen[w] = (u, kind, arg)
                        nxt.append(w)
            ends += [w for w in nxt if w in anchors]
            frontier = nxt
        if not ends:
            continue
        end = next((w for w in ends if w in kept), ends[0])
        steps: list[tuple[str, dict]] = []
        w = end
        while seen[w] is not None:  # from the end back to v: each link inverted
            u, _, _ = seen[w]  # type: ignore[misc]
            steps.append(next((kind, arg) for x, kind, arg in links[w] if x is u))
            w = u
        out[v] = (end, steps)
    return out


def _common_subexpressions(block: Block, among: set[Operation]) -> None:
    """One op for equal ops of the rules (same kind, operands, properties,
    attributes and result types; fusion ops are pure): the rules of two
    GEMMs reading one input each transpose it, and one transposed copy,
    gathered once, serves both weight gradients. Ops without operands (a
    constant, an iota) are kept apart: each takes its mesh from its users,
    and two of them may serve users on different meshes."""
    seen: dict[tuple, Operation] = {}
    for o in list(block.ops):
        if o not in among or o.regions or not o.results or not o.operands:
            continue
        key = (
            o.name,
            tuple(o.operands),
            tuple(o.properties.items()),
            tuple(o.attributes.items()),
            tuple(r.type for r in o.results),
        )
        first = seen.setdefault(key, o)
        if first is not o:
            for new, old in zip(first.results, o.results):
                old.replace_all_uses_with(new)
            Rewriter.erase_op(o)


def _dead_code(block: Block) -> None:
    """Erase ops whose results nothing reads (the forward values the
    backward does not need), last first."""
    changed = True
    while changed:
        changed = False
        for o in reversed(list(block.ops)):
            if o.results and not any(r.uses for r in o.results):
                Rewriter.erase_op(o)
                changed = True


def _unread_results_dropped(block: Block) -> None:
    """Each op without the optional results nothing reads (a norm's
    statistics or sdpa's log-sum-exp in a forward whose reader the budget
    moved to the backward): they are not made."""
    for o in list(block.ops):
        if not isinstance(o, FusionOp):
            continue
        keep = len(o.results)
        while keep > o.result_counts()[0] and not o.results[keep - 1].uses:
            keep -= 1
        if keep == len(o.results):
            continue
        new = o.with_results(keep)
        for r, was in zip(new.results, o.results):
            r.name_hint = was.name_hint
        Rewriter.replace_op(o, new, new_results=[*new.results, *(None for _ in o.results[keep:])])


def _reorder_args(block: Block, order: list[BlockArgument]) -> None:
    """Put `order` first among the block's arguments, in that order (by
    re-creating them: xDSL keeps arguments in insertion order)."""
    for i, a in enumerate(order):
        new = block.insert_arg(a.type, i)
        a.replace_all_uses_with(new)
        block.erase_arg(a)

"""propagate-shardings: give every tensor without a sharding one.

Per function, in this order (deterministic; values the user annotated are
never changed):

1. forward, in program order: an undecided op result gets
   `sharding_rules.forward` of its operands' shardings (propagated or
   annotated);
2. backward, in reverse program order: undecided operands of an op whose
   result is decided get `sharding_rules.required_operands` (the latest use
   decides), with `partial` only where a contraction can make it;
3. 1 and 2 again until nothing changes;
4. what is left (values connected to no sharded tensor) is replicated on the
   function's only mesh.

Only placement (`Sharding.placement`) propagates: Stream splits say how the
op producing a tensor is computed, so they stay where the user wrote them;
but one outside a device split (`Stream(2)*DIDx`) interleaves the device
blocks, is placement, and propagates like any split. A propagated value keeps the
mesh it comes from. A partial sum never propagates onto a function result:
there the reduction completes before the return.

Refused, as diagnostics naming the op and the shardings (no lowering can
satisfy them):
- a `partial` sharding on a function argument;
- a `partial` result of an op that neither contracts a dimension into it
  (fusion.matmul, fusion.linear without bias, fusion.sum, with a contracted
  extent the mesh axis divides) nor carries it from operands partial over the
  same type (a linear op: add, sub, neg, cast, set, permute, reshape,
  broadcast_in_dim, slice, sum; matmul or linear with one partial operand);
- an op other than fusion.set whose operands and result do not all lie on one
  mesh (only fusion.set moves a tensor between meshes);
- a value connected to no sharded tensor in a function that uses several
  meshes (nothing decides its mesh).
A module with no mesh at all (none declared, no sharding anywhere) runs on
one device: the pass declares the implicit one-device mesh
`fusion.mesh @implicit shape = [1]` (another name if that one is taken) and
every tensor is replicated on it. Host programs (`hir.host`) are left as
they are.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Container, Mapping
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, i64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from fuserc.diagnostics import Diagnostic, error_at
from fuserc.dialects.fusion_dispatch import CombineOp, DispatchOp
from fuserc.dialects import hir
from fuserc.dialects.fusion import FusionOp, MeshOp, SetOp, lookup_mesh, shape_of, sharding_of, with_sharding
from fuserc.ir import walk
from fuserc.passes import sharding_rules as rules
from fuserc.sharding import Mesh, Sharding, format_partial


@dataclass(frozen=True)
class PropagateShardings(ModulePass):
    """Gives every unannotated tensor a sharding (docs/passes.md)."""

    name = "propagate-shardings"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = [f for f in walk(op) if isinstance(f, FuncOp) and not f.is_declaration and "hir.host" not in f.attributes]
        for f in funcs:
            hir.check_fusion_function(f)
        if funcs and not any(isinstance(o, MeshOp) for o in walk(op)):
            _declare_implicit_mesh(op)
        for func in funcs:
            propagate_function(func)


def propagate_function(func: FuncOp, search: bool = True) -> None:
    """Give every tensor of `func` without a sharding one (the pass, on one
    function; make-resharding-contiguous reuses it, without the search, for
    the ops an expansion adds)."""
    scope = func.parent_block()
    mesh_ops = [m for m in scope.ops if isinstance(m, MeshOp)] if scope else []
    _FunctionPropagation(func, mesh_ops, search).run()


IMPLICIT_MESH = "implicit"
"""The name of the one-device mesh of a program that declares none."""


def _declare_implicit_mesh(module: ModuleOp) -> None:
    """`fusion.mesh @implicit shape = [1]` at the top of a module without
    meshes (a name no symbol of the module uses)."""
    taken = {
        o.properties["sym_name"].data
        for o in walk(module)
        if isinstance(o.properties.get("sym_name"), StringAttr)
    } | {o.sym_name.data for o in walk(module) if isinstance(o, FuncOp)}
    name, k = IMPLICIT_MESH, 1
    while name in taken:
        name, k = f"{IMPLICIT_MESH}_{k}", k + 1
    mesh = MeshOp.build(properties={"sym_name": StringAttr(name), "shape": ArrayAttr([IntegerAttr(1, i64)])})
    mesh.location = module.location
    block = module.body.block
    if block.first_op is None:
        block.add_op(mesh)
    else:
        block.insert_op_before(mesh, block.first_op)


class _FunctionPropagation:
    """The propagation state of one function: value -> decided sharding."""

    def __init__(self, func: FuncOp, mesh_ops: list[MeshOp], search: bool = True):
        self.func = func
        self.mesh_ops = mesh_ops
        self.module_meshes = [m.sym_name.data for m in mesh_ops]
        self.search = search
        self.ops: list[Operation] = [o for o in walk(func) if o is not func]
        args = [a for block in func.body.blocks for a in block.args]
        results = [r for o in self.ops for r in o.results]
        self.values: list[SSAValue] = [v for v in [*args, *results] if isinstance(v.type, TensorType)]
        self.fixed: dict[SSAValue, Sharding] = {}
        for v in self.values:
            s = sharding_of(v)
            if s is not None:
                self.fixed[v] = s
        self.known: dict[SSAValue, Sharding] = dict(self.fixed)
        self.returned = {v for o in self.ops if isinstance(o, ReturnOp) for v in o.operands}
        self.origin: dict[SSAValue, Operation] = {}
        """The op whose rule decided a propagated value (its producer going
        forward, the consumer that decided it going backward)."""

    def mesh_of(self, name: str) -> Mesh | None:
        return lookup_mesh(self.func, name)

    # ---- driver -------------------------------------------------------------
    def run(self) -> None:
        if not self.fixed and not self.module_meshes:
            return
        self.check_arguments()
        self.known = self.solve({})
        if self.search:
            self.known = self.searched(self.known)
        for op in self.ops:
            if isinstance(op, FusionOp):
                self.check_meshes(op)
                self.check_partial(op)
                self.check_routed(op)
        self.write_types()

    def solve(self, pins: Mapping[SSAValue, Sharding]) -> dict[SSAValue, Sharding]:
        """Forward and backward rules until nothing changes, from what the
        user wrote and `pins`, then what is left replicated."""
        self.known = {**self.fixed, **pins}
        self.origin = {}
        while self.forward(self.ops) | self.backward(self.ops):
            pass
        self.fill_unconnected(self.values)
        return self.known

    def searched(self, known: dict[SSAValue, Sharding]) -> dict[SSAValue, Sharding]:
        """`known` after the search for a plan that communicates fewer
        bytes (passes/sharding_search.py), one component of undecided values
        at a time: what propagates into one never depends on another."""
        from fuserc.passes import sharding_search as search

        meshes = {m.sym_name.data: m.model for m in self.mesh_ops}
        cost = search.PlanCost(meshes, self.mesh_ops)
        fusion_ops = [o for o in self.ops if isinstance(o, FusionOp)]
        made: dict[SSAValue, set[Sharding]] = {}  # reshards of values outside the components so far
        groups = search.components(fusion_ops, search.free_values(self.values, self.fixed))
        grouped = {o for ops, _ in groups for o in ops}
        cost.reshards([o for o in fusion_ops if o not in grouped], known, made)  # what the user fixed
        for ops, values in groups:
            search.improve(ops, set(values), self.returned, known, self.repropagate, cost, made)
            inside = set(values)
            mine: dict[SSAValue, set[Sharding]] = {}
            cost.reshards(ops, known, mine)
            for v, placements in mine.items():
                if v not in inside:
                    made.setdefault(v, set()).update(placements)
        self.known = known
        return known

    REDECIDE = 4
    """How often one trial may change a value before it is taken as a loop
    of rules (the trial fails)."""

    def repropagate(
        self, known: Mapping[SSAValue, Sharding], movable: Container[SSAValue], value: SSAValue, placement: Sharding
    ) -> dict[SSAValue, Sharding] | None:
        """The values whose shardings change when `value` is pinned to
        `placement` (it included), as propagation would decide them: each
        value the rules decided is decided again by the same op's rule (its
        producer's forward rule, or the backward rule of the consumer that
        decided it) from its neighbours' new shardings, as far as anything
        changes; only values in `movable` change (not what the user wrote,
        what the search pinned, nor a function's results). Its work
        is the ops around the changed values, not the function. None when
        the pin puts an op across meshes or the rules do not settle."""
        new: dict[SSAValue, Sharding] = {value: placement}
        times: dict[SSAValue, int] = {}
        work = [value]

        def get(v: SSAValue) -> Sharding:
            return new[v] if v in new else known[v]

        def decide(v: SSAValue, s: Sharding) -> bool:
            if v not in movable or v is value or get(v) == s:
                return True
            times[v] = times.get(v, 0) + 1
            if times[v] > self.REDECIDE:
                return False
            new[v] = s
            work.append(v)
            return True

        while work:
            u = work.pop()
            for use in u.uses:
                op = use.operation
                if not isinstance(op, FusionOp) or self.origin.get(op.results[0]) is not op:
                    continue
                s = rules.forward(op, [get(v) for v in op.operands], self.mesh_of)
                if s is None:
                    continue
                if s.partial and op.results[0] in self.returned:
                    s = s.with_partial(None)
                if not decide(op.results[0], s):
                    return None
                for r, more in zip(op.results[1:], op.more_shardings(s)):
                    if self.origin.get(r) is op and not decide(r, more):
                        return None
            op = u.owner
            if isinstance(op, FusionOp) and u is op.results[0]:
                mine = [v for v in op.operands if self.origin.get(v) is op]
                if mine:
                    for v, s in zip(op.operands, rules.required_operands(op, get(u), self.mesh_of)):
                        if v in mine and not decide(v, s if self._may_be_partial(v, s) else s.with_partial(None)):
                            return None
        saved = self.known
        self.known = ChainMap(new, known)  # type: ignore[assignment]
        try:
            for v in new:
                for op in {use.operation for use in v.uses} | ({v.owner} if isinstance(v.owner, FusionOp) else set()):
                    if isinstance(op, FusionOp):
                        self.check_meshes(op)
        except Diagnostic:
            return None
        finally:
            self.known = saved
        return new

    def forward(self, ops: list[Operation]) -> bool:
        changed = False
        for op in ops:
            if not isinstance(op, FusionOp) or op.results[0] in self.known:
                continue
            s = rules.forward(op, [self.known.get(v) for v in op.operands], self.mesh_of)
            if s is None:
                continue
            if s.partial and op.results[0] in self.returned:
                s = s.with_partial(None)
            self.known[op.results[0]] = s
            self.origin[op.results[0]] = op
            for r, more in zip(op.results[1:], op.more_shardings(s)):  # they lie as the first result
                if r not in self.known:
                    self.known[r] = more
                    self.origin[r] = op
            changed = True
        return changed

    def backward(self, ops: list[Operation]) -> bool:
        changed = False
        for op in reversed(ops):
            if not isinstance(op, FusionOp):
                continue
            res = self.known.get(op.results[0])
            if res is None or all(v in self.known for v in op.operands):
                continue
            for v, s in zip(op.operands, rules.required_operands(op, res, self.mesh_of)):
                if v not in self.known:
                    self.known[v] = s if self._may_be_partial(v, s) else s.with_partial(None)
                    self.origin[v] = op
                    changed = True
        return changed

    def _may_be_partial(self, v: SSAValue, s: Sharding) -> bool:
        """Backward gives a partial sum only to the result of a contraction
        that can make it, never to an input or to a function result."""
        owner = v.owner
        return (
            bool(s.partial)
            and isinstance(owner, FusionOp)
            and v not in self.returned
            and rules.can_make_partial(owner, s.partial, self.mesh_of(s.mesh))
        )

    def fill_unconnected(self, values: list[SSAValue]) -> None:
        rest = [v for v in values if v not in self.known]
        if not rest:
            return
        meshes = sorted({s.mesh for s in self.known.values()}) or self.module_meshes
        if len(meshes) != 1:
            raise self._at(
                rest[0],
                f"cannot decide the mesh of {self._describe(rest[0])}: it is connected to no "
                f"sharded tensor and the function uses meshes "
                f"{', '.join('@' + m for m in meshes)}; annotate it",
            )
        for v in rest:
            assert isinstance(v.type, TensorType)
            self.known[v] = Sharding.replicated(meshes[0], len(v.type.get_shape()))

    def write_types(self) -> None:
        for v in self.values:
            if v in self.fixed:
                continue
            assert isinstance(v.type, TensorType)
            Rewriter.replace_value_with_new_type(v, with_sharding(v.type, self.known[v]))
        self.func.update_function_type()

    # ---- diagnostics --------------------------------------------------------
    def check_arguments(self) -> None:
        for v, s in self.fixed.items():
            if isinstance(v, BlockArgument) and s.partial:
                raise error_at(
                    self.func,
                    f"{self._describe(v)} has sharding {s}: a function input cannot be a "
                    "partial sum (annotate it whole or split)",
                )

    def check_meshes(self, op: FusionOp) -> None:
        if isinstance(op, SetOp) or not op.operands:
            return
        operands = [self.known[v] for v in op.operands]
        for i, s in enumerate(operands[1:], 1):
            if s.mesh != operands[0].mesh:
                raise error_at(
                    op,
                    f"'{op.name}' op operands lie on different meshes: operand #0 is {operands[0]} "
                    f"and operand #{i} is {s}; only fusion.set moves a tensor between meshes",
                )
        res = self.known[op.results[0]]
        if res.mesh != operands[0].mesh:
            raise error_at(
                op,
                f"'{op.name}' op result {res} is on another mesh than its operands "
                f"({operands[0]}); only fusion.set moves a tensor between meshes",
            )

    def check_partial(self, op: FusionOp) -> None:
        res = self.fixed.get(op.results[0])
        if res is None or not res.partial:
            return
        p = res.partial
        if rules.can_make_partial(op, p, self.mesh_of(res.mesh)):
            return
        partials = [self.known[v].partial for v in op.operands]
        carries = rules.carries_partial(op)
        if carries == rules.ALL and all(q == p for q in partials):
            return
        if carries == rules.ONE and partials.count(p) == 1 and partials.count(()) == len(partials) - 1:
            return
        shown = ", ".join(str(self.known[v]) for v in op.operands)
        raise error_at(
            op,
            f"'{op.name}' op result has sharding {res}, but no lowering makes this partial sum: "
            "only fusion.matmul, fusion.linear without bias and fusion.sum contract a "
            "dimension the mesh divides into one, and only linear ops carry one from "
            f"operands partial over {format_partial(p)} (operands: {shown})",
        )

    def check_routed(self, op: FusionOp) -> None:
        """Dispatch and combine move tokens to their experts over one mesh
        axis (passes/expert_parallel.py): their tokens and experts split
        alike, on a mesh of one axis, or on a 2-D mesh with token groups
        ([G, T, k] ids) whose split makes each group a team of its own."""
        if not isinstance(op, (DispatchOp, CombineOp)):
            return
        g = len(shape_of(op.ids)) - 2
        tokens = self.known[op.ids].placement().dims[g]
        slots = op.results[0] if isinstance(op, DispatchOp) else op.input
        experts = self.known[slots].placement().dims[0]
        mesh = self.mesh_of(self.known[op.ids].mesh)
        if (tokens == experts or not experts) and (not tokens or mesh is None or len(mesh.shape) == 1 or g):
            return  # expert parallel (per group), local, or (experts whole) on gathered tokens
        shown = ", ".join(str(self.known[v]) for v in op.operands)
        raise error_at(
            op,
            f"'{op.name}' (operands {shown}, result {self.known[op.results[0]]}): expert parallelism splits "
            "the tokens and the experts alike, over one mesh axis; on a 2-D mesh the experts' slots would hold "
            "the tokens of every slice of the other axis: dispatch the tokens in groups (ids [G, T/G, k], the "
            "groups split over the other axis, the tokens within a group over the experts' axis)",
        )

    def _describe(self, v: SSAValue) -> str:
        if isinstance(v, BlockArgument):
            return f"function argument #{v.index} of @{self.func.sym_name.data}"
        assert isinstance(v.owner, Operation)
        return f"the result of '{v.owner.name}'"

    def _at(self, v: SSAValue, message: str) -> Diagnostic:
        return error_at(self.func if isinstance(v, BlockArgument) else v.owner, message)  # type: ignore[arg-type]

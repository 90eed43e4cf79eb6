"""The cost-driven part of propagate-shardings: where to reduce and where to gather.

Propagation's rules decide each undecided value from its neighbours, one op
at a time; they cannot see that a bias add of a row-parallel GEMM's partial
sum is better done on the sharded side (a ReduceScatter, then a local add)
than on the replicated one (an AllReduce, then a slice), that a norm's
backward should reduce-scatter its incoming partial sum in bf16 before its
f32 arithmetic, or that a transpose of a value gathered elsewhere should be
computed from that gathered copy instead of being gathered again. Those are
choices of the communication plan, which is the compiler's to make, as
GSPMD/Shardy's and XLA's SPMD partitioner's are.

So propagate-shardings ends with a local search over the values it decided
(never over what the user wrote): at every place where the propagated plan
communicates, it tries pinning the value there to the placement its
producer computes locally, or to the one its consumer needs, propagates
again from the pin as far as any decision changes (each value re-decided by
the rule that decided it), and keeps the pin when the ops around the
changes then communicate fewer bytes. `PlanCost` prices a plan exactly as
make-resharding-contiguous will split it (the expanded forms of norms and of
a linear with a bias included, bf16 and f32 sizes told apart), counting one
reshard of a value to a placement once however many ops read it (as that
pass shares equal reshards). The search is greedy (first improvement, in
program order: after a pin it goes back to the first op whose price the
pin changed) and deterministic; it runs until no candidate pays. A
`Ledger` keeps the component's price op by op, so a trial costs the ops
its pin reaches and whose price it changes, not the function nor every
reader of a value those ops read (a weight shared by every GEMM): compile
time grows with the program, not with the program times the places that
communicate.
"""

from __future__ import annotations

import bisect
import heapq
from collections import ChainMap
from collections.abc import Callable, Container, Mapping, Sequence

from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.rewriter import Rewriter

from fuserc.diagnostics import Diagnostic
from fuserc.dialects.fusion import FusionOp, MeshOp, SetOp, shape_of, sharding_of, with_sharding
from fuserc.ir import walk
from fuserc.passes import sharding_rules as rules
from fuserc.passes.reshard_util import Meshes, element_bytes, plan_cost, plan_reshard
from fuserc.sharding import Mesh, Sharding, Split

Assignment = Mapping[SSAValue, Sharding]

_Want = tuple[int, Sharding, float]
"""An operand index, the placement the op needs it in, and the bytes of that reshard."""


class PlanCost:
    """The bytes a function's plan communicates per device under an
    assignment of shardings, as make-resharding-contiguous would split it.
    Each op's part is found once per (op kind, properties, types, shardings)
    by running that pass's expansion and decomposition on a function holding
    the op alone."""

    def __init__(self, meshes: Meshes, mesh_ops: Sequence[MeshOp]):
        self.meshes = meshes
        self.mesh_ops = list(mesh_ops)
        self._ops: dict[tuple, tuple[float, tuple[_Want, ...]] | None] = {}
        self._kinds: dict[Operation, int] = {}
        self._kind_ids: dict[tuple, int] = {}
        self.priced = 0
        """How many op parts were asked for (a trial's work: tests/unit/test_sharding_search.py)."""

    def mesh_of(self, name: str) -> Mesh | None:
        return self.meshes.get(name)

    def total(self, ops: Sequence[Operation], known: Assignment, made: Mapping[SSAValue, set[Sharding]] | None = None) -> float:
        """Bytes of every op's own communication plus each distinct reshard
        of a value its consumers need (inf when some op cannot be split);
        `made`: reshards that exist already (free to reuse)."""
        bytes_ = 0.0
        wanted: dict[tuple[SSAValue, Sharding], float] = {}
        made = {v: set(p) for v, p in (made or {}).items()}
        for op in ops:
            part = self.op_part(op, known, made)
            if part is None:
                return float("inf")
            own, wants = part
            bytes_ += own
            for k, placement, cost in wants:
                if placement not in made.get(op.operands[k], ()):
                    wanted.setdefault((op.operands[k], placement), cost)
                made.setdefault(op.operands[k], set()).add(placement)
        return bytes_ + sum(wanted.values())

    def reshards(self, ops: Sequence[Operation], known: Assignment, made: dict[SSAValue, set[Sharding]]) -> None:
        """Add to `made` the reshards `ops` make of their operands under `known`."""
        for op in ops:
            part = self.op_part(op, known, made)
            for k, placement, _ in part[1] if part else ():
                made.setdefault(op.operands[k], set()).add(placement)

    def op_part(
        self,
        op: Operation,
        known: Assignment,
        made: Mapping[SSAValue, set[Sharding]] | None = None,
        avail: tuple[frozenset[Sharding], ...] | None = None,
    ) -> tuple[float, tuple[_Want, ...]] | None:
        """(bytes the op's split communicates apart from resharding its
        operands, the operand reshards it needs) for `op` under `known`;
        `made`: the placements each value was resharded to by earlier ops,
        which the op may reuse (make-resharding-contiguous does), or
        `avail`: those placements per operand."""
        self.priced += 1
        if not isinstance(op, FusionOp) or not op.results:
            return 0.0, ()
        operands = [known[v] for v in op.operands]
        results = [known[r] for r in op.results]
        if isinstance(op, SetOp):
            src, dst = operands[0], results[0]
            return self.reshard_bytes(op.operands[0], src, dst), ()
        if avail is None:
            avail = tuple(frozenset(made.get(v, ())) if made else frozenset() for v in op.operands)
        kind = self._kinds.get(op)
        if kind is None:  # the op's name, properties and types, hashed once
            static = (op.name, tuple(op.properties.items()), tuple(v.type for v in (*op.operands, *op.results)))
            kind = self._kinds[op] = self._kind_ids.setdefault(static, len(self._kind_ids))
        key = (kind, tuple(operands), tuple(results), avail)
        found = self._ops.get(key, False)
        if found is False:  # the search asks again and again for the same few ops
            if rules.computes_locally(op, operands, results[0], self.mesh_of):
                found = 0.0, ()
            else:
                found = self._split_alone(op, operands, results, avail)
            self._ops[key] = found
        return found

    def reshard_bytes(self, value: SSAValue, src: Sharding, dst: Sharding) -> float:
        shape = shape_of(value)
        plan = plan_reshard(src, dst, shape, self.meshes)
        if plan is None:
            return float("inf")
        return plan_cost(plan, src, shape, self.meshes, element_bytes(value.type))  # type: ignore[arg-type]

    def _split_alone(
        self, op: FusionOp, operands: list[Sharding], results: list[Sharding], avail: tuple[frozenset[Sharding], ...]
    ) -> tuple[float, tuple[_Want, ...]] | None:
        """make-resharding-contiguous's expansion and decomposition of `op`
        alone in a scratch function (its operands' reshards in `avail` made
        beforehand); None when it cannot be split."""
        from fuserc.passes.make_resharding_contiguous import split_resharding_ops

        arg_types = [with_sharding(v.type, s) for v, s in zip(op.operands, operands)]  # type: ignore[arg-type]
        block = Block(arg_types=arg_types)
        made: dict[tuple[SSAValue, Sharding], SSAValue] = {}
        for arg, placements in zip(block.args, avail):
            for p in sorted(placements, key=str):
                pre = SetOp.create(operands=[arg], result_types=[with_sharding(arg.type, p)])  # type: ignore[arg-type]
                block.add_op(pre)
                made[(arg, p)] = pre.results[0]
        clone = op.clone(value_mapper=dict(zip(op.operands, block.args)))
        for r, s in zip(clone.results, results):
            Rewriter.replace_value_with_new_type(r, with_sharding(r.type, s))  # type: ignore[arg-type]
        block.add_ops([clone, ReturnOp(*clone.results)])
        func = FuncOp("scratch", FunctionType.from_lists(arg_types, [r.type for r in clone.results]), Region(block))
        ModuleOp([m.clone() for m in self.mesh_ops] + [func])
        try:
            split_resharding_ops(func, self.meshes, made=made)
        except Diagnostic:
            return None
        own, wants = 0.0, []
        for s in walk(func.body):
            if not isinstance(s, SetOp) or (s.results[0] in made.values() and not s.results[0].uses):
                continue
            src, dst = sharding_of(s.operands[0]), sharding_of(s.results[0])
            assert src is not None and dst is not None
            cost = self.reshard_bytes(s.operands[0], src, dst)
            arg = s.operands[0]
            if isinstance(arg, BlockArgument) and arg.owner is block:
                wants.append((arg.index, dst.placement(), cost))
            else:
                own += cost
        return own, tuple(wants)


Repropagate = Callable[
    [Mapping[SSAValue, Sharding], Container[SSAValue], SSAValue, Sharding], "dict[SSAValue, Sharding] | None"
]
"""Propagation around one more pin (known, the values it may change, the
pinned value, its placement): the values that change, or None when the pin
makes propagation fail (propagate_shardings' `repropagate`)."""


def components(ops: Sequence[FusionOp], free: set[SSAValue]) -> list[tuple[list[Operation], list[SSAValue]]]:
    """The undecided values in groups that propagation decides apart (two
    values are together when one op touches both), each with the ops that
    touch it, in program order."""
    parent: dict[SSAValue, SSAValue] = {v: v for v in free}

    def find(v: SSAValue) -> SSAValue:
        while parent[v] is not v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    touching: list[tuple[Operation, list[SSAValue]]] = []
    for op in ops:
        mine = [v for v in (*op.operands, *op.results) if v in parent]
        if not mine:
            continue
        touching.append((op, mine))
        for v in mine[1:]:
            a, b = find(mine[0]), find(v)
            if a is not b:
                parent[b] = a
    groups: dict[SSAValue, tuple[list[Operation], list[SSAValue]]] = {}
    for op, mine in touching:
        group = groups.setdefault(find(mine[0]), ([], []))
        group[0].append(op)
    order = {v: i for i, v in enumerate(free)}
    for v in sorted(free, key=lambda v: order[v]):
        groups.setdefault(find(v), ([], []))[1].append(v)
    return list(groups.values())


def improve(
    ops: Sequence[Operation],
    free: set[SSAValue],
    returned: set[SSAValue],
    known: dict[SSAValue, Sharding],
    repropagate: Repropagate,
    cost: PlanCost,
    made: Mapping[SSAValue, set[Sharding]] | None = None,
) -> None:
    """Change `known` to the assignment after the search (module docstring)
    over `ops`; `free` holds the values the search may pin (those the user
    did not annotate); `made`: reshards of values outside that earlier
    components make. A function's results keep what propagation gave them:
    they are its interface (the shards a caller receives), not the plan's
    to change.

    Each trial re-propagates and prices only the ops around what its pin
    changes (`Ledger.trial`), so the search's work grows with the places
    that communicate and the reach of each change, not with their product;
    it runs until no candidate improves (no budget cuts a large program
    short)."""
    ledger = Ledger(ops, known, cost, made)
    if ledger.total == 0.0:
        return
    movable = free - returned
    tried: dict[SSAValue, set[Sharding]] = {}
    heap = list(range(len(ops)))
    queued = set(heap)
    while heap:
        i = heapq.heappop(heap)
        queued.discard(i)
        for value, placement in _candidates(ops[i], movable, returned, known, cost):
            if value not in movable or placement in tried.get(value, ()):
                continue
            tried.setdefault(value, set()).add(placement)
            new = repropagate(known, movable, value, placement)
            if new is None or not ledger.trial(new):
                continue
            known.update(new)
            movable.discard(value)  # pinned
            for j in ledger.commit():  # what failed there before may pay now
                for v in (*ops[j].operands, *ops[j].results):
                    tried.pop(v, None)
                if j not in queued:
                    queued.add(j)
                    heapq.heappush(heap, j)
            break


_Pair = tuple[SSAValue, Sharding]
"""A reshard of a value to a placement: made once, read by every op that wants it."""


class Ledger:
    """`PlanCost.total` of one component's ops under the search's
    assignment, kept op by op, so that a trial is priced by the ops whose
    part it changes, not by every op around it: the ops touching a value
    the trial changes, and a later reader of one of their operands only
    when the reshards made of that operand before it (which it may reuse)
    change. A weight that many GEMMs read is priced per trial by the GEMMs
    next to the change, not by all of its readers.

    The state is each op's part (priced with the reshards earlier ops of
    the component made, as `total` walks them) and, per reshard of a
    value to a placement, the ops that want it in program order (the
    first one's price counts; the others reuse it). An op that cannot be
    split costs infinitely much: a change that lets it split pays. `trial`
    prices a change of `known` against it; `commit` keeps the change after
    `known` took it."""

    def __init__(self, ops: Sequence[Operation], known: Assignment, cost: PlanCost, made: Mapping[SSAValue, set[Sharding]] | None):
        self.ops = ops
        self.known = known
        self.cost = cost
        self.ext: Mapping[SSAValue, set[Sharding]] = made or {}
        self.index = {op: i for i, op in enumerate(ops)}
        self.readers: dict[SSAValue, list[int]] = {}
        """Per value, the ops of the component that read it (program order)."""
        self.parts: list[tuple[float, tuple[_Want, ...]] | None] = []
        self.pairs: list[dict[_Pair, float]] = []
        """Per op, the reshards it wants that `made` does not hold, each with its price."""
        self.wanters: dict[_Pair, list[int]] = {}
        """Per reshard, the ops that want it (program order)."""
        self.placements: dict[SSAValue, set[Sharding]] = {}
        """Per value, the placements some op of the component wants it in."""
        self._staged: tuple[dict[int, tuple[float, tuple[_Want, ...]]], dict[int, dict[_Pair, float]], dict[_Pair, None], float, int] | None = None
        for i, op in enumerate(ops):
            for v in dict.fromkeys(op.operands):
                self.readers.setdefault(v, []).append(i)
            part = cost.op_part(op, known, avail=self._avail(i, op))
            self.parts.append(part)
            self.pairs.append(self._pairs(op, part) if part else {})
            for pair in self.pairs[i]:
                self.wanters.setdefault(pair, []).append(i)
                self.placements.setdefault(pair[0], set()).add(pair[1])
        self.unsplit = sum(p is None for p in self.parts)
        """How many ops cannot be split under `known` (each costs infinitely much)."""
        self.finite = sum(p[0] for p in self.parts if p) + sum(map(self._pair_price, self.wanters))

    @property
    def total(self) -> float:
        """`PlanCost.total` of the component (inf while an op cannot be split)."""
        return float("inf") if self.unsplit else self.finite

    def _pairs(self, op: Operation, part: tuple[float, tuple[_Want, ...]]) -> dict[_Pair, float]:
        out: dict[_Pair, float] = {}
        for k, placement, price in part[1]:
            v = op.operands[k]
            if placement not in self.ext.get(v, ()):
                out.setdefault((v, placement), price)
        return out

    def _pair_price(self, pair: _Pair) -> float:
        first = self.wanters.get(pair)
        return self.pairs[first[0]][pair] if first else 0.0

    def _avail(self, i: int, op: Operation, added: Mapping[_Pair, list[int]] | None = None, dropped: Mapping[_Pair, set[int]] | None = None) -> tuple[frozenset[Sharding], ...]:
        """Per operand of op i, the placements made of it before op i
        (with a trial's `added` and `dropped` wanters)."""
        out = []
        for v in op.operands:
            have = set(self.ext.get(v, ()))
            for p in self.placements.get(v, ()):
                if self._first(v, p, added, dropped) < i:
                    have.add(p)
            for pair in added or ():
                if pair[0] is v and added[pair][0] < i:  # type: ignore[index]
                    have.add(pair[1])
            out.append(frozenset(have))
        return tuple(out)

    def _first(self, v: SSAValue, p: Sharding, added: Mapping[_Pair, list[int]] | None, dropped: Mapping[_Pair, set[int]] | None) -> float:
        """The first op wanting (v, p): the state's, less the `dropped` ones, or the first `added`."""
        gone = dropped.get((v, p), ()) if dropped else ()
        first: float = next((j for j in self.wanters.get((v, p), ()) if j not in gone), float("inf"))
        more = added.get((v, p)) if added else None
        return min(first, more[0]) if more else first

    def trial(self, new: Mapping[SSAValue, Sharding]) -> bool:
        """Whether changing `known` by `new` makes the component's plan
        communicate fewer bytes (staged for `commit` when it does)."""
        self._staged = None
        assign = ChainMap(new, self.known)  # type: ignore[arg-type]
        heap = sorted({self.index[u.operation] for v in new for u in v.uses if u.operation in self.index}
                      | {self.index[v.owner] for v in new if v.owner in self.index})  # type: ignore[index]
        dirty = set(heap)
        parts: dict[int, tuple[float, tuple[_Want, ...]]] = {}
        pairs: dict[int, dict[_Pair, float]] = {}
        added: dict[_Pair, list[int]] = {}
        dropped: dict[_Pair, set[int]] = {}
        moved: dict[_Pair, None] = {}  # reshards whose price may change
        while heap:
            i = heapq.heappop(heap)
            op = self.ops[i]
            part = self.cost.op_part(op, assign, avail=self._avail(i, op, added, dropped))
            if part is None:
                return False
            parts[i], pairs[i] = part, self._pairs(op, part)
            before, after = self.pairs[i], pairs[i]
            for pair in (*before, *after):
                if before.get(pair) == after.get(pair):
                    continue
                moved[pair] = None
                if (pair in before) == (pair in after):
                    continue  # the same reshard at another price
                if pair in after:
                    added.setdefault(pair, []).append(i)
                    if self._first(*pair, None, None) < i:
                        continue  # made before op i either way
                else:
                    dropped.setdefault(pair, set()).add(i)
                    if self._first(*pair, added, dropped) < i:
                        continue
                # later readers of the value, up to the next op that wanted the
                # reshard, find another set of reshards made before them
                wanters = self.wanters.get(pair, [])
                nxt = bisect.bisect_right(wanters, i)
                readers = self.readers[pair[0]]
                lo = bisect.bisect_right(readers, i)
                hi = len(readers) if nxt == len(wanters) else bisect.bisect_right(readers, wanters[nxt])
                for j in readers[lo:hi]:
                    if j not in dirty:
                        dirty.add(j)
                        heapq.heappush(heap, j)
        split = sum(self.parts[i] is None for i in parts)  # ops the change lets split
        old = sum(p[0] for i in parts if (p := self.parts[i])) + sum(self._pair_price(pair) for pair in moved)
        now = sum(p[0] for p in parts.values())
        for pair in moved:
            first = self._first(*pair, added, dropped)
            if first != float("inf"):
                j = int(first)
                now += (pairs[j] if j in pairs else self.pairs[j])[pair]
        self._staged = (parts, pairs, moved, now - old, split)
        return split > 0 or now < old * (1 - 1e-9)

    def commit(self) -> list[int]:
        """Keep the change that the last `trial` priced (`known` has it
        now); the ops whose trials it may price otherwise: those whose
        part changed, and the readers of a value whose reshards changed."""
        assert self._staged is not None
        parts, pairs, moved, delta, split = self._staged
        for i, part in parts.items():
            before, after = self.pairs[i], pairs[i]
            for pair in before.keys() - after.keys():
                self.wanters[pair].remove(i)
                if not self.wanters[pair]:
                    del self.wanters[pair]
                    self.placements[pair[0]].discard(pair[1])
            for pair in after.keys() - before.keys():
                bisect.insort(self.wanters.setdefault(pair, []), i)
                self.placements.setdefault(pair[0], set()).add(pair[1])
            self.parts[i], self.pairs[i] = part, after
        self.finite += delta
        self.unsplit -= split
        self._staged = None
        return sorted(set(parts).union(*(self.readers.get(v, ()) for v in dict.fromkeys(v for v, _ in moved))))


def _candidates(
    op: Operation, free: set[SSAValue], returned: set[SSAValue], known: Assignment, cost: PlanCost
) -> list[tuple[SSAValue, Sharding]]:
    """Where `op` communicates in the plan: its result pinned to what it
    computes locally (reduce or gather later, at its consumers), and an
    operand pinned to what it needs (reduce or gather earlier, at its
    producer)."""
    part = cost.op_part(op, known)
    if not isinstance(op, FusionOp) or not op.results or part is None:
        return []
    own, wants = part
    if own == 0.0 and not wants:
        return []
    out: list[tuple[SSAValue, Sharding]] = []
    res = op.results[0]
    if res in free and not isinstance(op, SetOp):
        local = rules.local_result(op, [known[v] for v in op.operands], cost.mesh_of)
        if local is not None and local != known[res].placement() and not (local.partial and res in returned):
            if not local.errors(shape_of(res), cost.mesh_of(local.mesh)):
                out.append((res, local))
    for k, placement, _ in wants:
        v = op.operands[k]
        if v in free and not (placement.partial and v in returned):
            out.append((v, placement))
        if v in free:  # a partial sum reduce-scattered where it is made, not reduced whole
            out.extend((v, p) for p in _scattered(known[v], shape_of(v), cost.mesh_of(known[v].mesh)))
    if isinstance(op, SetOp) and op.operands[0] in free:
        out.append((op.operands[0], known[res].placement()))
    return out


def _scattered(s: Sharding, shape: Sequence[int], mesh: Mesh | None) -> list[Sharding]:
    """The placements a ReduceScatter of partial sum `s` gives: its types
    added as the innermost splits of one dimension (where they divide)."""
    if not s.partial:
        return []
    out = []
    splits = tuple(Split(p) for p in s.partial)
    for d in range(len(shape)):
        t = s.with_partial(None).with_dims([(*x, *splits) if i == d else x for i, x in enumerate(s.dims)]).placement()
        if not t.errors(shape, mesh):
            out.append(t)
    return out


def free_values(values: Sequence[SSAValue], fixed: Mapping[SSAValue, Sharding]) -> set[SSAValue]:
    """Values the search may pin: tensors the user left undecided."""
    return {v for v in values if v not in fixed and isinstance(v.type, TensorType)}

"""Planning and interpreting a host program: each op's `Step` made once per
program (`Planner`), each block one straight-line function of its steps, and
the `Interpreter` that runs them (the op handlers: runtime/evaluator/interpreter_ops.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Block, Operation, SSAValue

from fuserc.diagnostics import Diagnostic, error_at, location_of
from fuserc.dialects import hir
from fuserc.dialects.fusion import MeshOp
from fuserc.runtime.backends.backend import Array, Handle
from fuserc.sharding import Mesh

if TYPE_CHECKING:
    from fuserc.runtime.evaluator.evaluator import Program
    from xdsl.dialects.builtin import ModuleOp

FAIL_RANK_ENV = "FUSERC_FAIL_RANK"
"""Testing hook: the rank that raises at the first op of a run."""


def module_meshes(module: ModuleOp) -> dict[str, Mesh]:
    """The meshes a module declares, by name: its top-level ops only (a
    mesh's parent is the module), since every launch asks, and walking
    a whole model's program per launch took seconds at a first run."""
    return {op.sym_name.data: op.model for op in module.ops if isinstance(op, MeshOp)}


class InjectedFailure(RuntimeError):
    """The failure raised on the rank named by FUSERC_FAIL_RANK."""


def fail_rank() -> str | None:
    """The value of FUSERC_FAIL_RANK now (None when unset): read at every
    run, since a test may set it after loading a program."""
    return os.environ.get(FAIL_RANK_ENV)


# --------------------------------------------------------------------------
# Interpretation
# --------------------------------------------------------------------------
#
# A program is planned once, at its first run: every SSA value gets a slot in
# a flat list (the run's environment), and every op becomes a `Step` that
# holds what the op needs on every run, read from the IR once: a closure over
# its static attributes and slots, the slots of the operands that must be
# present, and whether this rank skips it. Each block becomes one function
# that calls its steps in turn (`_compile`). A run then does list indexing and
# backend calls, not IR property access nor a walk over step objects: the
# host's time from `run_prepared` to the first kernel, and between kernels,
# is time the device may sit idle.

Run = Callable[["Interpreter"], None]
"""One op's work in a run, its static attributes already bound."""

Prepare = Callable[["Planner", Any], Run]
"""Makes the `Run` of an op (once per program)."""

PREPARE: dict[type[Operation], Prepare] = {}


def prepares(*classes: type[Operation]) -> Callable[[Prepare], Prepare]:
    def register(fn: Prepare) -> Prepare:
        for c in classes:
            PREPARE[c] = fn
        return fn

    return register


_ROOT_ONLY: dict[type[Operation], tuple[str, ...]] = {
    hir.ScatterOp: ("input",),
    hir.GatherOp: ("output",),
    hir.ReduceOp: ("output",),
}
"""Communication operands used on the root only (they may be absent elsewhere)."""

_STRICT: tuple[type[Operation], ...] = (*hir.COMMUNICATION_OPS, hir.ShareOp)
"""Ops whose members must have every operand (an absent one is an error)."""


class Step:
    """An op ready to run on this rank. `member` is False where the rank is
    outside the op's team: `run` then only makes its results absent.
    `required` are the slots that must hold a value for the op to run (else
    its results are absent, or, for a `strict` op, it is an error)."""

    __slots__ = ("op", "run", "member", "required", "strict", "results")

    def __init__(
        self,
        op: Operation,
        run: Run | None,
        required: tuple[int, ...],
        strict: bool,
        results: tuple[int, ...],
    ):
        self.op = op
        self.member = run is not None
        self.run: Run = run if run is not None else absent_results(results)
        self.required = required
        self.strict = strict
        self.results = results


@dataclass(frozen=True)
class BlockPlan:
    """The steps of a block, the function that runs them (`_compile`), and
    the slots its terminator hands back (None: the block has no such
    terminator)."""

    steps: tuple[Step, ...]
    ends: tuple[int, ...] | None
    run: Run


@dataclass(frozen=True)
class Plan:
    """A host program planned for this rank. The function's arguments have
    the first slots, in order."""

    slots: int  # the size of a run's environment
    args: int  # the number of arguments
    body: BlockPlan


class Planner:
    """Plans a program for this rank: slots for SSA values, steps for ops."""

    def __init__(self, program: Program):
        self.program = program
        self.backend = program.backend
        self.rank = program.backend.rank
        self._slots: dict[SSAValue, int] = {}
        self._releases: dict[Block, dict[int, tuple[tuple[int, int], ...]]] = {}

    def plan(self) -> Plan:
        block = self.program.func.body.block
        args = self.slots(block.args)
        assert args == tuple(range(len(args)))  # a run's environment starts with its inputs
        self._releases = self._last_reads(block)
        body = self.block(block, ReturnOp)
        return Plan(len(self._slots), len(args), body)

    def _last_reads(self, block: Block) -> dict[Block, dict[int, tuple[tuple[int, int], ...]]]:
        """By block, for each step, the (slot, argument) pairs it reads for
        the last time: the arguments and their views (`hir.VIEW_OPS`),
        which a run lets go of there when the argument is donated
        (`Interpreter.release`). A read inside a region that runs once
        (`hir.if_rank`) is that region's step; inside any other (a loop),
        the step of the op holding it. A value the program returns or a
        region yields is never let go."""
        roots: dict[SSAValue, int] = {a: a.index for a in block.args}
        last: dict[SSAValue, tuple[Block, int]] = {}
        kept: set[SSAValue] = set()

        def visit(b: Block, at: tuple[Block, int] | None) -> None:
            k = 0
            for op in b.ops:
                if op is b.last_op and isinstance(op, (ReturnOp, hir.YieldOp)):
                    kept.update(v for v in op.operands if v in roots)
                    break
                if isinstance(op, hir.VIEW_OPS) and op.operands[0] in roots:
                    roots[op.results[0]] = roots[op.operands[0]]
                here = at or (b, k)
                for v in op.operands:
                    if v in roots:
                        last[v] = here
                for region in op.regions:
                    for inner in region.blocks:
                        visit(inner, None if at is None and isinstance(op, hir.IfRankOp) else here)
                k += 1

        visit(block, None)
        out: dict[Block, dict[int, list[tuple[int, int]]]] = {}
        for v, (b, k) in last.items():
            if v not in kept:
                out.setdefault(b, {}).setdefault(k, []).append((self.slot(v), roots[v]))
        return {b: {k: tuple(p) for k, p in steps.items()} for b, steps in out.items()}

    def team(self, op: hir.TeamOp) -> tuple[int, ...]:
        """This rank's team of `op` (of its family, where the team has
        translates); planned on members only."""
        own = op.team.of(self.rank)
        assert own is not None
        return own

    def slot(self, v: SSAValue) -> int:
        s = self._slots.get(v)
        if s is None:
            s = self._slots[v] = len(self._slots)
        return s

    def slots(self, values: Sequence[SSAValue]) -> tuple[int, ...]:
        return tuple(self.slot(v) for v in values)

    def block(self, block: Block, end: type[Operation]) -> BlockPlan:
        """The steps up to the first `end` op, whose operands the block
        hands back; a step that reads a donated input for the last time
        then lets go of it (`_last_reads`)."""
        releases = self._releases.get(block)
        self.slots(block.args)
        steps: list[Step] = []
        ends: tuple[int, ...] | None = None
        for op in block.ops:
            if isinstance(op, end):
                ends = self.slots(op.operands)
                break
            step = self.step(op)
            pairs = releases.get(len(steps)) if releases else None
            if pairs is not None:
                step.run = _then_release(step.run, pairs)
            steps.append(step)
        return BlockPlan(tuple(steps), ends, _compile(tuple(steps)))

    def step(self, op: Operation) -> Step:
        results = self.slots(op.results)
        prepare = PREPARE.get(type(op))
        if prepare is None:
            return Step(op, _unsupported(op), (), False, results)
        if isinstance(op, hir.TeamOp) and not op.team.covers(self.rank):
            return Step(op, None, (), False, results)
        optional = {getattr(op, name) for name in _ROOT_ONLY.get(type(op), ())}
        required = tuple(
            self.slot(v) for v in op.operands if v not in optional and not isinstance(v.type, hir.TokenType)
        )
        return Step(op, prepare(self, op), required, isinstance(op, _STRICT), results)


def _unsupported(op: Operation) -> Run:
    """An op without a handler: an error when (and only when) a run reaches it."""

    def run(it: Interpreter) -> None:
        raise error_at(op, f"the host evaluator cannot run '{op.name}'")

    return run


def absent_results(results: tuple[int, ...]) -> Run:
    """The step of an op this rank skips: its results are absent."""

    def run(it: Interpreter) -> None:
        env = it.env
        for r in results:
            env[r] = None

    return run


_PASS_THROUGH = (Diagnostic, InjectedFailure)
"""Errors that already say where they come from (no note is added)."""


def _compile(steps: tuple[Step, ...]) -> Run:
    """The function that runs a block's steps: straight-line code calling
    each step's `run`, its required-operand checks inline, so that a run
    spends no time walking step objects (about half of an op's host cost
    in a loop over them). With a tracer set, the traced loop runs instead.
    `i` tracks the step, for the note an error gets."""
    if not steps:
        return _nothing
    names: dict[str, Any] = {"steps": steps, "_PASS_THROUGH": _PASS_THROUGH}
    code = [
        "def block(it):",
        "    if it.tracer is not None:",
        "        it.run_traced(steps)",
        "        return",
        "    env = it.env",
        "    try:",
    ]
    for k, step in enumerate(steps):
        names[f"run{k}"] = step.run
        code.append(f"        i = {k}")
        if step.required:
            absent = " or ".join(f"env[{s}] is None" for s in step.required)
            code += [
                f"        if {absent}:",
                f"            it.skip(steps[{k}])",
                "        else:",
                f"            run{k}(it)",
            ]
        else:
            code.append(f"        run{k}(it)")
    code += [
        "    except _PASS_THROUGH:",
        "        raise",
        "    except Exception as e:",
        "        it.note(e, steps[i].op)",
        "        raise",
    ]
    exec(compile("\n".join(code), "<fuserc host block>", "exec"), names)
    return names["block"]


def _nothing(it: Interpreter) -> None:
    """An empty block."""


def _then_release(run: Run, pairs: tuple[tuple[int, int], ...]) -> Run:
    """`run`, then the run lets go of the donated inputs among `pairs`."""

    def step(it: Interpreter) -> None:
        run(it)
        if it.donated:
            it.release(pairs)

    return step


class Interpreter:
    """Runs a program's plan on this rank. One is made with the plan and
    serves every run: a run sets its state afresh (the values of the SSA
    values, by slot; its flops; the handles it shared for itself alone; the
    program's tracer)."""

    __slots__ = ("program", "backend", "rank", "env", "flops", "temp_handles", "tracer", "donated", "_plan", "_pad")

    def __init__(self, program: Program, plan: Plan):
        self.program = program
        self.backend = program.backend
        self.rank = program.backend.rank
        self.env: list[Any] = []
        self.flops = 0
        self.temp_handles: list[Handle] = []
        self.tracer: Any = None
        self.donated: frozenset[int] = frozenset()  # the run's inputs it may let go of after their last read
        self._plan = plan
        self._pad = (None,) * (plan.slots - plan.args)

    def run(self, inputs: Sequence[Array | None], fail_now: bool, donate: Collection[int] = ()) -> list[Any]:
        """One run. The inputs at the positions in `donate` are the run's
        alone: each leaves `inputs` (a list) and, once read for the last
        time, the run (`release`), so that its memory goes back while the
        run goes on (a backward's saved activations, as PyTorch's autograd
        frees each after its last use)."""
        plan = self._plan
        if len(inputs) != plan.args:
            raise error_at(self.program.func, f"expected {plan.args} inputs, got {len(inputs)}")
        self.env = env = [*inputs, *self._pad]
        self.donated = frozenset(donate)
        if isinstance(inputs, list):
            for i in self.donated:
                inputs[i] = None
        self.flops = 0
        self.temp_handles = []
        self.tracer = self.program.tracer
        body = plan.body
        if fail_now and body.steps:
            raise InjectedFailure(f"{FAIL_RANK_ENV}={self.rank}: injected failure at '{body.steps[0].op.name}'")
        body.run(self)
        if body.ends is None:
            raise error_at(self.program.func, "host program without func.return")
        return [env[s] for s in body.ends]

    def release(self, pairs: tuple[tuple[int, int], ...]) -> None:
        """Let go of the slots, among (slot, argument) `pairs`, whose argument is donated."""
        env, backend = self.env, self.backend
        for s, a in pairs:
            if a in self.donated and env[s] is not None:
                backend.let_go(env[s])
                env[s] = None

    def skip(self, step: Step) -> None:
        """A step missing a required operand: absent results, or an error
        for a strict op."""
        if step.strict:
            op = step.op
            raise error_at(op, f"'{op.name}': an operand is absent on rank {self.rank}, a member of its team")
        env = self.env
        for r in step.results:
            env[r] = None

    def run_traced(self, steps: Sequence[Step]) -> None:
        """A block's steps with a span around each op this rank runs."""
        env, tracer = self.env, self.tracer
        for step in steps:
            if not step.member:
                step.run(self)  # absent results
                continue
            if any(env[s] is None for s in step.required):
                self.skip(step)
                continue
            span = tracer.begin(step.op)
            try:
                step.run(self)
            except _PASS_THROUGH:
                raise
            except Exception as e:
                self.note(e, step.op)
                raise
            if span is not None:
                tracer.end(span, [env[r] for r in step.results])

    def note(self, e: Exception, op: Operation) -> None:
        """Name the op (and where it is) on an error passing through it."""
        loc = location_of(op)
        e.add_note(f"while running '{op.name}'" + (f" at {loc}" if loc else "") + f" on rank {self.rank}")


def team_position(op: Operation, value: Any, size: int, what: str) -> int:
    """A team position from an index value, checked against the team size."""
    p = int(value)
    if not 0 <= p < size:
        raise error_at(op, f"'{op.name}': {what} position {p} is out of range for a team of {size} ranks")
    return p


def buffer_shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())



from fuserc.runtime.evaluator import interpreter_ops  # noqa: E402,F401  (registers the op handlers)

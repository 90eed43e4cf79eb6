"""The host evaluator: interprets a host program (docs/hir.md) on one rank.

One implementation serves every backend: the evaluator walks the hir ops,
keeps the value of each SSA value (arrays, indices, tokens, streams, events,
handles; `None` for an *absent* value), and asks the backend to allocate,
view, compute and communicate. A `Program` is a host program loaded for this
rank: checked against the job (rank count), its teams prepared, and its
allocation cache kept across runs, so running it many times reuses buffers
and their shared memory handles.

Absent values: a rank outside an op's team skips the op and its results are
absent; an op without a team runs only when all its tensor operands are
present (except the operands a communication reads or writes on its root
alone); `hir.if_rank` runs its region on the listed ranks only.

Each op is prepared once per program (at its first run): its handler's
static attributes, whether this rank is in its team and which operands it
needs are read from the IR then, and each block becomes one straight-line
function over those steps, so that a run costs little more than the backend
calls (the host must issue kernels faster than the device runs them).

Testing hook: with the environment variable `FUSERC_FAIL_RANK=r`, rank r
raises an error at the first op of every run, so that failure handling can
be tested end to end.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, OpResult, Operation, SSAValue
from xdsl.traits import SymbolTable

from fuserc.diagnostics import Diagnostic, error_at, location_of
from fuserc.dialects import hir
from fuserc.dialects.fusion import MeshOp, sharding_of
from fuserc.runtime.alloc_cache import AllocationCache, CacheEntry
from fuserc.runtime.backend import Array, Backend, Handle, Team, reduce_op_name
from fuserc.runtime.graphs import CAPTURE, GRAPH, OPS, REPLAY, Captured, InputKey, Replays
from fuserc.dialects.interfaces import torch_dtype
from fuserc.runtime.reference import block_context
from fuserc.sharding import Mesh, Sharding

FAIL_RANK_ENV = "FUSERC_FAIL_RANK"
"""Testing hook: the rank that raises at the first op of a run."""


_OWNERS = itertools.count()


class InjectedFailure(RuntimeError):
    """The failure raised on the rank named by FUSERC_FAIL_RANK."""


def _fail_rank() -> str | None:
    """The value of FUSERC_FAIL_RANK now (None when unset): read at every
    run, since a test may set it after loading a program."""
    return os.environ.get(FAIL_RANK_ENV)


# --------------------------------------------------------------------------
# The signature: local and global types of arguments and results
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueSpec:
    """An argument or result of a host program: its local buffer type, and
    the global tensor it is a shard of (from `hir.global`)."""

    index: int
    label: str  # "argument #0 (%x)" or "result #0"
    shape: tuple[int, ...]
    dtype: torch.dtype
    local_type: TensorType
    global_type: TensorType
    sharding: Sharding
    mesh: Mesh | None  # None: no mesh, the tensor is whole on every rank

    @property
    def global_shape(self) -> tuple[int, ...]:
        return tuple(self.global_type.get_shape())

    def present_on(self, rank: int) -> bool:
        return self.mesh is None or self.mesh.has(rank)

    def devices(self, size: int) -> tuple[int, ...]:
        return self.mesh.devices if self.mesh is not None else tuple(range(size))


def _meshes(module: ModuleOp) -> dict[str, Mesh]:
    return {op.sym_name.data: op.model for op in module.walk() if isinstance(op, MeshOp)}


def _label(func: FuncOp, i: int, result: bool) -> str:
    if result:
        return f"result #{i}"
    hint = func.body.block.args[i].name_hint
    return f"argument #{i}" + (f" (%{hint})" if hint else "")


def _spec(func: FuncOp, meshes: dict[str, Mesh], i: int, local: Any, result: bool) -> ValueSpec:
    label = _label(func, i, result)
    if not isinstance(local, TensorType):
        raise error_at(func, f"{label} of host program @{func.sym_name.data} has type {local}; expected a tensor")
    gtype = hir.global_type(func, i, result) or local
    sharding = sharding_of(gtype)
    mesh = None
    if sharding is not None:
        mesh = meshes.get(sharding.mesh)
        if mesh is None:
            raise error_at(func, f"{label}: unknown mesh @{sharding.mesh} in its hir.global type")
    else:
        sharding = Sharding.replicated("", len(gtype.get_shape()))
    return ValueSpec(
        i, label, tuple(local.get_shape()), torch_dtype(local.element_type), local, gtype, sharding, mesh
    )


def signature(module: ModuleOp, func: FuncOp) -> tuple[list[ValueSpec], list[ValueSpec]]:
    """The arguments and results of a host program (no backend needed)."""
    meshes = _meshes(module)
    ftype = func.function_type
    params = [_spec(func, meshes, i, t, False) for i, t in enumerate(ftype.inputs.data)]
    results = [_spec(func, meshes, i, t, True) for i, t in enumerate(ftype.outputs.data)]
    return params, results


def find_host_program(module: ModuleOp, entry: str) -> FuncOp:
    """The host program `@entry` of a module (a Diagnostic otherwise)."""
    found = SymbolTable.lookup_symbol(module, entry)
    if not isinstance(found, FuncOp) or not found.body.blocks:
        names = [f"@{op.sym_name.data}" for op in module.ops if isinstance(op, FuncOp)]
        raise Diagnostic(f"no function @{entry} to run (functions: {', '.join(names) or 'none'})")
    if not hir.is_host_program(found):
        raise error_at(
            found,
            f"@{entry} is not a host program (no 'hir.host' attribute): run the pipeline "
            "that lowers it (-p default)",
        )
    return found


# --------------------------------------------------------------------------
# The loaded program
# --------------------------------------------------------------------------


class Program:
    """A host program loaded on this rank, run many times.

    `run(inputs)` takes this rank's local shards (host arrays, None where
    the argument is absent) and returns its local results as CPU tensors
    (None where absent). Buffers come from one allocation cache kept for
    the program's lifetime."""

    def __init__(self, module: ModuleOp, func: FuncOp, backend: Backend):
        self.module = module
        self.func = func
        self.backend = backend
        meshes = _meshes(module)
        self.params, self.results = signature(module, func)
        self.required_ranks, why = _required_ranks(func, meshes)
        require_ranks(func, self.required_ranks, why, backend.size)
        self.devices = _used_devices(meshes, self.required_ranks)
        self.teams = collect_teams(func)
        self._shares = any(isinstance(op, hir.ShareOp) for op in func.walk())
        self._prepared = False  # teams are made at the first run, after the input checks
        self._plan: _Plan | None = None  # the ops prepared for this rank, at the first run
        self._interp: _Interpreter | None = None  # runs the plan; made with it
        self.cache = AllocationCache(backend.empty)
        self._entries: dict[int, CacheEntry] = {}
        self.last_flops = 0
        self.runs = 0
        self.tracer: Any = None  # a runtime.trace.Tracer while a run is traced
        self._owner = next(_OWNERS)  # names this program's runs to the backend
        self.result_sites = _result_sites(func)
        self._owning = False  # in a run whose results go to the caller (`run_prepared(owned_results=True)`)
        self._owned: set[int] = set()  # buffers of result sites made for the caller in this run
        self.replays = Replays(backend.graphs_unavailable, backend.span)

    @staticmethod
    def load(module: ModuleOp, entry: str, backend: Backend) -> "Program":
        return Program(module, find_host_program(module, entry), backend)

    # ---- inputs -------------------------------------------------------------
    def prepare_inputs(self, values: Sequence[Any]) -> list[Array | None]:
        """Check this rank's local inputs (shape, dtype) and hand them to
        the backend: read in place where they already are on its device
        (`Backend.adopt`), uploaded otherwise."""
        if len(values) != len(self.params):
            raise error_at(
                self.func, f"@{self.func.sym_name.data} takes {len(self.params)} inputs, got {len(values)}"
            )
        out: list[Array | None] = []
        for spec, value in zip(self.params, values):
            if not spec.present_on(self.backend.rank):
                out.append(None)
                continue
            if value is None:
                raise error_at(self.func, f"{spec.label} is absent on rank {self.backend.rank}, which holds a shard")
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(np.ascontiguousarray(value))
            if not isinstance(value, torch.Tensor):
                raise error_at(self.func, f"{spec.label} must be a torch tensor or numpy array, got {type(value).__name__}")
            if tuple(value.shape) != spec.shape or value.dtype != spec.dtype:
                raise error_at(
                    self.func,
                    f"{spec.label}: expected a local shard {list(spec.shape)} of {spec.dtype} "
                    f"({spec.local_type}), got {list(value.shape)} of {value.dtype}",
                )
            out.append(self.backend.adopt(value))
        return out

    # ---- running ------------------------------------------------------------
    def run(self, inputs: Sequence[Any]) -> list[torch.Tensor | None]:
        """Run once on host inputs; results are CPU tensors (copies)."""
        return self.run_prepared(self.prepare_inputs(inputs), copy_outputs=True)

    def run_prepared(
        self,
        inputs: Sequence[Array | None],
        copy_outputs: bool = False,
        synchronize: bool = True,
        graphs: bool = True,
        owned_results: bool = False,
    ) -> list[Any]:
        """Run once on inputs from `prepare_inputs`. Without `copy_outputs`
        the results are the program's buffers, overwritten by the next run.
        With `synchronize=False` (no `copy_outputs`) the host returns once
        the work is enqueued, without waiting for the device or meeting the
        other ranks: the results are ready in stream order on the backend's
        main stream, and the caller synchronizes before reading them on the
        host. A timing loop uses it to measure device time as PyTorch's
        stream-ordered baselines are measured; a program that shares
        buffers must then end with a fence (stream-pipeline's do). Runs
        with the same inputs are replayed as a captured graph where the
        backend can (runtime/graphs.py), unless `graphs` is False. With
        `owned_results` (run op by op) the results are the caller's: the
        buffers of allocation sites that are results are made for this run
        on the caller's stream (`Backend.empty_for_caller`), not taken from
        the cache, and any other result is handed out (`_hand_out`), so the
        next run cannot overwrite what the caller holds."""
        interp = self._interp
        if interp is None:
            interp = self._start()
        fail = _fail_rank()
        fail_now = fail is not None and fail.strip() == str(self.backend.rank)
        synchronize = synchronize or copy_outputs
        replays, b = self.replays, self.backend
        key = replays.key(inputs, plain=graphs and not owned_results and self.tracer is None and not fail_now)
        self._owning = owned_results
        action, timed = replays.next(key)
        temp_handles: list[Handle] = []
        try:
            if timed:  # a trial run starts on an idle device: the host's latency counts
                b.synchronize()
            captured = replays.captured if action == REPLAY else None
            if action == CAPTURE:
                captured = self._capture(interp, inputs, key)
            if captured is not None:
                start = b.mark() if timed else None
                b.replay(captured.graph)
                replays.replays += action == REPLAY
                if start is not None:
                    replays.sample(GRAPH, start, b.mark(join=True))
                results, flops = captured.results, captured.flops
            else:
                start = b.mark() if timed and action == OPS else None  # not a failed capture
                results, flops, temp_handles = self._run_ops(interp, inputs, fail_now, key)
                if start is not None:
                    replays.sample(OPS, start, b.mark(join=True))
            if synchronize or temp_handles:
                self.backend.synchronize()
            if copy_outputs:
                results = [self.backend.to_host(r) if r is not None else None for r in results]
            if owned_results:
                results = self._hand_out(results)
        finally:
            self._owning = False
            self._owned.clear()
            interp.env = []  # the run's values are not kept alive until the next one
            self.cache.release_all()
        for h in temp_handles:
            self.backend.release_handle(h)
        if self._shares and synchronize:
            self.backend.barrier()  # one-sided copies into this rank are done
        self.last_flops = flops
        self.runs += 1
        return results

    def _hand_out(self, results: Sequence[Any]) -> list[Any]:
        """Results of an `owned_results` run as arrays the caller owns: a
        buffer made for the caller goes as it is; one of the allocation
        cache leaves the cache (its site allocates anew next run), unless
        something is registered for it (shared with peers), when it is
        copied, as is a result that is no buffer of this run (an input
        returned as it is)."""
        out: list[Any] = []
        handed: set[int] = set()  # cache buffers out of the cache in this call (a result may view one twice)
        for r in results:
            if r is None:
                out.append(None)
                continue
            base = id(self.backend.base(r))
            entry = self._entries.get(base)
            if base in self._owned or base in handed:
                out.append(r)
            elif entry is not None and not entry.registrations:
                self.cache.forget(entry)
                del self._entries[base]
                handed.add(base)
                out.append(r)
            else:
                out.append(r.clone(memory_format=torch.contiguous_format))
        return out

    def _run_ops(
        self, interp: "_Interpreter", inputs: Sequence[Array | None], fail_now: bool, key: InputKey | None
    ) -> tuple[list[Any], int, list[Handle]]:
        """One run op by op: its results, flops and handles shared for it alone."""
        b = self.backend
        b.begin_run(self._owner)
        try:
            results = interp.run(inputs, fail_now)
        finally:
            blockers = b.end_run()
        if interp.temp_handles:
            blockers.append("a buffer from outside the allocation cache shared for one run")
        self.replays.ran(key, blockers)
        return results, interp.flops, interp.temp_handles

    def _capture(self, interp: "_Interpreter", inputs: Sequence[Array | None], key: InputKey | None) -> Captured | None:
        """Capture one run as a graph (not launched yet); None (graphs off
        for this program, the run to be made op by op) when the capture
        fails."""
        assert key is not None
        b = self.backend
        b.begin_run(self._owner)
        error: Exception | None = None
        try:
            graph, results = b.capture(lambda: interp.run(inputs, False))
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to running op by op
            error = e
        blockers = b.end_run()
        if error is None and (interp.temp_handles or blockers):
            for h in interp.temp_handles:
                b.release_handle(h)
            what = "; ".join(blockers) or "a buffer shared for one run"
            error = RuntimeError(f"the captured run had {what}")
        if error is not None:
            self.replays.failed(error, f"@{self.func.sym_name.data} on rank {b.rank}")
            interp.env = []
            self.cache.release_all()
            return None
        return self.replays.keep(key, graph, list(results), interp.flops)

    def _start(self) -> _Interpreter:
        """At the first run (after the input checks): make the teams, plan
        the ops for this rank, and make the interpreter every run reuses."""
        if not self._prepared:
            self.backend.prepare_teams(self.teams)
            self._prepared = True
        if self._plan is None:
            self._plan = _Planner(self).plan()
        self._interp = _Interpreter(self, self._plan)
        return self._interp

    def entry_of(self, array: Array) -> CacheEntry | None:
        """The cache entry a buffer (or a view of one) comes from."""
        return self._entries.get(id(self.backend.base(array)))

    def acquire(self, site: str, shape: tuple[int, ...], dtype: torch.dtype) -> CacheEntry:
        if self._owning and site in self.result_sites:  # the caller's: not cached, on the caller's stream
            buffer = self.backend.empty_for_caller(shape, dtype)
            self._owned.add(id(buffer))
            return CacheEntry((site, shape, dtype), -1, buffer, in_use=True)
        entry = self.cache.acquire(site, shape, dtype)
        self._entries[id(entry.buffer)] = entry
        return entry

    def close(self) -> None:
        """Release the shared handles of cached buffers and drop the cache
        (collective: every rank closes its programs in the same order)."""
        self.backend.synchronize()
        self.replays.drop()
        self.backend.forget_owner(self._owner)
        self.cache.clear(self.backend.release_handle)
        self._entries.clear()


def _result_sites(func: FuncOp) -> frozenset[str]:
    """Allocation sites whose buffers `func` returns (directly, through
    views, or yielded out of a region), except buffers shared with peers
    (their registrations are kept with the cached buffer)."""
    shared = {_alloc_root(op.operands[0]) for op in func.walk() if isinstance(op, hir.ShareOp)}
    ret = func.body.blocks[0].last_op
    stack: list[SSAValue] = list(ret.operands) if ret is not None else []
    seen: set[SSAValue] = set()
    sites: set[str] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        op = v.owner
        if isinstance(op, hir.AllocOp):
            if v not in shared:
                sites.add(op.site)
        elif isinstance(op, hir.VIEW_OPS):
            stack.append(op.operands[0])
        elif isinstance(op, Operation) and isinstance(v, OpResult):
            for region in op.regions:
                for block in region.blocks:
                    last = block.last_op
                    if isinstance(last, hir.YieldOp) and v.index < len(last.operands):
                        stack.append(last.operands[v.index])
    return frozenset(sites)


def _alloc_root(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, hir.VIEW_OPS):
        v = v.owner.operands[0]
    return v


def collect_teams(func: FuncOp) -> list[Team]:
    """Every team the program communicates over, in a deterministic order
    (the same on every rank)."""
    teams = {
        tuple(op.team)
        for op in func.walk()
        if isinstance(op, (*hir.COMMUNICATION_OPS, hir.ShareOp))
    }
    return sorted(teams, key=lambda t: (len(t), t))


def mesh_ranks(meshes: dict[str, Mesh]) -> tuple[int, str]:
    """The ranks the meshes need (the largest device id + 1), and why;
    arithmetic, whatever the size of the meshes."""
    best, why = 1, "one rank"
    for mesh in meshes.values():
        top = mesh.max_device + 1
        if top > best:
            best, why = top, f"mesh @{mesh.name} uses device {top - 1}"
    return best, why


def require_ranks(anchor: Operation, needed: int, why: str, size: int) -> None:
    """A diagnostic at `anchor` when a job of `size` ranks is too small."""
    if needed > size:
        raise error_at(
            anchor,
            f"the program needs {needed} ranks ({why}) but the job has {size}; run it with mpiexec -n {needed} "
            f"or torchrun --nproc-per-node {needed}",
        )


def _required_ranks(func: FuncOp, meshes: dict[str, Mesh]) -> tuple[int, str]:
    """The ranks the job needs (the largest device id used + 1), and why."""
    best, why = mesh_ranks(meshes)
    for op in func.walk():
        ranks = getattr(op, "team", None) if isinstance(op, hir.TeamOp) else None
        if isinstance(op, hir.IfRankOp):
            ranks = op.ranks
        if ranks and max(ranks) + 1 > best:
            best, why = max(ranks) + 1, f"'{op.name}' uses rank {max(ranks)}"
    return best, why


def _used_devices(meshes: dict[str, Mesh], required: int) -> int:
    """The number of devices the program runs on (for per-GPU figures)."""
    devices = {d for m in meshes.values() for d in m.devices}
    return len(devices) if devices else required


def matmul_flops(a_shape: Sequence[int], out_shape: Sequence[int]) -> int:
    """2*M*N*K of a matmul/linear: K is the contracted extent."""
    k = a_shape[-1] if a_shape else 1
    return 2 * math.prod(out_shape) * k


# --------------------------------------------------------------------------
# Interpretation
# --------------------------------------------------------------------------
#
# A program is planned once, at its first run: every SSA value gets a slot in
# a flat list (the run's environment), and every op becomes a `_Step` that
# holds what the op needs on every run, read from the IR once: a closure over
# its static attributes and slots, the slots of the operands that must be
# present, and whether this rank skips it. Each block becomes one function
# that calls its steps in turn (`_compile`). A run then does list indexing and
# backend calls, not IR property access nor a walk over step objects: the
# host's time from `run_prepared` to the first kernel, and between kernels,
# is time the device may sit idle.

Run = Callable[["_Interpreter"], None]
"""One op's work in a run, its static attributes already bound."""

Prepare = Callable[["_Planner", Any], Run]
"""Makes the `Run` of an op (once per program)."""

_PREPARE: dict[type[Operation], Prepare] = {}


def _prepares(*classes: type[Operation]) -> Callable[[Prepare], Prepare]:
    def register(fn: Prepare) -> Prepare:
        for c in classes:
            _PREPARE[c] = fn
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


class _Step:
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
        self.run: Run = run if run is not None else _absent(results)
        self.required = required
        self.strict = strict
        self.results = results


@dataclass(frozen=True)
class _BlockPlan:
    """The steps of a block, the function that runs them (`_compile`), and
    the slots its terminator hands back (None: the block has no such
    terminator)."""

    steps: tuple[_Step, ...]
    ends: tuple[int, ...] | None
    run: Run


@dataclass(frozen=True)
class _Plan:
    """A host program planned for this rank. The function's arguments have
    the first slots, in order."""

    slots: int  # the size of a run's environment
    args: int  # the number of arguments
    body: _BlockPlan


class _Planner:
    """Plans a program for this rank: slots for SSA values, steps for ops."""

    def __init__(self, program: Program):
        self.program = program
        self.backend = program.backend
        self.rank = program.backend.rank
        self._slots: dict[SSAValue, int] = {}

    def plan(self) -> _Plan:
        block = self.program.func.body.block
        args = self.slots(block.args)
        assert args == tuple(range(len(args)))  # a run's environment starts with its inputs
        body = self.block(block, ReturnOp)
        return _Plan(len(self._slots), len(args), body)

    def slot(self, v: SSAValue) -> int:
        s = self._slots.get(v)
        if s is None:
            s = self._slots[v] = len(self._slots)
        return s

    def slots(self, values: Sequence[SSAValue]) -> tuple[int, ...]:
        return tuple(self.slot(v) for v in values)

    def block(self, block: Block, end: type[Operation]) -> _BlockPlan:
        """The steps up to the first `end` op, whose operands the block hands back."""
        self.slots(block.args)
        steps: list[_Step] = []
        ends: tuple[int, ...] | None = None
        for op in block.ops:
            if isinstance(op, end):
                ends = self.slots(op.operands)
                break
            steps.append(self.step(op))
        return _BlockPlan(tuple(steps), ends, _compile(tuple(steps)))

    def step(self, op: Operation) -> _Step:
        results = self.slots(op.results)
        prepare = _PREPARE.get(type(op))
        if prepare is None:
            return _Step(op, _unsupported(op), (), False, results)
        if isinstance(op, hir.TeamOp) and self.rank not in op.team:
            return _Step(op, None, (), False, results)
        optional = {getattr(op, name) for name in _ROOT_ONLY.get(type(op), ())}
        required = tuple(
            self.slot(v) for v in op.operands if v not in optional and not isinstance(v.type, hir.TokenType)
        )
        return _Step(op, prepare(self, op), required, isinstance(op, _STRICT), results)


def _unsupported(op: Operation) -> Run:
    """An op without a handler: an error when (and only when) a run reaches it."""

    def run(it: _Interpreter) -> None:
        raise error_at(op, f"the host evaluator cannot run '{op.name}'")

    return run


def _absent(results: tuple[int, ...]) -> Run:
    """The step of an op this rank skips: its results are absent."""

    def run(it: _Interpreter) -> None:
        env = it.env
        for r in results:
            env[r] = None

    return run


_PASS_THROUGH = (Diagnostic, InjectedFailure)
"""Errors that already say where they come from (no note is added)."""


def _compile(steps: tuple[_Step, ...]) -> Run:
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


def _nothing(it: _Interpreter) -> None:
    """An empty block."""


class _Interpreter:
    """Runs a program's plan on this rank. One is made with the plan and
    serves every run: a run sets its state afresh (the values of the SSA
    values, by slot; its flops; the handles it shared for itself alone; the
    program's tracer)."""

    __slots__ = ("program", "backend", "rank", "env", "flops", "temp_handles", "tracer", "_plan", "_pad")

    def __init__(self, program: Program, plan: _Plan):
        self.program = program
        self.backend = program.backend
        self.rank = program.backend.rank
        self.env: list[Any] = []
        self.flops = 0
        self.temp_handles: list[Handle] = []
        self.tracer: Any = None
        self._plan = plan
        self._pad = (None,) * (plan.slots - plan.args)

    def run(self, inputs: Sequence[Array | None], fail_now: bool) -> list[Any]:
        plan = self._plan
        if len(inputs) != plan.args:
            raise error_at(self.program.func, f"expected {plan.args} inputs, got {len(inputs)}")
        self.env = env = [*inputs, *self._pad]
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

    def skip(self, step: _Step) -> None:
        """A step missing a required operand: absent results, or an error
        for a strict op."""
        if step.strict:
            op = step.op
            raise error_at(op, f"'{op.name}': an operand is absent on rank {self.rank}, a member of its team")
        env = self.env
        for r in step.results:
            env[r] = None

    def run_traced(self, steps: Sequence[_Step]) -> None:
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


def _position(op: Operation, value: Any, size: int, what: str) -> int:
    """A team position from an index value, checked against the team size."""
    p = int(value)
    if not 0 <= p < size:
        raise error_at(op, f"'{op.name}': {what} position {p} is out of range for a team of {size} ranks")
    return p


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


# ---- allocation -----------------------------------------------------------


@_prepares(hir.AllocOp)
def _alloc(pl: _Planner, op: hir.AllocOp) -> Run:
    t = op.result.type
    assert isinstance(t, TensorType)
    site, shape, dtype = op.site, tuple(t.get_shape()), torch_dtype(t.element_type)
    result, acquire = pl.slot(op.result), pl.program.acquire

    def run(it: _Interpreter) -> None:
        it.env[result] = acquire(site, shape, dtype).buffer

    return run


@_prepares(hir.DeallocOp)
def _dealloc(pl: _Planner, op: hir.DeallocOp) -> Run:
    buffer, program = pl.slot(op.buffer), pl.program

    def run(it: _Interpreter) -> None:
        entry = program.entry_of(it.env[buffer])
        if entry is not None:
            program.cache.release(entry)

    return run


# ---- control ----------------------------------------------------------------


@_prepares(hir.ForOp)
def _for(pl: _Planner, op: hir.ForOp) -> Run:
    body = pl.block(op.body.block, hir.YieldOp).run
    index, indices = pl.slot(op.induction_var), op.indices

    def run(it: _Interpreter) -> None:
        env = it.env
        for i in indices:
            env[index] = i
            body(it)

    return run


@_prepares(hir.IfRankOp)
def _if_rank(pl: _Planner, op: hir.IfRankOp) -> Run:
    results = pl.slots(op.results)
    if pl.rank not in op.ranks:
        return _absent(results)
    body = pl.block(op.body.block, hir.YieldOp)
    block, yields = body.run, body.ends or ()
    if len(yields) != len(results):
        raise error_at(op, f"'{op.name}' yields {len(yields)} values for {len(results)} results")
    moves = tuple(zip(results, yields))

    def run(it: _Interpreter) -> None:
        block(it)
        env = it.env
        for r, v in moves:
            env[r] = env[v]

    return run


@_prepares(hir.ConstantOp)
def _constant(pl: _Planner, op: hir.ConstantOp) -> Run:
    result, value = pl.slot(op.result), op.value

    def run(it: _Interpreter) -> None:
        it.env[result] = value

    return run


@_prepares(hir.TeamIndexOp)
def _team_index(pl: _Planner, op: hir.TeamIndexOp) -> Run:
    result, value = pl.slot(op.result), op.team.index(pl.rank)  # planned on members only

    def run(it: _Interpreter) -> None:
        it.env[result] = value

    return run


@_prepares(hir.TeamRankOp)
def _team_rank(pl: _Planner, op: hir.TeamRankOp) -> Run:
    result, position, team = pl.slot(op.result), pl.slot(op.position), op.team
    size = len(team)

    def run(it: _Interpreter) -> None:
        env = it.env
        env[result] = team[_position(op, env[position], size, "team")]

    return run


@_prepares(hir.DivOp)
def _div(pl: _Planner, op: hir.DivOp) -> Run:
    result, lhs, divisor = pl.slot(op.result), pl.slot(op.lhs), op.divisor

    def run(it: _Interpreter) -> None:
        env = it.env
        env[result] = int(env[lhs]) // divisor

    return run


@_prepares(hir.AddModOp)
def _add_mod(pl: _Planner, op: hir.AddModOp) -> Run:
    result, lhs, rhs, modulus = pl.slot(op.result), pl.slot(op.lhs), pl.slot(op.rhs), op.modulus

    def run(it: _Interpreter) -> None:
        env = it.env
        env[result] = (int(env[lhs]) + int(env[rhs])) % modulus

    return run


# ---- streams and events -----------------------------------------------------


@_prepares(hir.GetCurrentStreamOp)
def _get_stream(pl: _Planner, op: hir.GetCurrentStreamOp) -> Run:
    stream, b = pl.slot(op.stream), pl.backend

    def run(it: _Interpreter) -> None:
        it.env[stream] = b.get_current_stream()

    return run


@_prepares(hir.SetCurrentStreamOp)
def _set_stream(pl: _Planner, op: hir.SetCurrentStreamOp) -> Run:
    stream, b = pl.slot(op.stream), pl.backend

    def run(it: _Interpreter) -> None:
        b.set_current_stream(it.env[stream])

    return run


@_prepares(hir.StreamForOp)
def _stream_for(pl: _Planner, op: hir.StreamForOp) -> Run:
    stream, index, count, b = pl.slot(op.stream), pl.slot(op.index), op.count, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        env[stream] = b.stream_for(int(env[index]), count)

    return run


@_prepares(hir.SyncStreamOp)
def _sync_stream(pl: _Planner, op: hir.SyncStreamOp) -> Run:
    """Record an event on %s, then the current stream waits for it."""
    stream, b = pl.slot(op.stream), pl.backend

    def run(it: _Interpreter) -> None:
        current = b.get_current_stream()
        b.set_current_stream(it.env[stream])
        event = b.record_event()
        b.set_current_stream(current)
        b.wait_event(event)

    return run


@_prepares(hir.RecordEventOp)
def _record_event(pl: _Planner, op: hir.RecordEventOp) -> Run:
    event, b = pl.slot(op.event), pl.backend

    def run(it: _Interpreter) -> None:
        it.env[event] = b.record_event()

    return run


@_prepares(hir.WaitEventOp)
def _wait_event(pl: _Planner, op: hir.WaitEventOp) -> Run:
    event, b = pl.slot(op.event), pl.backend

    def run(it: _Interpreter) -> None:
        b.wait_event(it.env[event])

    return run


# ---- communication -----------------------------------------------------------


@_prepares(hir.AllgatherOp)
def _allgather(pl: _Planner, op: hir.AllgatherOp) -> Run:
    token, inp, out, team, b = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        env[token] = b.allgather(env[inp], env[out], team)

    return run


@_prepares(hir.BroadcastOp)
def _broadcast(pl: _Planner, op: hir.BroadcastOp) -> Run:
    token, buf, root, team, b = pl.slot(op.token), pl.slot(op.buffer), pl.slot(op.root), op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        r = _position(op, env[root], len(team), "root")
        env[token] = b.broadcast(env[buf], r, team)

    return run


@_prepares(hir.ScatterOp)
def _scatter(pl: _Planner, op: hir.ScatterOp) -> Run:
    token, inp, out, root = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.slot(op.root)
    team, b = op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        r = _position(op, env[root], len(team), "root")
        env[token] = b.scatter(env[inp], env[out], r, team)

    return run


@_prepares(hir.GatherOp)
def _gather(pl: _Planner, op: hir.GatherOp) -> Run:
    token, inp, out, root = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.slot(op.root)
    team, b = op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        r = _position(op, env[root], len(team), "root")
        env[token] = b.gather(env[inp], env[out], r, team)

    return run


@_prepares(hir.ReduceOp)
def _reduce(pl: _Planner, op: hir.ReduceOp) -> Run:
    token, inp, out, root = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.slot(op.root)
    team, b, red = op.team, pl.backend, reduce_op_name(op.reduction_op)

    def run(it: _Interpreter) -> None:
        env = it.env
        r = _position(op, env[root], len(team), "root")
        env[token] = b.reduce(env[inp], env[out], r, red, team)

    return run


@_prepares(hir.AllreduceOp)
def _allreduce(pl: _Planner, op: hir.AllreduceOp) -> Run:
    token, inp, out = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output)
    team, b, red = op.team, pl.backend, reduce_op_name(op.reduction_op)

    def run(it: _Interpreter) -> None:
        env = it.env
        env[token] = b.allreduce(env[inp], env[out], red, team)

    return run


@_prepares(hir.ReduceScatterOp)
def _reduce_scatter(pl: _Planner, op: hir.ReduceScatterOp) -> Run:
    token, inp, out = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output)
    team, b, red = op.team, pl.backend, reduce_op_name(op.reduction_op)

    def run(it: _Interpreter) -> None:
        env = it.env
        env[token] = b.reduce_scatter(env[inp], env[out], red, team)

    return run


@_prepares(hir.AlltoallOp)
def _alltoall(pl: _Planner, op: hir.AlltoallOp) -> Run:
    token, inp, out, team, b = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        env[token] = b.alltoall(env[inp], env[out], team)

    return run


@_prepares(hir.SendOp)
def _send(pl: _Planner, op: hir.SendOp) -> Run:
    token, buf, peer, team, b = pl.slot(op.token), pl.slot(op.buffer), pl.slot(op.peer), op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        p = _position(op, env[peer], len(team), "peer")
        env[token] = b.send(env[buf], p, team)

    return run


@_prepares(hir.RecvOp)
def _recv(pl: _Planner, op: hir.RecvOp) -> Run:
    token, buf, peer, team, b = pl.slot(op.token), pl.slot(op.buffer), pl.slot(op.peer), op.team, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        p = _position(op, env[peer], len(team), "peer")
        env[token] = b.recv(env[buf], p, team)

    return run


@_prepares(hir.BarrierOp)
def _barrier(pl: _Planner, op: hir.BarrierOp) -> Run:
    token, team, word = pl.slot(op.token), op.team, op.backend

    def run(it: _Interpreter) -> None:
        it.env[token] = it.backend.team_barrier(team, word)

    return run


@_prepares(hir.WaitOp)
def _wait(pl: _Planner, op: hir.WaitOp) -> Run:
    token, b = pl.slot(op.token), pl.backend

    def run(it: _Interpreter) -> None:
        work = it.env[token]
        if work is not None:
            b.wait(work)

    return run


# ---- views -----------------------------------------------------------------------


@_prepares(hir.SelectOp)
def _select(pl: _Planner, op: hir.SelectOp) -> Run:
    result, source, index, dim, b = pl.slot(op.result), pl.slot(op.source), pl.slot(op.index), op.dim, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        env[result] = b.select(env[source], dim, int(env[index]))

    return run


@_prepares(hir.ChunkOp)
def _chunk(pl: _Planner, op: hir.ChunkOp) -> Run:
    result, source, index = pl.slot(op.result), pl.slot(op.source), pl.slot(op.index)
    dim, chunks, b = op.dim, op.chunks, pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        i = int(env[index])
        if not 0 <= i < chunks:
            raise error_at(op, f"chunk index {i} is out of range for chunks = {chunks}")
        env[result] = b.chunk(env[source], dim, i, chunks)

    return run


@_prepares(hir.ViewOp)
def _view(pl: _Planner, op: hir.ViewOp) -> Run:
    result, source, shape, b = pl.slot(op.result), pl.slot(op.source), _shape(op.result), pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        env[result] = b.reshape_view(env[source], shape)

    return run


# ---- compute -----------------------------------------------------------------------


@_prepares(hir.MatmulOp)
def _matmul(pl: _Planner, op: hir.MatmulOp) -> Run:
    lhs, rhs, out, b = pl.slot(op.lhs), pl.slot(op.rhs), pl.slot(op.out), pl.backend
    flops = matmul_flops(_shape(op.lhs), _shape(op.out))  # buffers have their types' shapes
    if op.acc is not None:
        acc = pl.slot(op.acc)

        def run_acc(it: _Interpreter) -> None:
            env = it.env
            b.matmul(env[lhs], env[rhs], env[out], env[acc])
            it.flops += flops

        return run_acc

    def run(it: _Interpreter) -> None:
        env = it.env
        b.matmul(env[lhs], env[rhs], env[out])
        it.flops += flops

    return run


@_prepares(hir.LinearOp)
def _linear(pl: _Planner, op: hir.LinearOp) -> Run:
    x, weight, out, b = pl.slot(op.input), pl.slot(op.weight), pl.slot(op.out), pl.backend
    bias = pl.slot(op.bias) if op.bias is not None else None
    flops = matmul_flops(_shape(op.input), _shape(op.out))
    if op.acc is not None:
        acc = pl.slot(op.acc)

        def run_acc(it: _Interpreter) -> None:
            env = it.env
            b.linear(env[x], env[weight], env[bias] if bias is not None else None, env[out], env[acc])
            it.flops += flops

        return run_acc

    activation = op.activation_name

    def run(it: _Interpreter) -> None:
        env = it.env
        b.linear(env[x], env[weight], env[bias] if bias is not None else None, env[out], activation=activation)
        it.flops += flops

    return run


@_prepares(hir.CopyOp)
def _copy(pl: _Planner, op: hir.CopyOp) -> Run:
    source, dest, b = pl.slot(op.source), pl.slot(op.dest), pl.backend

    def run(it: _Interpreter) -> None:
        env = it.env
        b.copy(env[source], env[dest])

    return run


@_prepares(hir.LaunchOp)
def _launch(pl: _Planner, op: hir.LaunchOp) -> Run:
    body, ins, outs, b = op.body.block, pl.slots(op.ins), pl.slots(op.outs), pl.backend
    meshes = _meshes(pl.program.module)
    contexts = {o: c for o in body.ops if (c := block_context(o, pl.rank, meshes.get)) is not None}

    def run(it: _Interpreter) -> None:
        env = it.env
        b.launch(body, [env[s] for s in ins], [env[s] for s in outs], contexts)

    return run


# ---- peer-to-peer ------------------------------------------------------------------


@_prepares(hir.ShareOp)
def _share(pl: _Planner, op: hir.ShareOp) -> Run:
    """Once per cached allocation (and view of it): the handle is kept with
    the cache entry. A buffer from outside the cache is shared for this run
    only."""
    handle_slot, buffer, team, b, program = pl.slot(op.handle), pl.slot(op.buffer), op.team, pl.backend, pl.program

    def run(it: _Interpreter) -> None:
        buf = it.env[buffer]
        entry = program.entry_of(buf)
        if entry is None:
            handle = b.share(buf, team)
            it.temp_handles.append(handle)
        else:
            key: Hashable = ("share", team, b.view_key(buf))
            handle = entry.registrations.get(key)
            if handle is None:
                handle = entry.registrations[key] = b.share(buf, team)
        it.env[handle_slot] = handle

    return run


def _block_index(op: Operation, value: Any, chunks: int) -> int:
    """The block index of `block %i of N`, checked against N."""
    index = int(value)
    if not 0 <= index < chunks:
        raise error_at(op, f"'{op.name}': block index {index} is out of range for {chunks} blocks")
    return index


@_prepares(hir.PutOp)
def _put(pl: _Planner, op: hir.PutOp) -> Run:
    token, source, handle, peer = pl.slot(op.token), pl.slot(op.source), pl.slot(op.handle), pl.slot(op.peer)
    chunks, b = op.chunks, pl.backend
    if op.block is None or chunks is None:

        def run(it: _Interpreter) -> None:
            env = it.env
            h = env[handle]
            p = _position(op, env[peer], len(h.team), "peer")
            env[token] = b.put(env[source], h, p)

        return run
    block = pl.slot(op.block)

    def run_block(it: _Interpreter) -> None:
        env = it.env
        h = env[handle]
        p = _position(op, env[peer], len(h.team), "peer")
        i = _block_index(op, env[block], chunks)
        env[token] = b.put_block(env[source], h, p, i, chunks)

    return run_block


@_prepares(hir.GetOp)
def _get(pl: _Planner, op: hir.GetOp) -> Run:
    token, handle, peer, dest = pl.slot(op.token), pl.slot(op.handle), pl.slot(op.peer), pl.slot(op.dest)
    chunks, b = op.chunks, pl.backend
    if op.block is None or chunks is None:

        def run(it: _Interpreter) -> None:
            env = it.env
            h = env[handle]
            p = _position(op, env[peer], len(h.team), "peer")
            env[token] = b.get(h, p, env[dest])

        return run
    block = pl.slot(op.block)

    def run_block(it: _Interpreter) -> None:
        env = it.env
        h = env[handle]
        p = _position(op, env[peer], len(h.team), "peer")
        i = _block_index(op, env[block], chunks)
        env[token] = b.get_block(h, p, env[dest], i, chunks)

    return run_block

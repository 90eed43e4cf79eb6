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

Testing hook: with the environment variable `FUSERC_FAIL_RANK=r`, rank r
raises an error at the first op of every run, so that failure handling can
be tested end to end.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import SymbolTable

from fuserc.diagnostics import Diagnostic, error_at, location_of
from fuserc.dialects import hir
from fuserc.dialects.fusion import MeshOp, sharding_of
from fuserc.runtime.alloc_cache import AllocationCache, CacheEntry
from fuserc.runtime.backend import Array, Backend, Handle, Team, reduce_op_name
from fuserc.runtime.reference import torch_dtype
from fuserc.sharding import Mesh, Sharding

FAIL_RANK_ENV = "FUSERC_FAIL_RANK"
"""Testing hook: the rank that raises at the first op of a run."""


class InjectedFailure(RuntimeError):
    """The failure raised on the rank named by FUSERC_FAIL_RANK."""


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
        if self.required_ranks > backend.size:
            raise error_at(
                func,
                f"the program needs {self.required_ranks} ranks ({why}) but the job has "
                f"{backend.size}; run it with mpiexec -n {self.required_ranks}",
            )
        self.devices = _used_devices(meshes, self.required_ranks)
        self.teams = collect_teams(func)
        self._shares = any(isinstance(op, hir.ShareOp) for op in func.walk())
        self._prepared = False  # teams are made at the first run, after the input checks
        self.cache = AllocationCache(backend.empty)
        self._entries: dict[int, CacheEntry] = {}
        self.last_flops = 0
        self.runs = 0
        self.tracer: Any = None  # a runtime.trace.Tracer while a run is traced

    @staticmethod
    def load(module: ModuleOp, entry: str, backend: Backend) -> "Program":
        return Program(module, find_host_program(module, entry), backend)

    # ---- inputs -------------------------------------------------------------
    def prepare_inputs(self, values: Sequence[Any]) -> list[Array | None]:
        """Check this rank's local inputs (shape, dtype) and upload them."""
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
            out.append(self.backend.from_host(value))
        return out

    # ---- running ------------------------------------------------------------
    def run(self, inputs: Sequence[Any]) -> list[torch.Tensor | None]:
        """Run once on host inputs; results are CPU tensors (copies)."""
        return self.run_prepared(self.prepare_inputs(inputs), copy_outputs=True)

    def run_prepared(self, inputs: Sequence[Array | None], copy_outputs: bool = False) -> list[Any]:
        """Run once on inputs from `prepare_inputs`. Without `copy_outputs`
        the results are the program's buffers, overwritten by the next run."""
        if not self._prepared:
            self.backend.prepare_teams(self.teams)
            self._prepared = True
        fail = os.environ.get(FAIL_RANK_ENV)
        interp = _Interpreter(self, fail_now=fail is not None and fail.strip() == str(self.backend.rank))
        temp_handles: list[Handle] = []
        try:
            results = interp.run(inputs, temp_handles)
            self.backend.synchronize()
            if copy_outputs:
                results = [self.backend.to_host(r) if r is not None else None for r in results]
        finally:
            self.cache.release_all()
        for h in temp_handles:
            self.backend.release_handle(h)
        if self._shares:
            self.backend.barrier()  # one-sided copies into this rank are done
        self.last_flops = interp.flops
        self.runs += 1
        return results

    def entry_of(self, array: Array) -> CacheEntry | None:
        """The cache entry a buffer (or a view of one) comes from."""
        return self._entries.get(id(self.backend.base(array)))

    def acquire(self, site: str, shape: tuple[int, ...], dtype: torch.dtype) -> CacheEntry:
        entry = self.cache.acquire(site, shape, dtype)
        self._entries[id(entry.buffer)] = entry
        return entry

    def close(self) -> None:
        """Release the shared handles of cached buffers and drop the cache
        (collective: every rank closes its programs in the same order)."""
        self.backend.synchronize()
        self.cache.clear(self.backend.release_handle)
        self._entries.clear()


def collect_teams(func: FuncOp) -> list[Team]:
    """Every team the program communicates over, in a deterministic order
    (the same on every rank)."""
    teams = {
        tuple(op.team)
        for op in func.walk()
        if isinstance(op, (*hir.COMMUNICATION_OPS, hir.ShareOp))
    }
    return sorted(teams, key=lambda t: (len(t), t))


def _required_ranks(func: FuncOp, meshes: dict[str, Mesh]) -> tuple[int, str]:
    """The ranks the job needs (the largest device id used + 1), and why."""
    best, why = 1, "one rank"
    for mesh in meshes.values():
        top = max(mesh.devices) + 1
        if top > best:
            best, why = top, f"mesh @{mesh.name} uses device {top - 1}"
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

Handler = Callable[["_Interpreter", Operation], None]
_HANDLERS: dict[type[Operation], Handler] = {}


def _handles(*classes: type[Operation]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for c in classes:
            _HANDLERS[c] = fn
        return fn

    return register


_ROOT_ONLY: dict[type[Operation], tuple[str, ...]] = {
    hir.ScatterOp: ("input",),
    hir.GatherOp: ("output",),
    hir.ReduceOp: ("output",),
}
"""Communication operands used on the root only (they may be absent elsewhere)."""


class _Interpreter:
    """One run of a program: the values of SSA values, op by op."""

    def __init__(self, program: Program, fail_now: bool):
        self.program = program
        self.backend = program.backend
        self.rank = program.backend.rank
        self.env: dict[SSAValue, Any] = {}
        self.flops = 0
        self._fail_now = fail_now
        self._temp_handles: list[Handle] = []

    def run(self, inputs: Sequence[Array | None], temp_handles: list[Handle]) -> list[Any]:
        self._temp_handles = temp_handles
        block = self.program.func.body.block
        if len(inputs) != len(block.args):
            raise error_at(self.program.func, f"expected {len(block.args)} inputs, got {len(inputs)}")
        for arg, value in zip(block.args, inputs):
            self.env[arg] = value
        for op in block.ops:
            if isinstance(op, ReturnOp):
                return [self.env[v] for v in op.operands]
            self.execute(op)
        raise error_at(self.program.func, "host program without func.return")

    def run_block(self, block: Block) -> list[Any]:
        """Run a region's block; the values its hir.yield yields."""
        for op in block.ops:
            if isinstance(op, hir.YieldOp):
                return [self.env[v] for v in op.values]
            self.execute(op)
        return []

    def execute(self, op: Operation) -> None:
        if self._fail_now:
            self._fail_now = False
            raise InjectedFailure(f"{FAIL_RANK_ENV}={self.rank}: injected failure at '{op.name}'")
        handler = _HANDLERS.get(type(op))
        if handler is None:
            raise error_at(op, f"the host evaluator cannot run '{op.name}'")
        team = op.team if isinstance(op, hir.TeamOp) else None
        if team is not None and self.rank not in team:
            self._absent(op)
            return
        if not self._operands_present(op):
            self._absent(op)
            return
        tracer = self.program.tracer
        span = tracer.begin(op) if tracer is not None else None
        try:
            handler(self, op)
        except (Diagnostic, InjectedFailure):
            raise
        except Exception as e:
            loc = location_of(op)
            e.add_note(f"while running '{op.name}'" + (f" at {loc}" if loc else "") + f" on rank {self.rank}")
            raise
        if span is not None:
            tracer.end(span, [self.env.get(r) for r in op.results])

    def _operands_present(self, op: Operation) -> bool:
        """Tensor operands must be present, except root-only ones; a member
        of a team must have every operand it uses."""
        optional = {getattr(op, name) for name in _ROOT_ONLY.get(type(op), ())}
        missing = [
            v
            for v in op.operands
            if self.env.get(v) is None and v not in optional and not isinstance(v.type, hir.TokenType)
        ]
        if not missing:
            return True
        if isinstance(op, (*hir.COMMUNICATION_OPS, hir.ShareOp)):
            raise error_at(op, f"'{op.name}': an operand is absent on rank {self.rank}, a member of its team")
        return False

    def _absent(self, op: Operation) -> None:
        for r in op.results:
            self.env[r] = None

    def value(self, v: SSAValue) -> Any:
        return self.env[v]

    def position(self, op: Operation, v: SSAValue, team: Team, what: str) -> int:
        p = int(self.env[v])
        if not 0 <= p < len(team):
            raise error_at(op, f"'{op.name}': {what} position {p} is out of range for a team of {len(team)} ranks")
        return p


# ---- allocation -----------------------------------------------------------


@_handles(hir.AllocOp)
def _alloc(it: _Interpreter, op: hir.AllocOp) -> None:
    t = op.result.type
    assert isinstance(t, TensorType)
    entry = it.program.acquire(op.site, tuple(t.get_shape()), torch_dtype(t.element_type))
    it.env[op.result] = entry.buffer


@_handles(hir.DeallocOp)
def _dealloc(it: _Interpreter, op: hir.DeallocOp) -> None:
    entry = it.program.entry_of(it.value(op.buffer))
    if entry is not None:
        it.program.cache.release(entry)


# ---- control ----------------------------------------------------------------


@_handles(hir.ForOp)
def _for(it: _Interpreter, op: hir.ForOp) -> None:
    for i in op.indices:
        it.env[op.induction_var] = i
        it.run_block(op.body.block)


@_handles(hir.IfRankOp)
def _if_rank(it: _Interpreter, op: hir.IfRankOp) -> None:
    if it.rank not in op.ranks:
        it._absent(op)
        return
    values = it.run_block(op.body.block)
    for r, v in zip(op.results, values, strict=True):
        it.env[r] = v


@_handles(hir.ConstantOp)
def _constant(it: _Interpreter, op: hir.ConstantOp) -> None:
    it.env[op.result] = op.value


@_handles(hir.TeamIndexOp)
def _team_index(it: _Interpreter, op: hir.TeamIndexOp) -> None:
    it.env[op.result] = op.team.index(it.rank)


@_handles(hir.TeamRankOp)
def _team_rank(it: _Interpreter, op: hir.TeamRankOp) -> None:
    it.env[op.result] = op.team[it.position(op, op.position, op.team, "team")]


@_handles(hir.DivOp)
def _div(it: _Interpreter, op: hir.DivOp) -> None:
    it.env[op.result] = int(it.value(op.lhs)) // op.divisor


@_handles(hir.AddModOp)
def _add_mod(it: _Interpreter, op: hir.AddModOp) -> None:
    it.env[op.result] = (int(it.value(op.lhs)) + int(it.value(op.rhs))) % op.modulus


# ---- streams and events -----------------------------------------------------


@_handles(hir.GetCurrentStreamOp)
def _get_stream(it: _Interpreter, op: hir.GetCurrentStreamOp) -> None:
    it.env[op.stream] = it.backend.get_current_stream()


@_handles(hir.SetCurrentStreamOp)
def _set_stream(it: _Interpreter, op: hir.SetCurrentStreamOp) -> None:
    it.backend.set_current_stream(it.value(op.stream))


@_handles(hir.StreamForOp)
def _stream_for(it: _Interpreter, op: hir.StreamForOp) -> None:
    it.env[op.stream] = it.backend.stream_for(int(it.value(op.index)), op.count)


@_handles(hir.SyncStreamOp)
def _sync_stream(it: _Interpreter, op: hir.SyncStreamOp) -> None:
    """Record an event on %s, then the current stream waits for it."""
    b = it.backend
    current = b.get_current_stream()
    b.set_current_stream(it.value(op.stream))
    event = b.record_event()
    b.set_current_stream(current)
    b.wait_event(event)


@_handles(hir.RecordEventOp)
def _record_event(it: _Interpreter, op: hir.RecordEventOp) -> None:
    it.env[op.event] = it.backend.record_event()


@_handles(hir.WaitEventOp)
def _wait_event(it: _Interpreter, op: hir.WaitEventOp) -> None:
    it.backend.wait_event(it.value(op.event))


# ---- communication -----------------------------------------------------------


@_handles(hir.AllgatherOp)
def _allgather(it: _Interpreter, op: hir.AllgatherOp) -> None:
    it.env[op.token] = it.backend.allgather(it.value(op.input), it.value(op.output), op.team)


@_handles(hir.BroadcastOp)
def _broadcast(it: _Interpreter, op: hir.BroadcastOp) -> None:
    root = it.position(op, op.root, op.team, "root")
    it.env[op.token] = it.backend.broadcast(it.value(op.buffer), root, op.team)


@_handles(hir.ScatterOp)
def _scatter(it: _Interpreter, op: hir.ScatterOp) -> None:
    root = it.position(op, op.root, op.team, "root")
    it.env[op.token] = it.backend.scatter(it.env.get(op.input), it.value(op.output), root, op.team)


@_handles(hir.GatherOp)
def _gather(it: _Interpreter, op: hir.GatherOp) -> None:
    root = it.position(op, op.root, op.team, "root")
    it.env[op.token] = it.backend.gather(it.value(op.input), it.env.get(op.output), root, op.team)


@_handles(hir.ReduceOp)
def _reduce(it: _Interpreter, op: hir.ReduceOp) -> None:
    root = it.position(op, op.root, op.team, "root")
    red = reduce_op_name(op.reduction_op)
    it.env[op.token] = it.backend.reduce(it.value(op.input), it.env.get(op.output), root, red, op.team)


@_handles(hir.AllreduceOp)
def _allreduce(it: _Interpreter, op: hir.AllreduceOp) -> None:
    red = reduce_op_name(op.reduction_op)
    it.env[op.token] = it.backend.allreduce(it.value(op.input), it.value(op.output), red, op.team)


@_handles(hir.ReduceScatterOp)
def _reduce_scatter(it: _Interpreter, op: hir.ReduceScatterOp) -> None:
    red = reduce_op_name(op.reduction_op)
    it.env[op.token] = it.backend.reduce_scatter(it.value(op.input), it.value(op.output), red, op.team)


@_handles(hir.AlltoallOp)
def _alltoall(it: _Interpreter, op: hir.AlltoallOp) -> None:
    it.env[op.token] = it.backend.alltoall(it.value(op.input), it.value(op.output), op.team)


@_handles(hir.SendOp)
def _send(it: _Interpreter, op: hir.SendOp) -> None:
    peer = it.position(op, op.peer, op.team, "peer")
    it.env[op.token] = it.backend.send(it.value(op.buffer), peer, op.team)


@_handles(hir.RecvOp)
def _recv(it: _Interpreter, op: hir.RecvOp) -> None:
    peer = it.position(op, op.peer, op.team, "peer")
    it.env[op.token] = it.backend.recv(it.value(op.buffer), peer, op.team)


@_handles(hir.BarrierOp)
def _barrier(it: _Interpreter, op: hir.BarrierOp) -> None:
    it.env[op.token] = it.backend.team_barrier(op.team)


@_handles(hir.WaitOp)
def _wait(it: _Interpreter, op: hir.WaitOp) -> None:
    work = it.env.get(op.token)
    if work is not None:
        it.backend.wait(work)


# ---- views -----------------------------------------------------------------------


@_handles(hir.SelectOp)
def _select(it: _Interpreter, op: hir.SelectOp) -> None:
    it.env[op.result] = it.backend.select(it.value(op.source), op.dim, int(it.value(op.index)))


@_handles(hir.ChunkOp)
def _chunk(it: _Interpreter, op: hir.ChunkOp) -> None:
    index = int(it.value(op.index))
    if not 0 <= index < op.chunks:
        raise error_at(op, f"chunk index {index} is out of range for chunks = {op.chunks}")
    it.env[op.result] = it.backend.chunk(it.value(op.source), op.dim, index, op.chunks)


@_handles(hir.ViewOp)
def _view(it: _Interpreter, op: hir.ViewOp) -> None:
    t = op.result.type
    assert isinstance(t, TensorType)
    it.env[op.result] = it.backend.reshape_view(it.value(op.source), tuple(t.get_shape()))


# ---- compute -----------------------------------------------------------------------


@_handles(hir.MatmulOp)
def _matmul(it: _Interpreter, op: hir.MatmulOp) -> None:
    a, out = it.value(op.lhs), it.value(op.out)
    it.backend.matmul(a, it.value(op.rhs), out)
    it.flops += matmul_flops(tuple(a.shape), tuple(out.shape))


@_handles(hir.LinearOp)
def _linear(it: _Interpreter, op: hir.LinearOp) -> None:
    x, out = it.value(op.input), it.value(op.out)
    bias = it.value(op.bias) if op.bias is not None else None
    it.backend.linear(x, it.value(op.weight), bias, out)
    it.flops += matmul_flops(tuple(x.shape), tuple(out.shape))


@_handles(hir.CopyOp)
def _copy(it: _Interpreter, op: hir.CopyOp) -> None:
    it.backend.copy(it.value(op.source), it.value(op.dest))


@_handles(hir.LaunchOp)
def _launch(it: _Interpreter, op: hir.LaunchOp) -> None:
    it.backend.launch(op.body.block, [it.value(v) for v in op.ins], [it.value(v) for v in op.outs])


# ---- peer-to-peer ------------------------------------------------------------------


@_handles(hir.ShareOp)
def _share(it: _Interpreter, op: hir.ShareOp) -> None:
    """Once per cached allocation (and view of it): the handle is kept with
    the cache entry. A buffer from outside the cache is shared for this run
    only."""
    buf = it.value(op.buffer)
    entry = it.program.entry_of(buf)
    if entry is None:
        handle = it.backend.share(buf, op.team)
        it._temp_handles.append(handle)
    else:
        key: Hashable = ("share", op.team, it.backend.view_key(buf))
        handle = entry.registrations.get(key)
        if handle is None:
            handle = entry.registrations[key] = it.backend.share(buf, op.team)
    it.env[op.handle] = handle


def _block(it: _Interpreter, op: hir.PutOp | hir.GetOp) -> int | None:
    """The block index of `block %i of N` (None without one)."""
    if op.block is None or op.chunks is None:
        return None
    index = int(it.value(op.block))
    if not 0 <= index < op.chunks:
        raise error_at(op, f"'{op.name}': block index {index} is out of range for {op.chunks} blocks")
    return index


@_handles(hir.PutOp)
def _put(it: _Interpreter, op: hir.PutOp) -> None:
    handle = it.value(op.handle)
    peer = it.position(op, op.peer, handle.team, "peer")
    block = _block(it, op)
    if block is None:
        it.env[op.token] = it.backend.put(it.value(op.source), handle, peer)
    else:
        assert op.chunks is not None
        it.env[op.token] = it.backend.put_block(it.value(op.source), handle, peer, block, op.chunks)


@_handles(hir.GetOp)
def _get(it: _Interpreter, op: hir.GetOp) -> None:
    handle = it.value(op.handle)
    peer = it.position(op, op.peer, handle.team, "peer")
    block = _block(it, op)
    if block is None:
        it.env[op.token] = it.backend.get(handle, peer, it.value(op.dest))
    else:
        assert op.chunks is not None
        it.env[op.token] = it.backend.get_block(handle, peer, it.value(op.dest), block, op.chunks)

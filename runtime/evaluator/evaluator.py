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

import contextlib
import gc
import itertools
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from fuserc.diagnostics import error_at, location_of
from fuserc.dialects import hir
from fuserc.dialects.fusion import sharding_of
from fuserc.dialects.interfaces import torch_dtype
from fuserc.passes.plan_memory import memory_plan
from fuserc.runtime.evaluator import stand_ins
from fuserc.runtime.evaluator.alloc_cache import AllocationCache, CacheEntry, MemoryPool
from fuserc.runtime.backends.backend import Array, Backend, Handle, Team
from fuserc.runtime.evaluator.graphs import (
    CAPTURE,
    GRAPH,
    OPS,
    REPLAY,
    Captured,
    InputKey,
    Loans,
    Replays,
    hold_for,
)
from fuserc.runtime.evaluator.interpreter import (  # noqa: F401  (FAIL_RANK_ENV, InjectedFailure re-exported)
    FAIL_RANK_ENV,
    InjectedFailure,
    Interpreter,
    Plan,
    Planner,
    fail_rank,
    module_meshes,
)
from fuserc.runtime.evaluator.interpreter_ops import matmul_flops  # noqa: F401  (re-exported)
from fuserc.runtime.evaluator.reference import function_to_run
from fuserc.runtime.job.startup import KERNELS, Startup
from fuserc.sharding import Mesh, Sharding

_OWNERS = itertools.count()


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
    meshes = module_meshes(module)
    ftype = func.function_type
    params = [_spec(func, meshes, i, t, False) for i, t in enumerate(ftype.inputs.data)]
    results = [_spec(func, meshes, i, t, True) for i, t in enumerate(ftype.outputs.data)]
    return params, results


def find_host_program(module: ModuleOp, entry: str) -> FuncOp:
    """The host program `@entry` of a module (a Diagnostic otherwise)."""
    found = function_to_run(module, entry)
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

    def __init__(self, module: ModuleOp, func: FuncOp, backend: Backend, pool: MemoryPool | None = None):
        self.module = module
        self.func = func
        self.backend = backend
        meshes = module_meshes(module)
        self.params, self.results = signature(module, func)
        self._expected = [(spec, spec.shape, spec.dtype) if spec.present_on(backend.rank) else None for spec in self.params]
        """Each argument's (spec, local shape, dtype) on this rank (None:
        absent here), what `prepare_inputs` checks every input of every run
        against."""
        self.required_ranks, why = _required_ranks(func, meshes)
        widest = max(meshes.values(), key=lambda m: m.max_device, default=None)
        require_ranks(func, self.required_ranks, why, backend.size, widest if widest and widest.max_device + 1 == self.required_ranks else None)
        self.devices = _used_devices(meshes, self.required_ranks)
        self.teams = collect_teams(func)
        self._shares = any(isinstance(op, hir.ShareOp) for op in func.walk())
        self._prepared = False  # teams are made at the first run, after the input checks
        self._plan: Plan | None = None  # the ops prepared for this rank, at the first run
        self._interp: Interpreter | None = None  # runs the plan; made with it
        self.cache = AllocationCache(backend.empty, pool or MemoryPool(backend.empty, hir.storage_blocks(func)))
        if not stand_ins.single_stream(func):
            self.cache.pool.pin(f"@{func.sym_name.data} shares buffers or switches streams")
        self._entries: dict[int, CacheEntry] = {}
        self.last_flops = 0
        self.runs = 0
        self._kernel_runs = 0
        """Runs in a row begun with every generated kernel in. The first of
        them is not gauged: it launches kernels built in the background for
        the first time, and a first launch loads the kernel and may tune it
        (Inductor times a reduction's configurations, waiting for the
        device), host time no later run has, which would tip the gauge
        towards graphs (a training step's replayed forward and backward
        hold their pools between steps: the 12-layer model's peak memory
        tripled when they were kept)."""
        self._host_s: float | None = None
        """The host's time for the last run op by op until the gauge judged
        (the hold before the gauged run: graphs.hold_for)."""
        self.tracer: Any = None  # a runtime.trace.Tracer while a run is traced
        self._owner = next(_OWNERS)  # names this program's runs to the backend
        self.result_sites = _result_sites(func)
        self.result_args = _result_args(func)
        self._owning = False  # in a run whose results go to the caller (`run_prepared(owned_results=True)`)
        self._owned: set[int] = set()  # buffers of result sites made for the caller in this run
        self._lent: list[Any] = []  # cache buffers a run op by op lent (`_hand_out`), written again by the next run
        self.replays = Replays(backend.graphs_unavailable, backend.span, memory_plan(func).planned, backend.memory_bytes())
        self.loans = Loans()  # results of replays handed out as the graph's buffers (`run_prepared(loan=True)`)
        self.startup = Startup()  # its first run: communicators, kernels, the rest (runtime/job/startup.py)
        self.background_kernels = False
        """Whether its generated kernels are made in the background of its
        first runs rather than before them (runtime/kernels/kernel_builds.py)."""
        backend.loaded(func)

    @staticmethod
    def load(module: ModuleOp, entry: str, backend: Backend, pool: MemoryPool | None = None) -> "Program":
        """`pool`: the memory blocks of programs that never run at the same
        time (`memory_pool`); by default the program's own."""
        return Program(module, find_host_program(module, entry), backend, pool)

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
        adopt = self.backend.adopt
        for expected, value in zip(self._expected, values):
            if expected is None:
                out.append(None)
                continue
            spec, shape, dtype = expected
            if not isinstance(value, torch.Tensor):
                value = self._tensor_input(spec, value)
            if value.shape != shape or value.dtype != dtype:
                raise error_at(
                    self.func,
                    f"{spec.label}: expected a local shard {list(spec.shape)} of {spec.dtype} "
                    f"({spec.local_type}), got {list(value.shape)} of {value.dtype}",
                )
            out.append(adopt(value))
        return out

    def _tensor_input(self, spec: ValueSpec, value: Any) -> torch.Tensor:
        """An input that is not a torch tensor: a numpy array's tensor, else an error."""
        if value is None:
            raise error_at(self.func, f"{spec.label} is absent on rank {self.backend.rank}, which holds a shard")
        if isinstance(value, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(value))
        raise error_at(self.func, f"{spec.label} must be a torch tensor or numpy array, got {type(value).__name__}")

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
        lent: Collection[int] = (),
        loan: bool = False,
        donate: Collection[int] = (),
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
        backend can (runtime/evaluator/graphs.py), unless `graphs` is False. With
        `owned_results` the results are the caller's, so that the next run
        cannot overwrite what the caller holds: run op by op, the buffers of
        allocation sites that are results are made for this run on the
        caller's stream (`Backend.empty_for_caller`), not taken from the
        cache, and any other result is handed out (`_hand_out`); replayed,
        each result is copied out of the graph's buffers into one made for
        the caller (`_copied_out`), and the trial times the copies with the
        replay, so a program whose results outweigh its host time keeps
        running op by op. Results at the positions in `lent` (with
        `owned_results`) are the caller's to read only until the program's
        next run: replayed, they are the graph's own buffers, not copies
        (`lends` tells which a caller holds, to copy those it needs longer
        before that run). With `loan` (and `owned_results`) the other results
        of a replay are loaned (`Loans`): the graph's buffers, which the
        caller lets go of before the next run, else they become its own and
        the program copies its results out from then on. The inputs at the
        positions in `donate` are the run's alone (the caller keeps no
        reference): run op by op, it lets go of each after its last read
        (`Interpreter.run`); a captured or replayed run keeps them to its end."""
        self._reclaim()
        self._lent = []
        first = self.runs == 0
        if first:
            clock, kernels_before = time.perf_counter(), KERNELS.copy()
        interp = self._interp
        if interp is None:
            interp = self._start()
        fail = fail_rank()
        fail_now = fail is not None and fail.strip() == str(self.backend.rank)
        synchronize = synchronize or copy_outputs
        replays, b = self.replays, self.backend
        key = replays.key(inputs, plain=graphs and self.tracer is None and not fail_now)
        ready = False
        if not replays.judged:  # gauged once a run before had every kernel in: that run launched each once (`_kernel_runs`)
            kernels_in = b.wait_for_kernels(0)
            ready = kernels_in and self._kernel_runs >= 1
            self._kernel_runs = self._kernel_runs + 1 if kernels_in else 0
        action, timed = replays.next(key, ready=ready)
        if replays.off is None:  # may yet be captured: the pool keeps its blocks (alloc_cache.py)
            self.cache.pool.undecided.add(self._owner)
        else:
            self.cache.pool.undecided.discard(self._owner)
        self._owning = owned_results and action == OPS  # a capture's results are the graph's
        temp_handles: list[Handle] = []
        loaned: list[int] = []
        held: float | None = None  # the hold before a gauged run, seconds
        try:
            if timed:  # a trial run starts on an idle device: the host's latency counts
                b.synchronize()
                if action == OPS and not replays.judged:  # the gauge: the device's time alone
                    held = hold_for(self._host_s)
                    b.hold(held)
            captured = replays.captured if action == REPLAY else None
            if action == CAPTURE:
                captured = self._capture(interp, inputs, key)
            if captured is not None:
                start = b.mark() if timed else None
                b.replay(captured.graph, [(inputs[i], buf) for i, buf in captured.staged.items()])
                replays.replays += action == REPLAY
                results, flops = self._with_arguments(captured.results, inputs), captured.flops
                if owned_results:
                    if loan and self.loans.refused is None:
                        loaned = self._loanable(results, lent)
                    results = self._copied_out(results, {*lent, *loaned})
                if start is not None:
                    replays.sample(GRAPH, start, b.mark(join=True))
            else:
                start = b.mark() if timed and action == OPS else None  # not a failed capture
                clocked = start is not None or not replays.judged  # none on the hot path
                issued = b.host_clock() if clocked else 0.0
                with _no_collection(start is not None):
                    results, flops, temp_handles = self._run_ops(interp, inputs, fail_now, key, donate if action == OPS else ())
                if clocked:
                    self._host_s = b.host_clock() - issued
                if start is not None:
                    replays.sample(OPS, start, b.mark(join=True), self._host_s, held)
            if synchronize or temp_handles:
                self.backend.synchronize()
            if copy_outputs:
                results = [self.backend.to_host(r) if r is not None else None for r in results]
            if owned_results and captured is None:
                results = self._hand_out(results, lent)
        finally:
            self._owning = False
            self._owned.clear()
            interp.env = []  # the run's values are not kept alive until the next one
            self.cache.release_all()
            self.cache.pool.release()  # its blocks go back until the next run takes them (alloc_cache.py)
        for h in temp_handles:
            self.backend.release_handle(h)
        if loaned:  # once the run's own views are gone: `Loans` counts who holds each buffer
            results = self.loans.hand_out(results, loaned)
        if self._shares and synchronize:
            self.backend.barrier()  # one-sided copies into this rank are done
        self.last_flops = flops
        self.runs += 1
        if first:
            kernels = self.startup.kernels = KERNELS.since(kernels_before)
            self.startup.add("kernels", kernels.seconds)
            rest = time.perf_counter() - clock - kernels.seconds - self.startup.seconds.get("communicators", 0.0)
            self.startup.add("first run", max(0.0, rest))
        return results

    def lends(self, result: Any) -> bool:
        """Whether a result handed out under `run_prepared(lent=...)` is a
        buffer the program's next run writes again: one of the graph it
        replays (a buffer of a graph since dropped is the holder's alone),
        or a cached buffer registered with peers that the last run, op by
        op, lent (`_hand_out`)."""
        if any(result is r for r in self._lent):
            return True
        captured = self.replays.captured
        return captured is not None and any(
            result is r for i, r in enumerate(captured.results) if i not in self.result_args
        )

    def _loanable(self, results: Sequence[Any], lent: Collection[int]) -> list[int]:
        """The positions of a replay's results that `loan` hands out as they
        are: the graph's buffers, but for arguments returned as they are and
        buffers registered with peers (copied, as `_hand_out` does)."""
        out = []
        for i, r in enumerate(results):
            if r is None or i in lent or i in self.result_args or r.numel() == 0:
                continue
            entry = self.entry_of(r)
            if entry is None or not entry.registrations:
                out.append(i)
        return out

    def _reclaim(self) -> None:
        """Before a run: loaned buffers the caller still holds become its
        own (they leave the cache, and the graph that writes them is
        dropped, to be captured anew); results are copied out from then on."""
        held = self.loans.held()
        if not held:
            return
        ptrs = {s.data_ptr() for s in held}
        for key, entry in list(self._entries.items()):
            if entry.buffer.untyped_storage().data_ptr() in ptrs:
                self.cache.forget(entry)
                del self._entries[key]
        self.replays.drop()
        self.loans.refused = "a caller held results of one run into the next"

    def _with_arguments(self, results: Sequence[Any], inputs: Sequence[Array | None]) -> list[Any]:
        """A replay's results, where a result is an argument returned as it
        is (`result_args`) this run's input, not the captured run's (nor the
        graph's staging buffer for it, written again by the next replay)."""
        if not self.result_args:
            return list(results)
        return [inputs[self.result_args[i]] if i in self.result_args else r for i, r in enumerate(results)]

    def _copied_out(self, results: Sequence[Any], lent: Collection[int] = ()) -> list[Any]:
        """A replay's results (the graph's buffers, written again by the
        next replay) copied into buffers made for the caller, in stream
        order after the replay, but for the `lent` positions, handed out as
        they are; a result that views another is copied once per view, as
        `_hand_out` copies what it cannot hand over."""
        b = self.backend
        out = [r if r is None or i in lent else b.empty_for_caller(tuple(r.shape), r.dtype) for i, r in enumerate(results)]
        copied = [i for i, r in enumerate(results) if r is not None and i not in lent]
        b.copy_all([results[i] for i in copied], [out[i] for i in copied])
        return out

    def _hand_out(self, results: Sequence[Any], lent: Collection[int] = ()) -> list[Any]:
        """Results of an `owned_results` run as arrays the caller owns: a
        buffer made for the caller goes as it is; one of the allocation
        cache leaves the cache (its site allocates anew next run), unless
        something is registered for it (shared with peers), when it is
        copied, as is a result that is no buffer of this run (an input
        returned as it is), but at the `lent` positions, where the caller
        gets its own input back, and a registered buffer as it is (`lends`:
        the GPT layer's forward at hidden 8192 x 16384 tokens, run op by
        op, copied 144 MiB of saved activations a step, 0.29 ms on 4
        H200s)."""
        out: list[Any] = []
        handed: set[int] = set()  # cache buffers out of the cache in this call (a result may view one twice)
        for i, r in enumerate(results):
            if r is None or (i in lent and i in self.result_args):
                out.append(r)
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
            elif entry is not None and i in lent:  # registered with peers: lent as it is (`lends`)
                self._lent.append(r)
                out.append(r)
            else:
                out.append(r.clone(memory_format=torch.contiguous_format))
        return out

    def _run_ops(
        self, interp: "Interpreter", inputs: Sequence[Array | None], fail_now: bool, key: InputKey | None, donate: Collection[int] = ()
    ) -> tuple[list[Any], int, list[Handle]]:
        """One run op by op: its results, flops and handles shared for it alone."""
        b = self.backend
        b.begin_run(self._owner)
        try:
            results = interp.run(inputs, fail_now, donate)
        finally:
            blockers = b.end_run()
        if interp.temp_handles:
            blockers.append("a buffer from outside the allocation cache shared for one run")
        self.replays.ran(key, blockers)
        return results, interp.flops, interp.temp_handles

    def _capture(self, interp: "Interpreter", inputs: Sequence[Array | None], key: InputKey | None) -> Captured | None:
        """Capture one run as a graph (not launched yet); None (graphs off
        for this program, the run to be made op by op) when the capture
        fails."""
        assert key is not None
        b = self.backend
        self.cache.pool.pin("a captured graph reads its blocks")
        staged: dict[int, Any] = {}  # the graph's own buffers for inputs that move (`Replays.staged`)
        for i in sorted(self.replays.staged):
            x = inputs[i]
            if x is not None:
                staged[i] = torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device=x.device)
                b.copy(x, staged[i])
        read = [staged.get(i, x) for i, x in enumerate(inputs)]
        b.begin_run(self._owner)
        error: Exception | None = None
        try:
            graph, results = b.capture(lambda: interp.run(read, False))
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
        return self.replays.keep(key, graph, list(results), interp.flops, staged)

    def _start(self) -> Interpreter:
        """At the first run (after the input checks): make the teams, plan
        the ops for this rank, make the interpreter every run reuses, and
        have the backend fetch or build the kernels the run will launch."""
        if not self._prepared:
            clock = time.perf_counter()
            self.backend.prepare_teams(self.teams)
            self.startup.add("communicators", time.perf_counter() - clock)
            self._prepared = True
        if self._plan is None:
            self._plan = Planner(self).plan()
        self._interp = Interpreter(self, self._plan)
        self.backend.prepare_kernels(self, background=self.background_kernels)
        return self._interp

    def for_caller(self, site: str) -> bool:
        """Whether `site`'s buffer in this run is made for the caller (a
        result handed out: not cached)."""
        return self._owning and site in self.result_sites

    def take(self, buffer: "Array | stand_ins.Later") -> Array:
        """`buffer` itself, or the buffer of one not taken yet (`Later`)."""
        if isinstance(buffer, stand_ins.Later):
            return self.acquire(buffer.site, buffer.shape, buffer.dtype, buffer.storage).buffer
        return buffer

    def made_for(self, later: stand_ins.Later, made: Array) -> None:
        """A region's result in memory of its own stands for a buffer not
        taken (interpreter_ops `_launch`) for the rest of the run; one of
        the caller's goes to the caller as it is (`_hand_out` knows a
        result by the tensor it views)."""
        if self.for_caller(later.site):
            self._owned.add(id(self.backend.base(made)))

    def entry_of(self, array: Array) -> CacheEntry | None:
        """The cache entry a buffer (or a view of one) comes from."""
        return self._entries.get(id(self.backend.base(array)))

    def acquire(self, site: str, shape: tuple[int, ...], dtype: torch.dtype, storage: int | None = None) -> CacheEntry:
        if self.for_caller(site):  # the caller's: not cached, on the caller's stream
            buffer = self.backend.empty_for_caller(shape, dtype)
            self._owned.add(id(buffer))
            return CacheEntry((site, shape, dtype), -1, buffer, in_use=True)
        entry = self.cache.acquire(site, shape, dtype, storage)
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


@contextlib.contextmanager
def _no_collection(timed: bool) -> Iterator[None]:
    """Python's garbage collector held off while a timed run (the gauge, a
    trial's run op by op) is issued: a full collection of a process that
    holds a model's IR and tensors takes tens of milliseconds, which one
    run's host time would count, and which can tip the gauge's verdict or
    the trial's."""
    if not timed or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def memory_pool(module: ModuleOp, backend: Backend) -> MemoryPool:
    """One pool for the host programs of `module` that run one after
    another in stream order (a forward, its backward, the forward without
    gradients): block k is as large as any program's block k needs."""
    sizes: dict[int, int] = {}
    for op in module.ops:
        if isinstance(op, FuncOp) and hir.is_host_program(op):
            for k, n in hir.storage_blocks(op).items():
                sizes[k] = max(sizes.get(k, 0), n)
    return MemoryPool(backend.empty, sizes)


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


def _result_args(func: FuncOp) -> dict[int, int]:
    """Results that are arguments returned as they are: result index ->
    argument index (lower-to-host-ir copies none of them)."""
    block = func.body.blocks[0]
    ret = block.last_op
    if ret is None:
        return {}
    return {k: v.index for k, v in enumerate(ret.operands) if isinstance(v, BlockArgument) and v.block is block}


def _alloc_root(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, hir.VIEW_OPS):
        v = v.owner.operands[0]
    return v


def collect_teams(func: FuncOp) -> list[Team]:
    """Every team the program communicates over, in a deterministic order
    (the same on every rank)."""
    teams = {
        op.team
        for op in func.walk()
        if isinstance(op, (*hir.COMMUNICATION_OPS, hir.ShareOp))
    }
    return sorted(teams, key=lambda t: (len(t), tuple(t), t.translates))


def mesh_ranks(meshes: dict[str, Mesh]) -> tuple[int, str]:
    """The ranks the meshes need (the largest device id + 1), and why;
    arithmetic, whatever the size of the meshes."""
    best, why = 1, "one rank"
    for mesh in meshes.values():
        top = mesh.max_device + 1
        if top > best:
            best, why = top, f"mesh @{mesh.name} uses device {top - 1}"
    return best, why


def require_ranks(anchor: Operation, needed: int, why: str, size: int, mesh: Mesh | None = None) -> None:
    """A diagnostic at `anchor` when a job of `size` ranks is too small:
    how to start one large enough (with the launchers installed), and how
    to fit `mesh` (the one that needs the most ranks) to this job."""
    from fuserc.runtime.job.mpi_env import launch_commands

    loc = location_of(anchor)
    if needed > size and loc is not None and loc.file.startswith("<FusionDefinition"):  # fuserc.api's: a Python script
        fit = f"fd.sched.mesh('{mesh.name}', [{size}])" if mesh is not None and len(mesh.shape) == 1 else "a mesh of this job's size"
        raise error_at(
            anchor,
            f"the program needs {needed} ranks ({why}) but this job has {size} process{'es' if size > 1 else ''}; launch "
            f"the script with {needed} processes (mpiexec -n {needed} python SCRIPT.py, or torchrun --nproc-per-node "
            f"{needed} SCRIPT.py), or declare {fit} (fuserc.api.job_size() is the job's size)",
        )
    if needed > size:
        if mesh is None:
            fit = "give a declared mesh another shape with fuserc run --mesh NAME=SHAPE"
        elif len(mesh.shape) == 1:
            fit = f"fit @{mesh.name} to this job with fuserc run --mesh {mesh.name}={size}"
        else:
            fit = f"fit @{mesh.name} to this job with fuserc run --mesh {mesh.name}=SHAPE ({size} devices: 1x{size}, ...)"
        raise error_at(
            anchor,
            f"the program needs {needed} ranks ({why}) but the job has {size}; run it with "
            f"{' or '.join(launch_commands(needed))}, or {fit}",
        )


def _required_ranks(func: FuncOp, meshes: dict[str, Mesh]) -> tuple[int, str]:
    """The ranks the job needs (the largest device id used + 1), and why."""
    best, why = mesh_ranks(meshes)
    for op in func.walk():
        top = None
        if isinstance(op, hir.TeamOp) and op.team:
            top = op.team.top  # its translates' too
        elif isinstance(op, hir.IfRankOp) and op.ranks:
            top = op.ranks.last  # from its runs, not its ranks
        if top is not None and top + 1 > best:
            best, why = top + 1, f"'{op.name}' uses rank {top}"
    return best, why


def _used_devices(meshes: dict[str, Mesh], required: int) -> int:
    """The number of devices the program runs on (for per-GPU figures)."""
    devices = {d for m in meshes.values() for d in m.devices}
    return len(devices) if devices else required

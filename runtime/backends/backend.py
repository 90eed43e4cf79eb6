"""The backend interface: what the host evaluator asks of a device.

The evaluator (runtime/evaluator/evaluator.py) is one implementation for every
backend; everything device-specific sits behind this small interface:
arrays and views, compute launches, communications over teams of ranks,
streams and events, shared memory handles, and timing.

Conventions shared by every backend:
- An *array* is the backend's buffer type (a CPU torch tensor on cpu; a
  device array on cuda). Element types are given as torch dtypes (the IR
  mapping is `fuserc.dialects.interfaces.torch_dtype`).
- A *team* is a tuple of MPI ranks in team order; positions (`root`,
  `peer`) are indices into it. Every team a program uses is given to
  `prepare_teams` once, at program load, on every rank in the same order,
  so that communicators can be created collectively and cached.
- Compute and communication are enqueued on the *current stream*; a
  communication returns a `Work` token that `wait` completes. The cpu
  backend runs streams in order; cuda overlaps them.
- Destination passing: every op writes into buffers it is given.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

import torch
from xdsl.ir import Block, Operation

from fuserc.dialects.interfaces import EvalContext

from fuserc.runtime.job.mpi_env import MpiEnv

Array = Any
Contexts = Mapping[Operation, EvalContext]
"""Per INDEXED op of a launch region: where its local blocks lie."""
"""A backend buffer (torch.Tensor on cpu)."""

Team = tuple[int, ...]
T = TypeVar("T")
ReduceOp = Literal["sum", "max", "min", "prod"]
REDUCE_OPS: tuple[str, ...] = ("sum", "max", "min", "prod")


class Work:
    """A communication in flight; `Backend.wait` completes it."""


class Stream:
    """A queue of work executed in order (a CUDA stream on cuda)."""


class Event:
    """A point in a stream's work that another stream can wait for."""


class Handle:
    """A buffer's memory shared across a team: one buffer per member, each
    reachable by the others through `put` and `get`."""

    team: Team


class Backend(ABC):
    """A device the host evaluator drives; one instance per rank."""

    name: ClassVar[str]
    stream_ordered: ClassVar[bool] = False
    """Work runs asynchronously in stream order (a run's results are ready
    in order on its main stream, without the host waiting)."""

    def __init__(self, env: MpiEnv):
        self.env = env

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def size(self) -> int:
        return self.env.size

    # ---- program load -------------------------------------------------------
    @abstractmethod
    def prepare_teams(self, teams: Sequence[Team]) -> None:
        """Create (once, cached) whatever each team needs to communicate.
        Called on every rank with the same teams in the same order."""

    def prepare_kernels(self, *programs: Any, background: bool = False) -> None:
        """Before the programs' first runs: make the generated kernels their
        runs will launch (the cuda backend's, from the kernel cache or built
        in parallel: runtime/kernels/kernel_builds.py), or start making them in the
        `background` of the runs. Nothing by default."""

    def wait_for_kernels(self, timeout: float | None = None) -> bool:
        """Wait for the kernels made in the background (at most `timeout`
        seconds); whether every one is in. True by default (none are)."""
        return True

    def loaded(self, func: Any) -> None:
        """A host program was loaded to run here (before its inputs and its
        first run): work its first run will need may start now. Nothing by
        default (the cuda backend starts importing its kernel compiler)."""

    # ---- arrays -------------------------------------------------------------
    @abstractmethod
    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> Array:
        """A new contiguous buffer with undefined contents."""

    @abstractmethod
    def from_host(self, value: torch.Tensor) -> Array:
        """A backend array holding a copy of a CPU tensor (an input)."""

    @abstractmethod
    def to_host(self, array: Array) -> torch.Tensor:
        """A CPU tensor with the contents of `array` (synchronizes; a copy,
        so that the caller may keep it while the buffer is reused)."""

    def adopt(self, value: torch.Tensor) -> Array:
        """An input as an array the program reads in place: a tensor already
        where this backend computes (made contiguous there, never through
        the host), else a copy (`from_host`)."""
        if value.device.type == "cpu":
            return (value.detach() if value.requires_grad else value).contiguous()
        return self.from_host(value)

    def let_go(self, array: Array) -> None:
        """A run drops its last reference to a donated input (`Program.run_prepared(donate=...)`):
        its memory may go back to the allocator once the device work
        already enqueued has read it. Synchronous backends need nothing."""

    def empty_for_caller(self, shape: Sequence[int], dtype: torch.dtype) -> Array:
        """A new buffer to be handed to the caller of the run under way
        (between `enter_caller` and `leave_caller`): on a stream-ordered
        device it comes from the caller's stream, so that the caller frees
        and reuses it in its own stream order."""
        return self.empty(shape, dtype)

    def enter_caller(self) -> Any:
        """Before a run inside a caller's stream of work (a PyTorch training
        step): the run starts after the work the caller has enqueued. What
        is returned goes to `leave_caller`. Synchronous backends need nothing."""
        return None

    def leave_caller(self, caller: Any, results: Sequence[Array | None]) -> None:
        """After the run: the caller's later work (on its stream) starts
        after the run, and `results`, handed to the caller, stay valid
        for it. Nothing waits on the host."""

    # ---- views (no copy) ----------------------------------------------------
    # Both backends hold torch tensors (on the CPU or a GPU), whose views
    # these are; a backend with another array type overrides them.
    def select(self, array: Array, dim: int, index: int) -> Array:
        """Index `index` of dim `dim`, which is dropped."""
        return array.select(dim, index)

    def chunk(self, array: Array, dim: int, index: int, chunks: int) -> Array:
        """The `index`-th of `chunks` equal blocks along `dim`."""
        size = array.shape[dim] // chunks
        return array.narrow(dim, index * size, size)

    def reshape_view(self, array: Array, shape: Sequence[int]) -> Array:
        """The same contiguous memory seen with another shape."""
        return array.view(tuple(shape))

    def transpose(self, array: Array) -> Array:
        """A 2-D array with its dimensions swapped (strided, no copy)."""
        return array.t()

    def base(self, array: Array) -> Array:
        """The buffer a view was made from (`array` itself if not a view)."""
        return array._base if array._base is not None else array

    def view_key(self, array: Array) -> Hashable:
        """Where a view lies in its base (offset, shape, strides), so that
        registrations of one buffer can be kept per view."""
        return (array.storage_offset(), tuple(array.shape), tuple(array.stride()))

    # ---- compute (on the current stream) ------------------------------------
    @abstractmethod
    def copy(self, src: Array, dst: Array) -> None: ...

    def copy_all(self, srcs: Sequence[Array], dsts: Sequence[Array]) -> None:
        """`copy` of each pair; a backend may batch them (a replay's results
        copied out for the caller)."""
        for src, dst in zip(srcs, dsts, strict=True):
            self.copy(src, dst)

    @abstractmethod
    def matmul(self, a: Array, b: Array, out: Array, acc: Array | None = None) -> None:
        """`torch.matmul(a, b) (+ acc)` into `out`. `acc` has out's shape and
        dtype and may be `out` itself; any aliasing between the operands
        gives the result of reading every input before writing `out`."""

    @abstractmethod
    def linear(
        self, x: Array, w: Array, bias: Array | None, out: Array, acc: Array | None = None, activation: str | None = None
    ) -> None:
        """`F.linear(x, w, bias) (+ acc)` into `out` (w is [out, in]; `acc`
        as in `matmul`), then `activation` (hir.linear's: "gelu_tanh")."""

    @abstractmethod
    def launch(
        self, body: Block, ins: Sequence[Array], outs: Sequence[Array], contexts: Contexts | None = None
    ) -> None:
        """Run a region of fusion ops on local tensors: `body`'s arguments
        are `ins`, the values its `hir.yield` yields go into `outs`;
        `contexts` says where the local blocks of its INDEXED ops lie."""

    def makes_results(self, body: Block) -> bool:
        """Whether this backend runs the region by kernels that make their
        results in memory of their own (torch._grouped_mm has no output
        argument): `launch_made` then runs it (asked once per region, when
        a program is planned)."""
        return False

    def launch_made(
        self, body: Block, ins: Sequence[Array], contexts: Contexts | None = None, callers: bool = False
    ) -> list[Array] | None:
        """Run a region of `makes_results` and return its results: the
        caller lets them stand for its output buffers where it can (the
        copies into them saved) and copies them into the others. None
        (nothing run): the caller calls `launch`. `callers`: the results
        go to the run's caller, so they are made where the caller's own
        memory is (`empty_for_caller`)."""
        return None

    # ---- communication (returns a token; ranks outside `team` never call) --
    @abstractmethod
    def allgather(self, inp: Array, out: Array, team: Team) -> Work: ...

    @abstractmethod
    def broadcast(self, buf: Array, root: int, team: Team) -> Work: ...

    @abstractmethod
    def scatter(self, inp: Array | None, out: Array, root: int, team: Team) -> Work:
        """`inp` is read on the root only (None elsewhere is fine)."""

    @abstractmethod
    def gather(self, inp: Array, out: Array | None, root: int, team: Team) -> Work:
        """`out` is written on the root only."""

    @abstractmethod
    def reduce(self, inp: Array, out: Array | None, root: int, op: ReduceOp, team: Team) -> Work: ...

    @abstractmethod
    def allreduce(self, inp: Array, out: Array, op: ReduceOp, team: Team) -> Work:
        """`inp` may be `out` (in place)."""

    @abstractmethod
    def reduce_scatter(self, inp: Array, out: Array, op: ReduceOp, team: Team) -> Work: ...

    @abstractmethod
    def alltoall(self, inp: Array, out: Array, team: Team) -> Work: ...

    @abstractmethod
    def alltoallv(self, inp: Array, send_counts: Array, out: Array, recv_counts: Array, team: Team) -> Work:
        """hir.alltoallv: the counts are exchanged first (the host reads
        them: the exchange of rows is sized by them), written into
        `recv_counts`, then the rows move (`alltoallv_offsets`)."""

    @abstractmethod
    def send(self, buf: Array, peer: int, team: Team) -> Work: ...

    @abstractmethod
    def recv(self, buf: Array, peer: int, team: Team) -> Work: ...

    @abstractmethod
    def wait(self, work: Work) -> None:
        """The current stream waits for `work` (on cpu, the host does)."""

    # ---- streams and events -------------------------------------------------
    @abstractmethod
    def get_current_stream(self) -> Stream: ...

    @abstractmethod
    def set_current_stream(self, stream: Stream) -> None: ...

    @abstractmethod
    def stream_for(self, index: int, pool_size: int) -> Stream:
        """The `(index mod pool_size)`-th worker stream of a pool of
        `pool_size` (distinct from the main stream), created once."""

    @abstractmethod
    def record_event(self) -> Event:
        """An event recorded on the current stream."""

    @abstractmethod
    def wait_event(self, event: Event) -> None:
        """The current stream waits for `event` without blocking the host."""

    # ---- peer-to-peer over shared memory handles ----------------------------
    @abstractmethod
    def share(self, buf: Array, team: Team) -> Handle:
        """Exchange `buf`'s memory handle with the team (collective over
        it). Callers cache the handle per allocation and reuse it."""

    @abstractmethod
    def release_handle(self, handle: Handle) -> None:
        """Undo `share` (collective over the handle's team)."""

    @abstractmethod
    def put(self, src: Array, handle: Handle, peer: int) -> Work:
        """Copy `src` into the shared buffer of team position `peer`."""

    @abstractmethod
    def get(self, handle: Handle, peer: int, dst: Array) -> Work:
        """Copy the shared buffer of team position `peer` into `dst`."""

    # ---- pipelines (stream-pipeline) -----------------------------------------
    # Not abstract, so that a backend without them still loads; programs
    # using hir.barrier or put/get with `block %i of N` need them.
    def team_barrier(self, team: Team, backend: str = "nccl") -> Work:
        """`hir.barrier`: a stream-ordered fence across `team` (a collective
        over it): work each member enqueued on its current stream before
        the call is complete before work enqueued after `wait` on the token
        starts, on every member. The host does not block. `backend` is the
        op's transport (nccl, cuda_ipc, mpi), where the backend has several."""
        raise NotImplementedError(f"the {self.name} backend has no team_barrier (hir.barrier)")

    def put_block(self, src: Array, handle: Handle, peer: int, index: int, chunks: int) -> Work:
        """Copy `src` into block `index` of `chunks` equal blocks along dim 0
        of the shared buffer of team position `peer`."""
        raise NotImplementedError(f"the {self.name} backend has no put_block (hir.put ... block)")

    def get_block(self, handle: Handle, peer: int, dst: Array, index: int, chunks: int) -> Work:
        """Copy block `index` of `chunks` equal blocks along dim 0 of the
        shared buffer of team position `peer` into `dst`."""
        raise NotImplementedError(f"the {self.name} backend has no get_block (hir.get ... block)")

    # ---- whole-device -------------------------------------------------------
    @abstractmethod
    def synchronize(self) -> None:
        """Wait for all work on every stream, including communications that
        no one waited for; the main stream is current again afterwards."""

    def barrier(self) -> None:
        """All ranks of the job meet (host-side)."""
        self.env.comm.Barrier()

    # ---- runs and graphs (runtime/evaluator/graphs.py) ----------------------------------
    graphs_unavailable: str | None = "this backend runs every op as the host reaches it"
    """Why this backend cannot capture a run as a graph (None when it can)."""

    def begin_run(self, owner: Hashable) -> None:
        """A run of program `owner` starts: whatever the backend numbers per
        run (its fences) starts again from 0."""

    def end_run(self) -> list[str]:
        """The run begun by `begin_run` ended; what in it a captured graph
        could not repeat ([] when nothing)."""
        return [] if self.graphs_unavailable is None else [self.graphs_unavailable]

    def forget_owner(self, owner: Hashable) -> None:
        """Program `owner` is closed (collective, like its runs)."""

    def capture(self, body: Callable[[], T]) -> tuple[Any, T]:
        """Capture the device work `body` enqueues as one graph, without
        running it; returns the graph and what `body` returned."""
        raise NotImplementedError(f"the {self.name} backend cannot capture graphs ({self.graphs_unavailable})")

    def replay(self, graph: Any, staged: Sequence[tuple[Array, Array]] = ()) -> None:
        """Enqueue a graph from `capture` on the main stream, after copying
        each staged input (source, the graph's buffer) in on that stream."""
        raise NotImplementedError(f"the {self.name} backend cannot replay graphs ({self.graphs_unavailable})")

    def memory_bytes(self) -> int | None:
        """The device's memory, bytes (None: not bounded here): what the
        graphs of a program may hold is a share of it (graphs.GRAPH_MEMORY)."""
        return None

    def hold(self, seconds: float) -> None:
        """The main stream waits about `seconds` on the device before its
        next work, which the host meanwhile enqueues (a gauged run:
        runtime/evaluator/graphs.py); nothing where the host runs the ops."""

    def mark(self, join: bool = False) -> Any:
        """A point on the main stream, now (with `join`, after all work of
        every stream); never blocks the host. `span` measures between two."""
        return time.perf_counter()

    def span(self, start: Any, end: Any) -> float:
        """Seconds from mark `start` to mark `end` (waits for `end`)."""
        return float(end) - float(start)

    def host_clock(self) -> float:
        """Seconds on the host's clock: how long the host takes to issue a
        run, against the device's `span` of it."""
        return time.perf_counter()

    # ---- timing -------------------------------------------------------------
    @abstractmethod
    def timer_start(self) -> Any:
        """A mark on the main stream from which `timer_stop` measures."""

    @abstractmethod
    def timer_stop(self, mark: Any) -> float:
        """Seconds of device time since `mark` (synchronizes)."""

    # ---- tracing (runtime/evaluator/trace.py) ------------------------------------------
    # The defaults read the host clock, which times an op on a backend that
    # runs each op when the host reaches it (cpu). A backend that enqueues
    # work asynchronously overrides all three with device-side marks.
    def trace_begin(self, stream: Stream) -> Any:
        """A mark at the current end of `stream`'s work (the current
        stream), taken just before an op is enqueued there. Must not block
        the host nor change what is enqueued (e.g. flush queued work)."""
        return time.perf_counter()

    def trace_end(self, begin: Any, work: Work | None = None) -> Any:
        """A mark at the end of the op begun at `begin` (same stream), taken
        just after it was enqueued. `work` is the op's token when it returns
        one: a backend that launches the communication later may end the
        span when the work completes. Must not block the host."""
        return time.perf_counter()

    def trace_seconds(self, origin: Any, mark: Any) -> float:
        """Seconds from mark `origin` (taken on the main stream at the start
        of a traced run) to `mark`. Called only after `synchronize`."""
        return float(mark) - float(origin)

    def close(self) -> None:
        """Free communicators and other per-job resources."""


def reduce_op_name(op: str) -> ReduceOp:
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction op '{op}' (one of {', '.join(REDUCE_OPS)})")
    return op  # type: ignore[return-value]


BACKEND_KINDS: tuple[str, ...] = ("auto", "cpu", "cuda")


def make_backend(kind: str, env: MpiEnv) -> Backend:
    """The backend named by `--backend`: `auto` is cuda when its module,
    CuPy and a GPU are all there, else cpu. The cuda module provides
    `CudaBackend` and `unavailable_reason() -> str | None`."""
    from fuserc.diagnostics import Diagnostic

    if kind not in BACKEND_KINDS:
        raise Diagnostic(f"unknown backend '{kind}' (one of {', '.join(BACKEND_KINDS)})")
    if kind in ("auto", "cuda"):
        reason = cuda_unavailable()
        if reason is None:
            from fuserc.runtime.backends.cuda import CudaBackend  # type: ignore[import-not-found]

            return CudaBackend(env)
        if kind == "cuda":
            raise Diagnostic(f"the cuda backend cannot run here: {reason}")
    from fuserc.runtime.backends.cpu import CpuBackend

    return CpuBackend(env)


_SHARED: dict[tuple[str, int], Backend] = {}


def shared_backend(kind: str, env: MpiEnv) -> Backend:
    """The process's backend of `kind` (`auto` resolved as `make_backend`
    does), made at its first use (collective) and kept for the life of the
    process: the programs of `CompiledProgram` and `fuserc.torch` share its
    streams and communicators. Kept because torch's caching allocator holds
    blocks, and the caller's tensors, tied to those streams: a backend
    collected while they live would leave torch with destroyed streams."""
    kind = resolve_auto(kind)
    key = (kind, id(env))
    if key not in _SHARED:
        _SHARED[key] = make_backend(kind, env)
    return _SHARED[key]


def resolve_auto(kind: str) -> str:
    """`kind`, with `auto` resolved as `make_backend` resolves it: cuda
    where it can run, else cpu."""
    if kind != "auto":
        return kind
    return "cuda" if cuda_unavailable() is None else "cpu"


def cuda_unavailable() -> str | None:
    """Why the cuda backend cannot be used (None when it can)."""
    import importlib

    try:
        cuda = importlib.import_module("fuserc.runtime.backends.cuda")
    except ModuleNotFoundError as e:
        if e.name != "fuserc.runtime.backends.cuda":
            return f"a module it needs is missing ({e.name})"
        return "this version of fuserc has no cuda backend"
    return cuda.unavailable_reason()


def alltoallv_offsets(
    send: Sequence[int], recv: Sequence[int], in_rows: int, out_rows: int, rank: int
) -> tuple[list[int], list[int]]:
    """The first row sent to, and received from, each team position of a
    hir.alltoallv, after checking its counts against its buffers' rows."""
    from fuserc.diagnostics import Diagnostic

    if any(c < 0 for c in send):
        raise Diagnostic(f"hir.alltoallv: negative send counts {list(send)} on rank {rank}")
    if sum(send) > in_rows:
        raise Diagnostic(
            f"hir.alltoallv: send counts {list(send)} on rank {rank} add up to {sum(send)} rows, "
            f"more than the input's {in_rows}"
        )
    if sum(recv) > out_rows:
        raise Diagnostic(
            f"hir.alltoallv: rank {rank} receives {sum(recv)} rows (counts {list(recv)}), more than the "
            f"output's bound of {out_rows} rows"
        )
    return list(itertools.accumulate(send, initial=0))[:-1], list(itertools.accumulate(recv, initial=0))[:-1]

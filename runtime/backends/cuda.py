"""The cuda backend: one GPU per rank, CuPy streams, NCCL and CUDA IPC.

Rank r uses GPU (its rank among the ranks of its node) mod (the node's GPU
count), which is r mod the GPU count when ranks fill nodes in order. Arrays
are torch CUDA tensors (views of them where the program asks); buffers come
from torch's caching allocator, so the allocation cache's buffers, and their
IPC registrations, persist across runs and memory stays flat.

Streams: each backend stream is a non-blocking CuPy stream, wrapped as a
torch external stream, so ONE CUDA stream is current for CuPy kernels, torch
ops, cuBLAS, NCCL and copies alike. An event is a CuPy event; `wait_event`
and `wait` are `cudaStreamWaitEvent` (the host never blocks inside a run).
A communication is enqueued on the current stream and its token is the
event recorded after it. Temporary buffers (staging for non-contiguous or
aliased operands) are allocated on the stream that uses them, so the
caching allocator reuses their memory only in that stream's order.

Compute: GEMMs through `GemmChooser` (cuda_gemm.py), fused elementwise
kernels for elementwise `hir.launch` regions (cuda_fusion.py), and any other
region op by op with torch on the GPU. Communication: cuda_comm.py.
Timing (`--iters`) and trace marks (`--trace`) are CUDA events on the
streams, read after a synchronization.

Runs can be captured as CUDA graphs and replayed (`capture`, `replay`; when,
in runtime/evaluator/graphs.py). `begin_run`/`end_run` bracket each run op by op: they
number its cuda_ipc fences (so each uses flags of its own, the same every
run: cuda_comm.SignalPad) and collect what a graph could not repeat.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from xdsl.ir import Block

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import hir
from fuserc.runtime.backends.backend import Backend, Contexts, Event, Handle, ReduceOp, Stream, T, Team, Work, alltoallv_offsets
from fuserc.runtime.backends.cpu import TorchResults
from fuserc.runtime.backends.cuda_comm import (
    MEMCPY_DEVICE_TO_DEVICE,
    Communicators,
    CudaHandle,
    P2POp,
    disable_multicast,
    nbytes,
)
from fuserc.runtime.kernels.cuda_regions import generates, kernels_mode, program_generates
from fuserc.runtime.job.mpi_env import MpiEnv

disable_multicast()


def unavailable_reason() -> str | None:
    """Why this process cannot use the cuda backend (None when it can)."""
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e})"
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        return f"CuPy has no NCCL support ({e})"
    if not getattr(nccl, "available", True):
        return "CuPy has no NCCL support"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - any driver failure means no GPU
        return f"no usable CUDA device ({e})"
    return None if count > 0 else "no CUDA device"


HOLD_CYCLES_PER_S = 2.2e9
"""GPU clock cycles a `hold` counts per second: above the SM clock of the
GPUs in use (an H200 runs at up to 1.98 GHz), so a hold lasts at least as
long as asked."""


@dataclass(eq=False)
class CudaStream(Stream):
    """A CuPy stream and the torch view of the same CUDA stream."""

    name: str
    cupy: Any
    torch: Any
    ids: tuple[int, int, int] = (0, 0, 0)
    """torch's (stream id, device index, device type) of `torch`: what
    `set_torch_stream` takes."""

    def __post_init__(self) -> None:
        self.ids = stream_ids(self.torch)

    @property
    def ptr(self) -> int:
        return int(self.cupy.ptr)


def spin(seconds: float) -> None:
    """A kernel that keeps torch's current stream busy for at least
    `seconds` (`HOLD_CYCLES_PER_S`): the host runs ahead of it meanwhile."""
    torch.cuda._sleep(int(seconds * HOLD_CYCLES_PER_S))


def stream_ids(stream: Any) -> tuple[int, int, int]:
    """A torch CUDA stream as the ids `set_torch_stream` takes."""
    return (stream.stream_id, stream.device_index, stream.device_type)


def set_torch_stream(ids: tuple[int, int, int]) -> None:
    """torch.cuda.set_stream without its Python layers (and
    `torch.cuda.stream`'s device lookups, tens of microseconds a switch):
    a run switches streams at every op and at every buffer made for its
    caller, and that host time is time the device may wait."""
    torch._C._cuda_setStream(*ids)


def current_torch_stream(device: int) -> tuple[int, int, int]:
    """The ids of torch's current stream on `device` (as `stream_ids`)."""
    found = torch._C._cuda_getCurrentStream(device)
    return (found[0], found[1], found[2])


@dataclass(eq=False)
class CudaEvent(Event):
    event: Any


@dataclass(eq=False)
class CudaWork(Work):
    """A communication's completion: the event recorded after it on
    `stream` (None while a grouped send/recv waits for its launch)."""

    stream: CudaStream
    event: Any = None
    keep: list[Any] = field(default_factory=list)


def import_compiler_early(func: Any, mode: str | None = None) -> bool:
    """Whether the regions of `func` (a host program about to run on this
    backend) get generated kernels under kernels `mode` ($FUSERC_KERNELS by
    default; cuda_regions.program_generates); if so, Inductor's modules are
    imported in a thread from now on (runtime/kernels/kernel_builds.py
    `import_early`, once), in a process the `fuserc` command owns only: a
    caller's own thread could be importing Inductor at the same time
    (torch.compile). `fuserc run` calls it before the backend starts, so
    that the import goes on while CUDA starts."""
    from fuserc.runtime.job.mpi_env import ENDS_PROCESS

    gets = program_generates(kernels_mode() if mode is None else mode, func)
    if gets and ENDS_PROCESS[0]:
        from fuserc.runtime.kernels.kernel_builds import import_early

        import_early()
    return gets


def open_device_early() -> threading.Thread | None:
    """Start this rank's GPU (its primary context, which CUDA's runtime in
    torch and CuPy then uses) on a thread, through the driver library with
    ctypes, which lets go of the GIL: the context's creation goes on while
    the passes run and CuPy imports, instead of inside the cuda backend's
    start. The GPU is the launcher's local rank modulo the GPUs seen, as the
    backend picks it; under a launcher that does not give it, or where no
    driver answers, nothing happens. In a process the `fuserc` command owns
    only."""
    import ctypes

    from fuserc.runtime.job.job import launcher_local_rank
    from fuserc.runtime.job.mpi_env import ENDS_PROCESS

    local = launcher_local_rank()
    if local is None or not ENDS_PROCESS[0]:
        return None

    def body() -> None:
        try:
            driver = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return
        count, device, context = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
        if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return
        if driver.cuDeviceGet(ctypes.byref(device), local % count.value) == 0:
            driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)  # kept: the backend's context

    thread = threading.Thread(target=body, name="fuserc-open-device", daemon=True)
    thread.start()
    return thread


BATCHED_BELOW = 1 << 20
"""Bytes under which `copy_all` batches a tensor's copy with the others'."""


class CudaBackend(TorchResults, Backend):
    """CUDA GPUs: CuPy streams/events, NCCL, CUDA IPC, cuBLAS, fused kernels."""

    name = "cuda"
    stream_ordered = True

    def __init__(self, env: MpiEnv):
        super().__init__(env)
        import cupy

        from fuserc.runtime.kernels.cuda_gemm import GemmChooser

        node = env.node_comm  # collective: every rank builds its backend at the same point
        local_rank = env.node_rank
        self.local_rank, self.local_size = local_rank, node.Get_size()
        self.device = env.gpu(cupy.cuda.runtime.getDeviceCount())
        cupy.cuda.Device(self.device).use()
        torch.cuda.set_device(self.device)
        callers = torch.cuda.current_stream(self.device)  # given back below: the caller's code keeps its stream
        leader = node.allreduce(env.rank, op=env.reduce_op("min"))
        gpus = env.comm.allgather((leader, self.device))
        # peer copies keep within env.nodes() (which $FUSERC_GPUS_PER_NODE may
        # cut finer than the machines); GPUs are shared within a machine
        self.comms = Communicators(env, self.device, env.nodes(), gpus)
        self.gemm = GemmChooser()
        self._stream_ids: list[tuple[int, int, int]] = []  # of every stream made (`_off_streams`)
        weakref.finalize(self, _off_streams, self._stream_ids, self.device).atexit = False
        self._main = self._new_stream("main")
        self._current = self._main
        self._pools: dict[int, list[CudaStream]] = {}
        self._activate(self._main)
        torch.cuda.set_stream(callers)
        self.fused_launches = 0
        self.fallback_launches = 0
        self.graphs_unavailable = _graphs_unavailable()
        self._owner: Hashable | None = None  # the program whose run is under way
        self._fences: dict[Team, int] = {}  # cuda_ipc fences per team in this run
        self._fences_per_run: dict[tuple[Hashable, Team], int] = {}  # from each program's first run
        self._blockers: list[str] = []  # what in this run a graph could not repeat
        self._capturing = False
        self._caller: Any = None  # torch's stream of the caller of the run under way (enter_caller)
        self._caller_ids = (0, 0, 0)  # its `stream_ids`
        self._torch_device = torch.device("cuda", self.device)
        self.kernels = kernels_mode()
        self._region_kernels: weakref.WeakKeyDictionary[Block, bool] = weakref.WeakKeyDictionary()
        """Whether each region of the programs loaded gets generated kernels."""
        self._background: list[Any] = []
        """Kernel builds under way in the background (kernel_builds.Background)."""

    def _new_stream(self, name: str) -> CudaStream:
        import cupy

        s = cupy.cuda.Stream(non_blocking=True)
        made = CudaStream(name, s, torch.cuda.ExternalStream(s.ptr, device=torch.device("cuda", self.device)))
        self._stream_ids.append(made.ids)
        return made

    def _activate(self, stream: CudaStream) -> None:
        stream.cupy.use()
        set_torch_stream(stream.ids)

    def _begin(self) -> None:
        """Before enqueueing work: launch the queued send/recv, and make the
        current stream current again for CuPy and torch (code outside the
        backend may have switched either)."""
        self.comms.flush()
        self._activate(self._current)

    def _streams(self) -> list[CudaStream]:
        return [self._main] + [s for pool in self._pools.values() for s in pool]

    # ---- program load -------------------------------------------------------
    def prepare_teams(self, teams: Sequence[Team]) -> None:
        self.comms.prepare(teams)

    def prepare_kernels(self, *programs: Any, background: bool = False) -> None:
        """The programs' region and row kernels, from the kernel cache or
        built in parallel (runtime/kernels/kernel_builds.py), before their first
        runs, or in the `background` of their runs."""
        if self.kernels != "cupy":
            from fuserc.runtime.kernels.kernel_builds import prepare

            found = prepare(programs, torch.device("cuda", self.device), self.local_rank, self.local_size, mode=self.kernels, background=background)
            if found is not None:
                self._background.append(found)

    def wait_for_kernels(self, timeout: float | None = None) -> bool:
        """Wait for the kernels built in the background (at most `timeout`
        seconds); whether every one is in."""
        return all(b.wait(timeout) for b in self._background)

    def loaded(self, func: Any) -> None:
        """Whether the program's regions get generated kernels (the choice
        is the program's), and if so, its compiler's import starts
        (`import_compiler_early`)."""
        gets = import_compiler_early(func, self.kernels)
        for op in func.walk():
            if isinstance(op, hir.LaunchOp):
                self._region_kernels[op.body.block] = gets

    # ---- arrays -------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A buffer from torch's caching allocator (no flush of queued
        send/recv: an allocation between a send and a recv keeps them in
        one group)."""
        return torch.empty(tuple(shape), dtype=dtype, device=self._torch_device)

    def from_host(self, value: torch.Tensor) -> torch.Tensor:
        """A copy on this GPU, complete when this returns (inputs outlive runs).
        torch's current stream is left as it was found: outside a run it is
        the caller's, and a stream of this backend left current there would
        outlive the backend (the next run's `enter_caller` would wait for a
        destroyed stream)."""
        self.comms.flush()
        found = current_torch_stream(self.device)
        self._activate(self._main)
        out = torch.empty(tuple(value.shape), dtype=value.dtype, device=self._torch_device)
        out.copy_(value.detach())
        self._main.cupy.synchronize()
        self._current.cupy.use()
        set_torch_stream(found)
        return out

    def adopt(self, value: torch.Tensor) -> torch.Tensor:
        """A tensor on this GPU is read in place (a non-contiguous one is
        made contiguous by a copy on this GPU); one elsewhere is copied in."""
        if value.device == self._torch_device:
            if value.requires_grad:
                value = value.detach()
            if value.is_contiguous():
                return value
            self._begin()
            return value.contiguous()
        if value.device.type == "cuda":
            raise Diagnostic(
                f"an input is on {value.device}, but rank {self.rank} computes on cuda:{self.device}"
            )
        return self.from_host(value)

    def let_go(self, array: torch.Tensor) -> None:
        """Marked as used on each of fuserc's streams that may read it after
        another's later write to its memory: the caching allocator hands its
        memory out again only once the reads enqueued there are done
        (`reading_streams`)."""
        for s in self.reading_streams():
            array.record_stream(s.torch)

    def reading_streams(self) -> list[CudaStream]:
        """The streams a buffer let go in a run must be marked as used on.
        In a caller's run (`enter_caller`), not the main stream while it is
        fuserc's only one: whatever reuses the memory in the run is made
        there (its writes come after the reads enqueued there) or for the
        caller (written on the main stream, or on the caller's after it
        waits for the main stream: `launch_made`), and after the run the
        caller's stream waits for the main stream (`leave_caller`). A mark
        makes the allocator record an event there when the memory goes
        back, which keeps the kernels on either side from starting back to
        back: a GPT's backward lets go of about 28 saved tensors a layer,
        and at 24 layers the device was idle between kernels 4.23 ms a step
        with the marks, 3.71 and 3.96 without."""
        return self._streams() if self._pools or self._caller is None else []

    def empty_for_caller(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Made on the caller's stream, so that the block belongs to it."""
        if self._caller is None:
            return self.empty(shape, dtype)
        with self._callers_stream():
            return torch.empty(tuple(shape), dtype=dtype, device=self._torch_device)

    @contextlib.contextmanager
    def _callers_stream(self) -> Iterator[None]:
        """torch's current stream is the caller's for the body (what torch
        allocates there is the caller's memory), then the one found again."""
        now = current_torch_stream(self.device)
        set_torch_stream(self._caller_ids)
        try:
            yield
        finally:
            set_torch_stream(now)

    def enter_caller(self) -> Any:
        """The main stream waits (on the device) for the caller's current
        torch stream, which is given back at `leave_caller`."""
        self.comms.flush()
        caller = torch.cuda.current_stream(self.device)
        self._caller_ids = stream_ids(caller)
        self._main.torch.wait_stream(caller)
        self._current = self._main
        self._activate(self._main)
        self._caller = caller
        return caller

    def leave_caller(self, caller: Any, results: Sequence[torch.Tensor | None]) -> None:
        """The caller's stream waits for the main stream (where a run's
        results are ready); each result is marked as used on the caller's
        stream (a no-op for buffers made on it), so the caching allocator
        does not give memory of fuserc's streams to fuserc's next run while
        the caller still reads it."""
        self.comms.flush()
        self._caller = None
        caller.wait_stream(self._main.torch)
        for r in results:
            if r is not None:
                r.record_stream(caller)
        torch.cuda.set_stream(caller)

    def to_host(self, array: torch.Tensor) -> torch.Tensor:
        self.comms.flush()
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
        return array.detach().to("cpu", copy=True).contiguous()

    # ---- compute ------------------------------------------------------------
    def copy(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self._begin()
        dst.copy_(src)

    def copy_all(self, srcs: Sequence[torch.Tensor], dsts: Sequence[torch.Tensor]) -> None:
        """The small tensors in one multi-tensor copy, the others one copy
        each: a copy pays a few microseconds to start (a training step's 16
        gradients copied out of a replayed graph one by one took 0.13 ms on
        an H200, for 0.06 ms of bytes), and torch's multi-tensor copy moves
        large tensors at half a copy's rate (16 us for 16 MiB, 7.6 one by one)."""
        self._begin()
        small_src: list[torch.Tensor] = []
        small_dst: list[torch.Tensor] = []
        for src, dst in zip(srcs, dsts, strict=True):
            if nbytes(src) < BATCHED_BELOW:
                small_src.append(src)
                small_dst.append(dst)
            else:
                dst.copy_(src)
        if small_src:
            torch._foreach_copy_(small_dst, small_src)

    def matmul(
        self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, acc: torch.Tensor | None = None
    ) -> None:
        """`a @ b` into `out` by the faster GEMM of its shape; with `acc`,
        one GEMM with `acc` in its epilogue (beta = 1) where torch has one."""
        self._begin()
        if acc is None:
            self.gemm.matmul(a, b, out, tune=not self._capturing)
        else:
            from fuserc.runtime.kernels.cuda_gemm import gemm_acc

            gemm_acc(a, b, out, acc)

    def linear(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor,
        acc: torch.Tensor | None = None,
        activation: str | None = None,
    ) -> None:
        """x @ w^T (+ bias) as one GEMM into `out` (bias in cuBLAS's epilogue
        through addmm, and a tanh GELU with it through cuBLASLt's
        `_addmm_activation`), on 2-D views of x and out; with `acc`, `acc`
        is in the epilogue instead and a bias is added after."""
        from fuserc.runtime.backends.cpu import epilogue
        from fuserc.runtime.kernels.cuda_gemm import direct_out, linear_acc

        self._begin()
        if acc is not None:
            linear_acc(x, w, bias, out, acc)
            return
        x2 = x.reshape(-1, x.shape[-1])
        out2 = out.view(-1, out.shape[-1]) if out.is_contiguous() else None
        direct = out2 is not None and direct_out(out2, x, w, *([bias] if bias is not None else []))
        if activation == "gelu_tanh" and direct and bias is not None:
            torch._addmm_activation(bias, x2, w.t(), use_gelu=True, out=out2)
        elif activation is not None or not direct:
            y = torch.nn.functional.linear(x, w, bias)
            out.copy_(epilogue(y, activation) if activation is not None else y)
        elif bias is None:
            self.gemm.matmul(x2, w.t(), out2, tune=not self._capturing)
        else:
            torch.addmm(bias, x2, w.t(), out=out2)

    def _generated(
        self, body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], contexts: Contexts | None
    ) -> bool:
        """Run a region with generated kernels: a row kernel for a lone
        softmax, log_softmax or cross_entropy (runtime/kernels/cuda_rows.py), else
        Inductor's (runtime/kernels/cuda_regions.py); False when neither has one,
        or its kernel is being built in the background (then no run is
        captured as a graph until it is in)."""
        from fuserc.runtime.kernels.cuda_regions import run_region
        from fuserc.runtime.kernels.cuda_rows import run_rows

        ran = run_rows(body, ins, outs)
        if ran is False:
            ran = run_region(body, ins, outs, contexts, compile_now=not self._capturing)
        if ran is None:
            self._block("a region whose kernel is being built in the background")
        return bool(ran)

    def launch(
        self, body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], contexts: Contexts | None = None
    ) -> None:
        from fuserc.runtime.kernels import torch_regions
        from fuserc.runtime.backends.cpu import launch_with_torch
        from fuserc.runtime.kernels.cuda_fusion import plan_for, run_plan

        self._begin()
        if torch_regions.run_region(body, ins, outs, contexts):  # attention, or a lone op PyTorch's kernel runs faster
            self.fused_launches += 1
            return
        gets = self._region_kernels.get(body)
        if gets is None:  # a region of no program loaded here: its own size decides
            gets = generates(self.kernels, (t.numel() for t in (*ins, *outs)))
        if gets and self._generated(body, ins, outs, contexts):
            self.fused_launches += 1
            return
        plan = plan_for(body)
        if plan is not None and run_plan(plan, ins, outs):
            self.fused_launches += 1
            return
        self.fallback_launches += 1
        self._block("a region run op by op with torch (not one fused kernel)")
        launch_with_torch(body, ins, outs, contexts)

    def launch_made(
        self, body: Block, ins: Sequence[torch.Tensor], contexts: Contexts | None = None, callers: bool = False
    ) -> list[torch.Tensor] | None:
        """Its values as torch makes them (`makes_results`), on the current
        stream; for the caller (`callers`, in a run not captured), on the
        caller's stream, between waits each way: its memory is then the
        caller's to reuse once the caller lets it go. Made on a stream of
        fuserc's and marked used on the caller's (`leave_caller`), a saved
        attention output went back only once the device had passed the
        caller's last use (the host runs tens of milliseconds ahead), which
        raised the 24-layer GPT's peak by 396 MiB."""
        self._begin()
        self.fused_launches += 1
        caller = self._caller
        if not callers or caller is None or self._capturing:
            return self.made_values(body, ins, contexts)
        caller.wait_stream(self._current.torch)
        with self._callers_stream():
            made = self.made_values(body, ins, contexts)
        self._current.torch.wait_stream(caller)
        return made

    # ---- communication ------------------------------------------------------
    def _work(self, event: Any, *keep: Any) -> CudaWork:
        return CudaWork(self._current, event, list(keep))

    def _staged_in(self, t: torch.Tensor, *outs: torch.Tensor | None) -> torch.Tensor:
        """`t` as a contiguous buffer that no output overlaps (a copy on the
        current stream when needed)."""
        from fuserc.runtime.kernels.spans import overlaps

        if t.is_contiguous() and not any(o is not None and overlaps(t, o) for o in outs):
            return t
        return t.clone(memory_format=torch.contiguous_format)

    @staticmethod
    def _staged_out(t: torch.Tensor) -> torch.Tensor:
        return t if t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=t.device)

    @staticmethod
    def _unstage(staged: torch.Tensor, t: torch.Tensor) -> None:
        if staged is not t:
            t.copy_(staged)

    def _position(self, team: Team) -> int:
        return team.index(self.rank)

    def allgather(self, inp: torch.Tensor, out: torch.Tensor, team: Team) -> Work:
        self._begin()
        n, pos = nbytes(inp), self._position(team)
        dst = self._staged_out(out)
        in_place = dst is out and inp.is_contiguous() and inp.data_ptr() == out.data_ptr() + pos * n
        src = inp if in_place else self._staged_in(inp, out)
        event = self.comms.allgather(src.data_ptr(), dst.data_ptr(), n, team, self._current.cupy)
        self._unstage(dst, out)
        return self._work(event, src, dst)

    def broadcast(self, buf: torch.Tensor, root: int, team: Team) -> Work:
        self._begin()
        staged = buf if buf.is_contiguous() else buf.contiguous()
        event = self.comms.broadcast(staged.data_ptr(), nbytes(staged), root, team, self._current.cupy)
        self._unstage(staged, buf)
        return self._work(event, staged)

    def scatter(self, inp: torch.Tensor | None, out: torch.Tensor, root: int, team: Team) -> Work:
        self._begin()
        pos, n = self._position(team), nbytes(out)
        dst = self._staged_out(out)
        sends: list[tuple[int, int, int]] = []
        recvs: list[tuple[int, int, int]] = []
        src = None
        if pos == root:
            if inp is None:
                raise RuntimeError(f"scatter: the input is absent on its root (rank {self.rank})")
            src = self._staged_in(inp, out)
            sends = [(p, src.data_ptr() + p * n, n) for p in range(len(team)) if p != pos]
            self._memcpy(dst.data_ptr(), src.data_ptr() + pos * n, n)
        else:
            recvs = [(root, dst.data_ptr(), n)]
        event = self.comms.exchange(sends, recvs, team, self._current.cupy)
        self._unstage(dst, out)
        return self._work(event, src, dst)

    def gather(self, inp: torch.Tensor, out: torch.Tensor | None, root: int, team: Team) -> Work:
        self._begin()
        pos, n = self._position(team), nbytes(inp)
        sends: list[tuple[int, int, int]] = []
        recvs: list[tuple[int, int, int]] = []
        dst = None
        if pos == root:
            if out is None:
                raise RuntimeError(f"gather: the output is absent on its root (rank {self.rank})")
            dst = self._staged_out(out)
            src = inp if inp.is_contiguous() and inp.data_ptr() == dst.data_ptr() + pos * n else self._staged_in(inp, out)
            recvs = [(p, dst.data_ptr() + p * n, n) for p in range(len(team)) if p != pos]
            if src.data_ptr() != dst.data_ptr() + pos * n:
                self._memcpy(dst.data_ptr() + pos * n, src.data_ptr(), n)
        else:
            src = self._staged_in(inp)
            sends = [(root, src.data_ptr(), n)]
        event = self.comms.exchange(sends, recvs, team, self._current.cupy)
        if dst is not None and out is not None:
            self._unstage(dst, out)
        return self._work(event, src, dst)

    def reduce(self, inp: torch.Tensor, out: torch.Tensor | None, root: int, op: ReduceOp, team: Team) -> Work:
        self._begin()
        is_root = self._position(team) == root
        if is_root and out is None:
            raise RuntimeError(f"reduce: the output is absent on its root (rank {self.rank})")
        dst = self._staged_out(out) if is_root and out is not None else None
        src = self._reduce_src(inp, dst)
        recv = dst.data_ptr() if dst is not None else src.data_ptr()
        event = self.comms.reduce(src.data_ptr(), recv, inp.numel(), inp.dtype, op, root, team, self._current.cupy)
        if dst is not None and out is not None:
            self._unstage(dst, out)
        return self._work(event, src, dst)

    def allreduce(self, inp: torch.Tensor, out: torch.Tensor, op: ReduceOp, team: Team) -> Work:
        self._begin()
        dst = self._staged_out(out)
        src = self._reduce_src(inp, dst)
        event = self.comms.allreduce(src.data_ptr(), dst.data_ptr(), inp.numel(), inp.dtype, op, team, self._current.cupy)
        self._unstage(dst, out)
        return self._work(event, src, dst)

    def reduce_scatter(self, inp: torch.Tensor, out: torch.Tensor, op: ReduceOp, team: Team) -> Work:
        self._begin()
        dst = self._staged_out(out)
        pos, n = self._position(team), out.numel()
        in_place = inp.is_contiguous() and dst.data_ptr() == inp.data_ptr() + pos * nbytes(out)
        src = inp if in_place else self._staged_in(inp, dst)
        event = self.comms.reduce_scatter(src.data_ptr(), dst.data_ptr(), n, inp.dtype, op, team, self._current.cupy)
        self._unstage(dst, out)
        return self._work(event, src, dst)

    def _reduce_src(self, inp: torch.Tensor, dst: torch.Tensor | None) -> torch.Tensor:
        """The input of a reduction: `inp` itself when contiguous and either
        disjoint from the output or exactly it (NCCL's in place)."""
        if dst is not None and inp.is_contiguous() and inp.data_ptr() == dst.data_ptr() and inp.numel() == dst.numel():
            return inp
        return self._staged_in(inp, dst)

    def alltoall(self, inp: torch.Tensor, out: torch.Tensor, team: Team) -> Work:
        self._begin()
        size, pos = len(team), self._position(team)
        dst = self._staged_out(out)
        src = self._staged_in(inp, dst)
        blk = nbytes(src) // size
        self._memcpy(dst.data_ptr() + pos * blk, src.data_ptr() + pos * blk, blk)
        peers = [p for p in range(size) if p != pos]
        sends = [(p, src.data_ptr() + p * blk, blk) for p in peers]
        recvs = [(p, dst.data_ptr() + p * blk, blk) for p in peers]
        event = self.comms.exchange(sends, recvs, team, self._current.cupy)
        self._unstage(dst, out)
        return self._work(event, src, dst)

    def alltoallv(
        self, inp: torch.Tensor, send_counts: torch.Tensor, out: torch.Tensor, recv_counts: torch.Tensor, team: Team
    ) -> Work:
        """The counts by one NCCL group of 8-byte sends, read on the host (a
        wait for the device: no graph repeats it), then the rows by another."""
        self._begin()
        size, pos = len(team), self._position(team)
        sc = send_counts.to(device=out.device, dtype=torch.int64).contiguous()
        rc = torch.empty(size, dtype=torch.int64, device=out.device)
        self._memcpy(rc.data_ptr() + pos * 8, sc.data_ptr() + pos * 8, 8)
        peers = [p for p in range(size) if p != pos]
        sends = [(p, sc.data_ptr() + p * 8, 8) for p in peers]
        recvs = [(p, rc.data_ptr() + p * 8, 8) for p in peers]
        self.comms.exchange(sends, recvs, team, self._current.cupy).synchronize()
        self._block("a hir.alltoallv, whose counts the host reads every run")
        send, recv = sc.cpu().tolist(), rc.cpu().tolist()
        recv_counts.copy_(rc)
        sdispl, rdispl = alltoallv_offsets(send, recv, inp.shape[0], out.shape[0], self.rank)
        dst = out if out.is_contiguous() else out.clone(memory_format=torch.contiguous_format)
        src = self._staged_in(inp, dst)
        row = math.prod(src.shape[1:]) * src.element_size()  # bytes per row
        self._memcpy(dst.data_ptr() + rdispl[pos] * row, src.data_ptr() + sdispl[pos] * row, send[pos] * row)
        sends = [(p, src.data_ptr() + sdispl[p] * row, send[p] * row) for p in peers if send[p]]
        recvs = [(p, dst.data_ptr() + rdispl[p] * row, recv[p] * row) for p in peers if recv[p]]
        event = self.comms.exchange(sends, recvs, team, self._current.cupy)
        self._unstage(dst, out)
        return self._work(event, src, dst, sc, rc)

    def send(self, buf: torch.Tensor, peer: int, team: Team) -> Work:
        self._activate(self._current)
        src = self._staged_in(buf)
        work = self._work(None, src)
        self.comms.p2p(P2POp(True, team, src.data_ptr(), nbytes(src), peer, _setter(work)), self._current.cupy)
        return work

    def recv(self, buf: torch.Tensor, peer: int, team: Team) -> Work:
        """Queued with the neighbouring send/recv; a strided destination
        receives into a staging buffer copied back right after the group."""
        self._activate(self._current)
        staged, stream = self._staged_out(buf), self._current
        work = self._work(None, staged)

        def done(event: Any) -> None:
            if staged is not buf:
                with torch.cuda.stream(stream.torch):
                    buf.copy_(staged)
                event = _recorded(stream, timing=not self.comms.capturing)  # a trace may end the recv here
            work.event = event

        self.comms.p2p(P2POp(False, team, staged.data_ptr(), nbytes(staged), peer, done), stream.cupy)
        return work

    def wait(self, work: Work) -> None:
        assert isinstance(work, CudaWork)
        self.comms.flush()
        if work.event is not None and work.stream is not self._current:
            self._current.cupy.wait_event(work.event)

    # ---- streams and events -------------------------------------------------
    def get_current_stream(self) -> Stream:
        return self._current

    def set_current_stream(self, stream: Stream) -> None:
        assert isinstance(stream, CudaStream)
        self.comms.flush()
        self._current = stream
        self._activate(stream)

    def stream_for(self, index: int, pool_size: int) -> Stream:
        pool = self._pools.get(pool_size)
        if pool is None:
            pool = self._pools[pool_size] = [self._new_stream(f"worker{i}/{pool_size}") for i in range(pool_size)]
            if self._capturing:  # new streams join the capture, as `capture` forks the others
                fork = _recorded(self._main)
                for s in pool:
                    s.cupy.wait_event(fork)
        return pool[index % pool_size]

    def record_event(self) -> Event:
        import cupy

        self.comms.flush()
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(self._current.cupy)
        return CudaEvent(event)

    def wait_event(self, event: Event) -> None:
        assert isinstance(event, CudaEvent)
        self.comms.flush()
        self._current.cupy.wait_event(event.event)

    # ---- peer-to-peer -------------------------------------------------------
    def share(self, buf: torch.Tensor, team: Team) -> Handle:
        if not buf.is_contiguous():
            raise RuntimeError("hir.share needs a contiguous buffer")
        return self.comms.share(buf, team)

    def release_handle(self, handle: Handle) -> None:
        assert isinstance(handle, CudaHandle)
        self.comms.release(handle)

    def put(self, src: torch.Tensor, handle: Handle, peer: int) -> Work:
        return self.put_block(src, handle, peer, 0, 1)

    def get(self, handle: Handle, peer: int, dst: torch.Tensor) -> Work:
        return self.get_block(handle, peer, dst, 0, 1)

    def put_block(self, src: torch.Tensor, handle: Handle, peer: int, index: int, chunks: int) -> Work:
        """One cudaMemcpyAsync into block `index` of the peer's buffer."""
        assert isinstance(handle, CudaHandle)
        self._begin()
        offset, n = _block_span(src, handle, index, chunks, "put")
        staged = self._staged_in(src)
        self._memcpy(handle.peer_ptr(peer, "hir.put") + offset, staged.data_ptr(), n)
        return self._work(self._record(), staged)

    def get_block(self, handle: Handle, peer: int, dst: torch.Tensor, index: int, chunks: int) -> Work:
        """One cudaMemcpyAsync from block `index` of the peer's buffer."""
        assert isinstance(handle, CudaHandle)
        self._begin()
        offset, n = _block_span(dst, handle, index, chunks, "get")
        staged = self._staged_out(dst)
        self._memcpy(staged.data_ptr(), handle.peer_ptr(peer, "hir.get") + offset, n)
        self._unstage(staged, dst)
        return self._work(self._record(), staged)

    def team_barrier(self, team: Team, backend: str = "nccl") -> Work:
        """A stream-ordered fence on the current stream (the host does not
        block): flags on IPC-shared memory for cuda_ipc (one warp's
        kernel, FenceOps), else a one-byte NCCL allreduce over the team."""
        self._begin()
        if backend != "cuda_ipc":
            return self._work(self.comms.fence(team, self._current.cupy))
        index = self._fences.get(team, 0)
        self._fences[team] = index + 1
        indexed = None
        if self._owner is not None and self._fences_per_run.get((self._owner, team), 2) >= 2:
            indexed = (self._owner, index)  # see SignalPad: two fences per run or more
        event, repeatable = self.comms.ipc_fence(team, self._current.cupy, indexed)
        if not repeatable:
            self._block(f"a cuda_ipc fence on team {list(team)} with new flag values every run (one fence per run on it)")
        return self._work(event)

    def _memcpy(self, dst: int, src: int, n: int) -> None:
        """cudaMemcpyAsync device to device on the current stream (copy engines)."""
        import cupy

        if n and dst != src:
            cupy.cuda.runtime.memcpyAsync(dst, src, n, MEMCPY_DEVICE_TO_DEVICE, self._current.ptr)

    def _record(self) -> Any:
        import cupy

        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(self._current.cupy)
        return event

    # ---- whole device -------------------------------------------------------
    def synchronize(self) -> None:
        import cupy

        self.comms.flush()
        cupy.cuda.runtime.deviceSynchronize()
        self._current = self._main  # made current by the next op (`_begin`): torch's stays the caller's

    def _join_workers(self) -> None:
        """The main stream waits for all work enqueued so far on every
        worker stream (device-side)."""
        for s in self._streams()[1:]:
            self._main.cupy.wait_event(_recorded(s))

    # ---- runs and graphs -----------------------------------------------------
    def _block(self, why: str) -> None:
        if why not in self._blockers:
            self._blockers.append(why)

    def begin_run(self, owner: Hashable) -> None:
        self._owner = owner
        self._fences = {}
        self._blockers = []

    def end_run(self) -> list[str]:
        """The run's blockers; after a program's first run, how many
        cuda_ipc fences its runs make per team (which flags they use)."""
        owner = self._owner
        if owner is not None:
            for team, count in self._fences.items():
                self._fences_per_run.setdefault((owner, team), count)
        self._owner = None
        blockers = self._blockers
        self._blockers = []
        if self.graphs_unavailable is not None:
            blockers.append(self.graphs_unavailable)
        return blockers

    def forget_owner(self, owner: Hashable) -> None:
        for key in [k for k in self._fences_per_run if k[0] == owner]:
            del self._fences_per_run[key]
        self.comms.forget_owner(owner)

    def capture(self, body: Callable[[], T]) -> tuple[Any, T]:
        """Capture `body`'s work on every stream as one CUDA graph (torch's
        CUDAGraph, so that buffers allocated during the capture come from
        the graph's private memory pool and stay valid for its replays).
        The capture starts on the main stream with every stream idle; each
        worker stream is forked from it, and joined back at the end."""
        import warnings

        self.synchronize()
        self.comms.forget_order()
        main = self._main
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(capture_error_mode="relaxed")
        self._capturing = self.comms.capturing = True
        done = False
        try:
            fork = _recorded(main)
            for s in self._streams()[1:]:
                s.cupy.wait_event(fork)
            result = body()
            self.comms.flush()
            self.set_current_stream(main)
            self._join_workers()
            done = True
        finally:
            self._capturing = self.comms.capturing = False
            self._current = main
            self._activate(main)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a rank with nothing to do captures an empty graph
                    graph.capture_end()
            except Exception:
                if done:
                    raise
            self.comms.forget_order()
        return graph, result

    def memory_bytes(self) -> int | None:
        return int(torch.cuda.get_device_properties(self.device).total_memory)

    def hold(self, seconds: float) -> None:
        """A kernel that spins `seconds` on the main stream (`HOLD_CYCLES_PER_S`)."""
        self.comms.flush()
        self.set_current_stream(self._main)
        spin(seconds)

    def mark(self, join: bool = False) -> Any:
        self.comms.flush()
        if join:
            self._join_workers()
        return _recorded(self._main, timing=True)

    def span(self, start: Any, end: Any) -> float:
        import cupy

        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3

    def replay(self, graph: Any, staged: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> None:
        self.comms.flush()
        self.set_current_stream(self._main)
        for src, dst in staged:
            self.copy(src, dst)
        graph.replay()

    def timer_start(self) -> Any:
        import cupy

        self.synchronize()
        start = cupy.cuda.Event()
        start.record(self._main.cupy)
        return start

    def timer_stop(self, mark: Any) -> float:
        """Device time from the mark to the end of all streams' work: the
        main stream joins every worker stream before the end event."""
        import cupy

        self.comms.flush()
        self._join_workers()
        end = cupy.cuda.Event()
        end.record(self._main.cupy)
        end.synchronize()
        self.synchronize()
        return cupy.cuda.get_elapsed_time(mark, end) / 1e3

    # ---- tracing: CUDA events ----------------------------------------------
    def trace_begin(self, stream: Stream) -> Any:
        """A timing event recorded at the current end of `stream` (queued
        send/recv stay queued)."""
        assert isinstance(stream, CudaStream)
        return _recorded(stream, timing=True)

    def trace_end(self, begin: Any, work: Work | None = None) -> Any:
        """An event after the op; a send/recv still queued for its group
        ends with the group, so its token stands for the mark."""
        if isinstance(work, CudaWork) and work.event is None:
            return work
        return _recorded(self._current, timing=True)

    def trace_seconds(self, origin: Any, mark: Any) -> float:
        import cupy

        if isinstance(mark, CudaWork):
            mark = mark.event  # the group's timing event, set at its launch
        if mark is None:
            return 0.0
        return cupy.cuda.get_elapsed_time(origin, mark) / 1e3

    def close(self) -> None:
        import cupy

        for b in self._background:
            b.stop()
        self._background.clear()
        cupy.cuda.runtime.deviceSynchronize()
        self.comms.close()
        _off_streams(self._stream_ids, self.device)


def _off_streams(ids: list[tuple[int, int, int]], device: int) -> None:
    """A backend's streams go with it: where one of them is still torch's
    current stream (work outside a run left it so), torch's default stream
    becomes current, so that no later caller orders its work after a
    destroyed stream (torch's record_event on one crashes the process)."""
    if torch.cuda.is_initialized() and current_torch_stream(device) in ids:
        torch.cuda.set_stream(torch.cuda.default_stream(device))


def _graphs_unavailable() -> str | None:
    """Why runs cannot be captured as CUDA graphs here (None when they can)."""
    from fuserc.runtime.evaluator.graphs import GRAPHS_ENV, graphs_enabled

    if not graphs_enabled():
        return f"{GRAPHS_ENV}=0"
    if not hasattr(torch.cuda, "CUDAGraph"):
        return "this torch has no CUDA graphs"
    return None


def _recorded(stream: CudaStream, timing: bool = False) -> Any:
    """An event recorded on `stream` now."""
    import cupy

    event = cupy.cuda.Event(block=False, disable_timing=not timing)
    event.record(stream.cupy)
    return event


def _setter(work: CudaWork) -> Any:
    def done(event: Any) -> None:
        work.event = event

    return done



def _block_span(local: torch.Tensor, handle: CudaHandle, index: int, chunks: int, what: str) -> tuple[int, int]:
    """(byte offset, byte count) of block `index` of `chunks` equal blocks
    along dim 0 of the shared buffer, checked against the local buffer."""
    n = nbytes(local)
    if chunks == 1 and index == 0:
        if n != handle.nbytes:
            raise RuntimeError(
                f"{what}: local buffer of {n} bytes does not match the shared buffer of {handle.nbytes} bytes"
            )
        return 0, n
    if chunks <= 0 or handle.nbytes % chunks or not 0 <= index < chunks:
        raise RuntimeError(f"{what}: block {index} of {chunks} does not cut the shared buffer of {handle.nbytes} bytes")
    size = handle.nbytes // chunks
    if n != size:
        raise RuntimeError(f"{what}: local buffer of {n} bytes does not match block {index} of {chunks} ({size} bytes)")
    return index * size, size

"""Communication for the cuda backend: NCCL communicators and CUDA IPC.

NCCL: one communicator per team (team position = NCCL rank), created at
program load and cached for the life of the backend. The first member of
each new team makes its unique id; one allgather over the world hands every
id to every rank, then the members initialize the teams in the order given
(the same on every rank, so the blocking initializations cannot cross).

Ordering: every NCCL launch of a rank is chained after the previous one
(its stream waits on the previous launch's event, a device-side wait), so
each GPU runs its NCCL kernels in program order. Ranks issue communications
in the same order, hence no two GPUs can wait on each other's later
communications, even when they are enqueued on different streams.
Consecutive send/recv on one stream are launched as one NCCL group, so a
ring (send to next, receive from previous) cannot deadlock.

CUDA IPC (`share`, `put`, `get`): the buffer's allocation is found with
cuMemGetAddressRange (torch's caching allocator carves buffers out of larger
segments), its memory handle and the buffer's offset in it are exchanged
over the team's MPI communicator, and each member maps the others'
allocations once (cudaIpcOpenMemHandle is allowed once per allocation and
process, so mappings are reference counted). Only ranks of one node share
memory: over a team spanning nodes (`MpiEnv.nodes`), each member maps the
buffers of the members on its node, and a put or get to a member of
another node is refused (send/recv, NCCL, is the way across nodes; the
rings of stream-pipeline use it there). A put or get is one
cudaMemcpyAsync (device to device, copy engines, no SMs) on the current
stream.

Cross-rank ordering of peer copies: a put or get is ordered after earlier
work on its stream and completes asynchronously; what the peer has written,
or will read, is ordered by the program's communications, which are
stream-ordered operations: `hir.barrier` is a device-side fence that every
team member passes only once all earlier work of all members on their
streams is done, with no host synchronization. With backend = nccl it is a
one-byte allreduce; with backend = cuda_ipc each member writes a flag in
every peer's shared pad, then waits for the peers' flags, in one small
kernel (a warp of one block beside the GEMMs it overlaps) or, with
$FUSERC_FENCE=memops, as stream memory operations (FenceOps); a
program's fences use flags with the same values every run, so that a
captured graph repeats them: SignalPad. Any
NCCL collective after `hir.wait` on a put orders it too. Handles are made
with the team synchronized (the handle exchange is an allgather) and
released after a device synchronization and a team barrier, and a run that
shares memory ends with a host barrier (runtime/evaluator/evaluator.py), so no copy
of one run overlaps the next or a freed buffer.
"""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fuserc.diagnostics import Diagnostic
from fuserc.dialects.hir_team import Team as HirTeam
from fuserc.runtime.backends.backend import Handle, ReduceOp, Team
from fuserc.runtime.job.mpi_env import MpiEnv

NO_MULTICAST_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""NVLink multicast stays off: set before any communicator exists."""


def disable_multicast() -> None:
    """Force NVLink multicast off in NCCL (and in torch and NVSHMEM)."""
    os.environ.update(NO_MULTICAST_ENV)


# ncclDataType_t and ncclRedOp_t (nccl.h)
NCCL_UINT8 = 1
NCCL_TYPES: dict[torch.dtype, int] = {
    torch.int64: 4,
    torch.float16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bfloat16: 9,  # NCCL >= 2.10
}
NCCL_OPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3}

MEMCPY_DEVICE_TO_DEVICE = 3


def nccl_type(dtype: torch.dtype) -> int:
    t = NCCL_TYPES.get(dtype)
    if t is None:
        raise RuntimeError(f"NCCL reductions do not support {dtype}")
    return t


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# --------------------------------------------------------------------------
# Device addresses
# --------------------------------------------------------------------------

_LIBCUDA: Any = None


def _libcuda() -> Any:
    """The CUDA driver library, with the signatures of the calls used here."""
    global _LIBCUDA
    if _LIBCUDA is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemGetAddressRange_v2.argtypes = [
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_uint64,
        ]
        lib.cuMemGetAddressRange_v2.restype = ctypes.c_int
        _LIBCUDA = lib
    return _LIBCUDA


def allocation_of(ptr: int) -> tuple[int, int]:
    """(base, size) of the CUDA allocation holding device address `ptr`."""
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    status = _libcuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    if status != 0:
        raise RuntimeError(f"cuMemGetAddressRange failed with CUDA error {status} for address {ptr:#x}")
    return int(base.value), int(size.value)


CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
"""A write with a system-scope memory fence before it (cuda.h)."""
FENCE_ENV = "FUSERC_FENCE"
FENCE_FORMS = ("kernel", "memops")
"""How a copy-engine fence is enqueued (`FUSERC_FENCE`, the first by
default): one small kernel that writes the peers' flags and spins on its
own, or one stream memory operation per flag."""

_FENCE_KERNEL_SOURCE = r"""
extern "C" __global__ void fuserc_fence(
    unsigned long long w0, unsigned long long w1, unsigned long long w2, unsigned long long w3,
    unsigned long long w4, unsigned long long w5, unsigned long long w6, unsigned long long w7,
    unsigned long long r0, unsigned long long r1, unsigned long long r2, unsigned long long r3,
    unsigned long long r4, unsigned long long r5, unsigned long long r6, unsigned long long r7,
    unsigned int value, int reset) {
  const unsigned long long w[8] = {w0, w1, w2, w3, w4, w5, w6, w7};
  const unsigned long long r[8] = {r0, r1, r2, r3, r4, r5, r6, r7};
  const int t = threadIdx.x;
  if (t < 8 && w[t]) {
    __threadfence_system();
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(w[t]), "r"(value) : "memory");
  }
  if (t < 8 && r[t]) {
    unsigned int seen;
    do {
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(r[t]) : "memory");
    } while (seen < value);
    if (reset) asm volatile("st.relaxed.sys.global.u32 [%0], 0;" :: "l"(r[t]) : "memory");
  }
  __syncthreads();
  __threadfence_system();
}
"""
KERNEL_FENCE_MEMBERS = 8
"""Members a kernel fence reaches (its flag addresses are its arguments)."""


class FenceOps:
    """How a fence writes and waits for flags on a stream. `kernel`: one
    block of one warp writes the peers' flags (release, system scope) and
    spins on its own (acquire); `memops`: cuStreamWriteValue32 /
    cuStreamWaitValue32, one per flag, run by the GPU's front end with no
    SM. Over 4 H100s, replayed back to back in a graph, a fence took 6.9 us
    as the kernel and 19.4 us as memops (a GEMM beside the kernel did not
    hold it back); launched op by op the kernel costs the host more (46
    against 30 us a fence)."""

    def __init__(self) -> None:
        lib = _libcuda()
        self.write_fn = self._function(lib, "cuStreamWriteValue32")
        self.wait_fn = self._function(lib, "cuStreamWaitValue32")
        self._kernel: Any = None

    @staticmethod
    def _function(lib: Any, name: str) -> Any:
        for candidate in (f"{name}_v2", name):
            fn = getattr(lib, candidate, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
                fn.restype = ctypes.c_int
                return fn
        raise RuntimeError(f"the CUDA driver has no {name}")

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with CUDA error {status}")

    def write(self, stream: int, addr: int, value: int) -> None:
        self._check(self.write_fn(stream, addr, value, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32")

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        self._check(self.wait_fn(stream, addr, value, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32")

    def fence(self, stream: Any, writes: Sequence[int], waits: Sequence[int], value: int, reset: bool, form: str) -> None:
        """Write `value` to each of `writes` (the peers' words for this
        member) once the stream's earlier work is done, wait until each of
        `waits` (this member's words for the peers) reaches it, then reset
        those to 0 if `reset`."""
        if form == "kernel" and max(len(writes), len(waits)) <= KERNEL_FENCE_MEMBERS:
            self._fence_kernel(stream, writes, waits, value, reset)
        else:
            for addr in writes:
                self.write(stream.ptr, addr, value)
            for addr in waits:
                self.wait_geq(stream.ptr, addr, value)
            for addr in waits if reset else ():
                self.write(stream.ptr, addr, 0)

    def _fence_kernel(self, stream: Any, writes: Sequence[int], waits: Sequence[int], value: int, reset: bool) -> None:
        import cupy
        import numpy as np

        if self._kernel is None:
            self._kernel = cupy.RawKernel(_FENCE_KERNEL_SOURCE, "fuserc_fence")
        pad = [0] * KERNEL_FENCE_MEMBERS
        w = (list(writes) + pad)[:KERNEL_FENCE_MEMBERS]
        r = (list(waits) + pad)[:KERNEL_FENCE_MEMBERS]
        args = tuple(np.uint64(a) for a in w + r) + (np.uint32(value), np.int32(reset))
        with stream:
            self._kernel((1,), (32,), args)


def fence_form() -> str:
    """$FUSERC_FENCE, checked: one of `FENCE_FORMS` (default the first)."""
    form = os.environ.get(FENCE_ENV, FENCE_FORMS[0])
    if form not in FENCE_FORMS:
        raise Diagnostic(f"{FENCE_ENV}={form}: expected one of {', '.join(FENCE_FORMS)}")
    return form


def fence_ops() -> tuple[FenceOps | None, str]:
    """This driver's FenceOps (they need its stream memory operations),
    or None and why not."""
    try:
        return FenceOps(), ""
    except (OSError, RuntimeError) as e:
        return None, str(e)


# --------------------------------------------------------------------------
# Shared memory handles
# --------------------------------------------------------------------------


@dataclass(eq=False)
class CudaHandle(Handle):
    """A buffer shared across a team: each member's device address of it
    (the peers' through their IPC mappings)."""

    team: Team
    ptrs: list[int | None]
    """Per member, its buffer's address here (None: a member on another node)."""
    nbytes: int
    buffer: torch.Tensor
    opened: list[bytes] = field(default_factory=list)

    def peer_ptr(self, peer: int, what: str) -> int:
        """Member `peer`'s buffer, refused when it is on another node."""
        ptr = self.ptrs[peer]
        if ptr is None:
            raise Diagnostic(
                f"{what} to rank {self.team[peer]} of team {list(self.team)}: it is on another node, "
                "which CUDA IPC does not reach (across nodes: hir.send/hir.recv)"
            )
        return ptr


FENCE_SLOTS = 16
"""Programs per team whose fences may use indexed flags at once."""
INDEXED_FENCES = 128
"""Fences per run of one program that may use indexed flags."""


@dataclass(eq=False)
class SignalPad:
    """The flags of a team's copy-engine fences, in every member's
    IPC-shared buffer of 32-bit words. Two protocols, each correct alone
    (every member passes its team's fences in the same order, chained
    across streams by `last`):

    - epoch: fence number e (counted over the team's whole life) writes e
      into word `me` of each peer's buffer and waits until every word of
      its own buffer reaches e. Values only grow, so the words are never
      reset; but each fence's values are new, so a captured graph cannot
      repeat it.
    - indexed: fence i of a program's run (word block (slot, i), a slot per
      program) writes 1 into word `me` of the block in each peer's buffer,
      waits until the block's words of its own buffer are 1, and resets
      them to 0. The same values every run, so a graph can repeat it. A
      peer cannot write a block's word again before it has been reset:
      its next write to block i comes after it has passed another fence,
      which needs this member's write that follows the reset; so a program
      uses indexed flags only when its runs have two fences or more on the
      team (the backend decides, from its first run)."""

    handle: CudaHandle
    me: int
    size: int
    ops: FenceOps
    epoch: int = 0
    last: Any = None
    """(event, stream pointer) after the previous fence: fences on
    different streams are chained, so that a member never passes fence
    n + 1 before fence n (a flag set for fence n + 1 then still means
    that fence n's earlier work is done)."""
    slots: dict[Any, int] = field(default_factory=dict)
    """Program -> its block of indexed words (assigned in the order
    programs first fence, the same on every member)."""

    @staticmethod
    def words(size: int) -> int:
        return size * (1 + FENCE_SLOTS * INDEXED_FENCES)

    def slot(self, owner: Any) -> int | None:
        """The indexed-word slot of `owner` (a new one at its first fence;
        None when all are taken)."""
        found = self.slots.get(owner)
        if found is None:
            free = sorted(set(range(FENCE_SLOTS)) - set(self.slots.values()))
            if not free:
                return None
            found = self.slots[owner] = free[0]
        return found

    def offset(self, pos: int, slot: int | None = None, index: int = 0) -> int:
        """Byte offset of member `pos`'s word: the epoch word, or the word
        of fence `index` of `slot`."""
        block = 0 if slot is None else 1 + slot * INDEXED_FENCES + index
        return 4 * (block * self.size + pos)


class IpcMappings:
    """This process's mappings of peers' allocations, one per allocation,
    reference counted across handles."""

    def __init__(self) -> None:
        self._open: dict[bytes, list[int]] = {}  # handle -> [base, count]

    def open(self, handle: bytes) -> int:
        from cupy.cuda import runtime

        entry = self._open.get(handle)
        if entry is None:
            entry = self._open[handle] = [runtime.ipcOpenMemHandle(handle), 0]
        entry[1] += 1
        return entry[0]

    def close(self, handle: bytes) -> None:
        from cupy.cuda import runtime

        entry = self._open[handle]
        entry[1] -= 1
        if entry[1] == 0:
            runtime.ipcCloseMemHandle(entry[0])
            del self._open[handle]

    def __len__(self) -> int:
        return len(self._open)


# --------------------------------------------------------------------------
# Teams
# --------------------------------------------------------------------------


@dataclass(eq=False)
class P2POp:
    """A send or recv waiting for its group launch."""

    send: bool
    team: Team
    ptr: int
    nbytes: int
    peer: int
    done: Callable[[Any], None]  # receives the event recorded after the group


class Communicators:
    """NCCL and MPI communicators per team, IPC mappings, and the ordering
    of this rank's NCCL launches."""

    def __init__(self, env: MpiEnv, device: int, node_of: Sequence[int], gpu_of: Sequence[tuple[int, int]]):
        disable_multicast()
        self.env = env
        self.device = device
        self.node_of = list(node_of)  # world rank -> node id
        self.gpu_of = list(gpu_of)  # world rank -> (node id, device)
        self._seen: set[Team] = set()
        self._nccl: dict[Team, Any] = {}
        self._mpi: dict[Team, Any] = {}
        self._last: Any = None  # (event, stream ptr) of the last NCCL launch
        self._p2p: list[P2POp] = []
        self._p2p_stream: Any = None
        self._fence: torch.Tensor | None = None  # the byte `fence` reduces
        self._pads: dict[Team, SignalPad | None] = {}  # ipc_fence flags per team (None: NCCL)
        self.capturing = False  # a graph capture is under way (CudaBackend.capture)
        self.ipc = IpcMappings()
        self.fence_form = fence_form()

    # ---- creation -----------------------------------------------------------
    def prepare(self, teams: Sequence[Team]) -> None:
        """Communicators for the teams not seen before (collective over the
        world: every rank passes the same teams in the same order)."""
        from cupy.cuda import nccl

        new = [t for t in teams if t not in self._seen]
        if not new:
            return
        self._seen.update(new)
        rank, world = self.env.rank, self.env.comm
        families = [t if isinstance(t, HirTeam) else HirTeam(t) for t in new]
        own = [f.of(rank) for f in families]  # this rank's team of each (a family: one of its translates)
        for team in (m for f in families for m in f.teams()):  # every team on every rank: all refuse alike
            gpus = [self.gpu_of[r] for r in team]
            if len(set(gpus)) != len(gpus):
                a, b = next((team[i], team[j]) for i in range(len(team)) for j in range(i) if gpus[i] == gpus[j])
                raise RuntimeError(
                    f"ranks {b} and {a} of team {list(team)} would share GPU {gpus[team.index(a)][1]} of "
                    "their node: the cuda backend needs one GPU per rank (run at most as many ranks per "
                    "node as the node has GPUs)"
                )
        # one NCCL id per team, made by its first member (of each team of a family)
        mine = {(i, t[0]): nccl.get_unique_id() for i, t in enumerate(own) if t is not None and t[0] == rank}
        ids: dict[tuple[int, int], Any] = {}
        for part in world.allgather(mine):
            ids.update(part)
        for i, (family, team) in enumerate(zip(families, own)):
            if family.translates:  # every team of the family by one split of the world
                _, comm = self.env.family_comm(family, tag=8)
            else:
                comm = self.env.team_comm(family, tag=8)  # collective over the world under torchrun
            if comm is None or team is None:
                continue
            self._mpi[team] = comm
            self._nccl[team] = nccl.NcclCommunicator(len(team), ids[(i, team[0])], team.index(rank))

    def nccl(self, team: Team) -> Any:
        comm = self._nccl.get(team)
        if comm is None:
            raise RuntimeError(f"team {list(team)} was not prepared on rank {self.env.rank}")
        return comm

    def mpi(self, team: Team) -> Any:
        self.nccl(team)
        return self._mpi[team]

    # ---- launching NCCL ---------------------------------------------------------
    def launch(self, stream: Any, body: Callable[[], None]) -> Any:
        """Run `body` (NCCL calls on `stream`) after this rank's previous
        NCCL launch; returns the event recorded after it."""
        import cupy

        self.flush()
        self._after_last(stream)
        body()
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        self._last = (event, stream.ptr)
        return event

    def _after_last(self, stream: Any) -> None:
        if self._last is not None and self._last[1] != stream.ptr:
            stream.wait_event(self._last[0])

    def p2p(self, op: P2POp, stream: Any) -> None:
        """Queue a send or recv; consecutive ones on a stream form a group."""
        if self._p2p and self._p2p_stream.ptr != stream.ptr:
            self.flush()
        self._p2p.append(op)
        self._p2p_stream = stream

    def flush(self) -> None:
        """Launch the queued send/recv as one NCCL group."""
        if not self._p2p:
            return
        import cupy
        from cupy.cuda import nccl

        ops, stream = self._p2p, self._p2p_stream
        self._p2p, self._p2p_stream = [], None
        self._after_last(stream)
        nccl.groupStart()
        try:
            for op in ops:
                comm = self.nccl(op.team)
                if op.send:
                    comm.send(op.ptr, op.nbytes, NCCL_UINT8, op.peer, stream.ptr)
                else:
                    comm.recv(op.ptr, op.nbytes, NCCL_UINT8, op.peer, stream.ptr)
        finally:
            nccl.groupEnd()
        # with timing (a trace ends the send/recv spans here), but not in a
        # graph capture, which records no timestamps
        event = cupy.cuda.Event(block=False, disable_timing=self.capturing)
        event.record(stream)
        self._last = (event, stream.ptr)
        for op in ops:
            op.done(event)

    # ---- collectives on contiguous buffers (the backend stages the rest) ----
    def allgather(self, send: int, recv: int, count: int, team: Team, stream: Any) -> Any:
        comm = self.nccl(team)
        return self.launch(stream, lambda: comm.allGather(send, recv, count, NCCL_UINT8, stream.ptr))

    def broadcast(self, buf: int, count: int, root: int, team: Team, stream: Any) -> Any:
        comm = self.nccl(team)
        return self.launch(stream, lambda: comm.broadcast(buf, buf, count, NCCL_UINT8, root, stream.ptr))

    def reduce(self, send: int, recv: int, count: int, dtype: torch.dtype, op: ReduceOp, root: int, team: Team, stream: Any) -> Any:
        comm = self.nccl(team)
        t, o = nccl_type(dtype), NCCL_OPS[op]
        return self.launch(stream, lambda: comm.reduce(send, recv, count, t, o, root, stream.ptr))

    def allreduce(self, send: int, recv: int, count: int, dtype: torch.dtype, op: ReduceOp, team: Team, stream: Any) -> Any:
        comm = self.nccl(team)
        t, o = nccl_type(dtype), NCCL_OPS[op]
        return self.launch(stream, lambda: comm.allReduce(send, recv, count, t, o, stream.ptr))

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: torch.dtype, op: ReduceOp, team: Team, stream: Any) -> Any:
        comm = self.nccl(team)
        t, o = nccl_type(dtype), NCCL_OPS[op]
        return self.launch(stream, lambda: comm.reduceScatter(send, recv, count, t, o, stream.ptr))

    def exchange(self, sends: Sequence[tuple[int, int, int]], recvs: Sequence[tuple[int, int, int]], team: Team, stream: Any) -> Any:
        """One group of sends and receives, each (peer, address, bytes):
        scatter, gather and alltoall."""
        from cupy.cuda import nccl

        comm = self.nccl(team)

        def body() -> None:
            nccl.groupStart()
            try:
                for peer, ptr, n in sends:
                    comm.send(ptr, n, NCCL_UINT8, peer, stream.ptr)
                for peer, ptr, n in recvs:
                    comm.recv(ptr, n, NCCL_UINT8, peer, stream.ptr)
            finally:
                nccl.groupEnd()

        return self.launch(stream, body)

    def ipc_fence(self, team: Team, stream: Any, indexed: tuple[Any, int] | None = None) -> tuple[Any, bool]:
        """`hir.barrier ... backend = cuda_ipc`: the same fence as `fence`,
        made of flags on IPC-shared memory (SignalPad) written and waited
        for by the fence kernel or stream memory operations (FenceOps), so
        it takes at most one warp from the GEMMs it overlaps and joins no
        NCCL launch order. `indexed`: (program, fence index in its run) to use
        that program's indexed flags, else epoch flags. Falls back to
        `fence` where a member's driver lacks stream memory operations
        (decided by the whole team at the first use). Returns the event
        after the fence and whether a graph can repeat it."""
        import cupy

        if len({self.node_of[r] for r in team}) > 1:
            raise Diagnostic(
                f"a cuda_ipc hir.barrier over team {list(team)}, which spans nodes: copy-engine fences stay "
                "within a node (one per node, or backend = nccl)"
            )
        pad = self._pads.get(team, False)
        if pad is False:
            pad = self._pads[team] = self._make_pad(team)
        if pad is None:
            return self.fence(team, stream), True
        assert isinstance(pad, SignalPad)
        self.flush()
        if pad.last is not None and pad.last[1] != stream.ptr:
            stream.wait_event(pad.last[0])
        slot = pad.slot(indexed[0]) if indexed is not None and indexed[1] < INDEXED_FENCES else None
        me, ops = pad.me, pad.ops
        if slot is None:
            pad.epoch += 1
            value, word = pad.epoch, pad.offset
        else:
            assert indexed is not None
            value, word = 1, functools.partial(pad.offset, slot=slot, index=indexed[1])
        here = pad.handle.peer_ptr(me, "a cuda_ipc fence")
        peers = [pos for pos in range(pad.size) if pos != me]
        writes = [pad.handle.peer_ptr(pos, "a cuda_ipc fence") + word(me) for pos in peers]
        waits = [here + word(pos) for pos in peers]
        # reset (indexed) for the next run (see SignalPad)
        ops.fence(stream, writes, waits, value, slot is not None, self.fence_form)
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        pad.last = (event, stream.ptr)
        return event, slot is not None

    def forget_owner(self, owner: Any) -> None:
        """Free a closed program's indexed-flag slots (its words are all 0:
        each of its fences reset what it waited for)."""
        for pad in self._pads.values():
            if pad is not None:
                pad.slots.pop(owner, None)

    def forget_order(self) -> None:
        """Drop the events that chain NCCL launches and fences: at the
        start and end of a graph capture, where an event recorded outside
        the capture (or inside it) must not be waited on. The caller has
        ordered everything before (the streams were synchronized, or the
        work joined into the main stream)."""
        self._last = None
        for pad in self._pads.values():
            if pad is not None:
                pad.last = None

    def _make_pad(self, team: Team) -> SignalPad | None:
        """Zeroed flags, shared with the team (collective over it); None on
        every member when one member cannot use stream memory operations."""
        import cupy

        ops, why = fence_ops()
        reasons = self.mpi(team).allgather(why if ops is None else "")
        if any(reasons):
            if self.env.rank == team[0]:
                warnings.warn(f"team {list(team)}: cuda_ipc fences use NCCL ({next(r for r in reasons if r)})")
            return None
        flags = torch.zeros(SignalPad.words(len(team)), dtype=torch.int32, device=torch.device("cuda", self.device))
        cupy.cuda.runtime.deviceSynchronize()  # zeroed before any peer can write
        assert ops is not None
        return SignalPad(self.share(flags, team), team.index(self.env.rank), len(team), ops)

    def fence(self, team: Team, stream: Any) -> Any:
        """`hir.barrier`: a one-byte allreduce (max) on `stream`. Each member
        passes it only once every member's earlier work on its stream is
        done: a device-side fence, the host does not wait."""
        comm = self.nccl(team)
        if self._fence is None:
            self._fence = torch.zeros(1, dtype=torch.uint8, device=torch.device("cuda", self.device))
        ptr = self._fence.data_ptr()
        return self.launch(stream, lambda: comm.allReduce(ptr, ptr, 1, NCCL_UINT8, NCCL_OPS["max"], stream.ptr))

    # ---- sharing memory -------------------------------------------------------
    def share(self, buf: torch.Tensor, team: Team) -> CudaHandle:
        """Exchange `buf`'s IPC handle and offset with the team and map the
        peers' buffers (collective over the team)."""
        from cupy.cuda import runtime

        self.flush()
        comm = self.mpi(team)
        size = nbytes(buf)
        handle, offset = b"", 0
        if size:
            base, _ = allocation_of(buf.data_ptr())
            handle, offset = runtime.ipcGetMemHandle(base), buf.data_ptr() - base
        mine = self.node_of[self.env.rank]
        infos = comm.allgather((mine, handle, offset, size))
        sizes = {info[3] for info in infos}
        if len(sizes) > 1:
            raise RuntimeError(
                f"hir.share over team {list(team)}: members share buffers of different sizes "
                f"({sorted(sizes)} bytes)"
            )
        me = team.index(self.env.rank)
        shared = CudaHandle(team, [], size, buf)
        for pos, (node, h, off, _) in enumerate(infos):
            if node != mine:  # another node: no mapping, no copy
                shared.ptrs.append(None)
            elif pos == me or not size:
                shared.ptrs.append(buf.data_ptr())
            else:
                shared.ptrs.append(self.ipc.open(h) + off)
                shared.opened.append(h)
        return shared

    def release(self, handle: CudaHandle) -> None:
        """Unmap the peers' buffers once no member copies any more
        (collective over the handle's team)."""
        import cupy

        self.flush()
        cupy.cuda.runtime.deviceSynchronize()
        self.mpi(handle.team).Barrier()
        for h in handle.opened:
            self.ipc.close(h)
        handle.opened.clear()

    def close(self) -> None:
        self.flush()
        for pad in self._pads.values():
            if pad is not None:
                self.release(pad.handle)
        self._pads.clear()
        for comm in self._nccl.values():
            comm.destroy()
        for comm in self._mpi.values():
            comm.Free()
        self._nccl.clear()
        self._mpi.clear()
        self._last = None
        self._fence = None

"""The cpu backend: torch CPU tensors and MPI (or gloo), so every program runs anywhere.

Arrays are contiguous torch CPU tensors (views of them where the program
asks). Communications go through the launcher's communicator (mpi4py under
mpiexec, torch.distributed's gloo under torchrun) on one sub-communicator per team,
created collectively at program load and cached; their ranks are in team
order, so a team position is the rank in that communicator. Data moves as
raw words of the element size (bf16 as 16-bit integers); reductions of
16-bit floats run in float32 and are rounded back.

Streams run in order: each op runs when the host reaches it. A
communication is started non-blocking and completes at `wait`, or earlier
when a later op touches memory it writes (or writes memory it reads), so
that results never depend on how streams were interleaved. Put/get use MPI
one-sided windows created by `share` (passive-target lock/unlock, so each
copy is complete at the target when it returns).

Nodes: MPI reaches every rank, but the cuda backend's peer copies and
copy-engine fences (CUDA IPC) reach only the ranks of one node, so this
backend refuses them across nodes too (`MpiEnv.nodes`; with
$FUSERC_GPUS_PER_NODE a one-machine job is several nodes): a program that
runs here keeps within a node what must, and moves the rest by send/recv.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from xdsl.ir import Block, SSAValue

from fuserc.diagnostics import Diagnostic
from fuserc.dialects.interfaces import EvalContext
from fuserc.runtime.backends.backend import Backend, Contexts, Event, Handle, ReduceOp, Stream, Team, Work, alltoallv_offsets
from fuserc.runtime.job.mpi_env import NO_WINDOWS, MpiEnv
from fuserc.runtime.kernels.spans import overlaps, same_view, span

_WORD = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}

_REDUCE_DTYPE: dict[torch.dtype, torch.dtype] = {
    torch.float32: torch.float32,
    torch.float64: torch.float64,
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.int64: torch.int64,
}
"""The dtype a reduction is computed in over MPI."""


def _words(t: torch.Tensor) -> np.ndarray:
    """A contiguous tensor's memory as integers of its element size."""
    assert t.is_contiguous(), "communication buffers must be contiguous"
    flat = t.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    return flat.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).numpy()


def _overlap(a: Sequence[tuple[int, int] | None], b: Sequence[tuple[int, int] | None]) -> bool:
    return any(x and y and x[0] < y[1] and y[0] < x[1] for x in a for y in b)


def _aliased(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether two buffers may share memory (MPI forbids aliased send and
    receive buffers, so the send side is then copied)."""
    return a is not None and b is not None and overlaps(a, b)


@dataclass(eq=False)
class CpuStream(Stream):
    name: str


@dataclass(eq=False)
class CpuEvent(Event):
    stream: CpuStream


@dataclass(eq=False)
class CpuWork(Work):
    """MPI requests in flight and what to do once they complete (copy a
    staging buffer back); `reads`/`writes` are the byte ranges it touches."""

    requests: list[Any] = field(default_factory=list)
    finalize: list[Callable[[], None]] = field(default_factory=list)
    reads: list[tuple[int, int] | None] = field(default_factory=list)
    writes: list[tuple[int, int] | None] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)
    done: bool = False


@dataclass(eq=False)
class CpuHandle(Handle):
    """An MPI window over one buffer per team member (None for a team of
    one rank, and in a job without MPI windows, torchrun's: no copy to a
    peer may use it; one to the rank's own buffer is a copy in memory)."""

    window: Any
    team: Team
    nbytes: int
    buffer: torch.Tensor


def epilogue(y: torch.Tensor, activation: str) -> torch.Tensor:
    """A GEMM's `activation` epilogue (hir.linear's) applied to its result."""
    if activation == "gelu_tanh":
        return torch.nn.functional.gelu(y, approximate="tanh")
    raise ValueError(f"unknown GEMM epilogue activation '{activation}'")


def launch_with_torch(
    body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], contexts: Contexts | None = None,
    views: bool = False,
) -> None:
    """Run a `hir.launch` region op by op with torch in the declared dtypes
    (each op's `reference`), writing the yielded values into `outs`
    (`torch_values`)."""
    values = torch_values(body, ins, contexts, views, outs[0].device if outs else None)
    for out, value in zip(outs, values, strict=True):
        out.copy_(value)


def torch_values(
    body: Block, ins: Sequence[torch.Tensor], contexts: Contexts | None = None, views: bool = False,
    device: torch.device | None = None,
) -> list[torch.Tensor]:
    """The values a `hir.launch` region yields, computed op by op with torch
    in the declared dtypes (each op's `reference`) on `device`. A value is
    let go after its last use, so the region holds what is live, not every
    value it made (a GPT layer's backward region of [8192, 16384] bf16
    tensors made 6.9 GB of f32 values; tracing it for its kernel ran them
    all at once). With `views`, permutes and reshapes are views of their
    operands (a grouped GEMM reads its permuted weight in place)."""
    from fuserc.runtime.evaluator.reference import reference_results

    env: dict[SSAValue, torch.Tensor] = dict(zip(body.args, ins, strict=True))
    last = _last_uses(body)
    for i, op in enumerate(body.ops):
        if op.name == "hir.yield":
            return [env[v] for v in op.operands]
        ctx = contexts.get(op) if contexts else None
        ctx = ctx.on(device) if ctx else EvalContext(device=device)
        view = _layout_view(op, env) if views else None
        values = [view] if view is not None else reference_results(op, [env[v] for v in op.operands], ctx)
        for r, value in zip(op.results, values, strict=True):
            if r in last:
                env[r] = value
        for v in op.operands:
            if last.get(v) == i:
                env.pop(v, None)
    raise AssertionError("hir.launch region without hir.yield")


def _layout_view(op: Any, env: dict[SSAValue, torch.Tensor]) -> torch.Tensor | None:
    """A permute or reshape of a region as a view of its operand (no copy),
    else None."""
    from fuserc.dialects.fusion import PermuteOp, ReshapeOp, shape_of

    if isinstance(op, PermuteOp):
        return env[op.operands[0]].permute(op.keyword("dims"))
    if isinstance(op, ReshapeOp):
        return env[op.operands[0]].reshape(shape_of(op.results[0]))
    return None


def _last_uses(body: Block) -> dict[SSAValue, int]:
    """Each value of a region read by its ops: the index of the last op that reads it."""
    last: dict[SSAValue, int] = {}
    for i, op in enumerate(body.ops):
        for v in op.operands:
            last[v] = i
    return last


class TorchResults:
    """Of a backend that runs a region of an op with a PyTorch kernel of its
    own, whose results torch makes in memory of their own:
    `Backend.makes_results` for those regions (attention, and
    `torch_regions.eager_region`'s: a grouped GEMM, dispatch's steps, an
    embedding's gradient), and their values for `Backend.launch_made`. The
    evaluator takes no buffer for a result that is to stand for it
    (`stand_ins.Later`): a buffer taken before the launch and freed after
    it, beside the result, raised the 24-layer GPT's peak on an H200 by
    651 MiB."""

    def makes_results(self, body: Block) -> bool:
        from fuserc.runtime.kernels.attention import runs_region
        from fuserc.runtime.kernels.torch_regions import eager_region

        return eager_region(body) or runs_region(body)

    @staticmethod
    def made_values(body: Block, ins: Sequence[torch.Tensor], contexts: Contexts | None) -> list[torch.Tensor]:
        """The region's values as torch makes them (its views as views)."""
        from fuserc.runtime.kernels.attention import region_values

        made = region_values(body, ins)
        if made is not None:
            return made
        return torch_values(body, ins, contexts, views=True, device=ins[0].device if ins else None)


class CpuBackend(TorchResults, Backend):
    """Torch on the CPU, MPI between ranks."""

    name = "cpu"

    def __init__(self, env: MpiEnv):
        super().__init__(env)
        self._comms: dict[Team, Any] = {}
        self._families: set[Team] = set()  # families of teams (hir.Team with translates) already split
        self._pending: list[CpuWork] = []
        self._main = CpuStream("main")
        self._current = self._main
        self._pools: dict[int, list[CpuStream]] = {}
        self.nodes = env.copy_nodes(self.name)  # collective: every rank builds its backend at the same point

    # ---- program load -------------------------------------------------------
    def prepare_teams(self, teams: Sequence[Team]) -> None:
        """One communicator per team, made with MPI_Comm_create_group by the
        team's members only; the teams of a family (translates of one team)
        by one MPI_Comm_split of the world, colored by team. Every rank walks
        the same list in the same order, so each creation completes before
        any member starts the next."""
        for team in teams:
            if getattr(team, "translates", ()):  # a family: one split of the world for all its teams
                if team in self._families:
                    continue
                self._families.add(team)
                own, comm = self.env.family_comm(team, tag=7)  # type: ignore[arg-type]
                if own is not None and own not in self._comms:
                    self._comms[own] = comm
                continue
            if team in self._comms:
                continue
            comm = self.env.team_comm(team, tag=7)
            if comm is not None:
                self._comms[team] = comm

    def _comm(self, team: Team) -> Any:
        comm = self._comms.get(team)
        if comm is None:
            raise RuntimeError(f"team {list(team)} was not prepared on rank {self.rank}")
        return comm

    # ---- arrays -------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype)

    def from_host(self, value: torch.Tensor) -> torch.Tensor:
        return value.detach().to("cpu").clone(memory_format=torch.contiguous_format)

    def to_host(self, array: torch.Tensor) -> torch.Tensor:
        self._order(reads=[array])
        return array.detach().clone(memory_format=torch.contiguous_format)

    # ---- compute ------------------------------------------------------------
    def copy(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self._order(reads=[src], writes=[dst])
        dst.copy_(src)

    def matmul(
        self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, acc: torch.Tensor | None = None
    ) -> None:
        if acc is not None:  # the sum is made aside, so `acc` may be `out` or overlap anything
            self._order(reads=[a, b, acc], writes=[out])
            out.copy_(torch.matmul(a, b).add_(acc))
            return
        self._order(reads=[a, b], writes=[out])
        if out.is_contiguous() and not _overlap([span(out)], [span(a), span(b)]):
            torch.matmul(a, b, out=out)
        else:
            out.copy_(torch.matmul(a, b))

    def linear(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor,
        acc: torch.Tensor | None = None,
        activation: str | None = None,
    ) -> None:
        ins = [x, w] + ([bias] if bias is not None else []) + ([acc] if acc is not None else [])
        self._order(reads=ins, writes=[out])
        y = torch.nn.functional.linear(x, w, bias)
        if activation is not None:
            y = epilogue(y, activation)
        out.copy_(y.add_(acc) if acc is not None else y)

    def launch(
        self, body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], contexts: Contexts | None = None
    ) -> None:
        from fuserc.runtime.kernels.attention import run_region

        self._order(reads=list(ins), writes=list(outs))
        if not run_region(body, ins, outs):
            launch_with_torch(body, ins, outs, contexts)

    def launch_made(
        self, body: Block, ins: Sequence[torch.Tensor], contexts: Contexts | None = None, callers: bool = False
    ) -> list[torch.Tensor] | None:
        """Its values as torch makes them (`makes_results`; one memory for
        the caller's and the program's)."""
        self._order(reads=list(ins))
        return self.made_values(body, ins, contexts)

    # ---- communication ------------------------------------------------------
    def allgather(self, inp: torch.Tensor, out: torch.Tensor, team: Team) -> Work:
        work = self._start([inp], [out])
        src = self._readable(inp, work, copy=_aliased(inp, out))  # in place: inp is a block of out
        work.requests.append(self._comm(team).Iallgather(_words(src), _words(self._writable(out, work))))
        return work

    def broadcast(self, buf: torch.Tensor, root: int, team: Team) -> Work:
        work = self._start([buf], [buf])
        if buf.is_contiguous():
            staged = buf
        else:
            staged = buf.contiguous()
            work.finalize.append(lambda: buf.copy_(staged))
            work.keep.append(staged)
        work.requests.append(self._comm(team).Ibcast(_words(staged), root=root))
        return work

    def scatter(self, inp: torch.Tensor | None, out: torch.Tensor, root: int, team: Team) -> Work:
        comm = self._comm(team)
        is_root = comm.Get_rank() == root
        if is_root and inp is None:
            raise RuntimeError(f"scatter: the input is absent on its root (rank {self.rank})")
        work = self._start([inp] if is_root else [], [out])
        send = _words(self._readable(inp, work, copy=_aliased(inp, out))) if is_root else None
        work.requests.append(comm.Iscatter(send, _words(self._writable(out, work)), root=root))
        return work

    def gather(self, inp: torch.Tensor, out: torch.Tensor | None, root: int, team: Team) -> Work:
        comm = self._comm(team)
        is_root = comm.Get_rank() == root
        if is_root and out is None:
            raise RuntimeError(f"gather: the output is absent on its root (rank {self.rank})")
        work = self._start([inp], [out] if is_root else [])
        recv = _words(self._writable(out, work)) if is_root else None
        send = self._readable(inp, work, copy=is_root and _aliased(inp, out))
        work.requests.append(comm.Igather(_words(send), recv, root=root))
        return work

    def reduce(self, inp: torch.Tensor, out: torch.Tensor | None, root: int, op: ReduceOp, team: Team) -> Work:
        comm = self._comm(team)
        is_root = comm.Get_rank() == root
        if is_root and out is None:
            raise RuntimeError(f"reduce: the output is absent on its root (rank {self.rank})")
        work = self._start([inp], [out] if is_root else [])
        src = self._reduce_input(inp, out if is_root else None, work)
        dst = self._reduce_output(out, work) if is_root else None
        work.requests.append(comm.Ireduce(src, dst, op=self.env.reduce_op(op), root=root))
        return work

    def allreduce(self, inp: torch.Tensor, out: torch.Tensor, op: ReduceOp, team: Team) -> Work:
        comm = self._comm(team)
        work = self._start([inp], [out])
        if same_view(inp, out) and out.is_contiguous() and _REDUCE_DTYPE.get(out.dtype) == out.dtype:
            work.requests.append(comm.Iallreduce(self.env.in_place, out.numpy(), op=self.env.reduce_op(op)))
            return work
        src = self._reduce_input(inp, out, work)
        work.requests.append(comm.Iallreduce(src, self._reduce_output(out, work), op=self.env.reduce_op(op)))
        return work

    def reduce_scatter(self, inp: torch.Tensor, out: torch.Tensor, op: ReduceOp, team: Team) -> Work:
        work = self._start([inp], [out])
        src = self._reduce_input(inp, out, work)
        dst = self._reduce_output(out, work)
        work.requests.append(self._comm(team).Ireduce_scatter_block(src, dst, op=self.env.reduce_op(op)))
        return work

    def alltoall(self, inp: torch.Tensor, out: torch.Tensor, team: Team) -> Work:
        work = self._start([inp], [out])
        src = self._readable(inp, work, copy=_aliased(inp, out))
        work.requests.append(self._comm(team).Ialltoall(_words(src), _words(self._writable(out, work))))
        return work

    def alltoallv(
        self, inp: torch.Tensor, send_counts: torch.Tensor, out: torch.Tensor, recv_counts: torch.Tensor, team: Team
    ) -> Work:
        comm = self._comm(team)
        self._order(reads=[send_counts], writes=[recv_counts])
        send = [int(c) for c in send_counts.tolist()]
        got = np.zeros(len(team), np.int64)
        comm.Alltoall(np.asarray(send, np.int64), got)  # the counts first: they size the exchange of rows
        recv_counts.copy_(torch.from_numpy(got))
        recv = got.tolist()
        sdispl, rdispl = alltoallv_offsets(send, recv, inp.shape[0], out.shape[0], self.rank)
        work = self._start([inp], [out])
        src = self._readable(inp, work, copy=_aliased(inp, out))
        if out.is_contiguous():
            dst = out
        else:  # staged with its values: rows past those received keep theirs
            dst = out.clone(memory_format=torch.contiguous_format)
            work.finalize.append(lambda: out.copy_(dst))
        work.keep.append(dst)
        row = math.prod(inp.shape[1:])  # elements (words) per row

        def spec(t: torch.Tensor, counts: list[int], displs: list[int]) -> list[Any]:
            return [_words(t), ([c * row for c in counts], [d * row for d in displs])]

        work.requests.append(comm.Ialltoallv(spec(src, send, sdispl), spec(dst, recv, rdispl)))
        return work

    def send(self, buf: torch.Tensor, peer: int, team: Team) -> Work:
        work = self._start([buf], [])
        work.requests.append(self._comm(team).Isend(_words(self._readable(buf, work)), dest=peer, tag=11))
        return work

    def recv(self, buf: torch.Tensor, peer: int, team: Team) -> Work:
        work = self._start([], [buf])
        work.requests.append(self._comm(team).Irecv(_words(self._writable(buf, work)), source=peer, tag=11))
        return work

    def wait(self, work: Work) -> None:
        assert isinstance(work, CpuWork)
        self._complete(work)

    # ---- streams and events: one in-order queue -----------------------------
    def get_current_stream(self) -> Stream:
        return self._current

    def set_current_stream(self, stream: Stream) -> None:
        assert isinstance(stream, CpuStream)
        self._current = stream

    def stream_for(self, index: int, pool_size: int) -> Stream:
        pool = self._pools.get(pool_size)
        if pool is None:
            pool = self._pools[pool_size] = [CpuStream(f"worker{i}/{pool_size}") for i in range(pool_size)]
        return pool[index % pool_size]

    def record_event(self) -> Event:
        return CpuEvent(self._current)

    def wait_event(self, event: Event) -> None:
        """Nothing to do: every op ran when the host reached it, and pending
        communications complete before anything touches their memory."""

    # ---- peer-to-peer -------------------------------------------------------
    def share(self, buf: torch.Tensor, team: Team) -> Handle:
        if not buf.is_contiguous():
            raise RuntimeError("hir.share needs a contiguous buffer")
        self._order(reads=[buf], writes=[buf])
        mem = _words(buf).view(np.uint8) if buf.numel() else np.empty(0, np.uint8)
        # without MPI windows (torchrun) each rank is a node of its own: the
        # handle has no window, and a copy through it to a peer is refused
        # (_reachable); a team of this rank alone needs none (`_own_bytes`)
        window = self.env.share_memory(mem, self._comm(team)) if self.env.shares_memory and len(team) > 1 else None
        return CpuHandle(window, team, buf.numel() * buf.element_size(), buf)

    def _own_bytes(self, handle: CpuHandle, peer: int) -> np.ndarray | None:
        """The shared buffer's bytes where a copy through a handle without a
        window is to this rank's own buffer (a team of this rank alone, or a
        job without MPI windows): a copy in memory. None otherwise. (A
        window over one process is not made: some MPI builds make none in a
        process started without a launcher.)"""
        if handle.window is None and handle.team[peer] == self.rank:
            return _words(handle.buffer).view(np.uint8)
        return None

    def release_handle(self, handle: Handle) -> None:
        assert isinstance(handle, CpuHandle)
        if handle.window is not None:
            handle.window.Free()

    def put(self, src: torch.Tensor, handle: Handle, peer: int) -> Work:
        assert isinstance(handle, CpuHandle)
        _check_peer_copy(src, handle, "put")
        return self._put(src, handle, peer, None)

    def get(self, handle: Handle, peer: int, dst: torch.Tensor) -> Work:
        assert isinstance(handle, CpuHandle)
        _check_peer_copy(dst, handle, "get")
        return self._get(handle, peer, dst, None)

    def put_block(self, src: torch.Tensor, handle: Handle, peer: int, index: int, chunks: int) -> Work:
        assert isinstance(handle, CpuHandle)
        return self._put(src, handle, peer, _block_span(src, handle, index, chunks, "put"))

    def get_block(self, handle: Handle, peer: int, dst: torch.Tensor, index: int, chunks: int) -> Work:
        assert isinstance(handle, CpuHandle)
        return self._get(handle, peer, dst, _block_span(dst, handle, index, chunks, "get"))

    def _put(self, src: torch.Tensor, handle: CpuHandle, peer: int, span: tuple[int, int] | None) -> Work:
        """`src` into the peer's shared buffer, whole or at byte `span`
        (offset, count): through the MPI window, or in memory where it is
        this rank's own (`_own_bytes`)."""
        from mpi4py import MPI

        self._order(reads=[src])
        data = _words(src.contiguous()).view(np.uint8)
        own = self._own_bytes(handle, peer)
        if own is not None:
            start = span[0] if span is not None else 0
            own[start : start + data.size] = data
        else:
            self._reachable(handle, peer, "hir.put")
            handle.window.Lock(peer, MPI.LOCK_SHARED)
            handle.window.Put(data, peer, target=None if span is None else (*span, MPI.BYTE))
            handle.window.Unlock(peer)
        return CpuWork(done=True)

    def _get(self, handle: CpuHandle, peer: int, dst: torch.Tensor, span: tuple[int, int] | None) -> Work:
        """The peer's shared buffer, whole or at byte `span`, into `dst` (`_put`'s way)."""
        from mpi4py import MPI

        self._order(writes=[dst])
        staged = dst if dst.is_contiguous() else torch.empty_like(dst, memory_format=torch.contiguous_format)
        into = _words(staged).view(np.uint8)
        own = self._own_bytes(handle, peer)
        if own is not None:
            start = span[0] if span is not None else 0
            into[:] = own[start : start + into.size]
        else:
            self._reachable(handle, peer, "hir.get")
            handle.window.Lock(peer, MPI.LOCK_SHARED)
            handle.window.Get(into, peer, target=None if span is None else (*span, MPI.BYTE))
            handle.window.Unlock(peer)
        if staged is not dst:
            dst.copy_(staged)
        return CpuWork(done=True)

    def team_barrier(self, team: Team, backend: str = "nccl") -> Work:
        """Ops run when the host reaches them, so the fence completes this
        rank's pending communications, then meets the team (over MPI,
        whatever `backend` names; a cuda_ipc fence only within a node)."""
        if backend == "cuda_ipc":
            for peer in range(len(team)):
                self._same_node(team, peer, "a cuda_ipc hir.barrier")
        while self._pending:
            self._complete(self._pending[0])
        self._comm(team).Barrier()
        return CpuWork(done=True)

    # ---- whole device -------------------------------------------------------
    def synchronize(self) -> None:
        while self._pending:
            self._complete(self._pending[0])
        self._current = self._main

    def timer_start(self) -> float:
        self.synchronize()
        return time.perf_counter()

    def timer_stop(self, mark: Any) -> float:
        self.synchronize()
        return time.perf_counter() - float(mark)

    def close(self) -> None:
        self.synchronize()
        for comm in self._comms.values():
            comm.Free()
        self._comms.clear()
        self._families.clear()

    # ---- internals ----------------------------------------------------------
    def _same_node(self, team: Team, peer: int, what: str) -> None:
        """Refuse a copy-engine transfer between nodes (as CUDA IPC does)."""
        other = team[peer]
        if self.nodes[other] != self.nodes[self.rank]:
            raise Diagnostic(
                f"{what} between rank {self.rank} (node {self.nodes[self.rank]}) and rank {other} "
                f"(node {self.nodes[other]}) of team {list(team)}: peer copies and cuda_ipc fences "
                "stay within a node (across nodes: hir.send/hir.recv; nodes by $FUSERC_GPUS_PER_NODE, else "
                "the ranks sharing memory: on the cpu backend under torchrun, none)"
            )

    def _reachable(self, handle: CpuHandle, peer: int, what: str) -> None:
        """Refuse a peer copy between nodes, or to a peer through a handle
        without a window (torchrun: no MPI windows)."""
        if handle.window is None:
            raise Diagnostic(f"{what} on the cpu backend: {NO_WINDOWS}")
        self._same_node(handle.team, peer, what)

    def _order(self, reads: Sequence[torch.Tensor] = (), writes: Sequence[torch.Tensor] = ()) -> None:
        """Complete the pending communications this op depends on: those
        writing memory it touches, and those reading memory it writes."""
        if not self._pending:
            return
        r = [span(t) for t in reads]
        w = [span(t) for t in writes]
        for work in list(self._pending):
            if _overlap(work.writes, r + w) or _overlap(work.reads, w):
                self._complete(work)

    def _start(self, reads: Sequence[torch.Tensor], writes: Sequence[torch.Tensor]) -> CpuWork:
        self._order(reads, writes)
        work = CpuWork(reads=[span(t) for t in reads], writes=[span(t) for t in writes])
        self._pending.append(work)
        return work

    def _complete(self, work: CpuWork) -> None:
        if work.done:
            return
        self.env.wait_all(work.requests)
        for fn in work.finalize:
            fn()
        work.done = True
        work.keep.clear()
        if work in self._pending:
            self._pending.remove(work)

    @staticmethod
    def _readable(t: torch.Tensor, work: CpuWork, copy: bool = False) -> torch.Tensor:
        """`t` as a contiguous buffer MPI may read (a copy when needed)."""
        staged = t.clone(memory_format=torch.contiguous_format) if copy or not t.is_contiguous() else t
        work.keep.append(staged)
        return staged

    @staticmethod
    def _writable(t: torch.Tensor, work: CpuWork) -> torch.Tensor:
        """A contiguous buffer MPI may write; copied into `t` on completion
        when `t` itself is not contiguous."""
        if t.is_contiguous():
            work.keep.append(t)
            return t
        staged = torch.empty_like(t, memory_format=torch.contiguous_format)
        work.keep.append(staged)
        work.finalize.append(lambda: t.copy_(staged))
        return staged

    @staticmethod
    def _reduce_input(inp: torch.Tensor, out: torch.Tensor | None, work: CpuWork) -> np.ndarray:
        """The input of a reduction in its compute dtype, as numpy (a copy
        when the dtype differs, it is not contiguous, or it overlaps `out`)."""
        cdt = _reduce_dtype(inp.dtype)
        aliased = out is not None and overlaps(inp, out)
        if cdt != inp.dtype or aliased or not inp.is_contiguous():
            staged = inp.to(cdt, memory_format=torch.contiguous_format, copy=True)
        else:
            staged = inp
        work.keep.append(staged)
        return staged.numpy()

    @staticmethod
    def _reduce_output(out: torch.Tensor, work: CpuWork) -> np.ndarray:
        cdt = _reduce_dtype(out.dtype)
        if cdt == out.dtype and out.is_contiguous():
            work.keep.append(out)
            return out.numpy()
        staged = torch.empty(out.shape, dtype=cdt)
        work.keep.append(staged)
        work.finalize.append(lambda: out.copy_(staged))
        return staged.numpy()


def _reduce_dtype(dtype: torch.dtype) -> torch.dtype:
    cdt = _REDUCE_DTYPE.get(dtype)
    if cdt is None:
        raise RuntimeError(f"reductions over MPI do not support {dtype}")
    return cdt


def _check_peer_copy(local: torch.Tensor, handle: CpuHandle, what: str) -> None:
    nbytes = local.numel() * local.element_size()
    if nbytes != handle.nbytes:
        raise RuntimeError(
            f"{what}: local buffer of {nbytes} bytes does not match the shared buffer of {handle.nbytes} bytes"
        )


def _block_span(local: torch.Tensor, handle: CpuHandle, index: int, chunks: int, what: str) -> tuple[int, int]:
    """(byte offset, byte count) of block `index` of `chunks` of the shared
    buffer, checked against the local buffer's size."""
    if chunks <= 0 or handle.nbytes % chunks or not 0 <= index < chunks:
        raise RuntimeError(f"{what}: block {index} of {chunks} does not cut the shared buffer of {handle.nbytes} bytes")
    size = handle.nbytes // chunks
    nbytes = local.numel() * local.element_size()
    if nbytes != size:
        raise RuntimeError(f"{what}: local buffer of {nbytes} bytes does not match a block of {size} bytes")
    return index * size, size

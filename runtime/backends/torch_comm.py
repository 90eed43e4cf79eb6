"""The launcher's communicator under torchrun: torch.distributed (gloo).

Under `torchrun` (no MPI needed) the runtime talks through `TorchComm`, which
offers the part of mpi4py's communicator interface the runtime uses
(rank/size, object allgather/allreduce/bcast, barrier, abort, non-blocking
buffer collectives on NumPy views of CPU tensors, team communicators), so
that the cpu backend, io and the cuda backend's bootstrap (NCCL unique ids,
IPC handles, node-local group) are written once for both launchers.
Buffer collectives go through gloo; gloo lacks reduce-scatter, so it is an
allreduce of which each rank keeps its block.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

IN_PLACE = object()
"""Marks an in-place allreduce (as MPI.IN_PLACE)."""

TIMEOUT_S = float(os.environ.get("FUSERC_COLLECTIVE_TIMEOUT_S", "600"))
"""How long a collective waits for a peer before it fails (and so ends the
job instead of hanging when a peer died without aborting)."""


class _Done:
    """A request already complete (blocking gloo ops, or finished work)."""

    def Wait(self) -> None:
        pass


class _Req:
    """A pending gloo operation; `then` runs after it completes."""

    def __init__(self, work: Any, then: Any = None):
        self.work, self.then = work, then

    def Wait(self) -> None:
        if self.work is not None:
            self.work.wait()
        if self.then is not None:
            self.then()
            self.then = None


_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN", "prod": "PRODUCT"}


def reduce_op(name: str) -> Any:
    import torch.distributed as dist

    return getattr(dist.ReduceOp, _OPS[name])


def _t(a: np.ndarray) -> torch.Tensor:
    """A NumPy buffer as a flat tensor (its memory) for reductions."""
    return torch.from_numpy(np.ascontiguousarray(a)).reshape(-1)


def _b(a: np.ndarray) -> torch.Tensor:
    """A NumPy buffer's memory as bytes, for data movement (gloo moves
    no 16-bit integers)."""
    return _t(a).view(torch.uint8)


class TorchComm:
    """A torch.distributed process group seen through mpi4py's names.
    `group` None is the world."""

    def __init__(self, ranks: Sequence[int], group: Any = None):
        import torch.distributed as dist

        self.ranks = list(ranks)
        self.group = group
        self._rank = self.ranks.index(dist.get_rank())

    # ---- identity -----------------------------------------------------------
    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return len(self.ranks)

    def _g(self, r: int) -> int:
        return self.ranks[r]  # global rank of member r

    # ---- objects ------------------------------------------------------------
    def allgather(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * len(self.ranks)
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        values = self.allgather(obj)  # gloo's gather_object is no cheaper here
        return values if self._rank == root else None

    def allreduce(self, value: Any, op: Any = "sum") -> Any:
        values = self.allgather(value)
        name = op if isinstance(op, str) else next(k for k in _OPS if reduce_op(k) == op)
        if name == "max":
            return max(values)
        if name == "min":
            return min(values)
        total = values[0]
        for v in values[1:]:
            total = total * v if name == "prod" else total + v
        return total

    def bcast(self, obj: Any, root: int = 0) -> Any:
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=self._g(root), group=self.group)
        return box[0]

    def Barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.group)

    def Abort(self, code: int = 1) -> None:
        os._exit(code)  # torchrun sees a failed worker and ends the others

    def Free(self) -> None:
        pass

    # ---- buffers (NumPy views of CPU tensors) -------------------------------
    def Send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        import torch.distributed as dist

        dist.send(_b(buf), self._g(dest), group=self.group)

    def Recv(self, buf: np.ndarray, source: int, tag: int = 0) -> None:
        import torch.distributed as dist

        t = _b(buf)
        dist.recv(t, self._g(source), group=self.group)

    def Bcast(self, buf: np.ndarray, root: int = 0) -> None:
        self.Ibcast(buf, root).Wait()

    def Isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> _Req:
        import torch.distributed as dist

        return _Req(dist.isend(_b(buf), self._g(dest), group=self.group))

    def Irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> _Req:
        import torch.distributed as dist

        return _Req(dist.irecv(_b(buf), self._g(source), group=self.group))

    def Ibcast(self, buf: np.ndarray, root: int = 0) -> _Req:
        import torch.distributed as dist

        t = _b(buf)
        return _Req(dist.broadcast(t, self._g(root), group=self.group, async_op=True))

    def Iallgather(self, send: np.ndarray, recv: np.ndarray) -> _Req:
        import torch.distributed as dist

        parts = list(_b(recv).chunk(len(self.ranks)))
        return _Req(dist.all_gather(parts, _b(send), group=self.group, async_op=True))

    def Iscatter(self, send: np.ndarray | None, recv: np.ndarray, root: int = 0) -> _Req:
        import torch.distributed as dist

        out = _b(recv)
        parts = list(_b(send).chunk(len(self.ranks))) if self._rank == root else None
        return _Req(dist.scatter(out, parts, src=self._g(root), group=self.group, async_op=True))

    def Igather(self, send: np.ndarray, recv: np.ndarray | None, root: int = 0) -> _Req:
        import torch.distributed as dist

        parts = list(_b(recv).chunk(len(self.ranks))) if self._rank == root else None
        return _Req(dist.gather(_b(send), parts, dst=self._g(root), group=self.group, async_op=True))

    def Ireduce(self, send: np.ndarray, recv: np.ndarray | None, op: Any, root: int = 0) -> _Req:
        import torch.distributed as dist

        t = _t(send).clone()
        work = dist.reduce(t, self._g(root), op=op, group=self.group, async_op=True)
        if self._rank != root:
            return _Req(work)
        return _Req(work, lambda: torch.from_numpy(recv).reshape(-1).copy_(t))

    def Iallreduce(self, send: Any, recv: np.ndarray, op: Any) -> _Req:
        import torch.distributed as dist

        out = torch.from_numpy(recv).reshape(-1)
        if send is not IN_PLACE:
            out.copy_(_t(send))
        return _Req(dist.all_reduce(out, op=op, group=self.group, async_op=True))

    def Ireduce_scatter_block(self, send: np.ndarray, recv: np.ndarray, op: Any) -> _Req:
        import torch.distributed as dist

        t = _t(send).clone()
        work = dist.all_reduce(t, op=op, group=self.group, async_op=True)
        mine = t.chunk(len(self.ranks))[self._rank]
        return _Req(work, lambda: torch.from_numpy(recv).reshape(-1).copy_(mine))

    def Ialltoall(self, send: np.ndarray, recv: np.ndarray) -> _Req:
        """Pairwise sends and receives (gloo has no all-to-all on CPU in
        every build)."""
        import torch.distributed as dist

        n = len(self.ranks)
        src = _b(send).chunk(n)
        dst = _b(recv).chunk(n)
        dst[self._rank].copy_(src[self._rank])
        ops = []
        for r in range(n):
            if r != self._rank:
                ops.append(dist.P2POp(dist.isend, src[r].contiguous(), self._g(r), group=self.group))
                ops.append(dist.P2POp(dist.irecv, dst[r], self._g(r), group=self.group))
        works = dist.batch_isend_irecv(ops) if ops else []
        return _Req(None, lambda: [w.wait() for w in works])

    def Alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        self.Ialltoall(send, recv).Wait()

    def Ialltoallv(self, send: list[Any], recv: list[Any]) -> _Req:
        """mpi4py's `[buffer, (counts, displacements)]` in elements of the
        buffers' dtype; pairwise sends and receives of the non-empty blocks."""
        import torch.distributed as dist

        (sbuf, (scounts, sdispl)), (rbuf, (rcounts, rdispl)) = send, recv
        size = sbuf.itemsize
        src, dst = _b(sbuf), _b(rbuf)

        def block(t: torch.Tensor, d: int, c: int) -> torch.Tensor:
            return t[d * size : (d + c) * size]

        me = self._rank
        block(dst, rdispl[me], rcounts[me]).copy_(block(src, sdispl[me], scounts[me]))
        ops = []
        for r in range(len(self.ranks)):
            if r != me and scounts[r]:
                ops.append(dist.P2POp(dist.isend, block(src, sdispl[r], scounts[r]), self._g(r), group=self.group))
            if r != me and rcounts[r]:
                ops.append(dist.P2POp(dist.irecv, block(dst, rdispl[r], rcounts[r]), self._g(r), group=self.group))
        works = dist.batch_isend_irecv(ops) if ops else []
        return _Req(None, lambda: [w.wait() for w in works])

    # ---- teams --------------------------------------------------------------
    def team(self, team: Sequence[int]) -> TorchComm | None:
        """A communicator of `team` (world ranks); None on non-members.
        Collective over this communicator: every member calls it for the
        same teams in the same order."""
        import torch.distributed as dist

        ranks = [self._g(r) for r in team] if self.group is not None else list(team)
        group = dist.new_group(ranks=ranks, backend="gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
        _GROUPS.append(group)
        return TorchComm(ranks, group) if dist.get_rank() in ranks else None


_GROUPS: list[Any] = []
"""The gloo groups fuserc made (destroyed at exit: `_shutdown`)."""
_OWN_WORLD = False


def _shutdown() -> None:
    """At exit, before the interpreter tears down: the process groups fuserc
    made are destroyed (the world too when fuserc made it). gloo's threads
    still running at exit end the process in std::terminate (SIGABRT) after
    a run that succeeded."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    try:
        if _OWN_WORLD:
            dist.destroy_process_group()
        else:
            for group in _GROUPS:
                dist.destroy_process_group(group)
    except Exception:  # noqa: BLE001 - at exit, a group already destroyed by the caller is fine
        pass
    _GROUPS.clear()


def init_world() -> TorchComm:
    """torch.distributed's world from torchrun's environment (gloo; the
    cuda backend talks NCCL through CuPy, not through this group)."""
    import torch.distributed as dist

    global _OWN_WORLD
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timeout)
        _OWN_WORLD = True
    atexit.register(_shutdown)
    size = dist.get_world_size()
    if dist.get_backend() == "gloo":
        return TorchComm(range(size))
    # the user's training script made an NCCL world: fuserc's host-side
    # messages (NumPy buffers, objects) need a gloo group of the same ranks
    group = dist.new_group(list(range(size)), backend="gloo", timeout=timeout)
    _GROUPS.append(group)
    return TorchComm(range(size), group)


def host_name() -> str:
    return socket.gethostname()

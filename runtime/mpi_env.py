"""MPI bootstrap: one process per device, launched by mpiexec.

Rank r of `MPI.COMM_WORLD` is device id r. `MpiEnv` is the job as this
process sees it (communicator, rank, size, the ranks of its node) and the
launcher of runtime/job.py and runtime/watchdog.py: what they need of a
launcher (a broadcast, an allgather, a barrier that gives up after a time,
and ending the whole job) is implemented here with MPI, so that another
launcher (torchrun, with torch.distributed) replaces this module alone.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

from fuserc.diagnostics import Diagnostic

POLL_S = 0.002
"""How often a barrier with a time limit polls for completion."""


@dataclass
class MpiEnv:
    """The job as this process sees it: world communicator, rank, size."""

    comm: Any  # mpi4py.MPI.Intracomm
    rank: int
    size: int
    _node_comm: Any = field(default=None, repr=False)
    _nodes: list[int] | None = field(default=None, repr=False)
    launcher = "mpiexec"

    @property
    def node_comm(self) -> Any:
        """The ranks sharing this node's memory (created on first use;
        collective over the world, so every rank must ask at the same
        point). It decides which GPU a rank uses."""
        if self._node_comm is None:
            from mpi4py import MPI

            self._node_comm = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        return self._node_comm

    @property
    def node_rank(self) -> int:
        return self.node_comm.Get_rank()

    def nodes(self) -> list[int]:
        """World rank -> node, the grouping peer copies and fences keep
        within (ranks of one node share memory over CUDA IPC; others talk
        by send/recv): rank // G with $FUSERC_GPUS_PER_NODE=G (a job on one
        machine then behaves as several nodes), else the ranks sharing
        memory. Collective over the world on first use without the
        variable, so every rank must ask at the same point."""
        if self._nodes is None:
            from fuserc.passes.cost_model import gpus_per_node_override

            try:
                g = gpus_per_node_override()
            except ValueError as e:
                raise Diagnostic(str(e)) from None
            if g is not None:
                self._nodes = [r // g for r in range(self.size)]
            elif self.comm is None:  # a job without MPI (tests): one node
                self._nodes = [0] * self.size
            else:
                from mpi4py import MPI

                leaders = self.comm.allgather(self.node_comm.allreduce(self.rank, op=MPI.MIN))
                ids = {leader: i for i, leader in enumerate(dict.fromkeys(leaders))}
                self._nodes = [ids[leader] for leader in leaders]
        return self._nodes

    # ---- what runtime/job.py and runtime/watchdog.py need -----------------------
    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root) if self.size > 1 else obj

    def allgather(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj) if self.size > 1 else [obj]

    def barrier_within(self, seconds: float | None) -> bool:
        """A barrier of every rank; False when `seconds` pass first (the
        barrier is then left pending: the job is about to end)."""
        if self.size == 1:
            return True
        request = self.comm.Ibarrier()
        end = None if seconds is None else time.monotonic() + seconds
        while not request.Test():
            if end is not None and time.monotonic() > end:
                return False
            time.sleep(POLL_S)
        return True

    def abort(self, code: int) -> NoReturn:
        """End every rank of the job now, with exit code `code` (callable
        from any thread). MPI's own banner is not printed: the caller has
        said why."""
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        if self.size > 1:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 2)
            except OSError:
                pass
            self.comm.Abort(code)
        os._exit(code)


_ENV: MpiEnv | None = None


def mpi_env() -> MpiEnv:
    """The process's MPI environment (MPI is initialized on first call;
    outside mpiexec this is a job of one rank)."""
    global _ENV
    if _ENV is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        _ENV = MpiEnv(comm, comm.Get_rank(), comm.Get_size())
    return _ENV

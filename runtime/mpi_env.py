"""MPI bootstrap and failure handling: one process per device.

Rank r of `MPI.COMM_WORLD` is device id r. Every rank runs the same host
program; a failure on any rank must end the whole job promptly with that
rank's message (DESIGN.md section 5), so `run_guarded` turns every exception
into a report on stderr followed by `MPI_Abort`, which kills the other ranks
wherever they are blocked.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

from fuserc.diagnostics import Diagnostic

COLLECTIVE_GRACE_S = 10.0
"""How long a rank other than 0 waits, after an error that every rank hits
the same way, for rank 0 to report it and abort the job (so a user sees one
message, not one per rank) before it reports and aborts itself."""

ABORT_GRACE_S = 0.5
"""How long a failing rank waits after printing, before it aborts the job,
so that the launcher forwards its message before every process is killed."""


@dataclass
class MpiEnv:
    """The job as this process sees it: world communicator, rank, size."""

    comm: Any  # mpi4py.MPI.Intracomm
    rank: int
    size: int
    _node_comm: Any = field(default=None, repr=False)
    _nodes: list[int] | None = field(default=None, repr=False)

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


class SameOnAllRanks(Exception):
    """Wraps an error that every rank raises identically (a bad program, a
    bad input file, too few ranks): only rank 0 reports it."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


@contextmanager
def same_on_all_ranks() -> Iterator[None]:
    """Marks errors raised inside as identical on every rank."""
    try:
        yield
    except SameOnAllRanks:
        raise
    except Exception as e:
        raise SameOnAllRanks(e) from e


def failure_message(error: BaseException) -> str:
    """What a user sees: a Diagnostic's text alone, anything else (an
    internal error) with its traceback."""
    if isinstance(error, Diagnostic):
        return error.render()
    return "internal error: " + "".join(
        traceback.format_exception(type(error), error, error.__traceback__)
    ).rstrip("\n")


def prefixed(rank: int, text: str) -> str:
    return "\n".join(f"[rank {rank}] {line}" for line in text.split("\n"))


def abort_job(env: MpiEnv, error: BaseException, code: int = 1) -> NoReturn:
    """Report `error` from this rank on stderr and end the whole job.

    An error every rank hits identically (`same_on_all_ranks`) is reported
    by rank 0; the others wait a while for rank 0's abort before they report
    and abort themselves. Before aborting, a rank pauses briefly so that the
    launcher forwards what it printed: an abort kills every process, and
    output still in transit with them."""
    same = isinstance(error, SameOnAllRanks)
    inner = error.error if same else error
    if same and env.rank != 0 and env.size > 1:
        time.sleep(COLLECTIVE_GRACE_S)  # rank 0 normally aborts us first
    sys.stdout.flush()
    sys.stderr.write(prefixed(env.rank, failure_message(inner)) + "\n")
    sys.stderr.flush()
    if env.size == 1:
        os._exit(code)  # no other rank to stop; skip MPI's abort banner
    time.sleep(ABORT_GRACE_S)
    env.comm.Abort(code)
    os._exit(code)  # pragma: no cover - Abort does not return


def run_guarded(body: Callable[[], int]) -> NoReturn:
    """Run `body` (returning an exit code) so that any exception on this
    rank ends the job with a non-zero exit (1) and this rank's message."""
    env = mpi_env()
    try:
        code = body()
    except SystemExit:  # an explicit exit code, the same on every rank
        raise
    except BaseException as e:  # noqa: BLE001 - every failure must end the job
        abort_job(env, e)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)

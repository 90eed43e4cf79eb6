"""Build workers: processes that build generated kernels into the kernel
cache for runtime/kernels/kernel_builds.py (`Pool` starts and feeds them, and
stops those still running at exit), each started as

    python -m fuserc.runtime.kernels.kernel_worker DEVICE CACHE_DIR

and holds each key's lock while its worker builds. Messages are pickles,
each after its length (8 bytes, little-endian): the worker says
`{"ready": True}` once its imports are done, then, for each request
`{"key": KernelKey, "spec": job.spec()}` on standard input, builds the
kernel (`cuda_regions.build_spec`, `cuda_rows.build_spec`), writes its
entry and answers `{"error": None}` (or the error's text). It ends at the
end of its input. Its standard output carries only these messages: what
Python or a compiler prints there goes to standard error.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fuserc.runtime.kernels.kernel_cache import THREADS_ENV

if TYPE_CHECKING:
    import torch

    from fuserc.runtime.kernels.kernel_builds import Job
    from fuserc.runtime.kernels.kernel_cache import KernelCache, KeyLock


# ---- the side that runs them (runtime/kernels/kernel_builds.py) -------------------------------

_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_COMM_WORLD_", "MPI_LOCALRANKID", "FUSERC_FAULT", "FUSERC_FAIL_RANK")


def worker_env() -> dict[str, str]:
    """A build worker's environment: this process's, without what would make
    it look like a rank of the job, with Inductor compiling in the worker
    itself (the workers are the parallelism)."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env[THREADS_ENV] = "1"
    return env


class _Worker:
    """A build worker process (`main` below) and the job it runs."""

    def __init__(self, device: torch.device, cache: KernelCache):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fuserc.runtime.kernels.kernel_worker", str(device), str(cache.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=worker_env(),
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.out = self.proc.stdout.fileno()
        self.ready = False
        self.alive = True
        self.job: tuple[Sequence[Job], KeyLock] | None = None

    def submit(self, group: Sequence[Job], lock: KeyLock) -> bool:
        """Hand the worker a job; False when it has ended."""
        job = group[0]
        assert self.proc.stdin is not None
        try:
            _send(self.proc.stdin, {"key": job.key, "spec": job.spec()})
        except OSError:
            self.alive = False
            return False
        self.job = (group, lock)
        return True

    def receive(self) -> dict[str, Any] | None:
        """The worker's next message; None when it has ended."""
        return _receive(self.out)

    def stop(self) -> None:
        """End the worker (it holds nothing between jobs: its entries are
        written whole or not at all)."""
        self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            with contextlib.suppress(OSError):
                f.close()  # type: ignore[union-attr]

    def failure(self) -> str:
        """Why the worker ended: its exit status and the end of its stderr."""
        with contextlib.suppress(OSError):
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace").strip().splitlines()[-3:]
            return f"a build worker ended (exit status {self.proc.poll()}): " + " / ".join(tail)
        return "a build worker ended"


class Pool:
    """Build workers started together; each runs one job at a time."""

    def __init__(self, n: int, device: torch.device, cache: KernelCache):
        self.workers: list[_Worker] = []
        _LIVE_POOLS.add(self)
        _stop_pools_at_exit()
        try:
            for _ in range(n):
                self.workers.append(_Worker(device, cache))
        except OSError as e:
            warnings.warn(f"fuserc: kernels are built in this process alone (a build worker could not start: {e})", stacklevel=3)
        self.warned = False

    def idle(self) -> _Worker | None:
        return next((w for w in self.workers if w.alive and w.ready and w.job is None), None)

    def running(self) -> bool:
        return any(w.alive and w.job is not None for w in self.workers)

    def alive(self) -> bool:
        return any(w.alive for w in self.workers)

    def abandon(self) -> None:
        """Give up the jobs the workers hold (their locks released; the
        workers are stopped by `close`)."""
        for w in self.workers:
            if w.job is not None:
                w.job[1].release()
                w.job = None

    def finished(self, timeout: float) -> list[tuple[Sequence[Job], KeyLock, str | None]]:
        """The jobs that ended within `timeout` seconds, with the error of
        each that failed; notes workers that became ready or ended."""
        fds = {w.out: w for w in self.workers if w.alive}
        if not fds:
            return []
        readable, _, _ = select.select(list(fds), [], [], timeout)
        out: list[tuple[Sequence[Job], KeyLock, str | None]] = []
        for fd in readable:
            w = fds[fd]
            msg = w.receive()
            if msg is None:
                w.alive = False
                why = w.failure()
                if w.job is not None:
                    out.append((*w.job, why))
                    w.job = None
                if not self.warned:
                    self.warned = True
                    warnings.warn(f"fuserc: {why}; its kernels are built in this process", stacklevel=3)
            elif msg.get("ready"):
                w.ready = True
            elif w.job is not None:
                out.append((*w.job, msg.get("error")))
                w.job = None
        return out

    def close(self) -> None:
        _LIVE_POOLS.discard(self)
        for w in self.workers:
            w.stop()


_LIVE_POOLS: set[Pool] = set()
"""Pools whose workers run: a background build's, when the process ends
before it (stopped at exit, `_stop_pools_at_exit`)."""
_AT_EXIT: list[bool] = []
_FIRST_AT_EXIT: list[Callable[[], None]] = []
"""What runs at exit before the workers are stopped (`at_exit_first`)."""


def at_exit_first(hook: Callable[[], None]) -> None:
    """Run `hook` at exit before the workers still running are stopped:
    a background build's thread is told to stop first, so that it never
    sees its workers end and builds their kernels in an ending process."""
    _stop_pools_at_exit()
    if hook not in _FIRST_AT_EXIT:
        _FIRST_AT_EXIT.append(hook)


def _stop_pools_at_exit() -> None:
    """Once: at exit, stop the workers of pools still running (a background
    build's thread is a daemon: it ends with the process, its workers would
    not), after the `at_exit_first` hooks."""
    if _AT_EXIT:
        return
    import atexit

    def stop() -> None:
        for hook in _FIRST_AT_EXIT:
            hook()
        for pool in list(_LIVE_POOLS):
            pool.close()

    atexit.register(stop)
    _AT_EXIT.append(True)


def _send(stream: Any, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int) -> Any:
    head = _read_exactly(fd, 8)
    if head is None:
        return None
    data = _read_exactly(fd, int.from_bytes(head, "little"))
    return None if data is None else pickle.loads(data)



# ---- the worker process ----


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import torch

    from fuserc.runtime.kernels.kernel_cache import KernelCache

    device = torch.device(sys.argv[1])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    cache = KernelCache(sys.argv[2])
    from fuserc.runtime.kernels import cuda_regions  # noqa: F401  (imported before saying ready)

    _send(out, {"ready": True})
    while (request := _receive(0)) is not None:
        _send(out, {"error": _build(request, cache, device)})


def _build(request: dict[str, Any], cache: Any, device: Any) -> str | None:
    """Build one kernel and write its entry; the error's text, or None."""
    import time

    from fuserc.runtime.kernels.kernel_cache import NotKept

    start = time.perf_counter()
    spec = request["spec"]
    try:
        if spec["kind"] == "rows":
            from fuserc.runtime.kernels.cuda_rows import build_spec
        else:
            from fuserc.runtime.kernels.cuda_regions import build_spec
        with cache.working_dirs():
            sections, _ = build_spec(spec, device)
        if isinstance(sections, NotKept):
            return sections.reason
        cache.write(request["key"], sections, time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - reported to the process that asked (it builds the kernel itself)
        traceback.print_exc()
        return f"{type(e).__name__}: {e}"
    return None


if __name__ == "__main__":
    main()

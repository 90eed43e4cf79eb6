"""Where the time to a first result goes: the startup phases of a run
(`fuserc run --time`, `fuserc.torch.function(..., time=True)`).

Phases, in order: imports (from the start of the process), passes
(compiling the program), backend (devices, streams, NCCL ids), communicators
(made at the first run), kernels (the program's generated kernels: loaded
from the kernel cache or built), first run (the rest of the first run),
steady run (a later run). A `Startup` holds one rank's; `combined` makes
the job's (the slowest rank's time per phase, the kernels counted over the
ranks)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

PHASES = ("imports", "passes", "backend", "communicators", "kernels", "first run", "steady run")


@dataclass
class KernelCounts:
    """Generated kernels fetched, by how (runtime/kernels/kernel_cache.py's
    `Fetched.how`), and the seconds spent on them."""

    loaded: int = 0  # from the cache
    waited: int = 0  # built by another process of the machine while this one waited
    built: int = 0  # built by this process or its build workers
    rebuilt: int = 0  # built again in place of an unusable entry
    failed: int = 0  # no kernel (the region runs another way)
    background: int = 0  # left to build in the background of the runs (counted again once fetched)
    seconds: float = 0.0

    def count(self, how: str) -> None:
        setattr(self, how, getattr(self, how) + 1)

    def copy(self) -> KernelCounts:
        return KernelCounts(**{f.name: getattr(self, f.name) for f in fields(self)})

    def since(self, before: KernelCounts) -> KernelCounts:
        return KernelCounts(**{f.name: getattr(self, f.name) - getattr(before, f.name) for f in fields(self)})

    def plus(self, other: KernelCounts) -> KernelCounts:
        return KernelCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total(self) -> int:
        return self.loaded + self.waited + self.built + self.rebuilt + self.failed

    def describe(self) -> str:
        later = f"{self.background} building in the background" if self.background else ""
        if not self.total:
            return later or "none"
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.loaded, "from the cache"),
                (self.built, "built"),
                (self.waited, "built by another process"),
                (self.rebuilt, "rebuilt (unusable cache entry)"),
                (self.failed, "failed"),
            )
            if n
        ]
        return f"{self.total} kernel{'s' if self.total != 1 else ''}: " + ", ".join(parts) + (f"; {later}" if later else "")


KERNELS = KernelCounts()
"""Every generated kernel this process fetched (runtime/kernels/kernel_builds.py)."""


@dataclass
class Startup:
    """One rank's startup: seconds per phase (absent: not measured) and its
    kernels."""

    seconds: dict[str, float] = field(default_factory=dict)
    kernels: KernelCounts = field(default_factory=KernelCounts)

    def add(self, phase: str, seconds: float) -> None:
        assert phase in PHASES, phase
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def report(self, title: str = "startup", ranks: int = 1) -> str:
        """The phases as a table; with several ranks, each time is the
        slowest rank's and the kernels are counted over the ranks."""
        head = title + (f" (slowest of {ranks} ranks per phase)" if ranks > 1 else "")
        lines = [head + ":"]
        first = [p for p in PHASES if p != "steady run" and p in self.seconds]
        for phase in PHASES:
            if phase not in self.seconds:
                continue
            note = ""
            if phase == "kernels":
                note = "  " + self.kernels.describe() + (" over the ranks" if ranks > 1 and self.kernels.total else "")
            lines.append(f"  {phase:<16}{self.seconds[phase]:8.3f} s{note}")
        lines.append(f"  {'to first result':<16}{sum(self.seconds[p] for p in first):8.3f} s")
        return "\n".join(lines) + "\n"


def combined(records: Sequence[Startup]) -> Startup:
    """The job's startup from every rank's: the slowest time per phase,
    the kernels summed."""
    out = Startup()
    for r in records:
        for phase, s in r.seconds.items():
            out.seconds[phase] = max(out.seconds.get(phase, 0.0), s)
        out.kernels = out.kernels.plus(r.kernels)
    return out


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


class Stopwatch:
    """Seconds since it was made (or since the last `lap`)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        out, self.start = now - self.start, now
        return out

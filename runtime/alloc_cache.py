"""The persistent allocation cache of a compiled program.

`hir.alloc "SITE" : T` asks for a buffer of type T at allocation site SITE.
The cache keeps every buffer it ever made, keyed by (site, shape, dtype),
so that a program run many times gets the same buffers back on every run,
together with whatever was registered for them (memory handles shared with
peers, CUDA IPC registrations): that registration is expensive and must be
done once. A site may be live more than once at a time (an allocation in a
loop whose buffers are released later), so each key holds a list of slots
and an acquisition takes the first free one; the same sequence of
acquisitions and releases therefore yields the same buffers on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

CacheKey = tuple[str, tuple[int, ...], torch.dtype]


@dataclass(eq=False)
class CacheEntry:
    """One cached buffer and what was registered for it."""

    key: CacheKey
    slot: int
    buffer: Any
    in_use: bool = False
    registrations: dict[Hashable, Any] = field(default_factory=dict)


class AllocationCache:
    """Buffers by allocation site, kept across runs of one program."""

    def __init__(self, empty: Callable[[Sequence[int], torch.dtype], Any]):
        self._empty = empty
        self._slots: dict[CacheKey, list[CacheEntry]] = {}
        self.hits = 0
        self.misses = 0

    def acquire(self, site: str, shape: Sequence[int], dtype: torch.dtype) -> CacheEntry:
        """A free buffer for (site, shape, dtype), made on first need."""
        key: CacheKey = (site, tuple(shape), dtype)
        slots = self._slots.setdefault(key, [])
        for entry in slots:
            if not entry.in_use:
                entry.in_use = True
                self.hits += 1
                return entry
        entry = CacheEntry(key, len(slots), self._empty(shape, dtype), in_use=True)
        slots.append(entry)
        self.misses += 1
        return entry

    def release(self, entry: CacheEntry) -> None:
        """The run no longer uses the buffer (it stays cached)."""
        entry.in_use = False

    def forget(self, entry: CacheEntry) -> None:
        """The buffer leaves the cache (handed to a caller who keeps it); its
        site gets a new buffer at its next acquisition."""
        self._slots[entry.key].remove(entry)

    def release_all(self) -> None:
        """End of a run: every buffer is free for the next one."""
        for slots in self._slots.values():  # not through __iter__: a generator costs twice as much
            for entry in slots:
                entry.in_use = False

    def __iter__(self) -> Iterator[CacheEntry]:
        for slots in self._slots.values():
            yield from slots

    def __len__(self) -> int:
        return sum(len(s) for s in self._slots.values())

    def nbytes(self) -> int:
        return sum(int(e.buffer.nbytes) for e in self)

    def clear(self, release: Callable[[Any], None] | None = None) -> None:
        """Drop every buffer; `release` undoes each registration first, in
        a deterministic order (registrations may be collective)."""
        for entry in self:
            for reg in entry.registrations.values():
                if release is not None:
                    release(reg)
            entry.registrations.clear()
        self._slots.clear()

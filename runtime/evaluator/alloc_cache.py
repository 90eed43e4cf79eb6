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

Sites that plan-memory gave one `storage` number share one block of memory
(a `MemoryPool`'s): the first buffer of each such site is a typed tensor at
the start of the block, so the program holds the block once instead of each
site's buffer. A second buffer of such a site (live twice at a time, which
the plan excludes) is a buffer of its own. The programs of one compilation
that never run at the same time (a forward and its backward, in stream
order) may share one pool: block k of each is the same memory.

Between runs a pool's blocks go back to the backend's allocator (`release`:
their storage shrinks to nothing, the cached buffers on them stay) and come
back at the first buffer a run takes from each (`acquire`), so that a
program holds its temporaries only while it runs, as eager PyTorch does: a
training step's forward does not hold the backward's blocks, nor the
backward the forward's, and the optimizer step between them neither (the
24-layer model held 609 MiB of blocks between steps, above eager's peak).
A block comes back at another address; no run reads an address of the
last (the buffers on it are views of the one storage, which follows). A
pool that a captured graph reads (its buffers at fixed addresses), or that
a program of several streams uses (a block freed on one stream while
another still reads it), is `pinned`: its blocks stay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
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
    storage: int | None = None
    """The pool block the buffer lies at the start of (None: memory of its own)."""
    registrations: dict[Hashable, Any] = field(default_factory=dict)


class MemoryPool:
    """Blocks of memory by `storage` number, made on first need at the size
    every program using the pool asked for (`sizes`: number -> bytes)."""

    def __init__(self, empty: Callable[[Sequence[int], torch.dtype], Any], sizes: Mapping[int, int]):
        self._empty = empty
        self.sizes = dict(sizes)
        self._blocks: dict[int, Any] = {}
        self.released: set[int] = set()
        """Blocks given back (`release`), made again at their next use."""
        self.pinned: str | None = None
        """Why the blocks are kept between runs (None: they are released)."""

    def release(self) -> None:
        """Give every block back to the allocator until its next use (none
        where the pool is pinned). In stream order: a run's work on a block
        is enqueued before the memory can be handed out again."""
        if self.pinned is not None:
            return
        for k, block in self._blocks.items():
            storage = block.untyped_storage()
            if k not in self.released and storage.resizable():  # (not memory another owner lent, as MPI's)
                storage.resize_(0)
                self.released.add(k)

    def ensure(self, storage: int) -> None:
        """Block `storage` in memory again where it was released."""
        if storage in self.released:
            block = self._blocks[storage]
            block.untyped_storage().resize_(block.numel())
            self.released.discard(storage)

    def buffer(self, storage: int, shape: Sequence[int], dtype: torch.dtype) -> Any:
        """A buffer of (shape, dtype) at the start of block `storage`: not a
        view (its own base), so that views of it find its cache entry."""
        n = math.prod(shape) * dtype.itemsize
        self.ensure(storage)
        block = self._blocks.get(storage)
        if block is None:
            block = self._blocks[storage] = self._empty((max(n, self.sizes.get(storage, 0)),), torch.uint8)
        if block.numel() < n:
            raise ValueError(f"memory block {storage} has {block.numel()} bytes, a buffer of it needs {n}")
        return torch.empty(0, dtype=dtype, device=block.device).set_(block.untyped_storage(), 0, tuple(shape))

    def nbytes(self) -> int:
        """The memory the blocks hold now (none for a released block)."""
        return sum(int(b.untyped_storage().nbytes()) for b in self._blocks.values())


class AllocationCache:
    """Buffers by allocation site, kept across runs of one program."""

    def __init__(self, empty: Callable[[Sequence[int], torch.dtype], Any], pool: MemoryPool | None = None):
        self._empty = empty
        self._slots: dict[CacheKey, list[CacheEntry]] = {}
        self.pool = pool if pool is not None else MemoryPool(empty, {})
        self.hits = 0
        self.misses = 0

    def acquire(self, site: str, shape: Sequence[int], dtype: torch.dtype, storage: int | None = None) -> CacheEntry:
        """A free buffer for (site, shape, dtype), made on first need (in
        block `storage` of the pool when the site has one)."""
        key: CacheKey = (site, tuple(shape), dtype)
        slots = self._slots.setdefault(key, [])
        for entry in slots:
            if not entry.in_use:
                entry.in_use = True
                self.hits += 1
                if entry.storage is not None and self.pool.released:
                    self.pool.ensure(entry.storage)
                return entry
        on = storage if storage is not None and not slots else None
        buffer = self.pool.buffer(on, shape, dtype) if on is not None else self._empty(shape, dtype)
        entry = CacheEntry(key, len(slots), buffer, in_use=True, storage=on)
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
        """The memory the cache's buffers take: each block once."""
        storages: dict[int, int] = {}
        for e in self:
            s = e.buffer.untyped_storage()
            storages[s.data_ptr()] = max(storages.get(s.data_ptr(), 0), s.nbytes())
        return sum(storages.values())

    def clear(self, release: Callable[[Any], None] | None = None) -> None:
        """Drop every buffer; `release` undoes each registration first, in
        a deterministic order (registrations may be collective)."""
        for entry in self:
            for reg in entry.registrations.values():
                if release is not None:
                    release(reg)
            entry.registrations.clear()
        self._slots.clear()

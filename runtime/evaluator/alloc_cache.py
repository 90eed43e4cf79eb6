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

A block's memory is held only while one of its buffers is in use
(`MemoryPool.give`, at the buffer's `hir.dealloc`, and `release` at the
end of a run): its storage shrinks to nothing, the cached buffers on it
(views of that one storage) stay, and the next buffer taken from it makes
it again (`take`). So a program holds its temporaries only while they
live, as eager PyTorch does: a training step's forward holds none of the
backward's blocks, the optimizer step between them neither, and the
backward's blocks are in memory only while their buffers are (the
24-layer model held 609 MiB of blocks between steps, and all seven of
its backward's throughout the backward). A block comes back at another
address; nothing reads an address of an earlier use (buffers are looked
up by storage, `base`). A pool that a captured graph reads (its buffers
at fixed addresses), or that a program of several streams uses (a block
freed on one stream while another still reads it), is `pinned`: its
blocks stay; so they do while a program of the pool may yet be captured
(`undecided`: its runs' way not settled, runtime/evaluator/graphs.py).
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
        """Blocks given back, made again at their next use (`take`)."""
        self.pinned: str | None = None
        """Why the blocks are kept (None: each is held while a buffer on it is in use)."""
        self.undecided: set[int] = set()
        """Programs of the pool that may yet be captured as graphs (their
        trial not over): the blocks stay until none is, as a graph captured
        then reads them where they are (the DeepSeek-like MoE layer's graphs,
        captured over blocks released and made again between runs, held
        5.4 GB instead of 3.3)."""
        self._using: dict[int, int] = {}
        """Block -> buffers on it in use now (plan-memory's sites of a block
        never overlap on the device, but the host may take the next before
        it lets go of the last)."""

    def pin(self, why: str) -> None:
        """Keep every block from now on (made again now where released)."""
        self.pinned = why
        for k in self._blocks:
            self._make(k)

    def take(self, storage: int) -> None:
        """A buffer on block `storage` is in use: the block is in memory,
        made again where released."""
        self._using[storage] = self._using.get(storage, 0) + 1
        self._make(storage)

    def give(self, storage: int) -> None:
        """A buffer on block `storage` is no longer in use: the block goes
        back once none is."""
        using = self._using.get(storage, 0) - 1
        self._using[storage] = max(using, 0)
        if using <= 0:
            self.release_block(storage)

    def release(self) -> None:
        """The end of a run: no buffer is in use, every block goes back."""
        self._using.clear()
        for k in self._blocks:
            self.release_block(k)

    def release_block(self, storage: int) -> None:
        """Give block `storage` back until its next use (not where the pool
        is pinned). In stream order: the work already enqueued on it runs
        before the memory can be handed out again."""
        if self.pinned is not None or self.undecided or storage in self.released:
            return
        held = self._blocks[storage].untyped_storage()
        if held.resizable():  # (not a storage NumPy has read, as the cpu backend's MPI does: it stays)
            held.resize_(0)
            self.released.add(storage)

    def _make(self, storage: int) -> None:
        """Block `storage` in memory, at its full size (made at one buffer's
        size, it could not grow for the next while that one is in use where
        NumPy has read the storage, which then no longer resizes)."""
        if storage in self.released:
            block = self._blocks[storage]
            block.untyped_storage().resize_(block.numel())
            self.released.discard(storage)

    def buffer(self, storage: int, shape: Sequence[int], dtype: torch.dtype) -> Any:
        """A buffer of (shape, dtype) at the start of block `storage`, in use
        (`take`): not a view (its own base), so that views of it find its
        cache entry."""
        n = math.prod(shape) * dtype.itemsize
        block = self._blocks.get(storage)
        if block is None:
            block = self._blocks[storage] = self._empty((max(n, self.sizes.get(storage, 0)),), torch.uint8)
        if block.numel() < n:
            raise ValueError(f"memory block {storage} has {block.numel()} bytes, a buffer of it needs {n}")
        self.take(storage)
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
                if entry.storage is not None:
                    self.pool.take(entry.storage)
                return entry
        on = storage if storage is not None and not slots else None
        buffer = self.pool.buffer(on, shape, dtype) if on is not None else self._empty(shape, dtype)
        entry = CacheEntry(key, len(slots), buffer, in_use=True, storage=on)
        slots.append(entry)
        self.misses += 1
        return entry

    def release(self, entry: CacheEntry) -> None:
        """The run no longer uses the buffer (it stays cached; its pool
        block goes back until its next use)."""
        entry.in_use = False
        if entry.storage is not None:
            self.pool.give(entry.storage)

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

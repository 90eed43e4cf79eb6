"""The sharding model: meshes, per-dimension splits, partial sums.

This is the one home of what a sharding *means*. The fusion dialect's
`#fusion.sharding` attribute, the passes and the runtime all ask this module
how a global tensor lies over a mesh (local shapes, which block a device
holds, which devices form a team), so that they cannot disagree.

Terminology (as nvFuser): a dimension of extent E with splits
`f1*f2*...*fn` (outermost first) is viewed as `[f1][f2]...[fn][E/prod(f)]`.
A device-parallel split (DIDx/DIDy/DIDz) selects the block at the device's
coordinate along that mesh axis; a `Stream(S)` split says the producing op
is computed in S chunks. Inside every device split of its dimension it does
not change placement; outside one (`Stream(2)*DIDx`) it interleaves the
device blocks, so it is part of the placement (`Sharding.placement`).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

DEVICE_TYPES = ("DIDx", "DIDy", "DIDz")
"""Device-parallel types; DIDx names the last mesh axis, DIDy the one before."""


def axis_order(ptypes: Sequence[str]) -> tuple[str, ...]:
    """Device types in mesh-axis order, outermost first (DIDz, DIDy, DIDx):
    the canonical order of a partial over several axes, and the order of
    their team (row-major over those axes)."""
    return tuple(sorted(ptypes, key=lambda p: DEVICE_TYPES.index(p) if p in DEVICE_TYPES else -1, reverse=True))


def one_or_many(ptypes: Sequence[str]) -> "str | tuple[str, ...]":
    """The `ptype` of a collective over `ptypes`: the type itself for one
    axis, the tuple for several."""
    return ptypes[0] if len(ptypes) == 1 else tuple(ptypes)


MAX_MESH_DEVICES = 1 << 22
"""The most devices a mesh may have (4,194,304): far beyond any job, small
enough that a program lowered for it stays within a host's memory (a mesh
whose ids are not equally spaced has its teams listed). Checked
arithmetically, before any list of devices is made."""


@dataclass(frozen=True)
class Mesh:
    """A named, row-major mesh of device ids (MPI ranks).

    `ids` are the explicit `devices = [...]` of the declaration; empty means
    the default ids 0..N-1 (an explicit list equal to those is the same
    mesh and is stored empty). Nothing here lists the devices of a mesh
    unless asked to (`devices`, `teams`): coordinates, positions and teams
    are computed arithmetically, so a mesh of millions of devices costs
    what the program uses of it."""

    name: str
    shape: tuple[int, ...]
    ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.ids and self.ids == tuple(range(len(self.ids))):
            object.__setattr__(self, "ids", ())

    @cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @cached_property
    def devices(self) -> tuple[int, ...]:
        """Every device id in row-major order (made on first use: only what
        lists a whole mesh, such as a host program's rank sets, asks)."""
        return self.ids or tuple(range(self.size))

    @property
    def max_device(self) -> int:
        """The largest device id: a job needs this many ranks plus one."""
        return max(self.ids) if self.ids else self.size - 1

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {d: i for i, d in enumerate(self.ids)}

    @cached_property
    def _strides(self) -> tuple[int, ...]:
        out = [1] * self.rank
        for a in range(self.rank - 2, -1, -1):
            out[a] = out[a + 1] * self.shape[a + 1]
        return tuple(out)

    def axis_of(self, ptype: str) -> int:
        """Mesh axis named by a device-parallel type (DIDx is the last axis)."""
        idx = DEVICE_TYPES.index(ptype)
        if idx >= self.rank:
            raise ValueError(
                f"{ptype} needs a mesh with at least {idx + 1} axes, "
                f"@{self.name} has {self.rank}"
            )
        return self.rank - 1 - idx

    def axes_of(self, ptype: str | Sequence[str]) -> tuple[int, ...]:
        """The mesh axes of one device type or several, increasing."""
        return (self.axis_of(ptype),) if isinstance(ptype, str) else tuple(sorted(self.axis_of(p) for p in ptype))

    def axis_size(self, ptype: str | Sequence[str]) -> int:
        """Devices along a type's axis; along several, their product (the
        size of a team over them)."""
        if isinstance(ptype, str):
            return self.shape[self.axis_of(ptype)]
        return math.prod(self.shape[a] for a in self.axes_of(ptype))

    def position(self, device: int) -> int:
        """Row-major position of `device` on the mesh (ValueError if absent)."""
        if self.ids:
            pos = self._positions.get(device)
            if pos is not None:
                return pos
        elif 0 <= device < self.size:
            return device
        raise ValueError(f"device {device} is not on mesh @{self.name}")

    def at(self, pos: int) -> int:
        """The device at row-major position `pos`."""
        return self.ids[pos] if self.ids else pos

    def has(self, device: int) -> bool:
        return device in self._positions if self.ids else 0 <= device < self.size

    def coords(self, device: int) -> tuple[int, ...]:
        """Coordinates of `device` on the mesh (row-major over `devices`)."""
        pos = self.position(device)
        return tuple((pos // st) % n for st, n in zip(self._strides, self.shape))

    def device_at(self, coords: Sequence[int]) -> int:
        return self.at(sum(c * st for c, st in zip(coords, self._strides)))

    def team(self, device: int, ptype: str | Sequence[str]) -> tuple[int, ...]:
        """Devices sharing all coordinates of `device` but the `ptype` axis
        (or axes), ordered by that axis (row-major over those axes): the
        team of a collective over `ptype`."""
        if not isinstance(ptype, str):
            pos = self.position(device)
            base = pos - sum((pos // self._strides[a]) % self.shape[a] * self._strides[a] for a in self.axes_of(ptype))
            return self._team_over(base, self.axes_of(ptype))
        axis = self.axis_of(ptype)
        pos, stride, n = self.position(device), self._strides[axis], self.shape[axis]
        base = pos - (pos // stride) % n * stride
        return self._team_at(base, stride, n)

    def _team_over(self, base: int, axes: Sequence[int]) -> tuple[int, ...]:
        """The devices at row-major positions `base` plus every combination
        of steps along `axes` (outermost first)."""
        offsets = [0]
        for a in axes:
            offsets = [o + i * self._strides[a] for o in offsets for i in range(self.shape[a])]
        return tuple(self.at(base + o) for o in offsets)

    def _team_at(self, base: int, stride: int, n: int) -> tuple[int, ...]:
        if self.ids:
            return self.ids[base : base + n * stride : stride]
        return tuple(range(base, base + n * stride, stride))

    def team_count(self, ptype: str | Sequence[str]) -> int:
        """How many teams (mesh slices) there are over `ptype`."""
        return self.size // self.axis_size(ptype)

    def translates(self, ptype: str | Sequence[str]) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None:
        """The teams over `ptype` as one team and its translates, `(first
        slice's devices, ((count, stride), ...))`: the devices of slice
        (i_a) are the first's plus `sum(i_a * stride_a)` over the other
        mesh axes a. None where the ids are not increasing and equally
        spaced (the slices are then not translates of one another). Time
        and memory of one team, whatever the mesh."""
        if self.ids:
            first, step = self.ids[0], (self.ids[1] - self.ids[0] if len(self.ids) > 1 else 1)
            if step < 1 or self.ids != tuple(range(first, first + step * len(self.ids), step)):
                return None
        else:
            first, step = 0, 1
        if not isinstance(ptype, str):
            axes = self.axes_of(ptype)
            base = self._team_over(0, axes)
            others = tuple((self.shape[a], step * self._strides[a]) for a in range(self.rank) if a not in axes and self.shape[a] > 1)
            return base, others
        axis = self.axis_of(ptype)
        stride, n = self._strides[axis], self.shape[axis]
        base = tuple(range(first, first + step * n * stride, step * stride))
        others = tuple((self.shape[a], step * self._strides[a]) for a in range(self.rank) if a != axis and self.shape[a] > 1)
        return base, others

    def teams(self, ptype: str | Sequence[str]) -> list[tuple[int, ...]]:
        """All teams over `ptype`, one per slice of the mesh, in device
        order (of their first devices): time and memory linear in the mesh."""
        if not isinstance(ptype, str):
            axes = self.axes_of(ptype)
            others = [a for a in range(self.rank) if a not in axes]
            return [self._team_over(sum(c * self._strides[a] for c, a in zip(cs, others)), axes) for cs in itertools.product(*(range(self.shape[a]) for a in others))]
        axis = self.axis_of(ptype)
        stride, n = self._strides[axis], self.shape[axis]
        block = stride * n
        return [
            self._team_at(outer + inner, stride, n)
            for outer in range(0, self.size, block)
            for inner in range(stride)
        ]


@dataclass(frozen=True)
class Split:
    """One split of a dimension: a device-parallel type, or Stream(S)."""

    ptype: str  # "DIDx" | "DIDy" | "DIDz" | "Stream"
    factor: int = 0  # the S of Stream(S); 0 for device types (mesh decides)

    @property
    def is_stream(self) -> bool:
        return self.ptype == "Stream"

    def size(self, mesh: Mesh) -> int:
        return self.factor if self.is_stream else mesh.axis_size(self.ptype)

    def __str__(self) -> str:
        return f"Stream({self.factor})" if self.is_stream else self.ptype


_TERM = re.compile(r"\s*(DIDx|DIDy|DIDz|Stream\s*\(\s*(-?\d+)\s*\))\s*$", re.ASCII)


def parse_axis(text: str) -> tuple[Split, ...]:
    """Parse one dimension's axis text: `-`, `DIDx`, `Stream(4)*DIDx`, ..."""
    text = text.strip()
    if text == "-":
        return ()
    splits: list[Split] = []
    for term in text.split("*"):
        m = _TERM.match(term)
        if not m:
            raise ValueError(
                f"invalid sharding axis '{text}': expected '-', DIDx, DIDy, DIDz, "
                "Stream(S) or a '*' product of them"
            )
        if m.group(2) is not None:
            splits.append(Split("Stream", int(m.group(2))))
        else:
            splits.append(Split(m.group(1)))
    return tuple(splits)


def format_axis(splits: Sequence[Split]) -> str:
    return "*".join(str(s) for s in splits) if splits else "-"


def format_partial(ptypes: Sequence[str]) -> str:
    """`DIDx` for one axis, `[DIDy, DIDx]` for several (the attribute's
    text after `partial =`)."""
    return ptypes[0] if len(ptypes) == 1 else f"[{', '.join(ptypes)}]"


@dataclass(frozen=True)
class Sharding:
    """How a global tensor lies over a mesh: splits per dimension, and the
    device types over whose mesh axes the value is a partial sum (empty:
    none; several: the sum over the team spanning them all), in mesh-axis
    order (`axis_order`). A type or None may be given for `partial`."""

    mesh: str
    dims: tuple[tuple[Split, ...], ...]
    partial: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        p = self.partial
        if type(p) is not tuple or len(p) > 1:
            p = (p,) if isinstance(p, str) else axis_order(p or ())
            object.__setattr__(self, "partial", p)

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields), found once per object:
        passes key their caches by shardings, and the fields' hash is a
        Python call per split."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.mesh, self.dims, self.partial))
            object.__setattr__(self, "_hash", h)
        return h

    # ---- construction / printing -------------------------------------------
    @staticmethod
    def replicated(mesh: str, rank: int) -> "Sharding":
        return Sharding(mesh, tuple(() for _ in range(rank)))

    @staticmethod
    def from_axes(mesh: str, axes: Sequence[str], partial: str | Sequence[str] | None = None) -> "Sharding":
        return Sharding(mesh, tuple(parse_axis(a) for a in axes), partial or ())  # type: ignore[arg-type]

    def axes_text(self) -> list[str]:
        return [format_axis(d) for d in self.dims]

    def __str__(self) -> str:
        s = f"#fusion.sharding<@{self.mesh}, [{', '.join(self.axes_text())}]"
        if self.partial:
            s += f", partial = {format_partial(self.partial)}"
        return s + ">"

    def with_dims(self, dims: Sequence[Sequence[Split]]) -> "Sharding":
        return Sharding(self.mesh, tuple(tuple(d) for d in dims), self.partial)

    def with_partial(self, partial: str | Sequence[str] | None) -> "Sharding":
        return Sharding(self.mesh, self.dims, partial or ())  # type: ignore[arg-type]

    # ---- queries -----------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.dims)

    def device_types(self) -> list[str]:
        """Device-parallel types used by splits (not by partial)."""
        return [s.ptype for d in self.dims for s in d if not s.is_stream]

    def dim_of(self, ptype: str) -> int | None:
        """The dimension carrying split `ptype`, if any."""
        for i, d in enumerate(self.dims):
            if any(s.ptype == ptype for s in d):
                return i
        return None

    def stream_dim(self) -> tuple[int, int] | None:
        """(dimension, S) of the Stream split, if any."""
        for i, d in enumerate(self.dims):
            for s in d:
                if s.is_stream:
                    return i, s.factor
        return None

    def without_streams(self) -> "Sharding":
        """The sharding with every Stream split removed. Where a Stream split
        stands outside a device split (`Stream(2)*DIDx`) this is not the same
        placement: see `placement`."""
        return self.with_dims([tuple(s for s in d if not s.is_stream) for d in self.dims])

    def placement(self) -> "Sharding":
        """What decides which elements each device holds: the device splits,
        and the Stream splits standing outside one of them on their
        dimension (`Stream(2)*DIDx` interleaves the device blocks: each
        device holds one block of every chunk). Stream splits with no device
        split inside them only say how the producing op is computed, and are
        dropped (`DIDx*Stream(2)` and `Stream(2)` place as `DIDx` and `-`).
        Found once per object (it is immutable; passes ask for it often)."""
        placed = self.__dict__.get("_placement")
        if placed is None:
            dims = []
            for d in self.dims:
                last = max((i for i, s in enumerate(d) if not s.is_stream), default=-1)
                dims.append(d[: last + 1])
            placed = self.with_dims(dims)
            object.__setattr__(self, "_placement", placed)
        return placed

    def interleaved_dims(self) -> list[int]:
        """Dimensions whose device blocks a Stream split interleaves (a
        device's indices along them are not one contiguous range)."""
        return [i for i in range(self.rank) if not self.is_contiguous_block(i)]

    def has_outer_stream(self) -> bool:
        """A Stream split outside a device split interleaves the device blocks
        (`Stream(2)*DIDx`: each device holds one block of every chunk)."""
        for d in self.dims:
            kinds = [s.is_stream for s in d]
            if True in kinds and False in kinds[kinds.index(True):]:
                return True
        return False

    def same_placement(self, other: "Sharding") -> bool:
        """True when both put the same data on the same devices (Stream
        splits change placement only outside a device split)."""
        a, b = self.placement(), other.placement()
        return a.mesh == b.mesh and a.dims == b.dims and a.partial == b.partial

    def is_replicated(self) -> bool:
        return not self.device_types() and not self.partial

    # ---- validation --------------------------------------------------------
    def errors(self, shape: Sequence[int], mesh: Mesh | None) -> list[str]:
        """Reasons this sharding is invalid for a tensor of `shape` (empty if
        valid). `mesh` is None when the mesh symbol is unknown."""
        if mesh is None:
            return [f"unknown mesh @{self.mesh}"]
        errs: list[str] = []
        if len(self.dims) != len(shape):
            return [
                f"sharding has {len(self.dims)} axes but the tensor has rank {len(shape)}"
            ]
        used: list[str] = []
        for d in self.dims:
            used.extend(s.ptype for s in d)
        used.extend(self.partial)
        for p in self.partial:
            if p not in DEVICE_TYPES:
                errs.append(f"partial must be DIDx, DIDy or DIDz, got '{p}'")
        for p in dict.fromkeys(used):
            if used.count(p) > 1:
                errs.append(f"parallel type {p} appears more than once")
        for p in dict.fromkeys(used):
            if p in DEVICE_TYPES:
                try:
                    mesh.axis_of(p)
                except ValueError as e:
                    errs.append(str(e))
        if errs:
            return errs
        for i, (d, extent) in enumerate(zip(self.dims, shape)):
            factor = 1
            for s in d:
                if s.is_stream and s.factor <= 0:
                    errs.append(f"Stream({s.factor}) on dimension {i}: S must be positive")
                    return errs
                factor *= s.size(mesh)
            if factor and extent % factor != 0:
                errs.append(
                    f"dimension {i} of extent {extent} is not divisible by "
                    f"{factor} ({format_axis(d)} on @{mesh.name} of shape "
                    f"{list(mesh.shape)})"
                )
        return errs

    # ---- placement ---------------------------------------------------------
    def local_shape(self, shape: Sequence[int], mesh: Mesh) -> tuple[int, ...]:
        """Shape of the shard a device of `mesh` holds."""
        out = []
        for d, extent in zip(self.dims, shape):
            f = math.prod(s.size(mesh) for s in d if not s.is_stream)
            out.append(extent // f)
        return tuple(out)

    def dim_indices(self, dim: int, extent: int, mesh: Mesh, device: int) -> Sequence[int]:
        """Global indices along `dim` held by `device`, in local order: a
        `range` when they are one contiguous block (no Stream split outside
        a device split), else a list."""
        splits = self.dims[dim]
        sizes = [s.size(mesh) for s in splits]
        inner = extent // max(1, math.prod(sizes))
        coords = mesh.coords(device) if any(not s.is_stream for s in splits) else ()
        if self.is_contiguous_block(dim):
            # Stream splits only inside the device splits: one block.
            start, width = 0, extent
            for s, n in zip(splits, sizes):
                if s.is_stream:
                    break
                width //= n
                start += coords[mesh.axis_of(s.ptype)] * width
            return range(start, start + width)
        # For each split, the positions this device takes along it.
        choices: list[Sequence[int]] = []
        for s, n in zip(splits, sizes):
            choices.append(range(n) if s.is_stream else (coords[mesh.axis_of(s.ptype)],))
        idx = [0]
        for ch, n in zip(choices, sizes):
            idx = [base * n + c for base in idx for c in ch]
        return [base * inner + j for base in idx for j in range(inner)]

    def is_contiguous_block(self, dim: int) -> bool:
        """A device's indices along `dim` form one contiguous range."""
        seen_device = False
        for s in reversed(self.dims[dim]):
            if s.is_stream and seen_device:
                return False
            if not s.is_stream:
                seen_device = True
        return True


def shard_array(array, sharding: Sharding, mesh: Mesh, device: int):
    """The local shard of a global array (NumPy or torch) held by `device`.

    Partial shardings are not cut: a partial value's local summand is whatever
    the device computed, so only replicated/split placement applies here."""
    out = array
    for dim, extent in enumerate(array.shape):
        if not any(not s.is_stream for s in sharding.dims[dim]):
            continue
        idx = sharding.dim_indices(dim, extent, mesh, device)
        if isinstance(idx, range):
            sl = [slice(None)] * array.ndim
            sl[dim] = slice(idx.start, idx.stop)
            out = out[tuple(sl)]
        else:
            out = _take(out, dim, idx)
    return out


def _take(array, dim: int, idx: Sequence[int]):
    try:
        import torch

        if isinstance(array, torch.Tensor):
            return torch.index_select(array, dim, torch.tensor(list(idx), dtype=torch.long, device=array.device))
    except ImportError:  # pragma: no cover
        pass
    import numpy as np

    return np.take(array, np.asarray(idx, dtype=np.intp), axis=dim)


def global_slots(sharding: Sharding, shape: Sequence[int], mesh: Mesh, device: int) -> list[Sequence[int]]:
    """Per dimension, the global indices a device's shard covers (for
    assembling a global tensor from shards)."""
    return [sharding.dim_indices(i, e, mesh, device) for i, e in enumerate(shape)]

"""The interfaces every fusion op implements: its facts, beside its definition.

As MLIR ops implement interfaces (ShardingInterface, Enzyme's
AutoDiffOpInterface), each fusion op class says, in its own family module
(`fusion_*.py`), everything the rest of fuserc needs to know about it:

- syntax and types: `OPERANDS`, `KEYWORDS`, `ELEMENTS`, `infer` (the verifier
  and the Python builder use the same inference);
- sharding: `sharding_map()`, an `OpMap` (below) read by the passes'
  `sharding_rules`;
- reference semantics: `reference(args, ctx)`, PyTorch on any device, used by
  the reference evaluator (float64) and by both backends for regions that
  are not fused;
- kernel expression: `kernel(m, *args)` of pointwise ops, written once over a
  `Math` namespace that the kernel generators print (and that `TorchMath`
  evaluates, so formulas are tested without a GPU);
- derivative: `vjp(g, cotangent)`, the vector-Jacobian product built as
  fusion ops at global shapes;
- expansion: `expand(b)`, the op in simpler ops, used where the shardings of
  its operands need statistics across devices (a layer_norm over a sharded
  hidden dimension) that the op cannot compute on local blocks.

This module holds the vocabulary those facts are written in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------
# Sharding: how operand dimensions relate to the result
# --------------------------------------------------------------------------

MAP, DROP, CONTRACT, STAT = "map", "drop", "contract", "stat"
"""Kinds of `Target` (see `OpMap`)."""

ALL, ONE, NONE = "all", "one", "none"
"""How an op passes partial operands to its result (`OpMap.carries`)."""


@dataclass(frozen=True)
class Target:
    """Where one operand dimension goes.

    - `MAP r`: it becomes result dimension r; a split on it stays a split
      there;
    - `DROP r`: it lines up with result dimension r (or with none) but cannot
      stay split through the op (a softmax dimension, a sliced one, one of
      extent 1 broadcast): it must be gathered first;
    - `CONTRACT`: it is summed over (matmul's K, `sum`'s dimensions, the
      vocabulary of an embedding table); a split there makes the local
      result a partial sum;
    - `STAT r`: like MAP (the split stays on result dimension r), but the op
      needs statistics over the whole dimension (a layer_norm's normalized
      dimension): with a split there the op is not local and is replaced by
      its `expand`ed form, whose reductions communicate."""

    kind: str
    dim: int | None = None


@dataclass(frozen=True)
class OpMap:
    """An op's dimension map: one Target per dimension of each operand.

    `priority`: the operand order in which sharding propagation takes
    splits (matmul: rhs then lhs, as nvFuser; None: the operand with most
    device splits first). `carries`: ALL (every operand partial over the
    same type gives a partial result: add, sub, permute, ...), ONE (at most
    one operand partial: matmul), NONE. `contracts`: a split CONTRACT
    dimension makes the result partial (False where it cannot: a linear with
    a bias would add the bias once per device)."""

    operands: tuple[tuple[Target, ...], ...]
    result_rank: int
    priority: tuple[int, ...] | None
    carries: str
    contracts: bool

    def free_dims(self) -> list[int]:
        """Result dimensions no operand dimension lines up with (broadcast
        dimensions, an iota's): a device makes any block of them itself."""
        taken = {t.dim for ts in self.operands for t in ts if t.dim is not None}
        return [r for r in range(self.result_rank) if r not in taken]

    def stat_dims(self) -> set[tuple[int, int]]:
        """(operand, dimension) pairs of kind STAT."""
        return {(i, d) for i, ts in enumerate(self.operands) for d, t in enumerate(ts) if t.kind == STAT}


RESHAPE = "reshape"
"""`sharding_map()` of reshape: dimensions relate by groups, not one to one
(`sharding_rules.reshape_sharding`)."""


def identity(rank: int) -> tuple[Target, ...]:
    return tuple(Target(MAP, d) for d in range(rank))


def broadcast_targets(shape: Sequence[int], result: Sequence[int]) -> tuple[Target, ...]:
    """An operand of a broadcasting elementwise op: dimensions align from
    the right; one of extent 1 expanded to more is DROP (it cannot stay
    split), the others MAP."""
    off = len(result) - len(shape)
    return tuple(
        Target(MAP, off + d) if shape[d] == result[off + d] else Target(DROP)
        for d in range(len(shape))
    )


def normalized(dims: Sequence[int], rank: int) -> list[int]:
    return [d % max(1, rank) for d in dims]


# --------------------------------------------------------------------------
# Evaluation context: dtype and the global position of a local block
# --------------------------------------------------------------------------


@dataclass
class EvalContext:
    """What `reference` may need besides its arguments.

    `accumulate`: the dtype floats are computed in (float64 in the reference
    evaluator), None for the declared dtypes. `global_index(k, dim)`: the
    global indices (a LongTensor) of the elements of value k along `dim`
    (k = operand index, -1 the result); a local block of a sharded tensor
    knows where it lies through it. `global_shape(k)`: the whole tensor's
    shape. Unsharded evaluation (the default) gives aranges and the local
    shapes themselves."""

    accumulate: Any = None
    shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    indices: dict[tuple[int, int], Any] = field(default_factory=dict)
    device: Any = None
    _placed: dict[str, "EvalContext"] = field(default_factory=dict, repr=False, compare=False)
    _starts: dict[tuple[int, int], int] | None = field(default=None, repr=False, compare=False)

    def on(self, device: Any) -> "EvalContext":
        """This context with its tensors made on `device`: the global
        indices are moved there once and kept, so that a region run op by
        op with torch on a GPU copies none of them from the host per run."""
        if device is None or self.device == device:
            return self
        key = str(device)
        placed = self._placed.get(key)
        if placed is None:
            moved = {k: v.to(device) for k, v in self.indices.items()}
            placed = self._placed[key] = EvalContext(self.accumulate, self.shapes, moved, device)
            placed._starts = self._starts_on_host()
        return placed

    def _starts_on_host(self) -> dict[tuple[int, int], int]:
        """The first global index of each split value, read once where the
        indices are still on the host."""
        if self._starts is None:
            self._starts = {k: int(v[0]) if v.numel() else 0 for k, v in self.indices.items()}
        return self._starts

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a build worker's job) without the copies `on` keeps:
        they are this process's, on its devices."""
        return {**self.__dict__, "_placed": {}}

    def global_shape(self, k: int, local: Sequence[int]) -> tuple[int, ...]:
        return self.shapes.get(k, tuple(local))

    def global_index(self, k: int, dim: int, local_extent: int) -> Any:
        import torch

        idx = self.indices.get((k, dim))
        if idx is None:
            return torch.arange(local_extent, dtype=torch.int64, device=self.device)
        return idx.to(self.device) if self.device is not None else idx

    def global_start(self, k: int, dim: int) -> int:
        """The global index of the first element of value k along `dim`, an
        int kept on the host: reading it from `global_index` on a GPU would
        wait for the device (a grouped GEMM's block of experts asks at
        every run; a CUDA graph capture cannot wait)."""
        return self._starts_on_host().get((k, dim), 0)

    def is_whole(self, k: int) -> bool:
        """Value k is not split: its local block is the whole tensor."""
        return not any(key[0] == k for key in self.indices)

    def dtype(self, element: Any) -> Any:
        """The torch dtype a value of IR element type `element` is computed
        in: floats in `accumulate` when set, others as declared."""
        if self.accumulate is not None and is_float_type(element):
            return self.accumulate
        return torch_dtype(element)


# --------------------------------------------------------------------------
# Element types <-> torch dtypes
# --------------------------------------------------------------------------


def _dtype_table() -> tuple[tuple[Any, Any], ...]:
    import torch
    from xdsl.dialects.builtin import bf16, f16, f32, f64, i1, i64

    return (
        (f32, torch.float32),
        (f16, torch.float16),
        (bf16, torch.bfloat16),
        (f64, torch.float64),
        (i64, torch.int64),
        (i1, torch.bool),
    )


_TABLE: list[tuple[tuple[Any, Any], ...]] = []


def dtype_table() -> tuple[tuple[Any, Any], ...]:
    """(IR element type, torch dtype) pairs: the one mapping between them."""
    if not _TABLE:
        _TABLE.append(_dtype_table())
    return _TABLE[0]


def torch_dtype(element_type: Any) -> Any:
    """The torch dtype holding values of an IR element type."""
    for attr, dtype in dtype_table():
        if element_type == attr:
            return dtype
    from fuserc.diagnostics import Diagnostic

    raise Diagnostic(f"element type {element_type} has no torch dtype (f32, f16, bf16, f64, i64, i1)")


def element_type(dtype: Any) -> Any:
    """The IR element type of a torch dtype."""
    for attr, d in dtype_table():
        if d == dtype:
            return attr
    from fuserc.diagnostics import Diagnostic

    raise Diagnostic(f"torch dtype {dtype} has no fuserc element type (f32, f16, bf16, f64, i64, i1)")


def is_float_type(element: Any) -> bool:
    from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type

    return isinstance(element, (Float32Type, Float16Type, BFloat16Type, Float64Type))


# --------------------------------------------------------------------------
# Kernel expressions
# --------------------------------------------------------------------------


class Math:
    """The operations a pointwise op's `kernel` formula may use. Values are
    whatever the namespace makes them (C expression strings, Triton source,
    torch tensors); `const(v)` makes a literal of the formula's compute
    type. Comparisons give booleans that `where` takes."""

    def const(self, v: float) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def sub(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
    def div(self, a: Any, b: Any) -> Any: ...
    def neg(self, a: Any) -> Any: ...
    def exp(self, a: Any) -> Any: ...
    def log(self, a: Any) -> Any: ...
    def tanh(self, a: Any) -> Any: ...
    def erf(self, a: Any) -> Any: ...
    def sqrt(self, a: Any) -> Any: ...
    def rsqrt(self, a: Any) -> Any: ...
    def abs(self, a: Any) -> Any: ...
    def sin(self, a: Any) -> Any: ...
    def cos(self, a: Any) -> Any: ...
    def pow(self, a: Any, b: Any) -> Any: ...
    def maximum(self, a: Any, b: Any) -> Any:
        """NaN propagates, as torch.maximum."""
    def minimum(self, a: Any, b: Any) -> Any:
        """NaN propagates, as torch.minimum."""
    def lt(self, a: Any, b: Any) -> Any: ...
    def le(self, a: Any, b: Any) -> Any: ...
    def gt(self, a: Any, b: Any) -> Any: ...
    def ge(self, a: Any, b: Any) -> Any: ...
    def eq(self, a: Any, b: Any) -> Any: ...
    def ne(self, a: Any, b: Any) -> Any: ...
    def where(self, c: Any, a: Any, b: Any) -> Any: ...
    def isnan(self, a: Any) -> Any: ...
    def cast(self, a: Any, dtype: Any) -> Any:
        """`a` rounded to torch dtype `dtype` (and read back)."""


class TorchMath(Math):
    """`Math` on torch tensors: evaluates a kernel formula exactly as the
    generated kernel computes it, to test formulas against `reference` on
    the CPU."""

    def __init__(self, dtype: Any):
        self.dtype = dtype

    def const(self, v: float) -> Any:
        import torch

        return torch.tensor(v, dtype=self.dtype)

    def add(self, a, b): return a + b
    def sub(self, a, b): return a - b
    def mul(self, a, b): return a * b
    def div(self, a, b): return a / b
    def neg(self, a): return -a
    def exp(self, a): return a.exp()
    def log(self, a): return a.log()
    def tanh(self, a): return a.tanh()
    def erf(self, a): return a.erf()
    def sqrt(self, a): return a.sqrt()
    def rsqrt(self, a): return a.rsqrt()
    def abs(self, a): return a.abs()
    def sin(self, a): return a.sin()
    def cos(self, a): return a.cos()

    def pow(self, a, b):
        import torch

        return torch.pow(a, b)

    def maximum(self, a, b):
        import torch

        return torch.maximum(a, b)

    def minimum(self, a, b):
        import torch

        return torch.minimum(a, b)

    def lt(self, a, b): return a < b
    def le(self, a, b): return a <= b
    def gt(self, a, b): return a > b
    def ge(self, a, b): return a >= b
    def eq(self, a, b): return a == b
    def ne(self, a, b): return a != b

    def where(self, c, a, b):
        import torch

        return torch.where(c, a, b)

    def isnan(self, a): return a != a
    def cast(self, a, dtype): return a.to(dtype).to(a.dtype) if a.is_floating_point() else a.to(dtype)


# --------------------------------------------------------------------------
# Counter-based random numbers (dropout)
# --------------------------------------------------------------------------

MASK32 = 0xFFFFFFFF
HASH_M1, HASH_M2 = 0x85EBCA6B, 0xC2B2AE35
SEED_MIX = 0x9E3779B9


def uniform_bits(seed: Any, index: Any) -> Any:
    """A 24-bit uniform integer per element from (seed, global index): two
    rounds of MurmurHash3's 32-bit finalizer over the index's low and high
    words and the seed, in 64-bit integer arithmetic masked to 32 bits, so
    that torch (CPU or GPU) and generated kernels compute the same bits.
    `seed` and `index` are int64 tensors (or ints)."""

    def fmix(h: Any) -> Any:
        h = h ^ (h >> 16)
        h = (h * HASH_M1) & MASK32
        h = h ^ (h >> 13)
        h = (h * HASH_M2) & MASK32
        return h ^ (h >> 16)

    s = fmix((seed & MASK32) ^ SEED_MIX)
    h = fmix((index & MASK32) ^ s)
    h = fmix(h ^ ((index >> 32) & MASK32) ^ ((seed >> 32) & MASK32))
    return h >> 8


UNIFORM_SCALE = 1.0 / (1 << 24)
"""`uniform_bits * UNIFORM_SCALE` is uniform in [0, 1)."""


def keep_threshold(p: float) -> int:
    """An element is kept when its `uniform_bits` >= this (probability 1 - p)."""
    return int(math.ceil(p * (1 << 24)))



"""Random valid fusion programs for the property test (check_programs.py).

`generate(seed, max_devices)` writes one program: up to three meshes of 1-3
axes (default or explicit device ids; axes of one device among them, where
a device split places nothing), arguments made on demand with random
shapes (extents 0 and 1 included) and random valid shardings (`-`, DIDx/y/z,
Stream(S), nested `A*B` either way, on any mesh), then a few ops drawn from
`OPS`, each result annotated with a random sharding (a resharding op) or
left to propagate-shardings, `partial` where a contraction can make one.

Adding an op family is one entry of `OPS`: a name, a weight and a builder
that gets a `Ctx` (the random source, the values made so far, `arg` to make
a new argument) and returns an `Emit` (operands, keyword text, result shape
and element type, the interval its values lie in) or None when it does not
apply. Builders for the common forms (`unary`, `binary`, `reduction`,
`along_dim`) take the op name and how it maps intervals.

Values carry an interval bounding their elements (inputs are standard
normal, within [-5, 5] here), so that the generator keeps to programs whose
float64 reference and whose own rounding agree within `--check`'s
tolerances: no overflow, no division by values near zero, and exp and
softmax only of inputs small enough that rounding them does not move the
result past the tolerance of their element type.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fuserc.sharding import DEVICE_TYPES, Mesh, Sharding, Split

FLOATS = ("f32", "bf16", "f16")
NUMS = (*FLOATS, "i64")
ANY = (*NUMS, "i1")
LIMIT = {"f32": 1e6, "bf16": 1e4, "f16": 2e3, "i64": 1e6, "i1": 1.0}
"""The largest magnitude a value of each type may reach (f16 overflows at 65504)."""
SENSITIVE = {"f32": 16.0, "bf16": 1.0, "f16": 1.0}
"""The largest magnitude of an input to exp-like ops (exp, softmax, sin,
pow): the relative error of exp(x) is the absolute error of x (its
rounding in the element type)."""
EXTENTS = (0, 1, 2, 3, 4, 6, 8, 12)
EXTENT_WEIGHTS = (1, 2, 5, 2, 5, 3, 4, 2)
NORMAL = (-5.0, 5.0)
"""Where standard normal random inputs lie (in practice)."""
POSITIVE = (0.25, 4.0)
"""Where random inputs of log, sqrt, rsqrt, reciprocal are drawn
(fuserc.dialects.fusion_elementwise.POSITIVE: the runtime draws an argument
in the domain of the ops using it)."""
Interval = tuple[float, float]


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    mesh: str
    sharding: Sharding | None  # None: left to propagate-shardings
    interval: Interval
    exact: bool = False
    """The same number in the program and in the float64 reference: an
    argument, or moved, negated, compared, selected... from exact values
    (comparisons and truncations of inexact values could flip)."""
    arg: bool = False

    def type(self) -> str:
        dims = "".join(f"{e}x" for e in self.shape)
        enc = f", {self.sharding}" if self.sharding is not None else ""
        return f"tensor<{dims}{self.dtype}{enc}>"

    @property
    def bound(self) -> float:
        return max(abs(self.interval[0]), abs(self.interval[1]))

    def within(self, domain: Interval) -> bool:
        return domain[0] <= self.interval[0] and self.interval[1] <= domain[1]


@dataclass(frozen=True)
class Emit:
    """What a builder makes: the op's operands, keyword text, result shape,
    element type and interval; `contracts` when it may make a partial sum;
    `exact` when the result is exact (Value.exact)."""

    operands: Sequence[Value]
    keywords: str
    shape: tuple[int, ...]
    dtype: str
    interval: Interval
    contracts: bool = False
    exact: bool = False


@dataclass(frozen=True)
class OpFamily:
    name: str  # fusion.NAME
    build: Callable[["Ctx"], Emit | None]
    weight: float = 1.0


# --------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------


def _hull(*points: float) -> Interval:
    return (min(points), max(points))


def _mul(a: Interval, b: Interval) -> Interval:
    return _hull(*(x * y for x in a for y in b))


def _scale(a: Interval, n: int) -> Interval:
    return (min(a[0] * n, 0.0) if n else 0.0, max(a[1] * n, 0.0) if n else 0.0)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x > -700 else 0.0


def _fits(interval: Interval, dtype: str) -> bool:
    return max(abs(interval[0]), abs(interval[1])) <= LIMIT[dtype]


def _all_exact(values: Sequence[Value]) -> bool:
    return all(v.exact for v in values)


# --------------------------------------------------------------------------
# The builders' view of the program
# --------------------------------------------------------------------------


class Ctx:
    def __init__(self, program: "ProgramBuilder"):
        self.p = program
        self.rng = program.rng

    def pick(self, ok: Callable[[Value], bool] = lambda v: True, kinds: Sequence[str] = FLOATS) -> Value | None:
        """A value made so far (recent ones likelier) of one of `kinds`
        that passes `ok`."""
        found = [v for v in self.p.values if v.dtype in kinds and ok(v)]
        if not found:
            return None
        weights = [1 + i for i in range(len(found))]
        return self.rng.choices(found, weights)[0]

    def arg(self, shape: Sequence[int], dtype: str, mesh: str, interval: Interval = NORMAL) -> Value:
        """A new function argument (random sharding on `mesh`); `interval`:
        where the runtime draws it (standard normal, or the domain of the
        op it is made for)."""
        return self.p.new_arg(tuple(shape), dtype, mesh, interval)

    def like(self, v: Value, shape: Sequence[int] | None = None, ok: Callable[[Value], bool] = lambda u: True) -> Value:
        """An operand of `shape` (default: v's) on v's mesh and of v's type
        that passes `ok`: one made so far, or a new argument."""
        shape = tuple(v.shape if shape is None else shape)
        other = self.pick(lambda u: u.shape == shape and u.mesh == v.mesh and ok(u), kinds=(v.dtype,))
        if other is None or self.rng.random() < 0.4:
            return self.arg(shape, v.dtype, v.mesh)
        return other

    def extent(self, low: int = 0) -> int:
        return self.rng.choices([e for e in EXTENTS if e >= low], [w for e, w in zip(EXTENTS, EXTENT_WEIGHTS) if e >= low])[0]

    def broadcastable(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """`shape`, or a shape that broadcasts to it (leading dims dropped,
        some extents 1, or rank 0)."""
        r = self.rng.random()
        if r < 0.6 or not shape:
            return shape
        if r < 0.7:
            return ()
        out = [1 if self.rng.random() < 0.5 else e for e in shape]
        return tuple(out[self.rng.randint(0, len(out) - 1):])


def _bshape(*shapes_: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes_)
    out = []
    for i in range(rank):
        extents = {s[len(s) - rank + i] for s in shapes_ if len(s) - rank + i >= 0}
        big = extents - {1}
        out.append(big.pop() if big else 1)
    return tuple(out)


def _float(x: float) -> str:
    return repr(float(x))


# --------------------------------------------------------------------------
# Builders of the common forms
# --------------------------------------------------------------------------


def unary(
    fn: Callable[[Interval], Interval],
    sensitive: bool = False,
    keywords: str = "",
    kinds: Sequence[str] = FLOATS,
    exact: bool = False,
    domain: Interval | None = None,
) -> Callable[[Ctx], Emit | None]:
    """An elementwise op of one operand; `fn` maps its interval;
    `sensitive`: exp-like (the input must be small, SENSITIVE); `exact`:
    exact on exact inputs (neg, abs, relu); `domain`: where the operand must
    lie (log, sqrt: an argument made for it is drawn there)."""

    def build(c: Ctx) -> Emit | None:
        def ok(v: Value) -> bool:
            if domain is not None:
                return v.within(domain)
            return v.bound <= (SENSITIVE.get(v.dtype, 0.0) if sensitive else LIMIT[v.dtype])

        x = c.pick(ok, kinds)
        if x is None and domain is not None:
            x = c.arg(c.p.shape(), c.rng.choice([k for k in kinds if k in FLOATS]), c.p.main, domain)
        if x is None:
            return None
        out = fn(x.interval)
        if not _fits(out, x.dtype):
            return None
        return Emit([x], keywords, x.shape, x.dtype, out, exact=exact and x.exact)

    return build


def binary(
    fn: Callable[[Interval, Interval], Interval],
    rhs_ok: Callable[[Value], bool] | None = None,
    kinds: Sequence[str] = FLOATS,
    exact: bool = False,
    compare: bool = False,
) -> Callable[[Ctx], Emit | None]:
    """An elementwise op of two operands that broadcast (PyTorch's rules);
    `fn` maps the intervals; `rhs_ok`: what the second operand must be
    (chosen first then: a divisor away from zero); `compare`: an i1 result
    of exact operands only (a comparison of rounded values could flip)."""

    def build(c: Ctx) -> Emit | None:
        need = (lambda v: v.exact) if compare else (lambda v: True)
        if rhs_ok is not None:
            y = c.pick(lambda v: rhs_ok(v) and need(v), kinds)
            if y is None:
                return None
            x = c.like(y, c.broadcastable(y.shape), need)
        else:
            x = c.pick(need, kinds)
            if x is None:
                return None
            y = c.like(x, c.broadcastable(x.shape), need)
        if c.rng.random() < 0.5:
            x, y = (y, x) if rhs_ok is None else (x, y)
        out = (0.0, 1.0) if compare else fn(x.interval, y.interval)
        dtype = "i1" if compare else x.dtype
        if not _fits(out, dtype):
            return None
        return Emit([x, y], "", _bshape(x.shape, y.shape), dtype, out, exact=(exact or compare) and x.exact and y.exact)

    return build


def reduction(
    fn: Callable[[Interval, int], Interval], empty_ok: bool, kinds: Sequence[str] = FLOATS, keywords: Callable[[Ctx, int], str] | None = None,
    least: int = 1,
) -> Callable[[Ctx], Emit | None]:
    """`dims = [...]` (and sometimes `keepdim = true`) over a ranked value;
    `fn` maps the interval given the number of reduced elements;
    `empty_ok`: a reduction of no elements is defined (sum: 0; max has no
    value and is refused, so kept rarely, for that diagnostic; mean and var
    of none are NaN: never); `least`: the fewest elements reduced (var with
    a correction); `keywords`: more keyword text, given the count."""

    def build(c: Ctx) -> Emit | None:
        x = c.pick(lambda v: len(v.shape) > 0, kinds)
        if x is None:
            return None
        k = c.rng.randint(1, len(x.shape))
        dims = sorted(c.rng.sample(range(len(x.shape)), k))
        n = math.prod(x.shape[d] for d in dims)
        if n < least:
            if empty_ok or n > 0 or least > 1 or c.rng.random() < 0.9:
                return None  # (max over nothing kept rarely: the verifier's refusal is tested too)
        keep = c.rng.random() < 0.3
        shape = tuple(1 if i in dims else e for i, e in enumerate(x.shape)) if keep else tuple(
            e for i, e in enumerate(x.shape) if i not in dims
        )
        out = fn(x.interval, n)
        if not _fits(out, x.dtype):
            return None
        kw = f" dims = [{', '.join(map(str, dims))}]" + (keywords(c, n) if keywords else "") + (" keepdim = true" if keep else "")
        return Emit([x], kw, shape, x.dtype, out, contracts=True)

    return build


def along_dim(fn: Callable[[Interval, int], Interval], sensitive: bool) -> Callable[[Ctx], Emit | None]:
    """An op with `dim = d` keeping the shape (softmax-like); `fn` maps the
    interval given the extent of d."""

    def build(c: Ctx) -> Emit | None:
        x = c.pick(lambda v: len(v.shape) > 0 and (not sensitive or v.bound <= SENSITIVE[v.dtype]))
        if x is None:
            return None
        d = c.rng.randrange(len(x.shape))
        return Emit([x], f" dim = {d}", x.shape, x.dtype, fn(x.interval, x.shape[d]))

    return build


# --------------------------------------------------------------------------
# The other families
# --------------------------------------------------------------------------


def _matmul(c: Ctx) -> Emit | None:
    a = c.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    k = a.shape[-1]
    n = c.extent()
    form = c.rng.choice(["mat", "vec"] if len(a.shape) >= 2 else ["vec", "mat"])
    b_shape: tuple[int, ...] = (k, n) if form == "mat" else (k,)
    if form == "mat" and len(a.shape) <= 3 and c.rng.random() < 0.3:
        b_shape = (c.rng.choice([1, 2]), k, n)  # a batched rhs, broadcast against a's batch
        if len(a.shape) == 3 and a.shape[0] not in (1, b_shape[0]):
            b_shape = (1, k, n)
    b = c.like(a, b_shape)
    out_shape = _matmul_shape(a.shape, b.shape)
    out = _scale(_mul(a.interval, b.interval), k)
    return Emit([a, b], "", out_shape, a.dtype, out, contracts=True) if _fits(out, a.dtype) else None


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return b[:-2] + (b[-1],)
    return _bshape(a[:-2], b[:-2]) + (a[-2], b[-1])


def _linear(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) >= 1)
    if x is None:
        return None
    k, n = x.shape[-1], c.extent()
    w = c.like(x, (n, k))
    ops = [x, w]
    out = _scale(_mul(x.interval, w.interval), k)
    if c.rng.random() < 0.5:
        b = c.like(x, (n,))
        ops.append(b)
        out = (out[0] + b.interval[0], out[1] + b.interval[1])
    if not _fits(out, x.dtype):
        return None
    return Emit(ops, "", x.shape[:-1] + (n,), x.dtype, out, contracts=len(ops) == 2)


def _cast(c: Ctx) -> Emit | None:
    x = c.pick(kinds=ANY)
    if x is None:
        return None
    targets = [t for t in FLOATS if t != x.dtype] + (["i64"] if x.exact and x.dtype in FLOATS else [])
    to = c.rng.choice(targets)
    out = (float(math.trunc(x.interval[0])), float(math.trunc(x.interval[1]))) if to == "i64" else x.interval
    exact = x.exact and (to == "i64" or x.dtype in ("i1", "i64") or (x.dtype != "f32" and to == "f32"))
    return Emit([x], "", x.shape, to, out, exact=exact) if _fits(out, to) else None


def _permute(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) >= 2, ANY)
    if x is None:
        return None
    perm = list(range(len(x.shape)))
    c.rng.shuffle(perm)
    shape = tuple(x.shape[p] for p in perm)
    return Emit([x], f" dims = [{', '.join(map(str, perm))}]", shape, x.dtype, x.interval, exact=x.exact)


def _reshape(c: Ctx) -> Emit | None:
    x = c.pick(kinds=ANY)
    if x is None:
        return None
    shape = list(x.shape)
    move = c.rng.choice(["merge", "split", "flat", "unit"])
    if move == "merge" and len(shape) >= 2:
        i = c.rng.randrange(len(shape) - 1)
        shape[i : i + 2] = [shape[i] * shape[i + 1]]
    elif move == "split" and shape:
        i = c.rng.randrange(len(shape))
        f = c.rng.choice([d for d in (1, 2, 3, 4) if shape[i] % d == 0] or [1])
        shape[i : i + 1] = [f, shape[i] // f]
    elif move == "flat":
        shape = [math.prod(shape)]
    else:
        shape.insert(c.rng.randint(0, len(shape)), 1)
    if len(shape) > 4:
        return None
    return Emit([x], "", tuple(shape), x.dtype, x.interval, exact=x.exact)


def _broadcast_in_dim(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) <= 3, ANY)
    if x is None:
        return None
    at = c.rng.randint(0, len(x.shape))
    shape = list(x.shape)
    shape.insert(at, c.extent())
    dims = [d if d < at else d + 1 for d in range(len(x.shape))]
    for d in dims:  # expand extent-1 dims now and then
        if shape[d] == 1 and c.rng.random() < 0.5:
            shape[d] = c.extent()
    return Emit([x], f" dims = [{', '.join(map(str, dims))}]", tuple(shape), x.dtype, x.interval, exact=x.exact)


def _slice(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) >= 1, ANY)
    if x is None:
        return None
    starts, limits = [], []
    for e in x.shape:
        s = c.rng.randint(0, e)
        starts.append(s)
        limits.append(c.rng.randint(s, e))
    kw = f" starts = [{', '.join(map(str, starts))}] limits = [{', '.join(map(str, limits))}]"
    return Emit([x], kw, tuple(lim - s for s, lim in zip(starts, limits)), x.dtype, x.interval, exact=x.exact)


def _concat(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) >= 1, ANY)
    if x is None:
        return None
    d = c.rng.randrange(len(x.shape))
    ops = [x]
    for _ in range(c.rng.choice([1, 1, 2])):
        shape = list(x.shape)
        shape[d] = c.extent()
        ops.append(c.like(x, tuple(shape)))
    shape = list(x.shape)
    shape[d] = sum(o.shape[d] for o in ops)
    out = _hull(*(e for o in ops for e in o.interval))
    return Emit(ops, f" dim = {d}", tuple(shape), x.dtype, out, exact=_all_exact(ops))


def _set(c: Ctx) -> Emit | None:
    """A copy; the builder always gives its result a sharding (a reshard,
    to any mesh)."""
    x = c.pick(kinds=ANY)
    return None if x is None else Emit([x], "", x.shape, x.dtype, x.interval, exact=x.exact)


def _where(c: Ctx) -> Emit | None:
    a = c.pick()
    if a is None:
        return None
    cond = c.pick(lambda v: _bshape(v.shape, a.shape) == a.shape and len(v.shape) <= len(a.shape) and v.mesh == a.mesh, ("i1",))
    if cond is None or c.rng.random() < 0.3:
        cond = c.arg(c.broadcastable(a.shape), "i1", a.mesh, (0.0, 1.0))
    b = c.like(a, c.broadcastable(a.shape))
    return Emit([cond, a, b], "", a.shape, a.dtype, _hull(*a.interval, *b.interval), exact=a.exact and b.exact and cond.exact)


def _constant(c: Ctx) -> Emit | None:
    v = c.rng.choice([0.0, 0.5, -1.5, 2.0, 0.125, 3.0])
    dtype = c.rng.choice([c.p.dtype, c.p.dtype, "i64"])
    return Emit([], f" {_float(v) if dtype != 'i64' else int(v)}", (), dtype, (v, v), exact=True)


def _iota(c: Ctx) -> Emit | None:
    shape = c.p.shape() or (c.extent(),)
    d = c.rng.randrange(len(shape))
    dtype = c.rng.choice(["i64", "i64", c.p.dtype])
    return Emit([], f" dim = {d}", shape, dtype, (0.0, float(max(shape[d] - 1, 0))), exact=True)


def _dropout(c: Ctx) -> Emit | None:
    x = c.pick()
    if x is None:
        return None
    seed = c.pick(lambda v: v.shape == () and v.arg and v.mesh == x.mesh, ("i64",))
    if seed is None:
        seed = c.arg((), "i64", x.mesh, (-8.0, 8.0))
    p = c.rng.choice([0.0, 0.1, 0.5])
    out = (x.interval[0] / (1 - p), x.interval[1] / (1 - p))
    out = _hull(0.0, *out)
    return Emit([x, seed], f" p = {_float(p)}", x.shape, x.dtype, out) if _fits(out, x.dtype) else None


def _var_correction(c: Ctx, n: int) -> str:
    return c.rng.choice(["", " correction = 0", " correction = 1"]) if n > 1 else " correction = 0"


def _layer_norm(c: Ctx, bias: bool) -> Emit | None:
    """Normalizations of arguments (random, of spread about 1): rounding
    errors of a computed input of small spread would be amplified by
    1/sqrt(eps), past any tolerance."""
    x = c.pick(lambda v: v.arg and len(v.shape) >= 1)
    if x is None:
        x = c.arg(c.p.shape() or (c.extent(),), c.p.dtype, c.p.main)
    k = c.rng.randint(1, min(2, len(x.shape)))
    dims = list(range(len(x.shape) - k, len(x.shape)))
    norm = tuple(x.shape[d] for d in dims)
    if 0 in norm:
        return None
    ops = [x, c.like(x, norm)]
    if bias and c.rng.random() < 0.7:
        ops.append(c.like(x, norm))
    z = math.sqrt(math.prod(norm))
    out = _scale(_mul((-1.0, 1.0), ops[1].interval), math.ceil(z))
    if len(ops) == 3:
        out = (out[0] + ops[2].interval[0], out[1] + ops[2].interval[1])
    eps = c.rng.choice(["", " eps = 1.0e-05", " eps = 1.0e-03"])
    return Emit(ops, f" dims = [{', '.join(map(str, dims))}]{eps}", x.shape, x.dtype, out) if _fits(out, x.dtype) else None


def _sdpa(c: Ctx) -> Emit | None:
    """On f32 arguments: attention scores reach tens, past what 16-bit
    rounding of them leaves within tolerance after exp."""
    b, hk, g = c.rng.choice([0, 1, 2, 2]), c.rng.choice([1, 2]), c.rng.choice([1, 2])
    s, sk, d, dv = c.rng.choice([0, 1, 3, 4]), c.rng.choice([1, 2, 4]), c.rng.choice([2, 4, 8]), c.rng.choice([2, 4])
    mesh = c.p.main
    q = c.arg((b, hk * g, s, d), "f32", mesh)
    k = c.arg((b, hk, sk, d), "f32", mesh)
    v = c.arg((b, hk, sk, dv), "f32", mesh)
    kw = (" scale = 0.5" if c.rng.random() < 0.3 else "") + (" causal = true" if c.rng.random() < 0.5 else "")
    return Emit([q, k, v], kw, (b, hk * g, s, dv), "f32", v.interval)


def _embedding(c: Ctx) -> Emit | None:
    table = c.pick(lambda v: len(v.shape) == 2 and v.shape[0] >= 1)
    if table is None:
        table = c.arg((c.extent(1), c.extent()), c.p.dtype, c.p.main)
    vocab = table.shape[0]
    ids = c.pick(lambda v: v.within((0, vocab - 1)) and len(v.shape) <= 2 and v.mesh == table.mesh, ("i64",))
    if ids is None or c.rng.random() < 0.5:
        ids = c.arg(c.p.shape()[:2], "i64", table.mesh, (0.0, float(vocab - 1)))
    return Emit([ids, table], "", ids.shape + (table.shape[1],), table.dtype, table.interval, exact=table.exact)


def _cross_entropy(c: Ctx) -> Emit | None:
    logits = c.pick(lambda v: len(v.shape) == 2 and v.shape[0] >= 1 and v.shape[1] >= 1 and v.bound <= (20 if v.dtype == "f32" else 8))
    if logits is None:
        logits = c.arg((c.extent(1), c.extent(1)), c.p.dtype, c.p.main)
    n, classes = logits.shape
    labels = c.pick(lambda v: v.shape == (n,) and v.within((0, classes - 1)) and v.mesh == logits.mesh, ("i64",))
    if labels is None:
        labels = c.arg((n,), "i64", logits.mesh, (0.0, float(classes - 1)))
    out = (0.0, logits.interval[1] - logits.interval[0] + math.log(classes))
    return Emit([logits, labels], "", (), logits.dtype, out)


def _away_from_zero(v: Value) -> bool:
    lo, hi = v.interval
    return not lo <= 0 <= hi and min(abs(lo), abs(hi)) >= 1e-3


def _div(a: Interval, b: Interval) -> Interval:
    """Only by values bounded away from zero (exp, sigmoid of bounded inputs)."""
    return _hull(*(x / y for x in a for y in b))


def _pow(a: Interval, b: Interval) -> Interval:
    return _hull(*(x**y for x in a for y in b))


def _pow_base(v: Value) -> bool:
    """Positive and moderate (x**y with y of either sign stays in range, and
    its error, |y| rel(x) + |ln x| abs(y), within tolerance)."""
    return 0.1 <= v.interval[0] and v.interval[1] <= 8 and v.dtype == "f32"


def _pow_op(c: Ctx) -> Emit | None:
    base = c.pick(_pow_base)
    if base is None:
        return None
    e = c.like(base, c.broadcastable(base.shape))
    out = _pow(base.interval, e.interval)
    return Emit([base, e], "", _bshape(base.shape, e.shape), "f32", out) if _fits(out, "f32") else None


def _stat_sum(a: Interval, n: int) -> Interval:
    return _scale(a, n)


OPS: list[OpFamily] = [
    OpFamily("matmul", _matmul, 2.0),
    OpFamily("linear", _linear, 2.0),
    OpFamily("add", binary(lambda a, b: (a[0] + b[0], a[1] + b[1]), kinds=NUMS, exact=False)),
    OpFamily("sub", binary(lambda a, b: (a[0] - b[1], a[1] - b[0]), kinds=NUMS)),
    OpFamily("mul", binary(_mul, kinds=NUMS)),
    OpFamily("div", binary(_div, rhs_ok=_away_from_zero), 4.0),
    OpFamily("pow", _pow_op),
    OpFamily("maximum", binary(lambda a, b: (max(a[0], b[0]), max(a[1], b[1])), kinds=NUMS, exact=True)),
    OpFamily("minimum", binary(lambda a, b: (min(a[0], b[0]), min(a[1], b[1])), kinds=NUMS, exact=True)),
    *(OpFamily(name, binary(lambda a, b: (0.0, 1.0), kinds=NUMS, compare=True), 0.5) for name in ("lt", "le", "gt", "ge", "eq", "ne")),
    OpFamily("where", _where),
    OpFamily("relu", unary(lambda a: (max(a[0], 0.0), max(a[1], 0.0)), kinds=NUMS, exact=True)),
    OpFamily("neg", unary(lambda a: (-a[1], -a[0]), kinds=NUMS, exact=True)),
    OpFamily("abs", unary(lambda a: (0.0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1]))), kinds=NUMS, exact=True)),
    OpFamily("exp", unary(lambda a: (math.exp(a[0]), math.exp(a[1])), sensitive=True)),
    OpFamily("log", unary(lambda a: (math.log(a[0]), math.log(a[1])), domain=POSITIVE)),
    OpFamily("sqrt", unary(lambda a: (math.sqrt(a[0]), math.sqrt(a[1])), domain=POSITIVE)),
    OpFamily("rsqrt", unary(lambda a: (a[1] ** -0.5, a[0] ** -0.5), domain=POSITIVE)),
    OpFamily("reciprocal", unary(lambda a: (1 / a[1], 1 / a[0]), domain=POSITIVE)),
    OpFamily("tanh", unary(lambda a: (math.tanh(a[0]), math.tanh(a[1])))),
    OpFamily("sigmoid", unary(lambda a: (_sigmoid(a[0]), _sigmoid(a[1])))),
    OpFamily("erf", unary(lambda a: (math.erf(a[0]), math.erf(a[1])))),
    OpFamily("sin", unary(lambda a: (-1.0, 1.0), sensitive=True)),
    OpFamily("cos", unary(lambda a: (-1.0, 1.0), sensitive=True)),
    OpFamily("silu", unary(lambda a: (-0.3, max(a[1], 0.0)))),
    OpFamily("gelu", unary(lambda a: (-0.2, max(a[1], 0.0)))),
    OpFamily("gelu", unary(lambda a: (-0.2, max(a[1], 0.0)), keywords=' {approximate = "tanh"}'), 0.3),
    OpFamily("cast", _cast),
    OpFamily("constant", _constant, 0.5),
    OpFamily("iota", _iota, 0.5),
    OpFamily("dropout", _dropout, 0.5),
    OpFamily("sum", reduction(_stat_sum, empty_ok=True, kinds=NUMS)),
    OpFamily("max", reduction(lambda a, n: a, empty_ok=False, kinds=NUMS)),
    OpFamily("min", reduction(lambda a, n: a, empty_ok=False, kinds=NUMS)),
    OpFamily("mean", reduction(lambda a, n: a, empty_ok=False)),
    OpFamily("var", reduction(lambda a, n: (0.0, (a[1] - a[0]) ** 2 * n), empty_ok=False, keywords=_var_correction, least=2)),
    OpFamily("permute", _permute),
    OpFamily("reshape", _reshape),
    OpFamily("broadcast_in_dim", _broadcast_in_dim),
    OpFamily("slice", _slice),
    OpFamily("concat", _concat),
    OpFamily("set", _set, 2.0),
    OpFamily("softmax", along_dim(lambda a, n: (0.0, 1.0), sensitive=True)),
    OpFamily("log_softmax", along_dim(lambda a, n: (a[0] - a[1] - math.log(max(n, 1)), 0.0), sensitive=True)),
    OpFamily("layer_norm", lambda c: _layer_norm(c, bias=True)),
    OpFamily("rms_norm", lambda c: _layer_norm(c, bias=False)),
    OpFamily("sdpa", _sdpa),
    OpFamily("embedding", _embedding),
    OpFamily("cross_entropy", _cross_entropy),
]
"""Every op family of the fusion dialect: one entry each."""


# --------------------------------------------------------------------------
# Meshes and shardings
# --------------------------------------------------------------------------

MESH_SHAPES = [(1,), (2,), (3,), (4,), (1, 2), (2, 1), (2, 2), (1, 3), (4, 1), (1, 4), (1, 1, 2), (2, 1, 2), (1, 2, 2), (2, 2, 2), (1, 1, 1)]


@dataclass(frozen=True)
class MeshDecl:
    """A `fusion.mesh` declaration: explicit ids, or () for 0..n-1."""

    name: str
    shape: tuple[int, ...]
    ids: tuple[int, ...] = ()

    @property
    def model(self) -> Mesh:
        return Mesh(self.name, self.shape, self.ids)

    @property
    def ranks(self) -> int:
        return max(self.ids) + 1 if self.ids else math.prod(self.shape)

    def text(self) -> str:
        ids = f" devices = [{', '.join(map(str, self.ids))}]" if self.ids else ""
        return f"fusion.mesh @{self.name} shape = [{', '.join(map(str, self.shape))}]{ids}"


def random_meshes(rng: random.Random, max_devices: int) -> list[MeshDecl]:
    """One to three meshes; ids default (0..n-1) or explicit (a random
    subset of the job's ranks, in random order)."""
    shapes = [s for s in MESH_SHAPES if math.prod(s) <= max_devices]
    out = []
    for k in range(rng.choices([1, 2, 3], [5, 3, 1])[0]):
        shape = rng.choice(shapes)
        n = math.prod(shape)
        ids: tuple[int, ...] = ()
        if rng.random() < 0.4:
            ids = tuple(rng.sample(range(max_devices), n))
        out.append(MeshDecl(f"m{k}", shape, ids))
    return out


def random_sharding(
    rng: random.Random, shape: Sequence[int], mesh: Mesh, partial: bool = False, tries: int = 30
) -> Sharding:
    """A valid sharding of `shape` on `mesh`: per dimension `-`, a device
    type, Stream(S), or a product of them in either order; each type once;
    `partial` over an unused device type when asked and possible."""
    types = list(DEVICE_TYPES[: mesh.rank])
    for _ in range(tries):
        free = types[:]
        rng.shuffle(free)
        stream_left = True
        dims: list[tuple[Split, ...]] = []
        for e in shape:
            splits: list[Split] = []
            for _ in range(rng.choices([0, 1, 2], [4, 4, 1])[0]):
                if stream_left and rng.random() < 0.25:
                    n = rng.choice([1, 2, 3, 4, 2 * mesh.size])
                    splits.append(Split("Stream", n))
                    stream_left = False
                elif free:
                    splits.append(Split(free.pop()))
            dims.append(tuple(splits))
        p = None
        if partial and free:
            p = free.pop()
        s = Sharding(mesh.name, tuple(dims), p)
        if not s.errors(shape, mesh):
            return s
    return Sharding.replicated(mesh.name, len(shape))


# --------------------------------------------------------------------------
# A program
# --------------------------------------------------------------------------


@dataclass
class ProgramBuilder:
    rng: random.Random
    meshes: list[MeshDecl]
    args: list[Value] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    dtype: str = "f32"

    def mesh(self, name: str) -> Mesh:
        return next(m.model for m in self.meshes if m.name == name)

    @property
    def main(self) -> str:
        """The mesh of the first argument: where new values are made."""
        return self.meshes[0].name

    def shape(self) -> tuple[int, ...]:
        rank = self.rng.choices([0, 1, 2, 3], [1, 4, 6, 3])[0]
        return tuple(self.rng.choices(EXTENTS, EXTENT_WEIGHTS)[0] for _ in range(rank))

    def new_arg(self, shape: tuple[int, ...], dtype: str, mesh: str, interval: Interval) -> Value:
        sharding = random_sharding(self.rng, shape, self.mesh(mesh))
        v = Value(f"%a{len(self.args)}", shape, dtype, mesh, sharding, interval, exact=True, arg=True)
        self.args.append(v)
        self.values.append(v)
        return v

    def op(self, family: OpFamily) -> bool:
        emit = family.build(Ctx(self))
        if emit is None:
            return False
        mesh = emit.operands[0].mesh if emit.operands else self.meshes[0].name
        sharding = None
        if family.name == "set" or self.rng.random() < 0.35:
            if family.name == "set" and self.rng.random() < 0.4:
                mesh = self.rng.choice(self.meshes).name
            partial = emit.contracts and self.rng.random() < 0.3
            sharding = random_sharding(self.rng, emit.shape, self.mesh(mesh), partial=partial)
        v = Value(f"%v{len(self.lines)}", emit.shape, emit.dtype, mesh, sharding, emit.interval, emit.exact)
        operands = " " + ", ".join(o.name for o in emit.operands) if emit.operands else ""
        types = ", ".join(o.type() for o in emit.operands)
        self.lines.append(f"  {v.name} = fusion.{family.name}{operands}{emit.keywords} : ({types}) -> {v.type()}")
        self.values.append(v)
        self.families.append(family.name)
        return True

    def text(self, results: list[Value]) -> str:
        decls = [m.text() for m in self.meshes]
        args = ", ".join(f"{a.name}: {a.type()}" for a in self.args)
        res = ", ".join(r.type() for r in results)
        ret = f"  func.return {', '.join(r.name for r in results)} : {res}"
        return "\n".join([*decls, f"func.func @main({args}) -> ({res}) {{", *self.lines, ret, "}"]) + "\n"


@dataclass(frozen=True)
class Program:
    seed: int
    text: str
    families: tuple[str, ...]
    ranks: int  # the job size it needs


def generate(seed: int, max_devices: int = 4, max_ops: int = 6) -> Program:
    """One random valid program (deterministic in `seed`)."""
    rng = random.Random(seed)
    b = ProgramBuilder(rng, random_meshes(rng, max_devices))
    b.dtype = rng.choices(FLOATS, [6, 2, 1])[0]
    b.new_arg(b.shape(), b.dtype, b.main, NORMAL)
    weights = [f.weight for f in OPS]
    made, attempts = 0, 0
    target = rng.randint(1, max_ops)
    while made < target and attempts < 50:
        attempts += 1
        made += b.op(rng.choices(OPS, weights)[0])
    last = b.values[-1]
    results = [last]
    extra = [v for v in b.values if v is not last and v not in b.args]
    if extra and rng.random() < 0.4:
        results.insert(0, rng.choice(extra))
    ranks = max(m.ranks for m in b.meshes)
    return Program(seed, b.text(results), tuple(b.families), ranks)


if __name__ == "__main__":  # print a few: python3 tests/property/program_gen.py [SEED [COUNT]]
    import sys

    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for s in itertools.islice(itertools.count(first), int(sys.argv[2]) if len(sys.argv) > 2 else 3):
        print(f"// seed {s}\n{generate(s).text}")

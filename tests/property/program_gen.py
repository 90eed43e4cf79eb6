"""Random valid fusion programs for the property test (check_programs.py).

`generate(seed, max_devices)` writes one program: up to three meshes of 1-3
axes (default or explicit device ids), arguments made on demand with random
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
LIMIT = {"f32": 1e6, "bf16": 1e4, "f16": 2e3}
"""The largest magnitude a value of each type may reach (f16 overflows at 65504)."""
SENSITIVE = {"f32": 16.0, "bf16": 1.0, "f16": 1.0}
"""The largest magnitude of an input to exp/softmax: the relative error of
exp(x) is the absolute error of x (its rounding in the element type)."""
EXTENTS = (0, 1, 2, 3, 4, 6, 8, 12)
EXTENT_WEIGHTS = (1, 2, 5, 2, 5, 3, 4, 2)
Interval = tuple[float, float]


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    mesh: str
    sharding: Sharding | None  # None: left to propagate-shardings
    interval: Interval

    def type(self) -> str:
        dims = "".join(f"{e}x" for e in self.shape)
        enc = f", {self.sharding}" if self.sharding is not None else ""
        return f"tensor<{dims}{self.dtype}{enc}>"

    @property
    def bound(self) -> float:
        return max(abs(self.interval[0]), abs(self.interval[1]))


@dataclass(frozen=True)
class Emit:
    """What a builder makes: the op's operands, keyword text, result shape,
    element type and interval; `contracts` when it may make a partial sum."""

    operands: Sequence[Value]
    keywords: str
    shape: tuple[int, ...]
    dtype: str
    interval: Interval
    contracts: bool = False


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


# --------------------------------------------------------------------------
# The builders' view of the program
# --------------------------------------------------------------------------


class Ctx:
    def __init__(self, program: "ProgramBuilder"):
        self.p = program
        self.rng = program.rng

    def pick(self, ok: Callable[[Value], bool] = lambda v: True) -> Value | None:
        """A value made so far (recent ones likelier) that passes `ok`."""
        found = [v for v in self.p.values if ok(v)]
        if not found:
            return None
        weights = [1 + i for i in range(len(found))]
        return self.rng.choices(found, weights)[0]

    def arg(self, shape: Sequence[int], dtype: str, mesh: str, interval: Interval = (-5.0, 5.0)) -> Value:
        """A new function argument (random sharding on `mesh`)."""
        return self.p.new_arg(tuple(shape), dtype, mesh, interval)

    def like(self, v: Value, shape: Sequence[int] | None = None) -> Value:
        """An operand of `shape` (default: v's) on v's mesh and of v's type:
        one made so far, or a new argument."""
        shape = tuple(v.shape if shape is None else shape)
        other = self.pick(lambda u: u.shape == shape and u.dtype == v.dtype and u.mesh == v.mesh)
        if other is None or self.rng.random() < 0.4:
            return self.arg(shape, v.dtype, v.mesh)
        return other

    def extent(self) -> int:
        return self.rng.choices(EXTENTS, EXTENT_WEIGHTS)[0]


# --------------------------------------------------------------------------
# Builders of the common forms
# --------------------------------------------------------------------------


def unary(
    fn: Callable[[Interval], Interval], sensitive: bool = False, keywords: str = ""
) -> Callable[[Ctx], Emit | None]:
    """An elementwise op of one float operand; `fn` maps its interval;
    `sensitive`: exp-like (the input must be small, SENSITIVE)."""

    def build(c: Ctx) -> Emit | None:
        limit = lambda v: SENSITIVE[v.dtype] if sensitive else LIMIT[v.dtype]  # noqa: E731
        x = c.pick(lambda v: v.bound <= limit(v))
        if x is None:
            return None
        out = fn(x.interval)
        return Emit([x], keywords, x.shape, x.dtype, out) if _fits(out, x.dtype) else None

    return build


def binary(
    fn: Callable[[Interval, Interval], Interval | None], rhs_ok: Callable[[Value], bool] | None = None
) -> Callable[[Ctx], Emit | None]:
    """An elementwise op of two operands of one shape; `fn` maps the
    intervals, None where the op must not apply; `rhs_ok`: what the second
    operand must be (chosen first then: a divisor away from zero)."""

    def build(c: Ctx) -> Emit | None:
        if rhs_ok is not None:
            y = c.pick(rhs_ok)
            if y is None:
                return None
            x = c.like(y)
        else:
            x = c.pick()
            if x is None:
                return None
            y = c.like(x)
        out = fn(x.interval, y.interval)
        if out is None or not _fits(out, x.dtype):
            return None
        return Emit([x, y], "", x.shape, x.dtype, out)

    return build


def reduction(fn: Callable[[Interval, int], Interval], empty_ok: bool) -> Callable[[Ctx], Emit | None]:
    """`dims = [...]` (and sometimes `keepdim = true`) over a ranked value;
    `fn` maps the interval given the number of reduced elements;
    `empty_ok`: the reduction has an identity (a dimension of extent 0 may
    be reduced)."""

    def build(c: Ctx) -> Emit | None:
        x = c.pick(lambda v: len(v.shape) > 0)
        if x is None:
            return None
        k = c.rng.randint(1, len(x.shape))
        dims = sorted(c.rng.sample(range(len(x.shape)), k))
        if not empty_ok and any(x.shape[d] == 0 for d in dims) and c.rng.random() < 0.9:
            return None  # (kept rarely: the verifier's refusal is part of the test)
        keep = c.rng.random() < 0.3
        shape = tuple(1 if i in dims else e for i, e in enumerate(x.shape)) if keep else tuple(
            e for i, e in enumerate(x.shape) if i not in dims
        )
        n = math.prod(x.shape[d] for d in dims)
        out = fn(x.interval, n)
        if not _fits(out, x.dtype):
            return None
        kw = f" dims = [{', '.join(map(str, dims))}]" + (" keepdim = true" if keep else "")
        return Emit([x], kw, shape, x.dtype, out, contracts=True)

    return build


def along_dim(fn: Callable[[Interval], Interval], sensitive: bool) -> Callable[[Ctx], Emit | None]:
    """An op with `dim = d` keeping the shape (softmax-like)."""

    def build(c: Ctx) -> Emit | None:
        x = c.pick(lambda v: len(v.shape) > 0 and (not sensitive or v.bound <= SENSITIVE[v.dtype]))
        if x is None:
            return None
        d = c.rng.randrange(len(x.shape))
        return Emit([x], f" dim = {d}", x.shape, x.dtype, fn(x.interval))

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
    b_shape = (k, n) if form == "mat" else (k,)
    if len(a.shape) == 1 and form == "mat" and c.rng.random() < 0.3:
        b_shape = (c.rng.choice([1, 2]), k, n)  # a batched rhs
    b = c.like(a, b_shape)
    out_shape = _matmul_shape(a.shape, b.shape)
    out = _scale(_mul(a.interval, b.interval), k)
    return Emit([a, b], "", out_shape, a.dtype, out, contracts=True) if _fits(out, a.dtype) else None


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return b[:-2] + (b[-1],)
    return a[:-1] + (b[-1],)


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
    x = c.pick()
    if x is None:
        return None
    to = c.rng.choice([t for t in FLOATS if t != x.dtype])
    return Emit([x], "", x.shape, to, x.interval) if _fits(x.interval, to) else None


def _permute(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) >= 2)
    if x is None:
        return None
    perm = list(range(len(x.shape)))
    c.rng.shuffle(perm)
    return Emit([x], f" dims = [{', '.join(map(str, perm))}]", tuple(x.shape[p] for p in perm), x.dtype, x.interval)


def _reshape(c: Ctx) -> Emit | None:
    x = c.pick()
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
    return Emit([x], "", tuple(shape), x.dtype, x.interval)


def _broadcast_in_dim(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) <= 3)
    if x is None:
        return None
    at = c.rng.randint(0, len(x.shape))
    shape = list(x.shape)
    shape.insert(at, c.extent())
    dims = [d if d < at else d + 1 for d in range(len(x.shape))]
    for i, d in enumerate(dims):  # expand extent-1 dims now and then
        if shape[d] == 1 and c.rng.random() < 0.5:
            shape[d] = c.extent()
    return Emit([x], f" dims = [{', '.join(map(str, dims))}]", tuple(shape), x.dtype, x.interval)


def _slice(c: Ctx) -> Emit | None:
    x = c.pick(lambda v: len(v.shape) >= 1)
    if x is None:
        return None
    starts, limits = [], []
    for e in x.shape:
        s = c.rng.randint(0, e)
        starts.append(s)
        limits.append(c.rng.randint(s, e))
    kw = f" starts = [{', '.join(map(str, starts))}] limits = [{', '.join(map(str, limits))}]"
    return Emit([x], kw, tuple(lim - s for s, lim in zip(starts, limits)), x.dtype, x.interval)


def _set(c: Ctx) -> Emit | None:
    """A copy; the builder always gives its result a sharding (a reshard,
    to any mesh)."""
    x = c.pick()
    return None if x is None else Emit([x], "", x.shape, x.dtype, x.interval)


def _away_from_zero(v: Value) -> bool:
    lo, hi = v.interval
    return not lo <= 0 <= hi and min(abs(lo), abs(hi)) >= 1e-3


def _div(a: Interval, b: Interval) -> Interval:
    """Only by values bounded away from zero (exp, sigmoid of bounded inputs)."""
    return _hull(*(x / y for x in a for y in b))


OPS: list[OpFamily] = [
    OpFamily("matmul", _matmul, 2.0),
    OpFamily("linear", _linear, 2.0),
    OpFamily("add", binary(lambda a, b: (a[0] + b[0], a[1] + b[1]))),
    OpFamily("sub", binary(lambda a, b: (a[0] - b[1], a[1] - b[0]))),
    OpFamily("mul", binary(_mul)),
    OpFamily("div", binary(_div, rhs_ok=_away_from_zero), 4.0),
    OpFamily("maximum", binary(lambda a, b: (max(a[0], b[0]), max(a[1], b[1])))),
    OpFamily("relu", unary(lambda a: (max(a[0], 0.0), max(a[1], 0.0)))),
    OpFamily("neg", unary(lambda a: (-a[1], -a[0]))),
    OpFamily("exp", unary(lambda a: (math.exp(a[0]), math.exp(a[1])), sensitive=True)),
    OpFamily("tanh", unary(lambda a: (math.tanh(a[0]), math.tanh(a[1])))),
    OpFamily("sigmoid", unary(lambda a: (_sigmoid(a[0]), _sigmoid(a[1])))),
    OpFamily("silu", unary(lambda a: (-0.3, max(a[1], 0.0)))),
    OpFamily("gelu", unary(lambda a: (-0.2, max(a[1], 0.0)))),
    OpFamily("gelu", unary(lambda a: (-0.2, max(a[1], 0.0)), keywords=' {approximate = "tanh"}'), 0.3),
    OpFamily("cast", _cast),
    OpFamily("sum", reduction(_scale, empty_ok=True)),
    OpFamily("max", reduction(lambda a, n: a, empty_ok=False)),
    OpFamily("permute", _permute),
    OpFamily("reshape", _reshape),
    OpFamily("broadcast_in_dim", _broadcast_in_dim),
    OpFamily("slice", _slice),
    OpFamily("set", _set, 2.0),
    OpFamily("softmax", along_dim(lambda a: (0.0, 1.0), sensitive=True)),
]
"""Every op family of the fusion dialect: one entry each."""


# --------------------------------------------------------------------------
# Meshes and shardings
# --------------------------------------------------------------------------

MESH_SHAPES = [(1,), (2,), (3,), (4,), (1, 2), (2, 1), (2, 2), (1, 3), (1, 1, 2), (2, 1, 2), (1, 2, 2), (2, 2, 2), (1, 1, 1)]


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

    def shape(self) -> tuple[int, ...]:
        rank = self.rng.choices([0, 1, 2, 3], [1, 4, 6, 3])[0]
        return tuple(self.rng.choices(EXTENTS, EXTENT_WEIGHTS)[0] for _ in range(rank))

    def new_arg(self, shape: tuple[int, ...], dtype: str, mesh: str, interval: Interval) -> Value:
        v = Value(f"%a{len(self.args)}", shape, dtype, mesh, random_sharding(self.rng, shape, self.mesh(mesh)), interval)
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
        v = Value(f"%v{len(self.lines)}", emit.shape, emit.dtype, mesh, sharding, emit.interval)
        operands = ", ".join(o.name for o in emit.operands)
        types = ", ".join(o.type() for o in emit.operands)
        self.lines.append(f"  {v.name} = fusion.{family.name} {operands}{emit.keywords} : ({types}) -> {v.type()}")
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
    main = b.meshes[0].name
    b.new_arg(b.shape(), b.dtype, main, (-5.0, 5.0))
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

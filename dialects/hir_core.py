"""The hir dialect's types, attribute helpers, buffer checks, base op class and allocation ops.

Part of the hir dialect (`fuserc.dialects.hir` gathers the ops and defines the dialect; docs/hir.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    UNKNOWN_LOC,
    ArrayAttr,
    BytesAttr,
    I64,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import (
    Attribute,
    Operation,
    OpResult,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    irdl_custom_directive,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from fuserc.dialects.fusion import element_type_of, flat_definition
from fuserc.dialects.fusion_mesh import _int_array, i64_attr
from fuserc.dialects.hir_team import Team
from fuserc.sharding import MAX_MESH_DEVICES

BACKENDS: tuple[str, ...] = ("nccl", "cuda_ipc", "mpi")


REDUCTION_OPS: tuple[str, ...] = ("sum", "max", "min", "prod")

HOST_ATTR = "hir.host"
"""Unit attribute marking a `func.func` as a host program."""
GLOBAL_ATTR = "hir.global"
"""Argument/result attribute: the global (sharded) type of a local tensor."""
STREAM_ATTR = "hir.stream"
"""Discardable attribute `[dim, S]` on an op lowered from a fusion op whose
result has a `Stream(S)` split on dim (read by stream-pipeline)."""


# --------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """`!hir.token`: the work handle of a communication, consumed by hir.wait."""

    name = "hir.token"


@irdl_attr_definition
class StreamType(ParametrizedAttribute, TypeAttribute):
    """`!hir.stream`: a CUDA stream on cuda, in-order execution on cpu."""

    name = "hir.stream"


TOKEN, STREAM = TokenType(), StreamType()
"""The token and stream types, made once (the passes make thousands of ops of them)."""


@irdl_attr_definition
class EventType(ParametrizedAttribute, TypeAttribute):
    """`!hir.event`: a point in a stream's work, recorded and waited on."""

    name = "hir.event"


@irdl_attr_definition
class HandleType(ParametrizedAttribute, TypeAttribute):
    """`!hir.handle`: a buffer's memory handles shared across a team."""

    name = "hir.handle"


# --------------------------------------------------------------------------
# Attribute helpers and custom syntax directives
# --------------------------------------------------------------------------


def int_array(values: Sequence[int]) -> ArrayAttr[IntegerAttr]:
    """`[0 : i64, 1 : i64, ...]`: short int lists (dims, starts, limits)."""
    return _int_array(values)


def rank_array(values: Sequence[int]) -> DenseArrayBase:
    """`array<i64: 0, 1, ...>`: how teams and rank lists are stored, packed
    (a team of a million ranks is one attribute of 8 MB, built in a blink,
    not a million attributes)."""
    values = tuple(values)
    bad = [v for v in values if not -(1 << 63) <= v < 1 << 63]
    if bad:
        raise VerifyException(f"rank {bad[0]} is out of the range of i64")
    return DenseArrayBase(i64, BytesAttr(i64.pack(values)))


def _ints(attr: ArrayAttr[IntegerAttr] | DenseArrayBase) -> tuple[int, ...]:
    if isinstance(attr, DenseArrayBase):
        return attr.get_values()  # type: ignore[return-value]
    return tuple(a.value.data for a in attr.data)


# --------------------------------------------------------------------------
# Rank lists as runs
# --------------------------------------------------------------------------

Run = tuple[int, int, int]
"""`(start, stop, step)`: the ranks of `range(start, stop, step)`, step >= 1."""

RANGE_MIN = 16
"""A run of this many equally spaced increasing ranks is written `A to B`
(`A to B step S`; B exclusive, as hir.for's bounds), a shorter one rank by
rank: small teams read as they are, a mesh of millions is a few words."""


def rank_runs(values: Sequence[int]) -> tuple[Run, ...]:
    """`values`, in order, as maximal increasing arithmetic runs (one for a
    whole mesh, a DIDx slice or a strided DIDy team, found at C speed)."""
    n = len(values)
    if n == 0:
        return ()
    if isinstance(values, range) and values.step > 0:
        return ((values.start, values.start + n * values.step, values.step),)
    first, last = values[0], values[-1]
    if n >= 2 and last > first and (last - first) % (n - 1) == 0:
        step = (last - first) // (n - 1)
        if tuple(values) == tuple(range(first, last + 1, step)):
            return ((first, last + 1, step),)
    runs: list[Run] = []
    i = 0
    while i < n:
        start = values[i]
        if i + 1 == n or values[i + 1] <= start:
            runs.append((start, start + 1, 1))
            i += 1
            continue
        step = values[i + 1] - start
        j = i + 1
        while j + 1 < n and values[j + 1] - values[j] == step:
            j += 1
        runs.append((start, values[j] + 1, step))
        i = j + 1
    return tuple(runs)


def format_runs(runs: Sequence[Run]) -> str:
    """`[0, 1, 2]`, `[0 to 4096]`, `[0 to 4096 step 2, 9000]` (RANGE_MIN; a
    run's stop is its start plus its length times its step)."""
    items: list[str] = []
    for start, stop, step in runs:
        r = range(start, stop, step)
        if len(r) >= RANGE_MIN:
            items.append(f"{start} to {start + len(r) * step}" + (f" step {step}" if step != 1 else ""))
        else:
            items.extend(str(v) for v in r)
    return "[" + ", ".join(items) + "]"


def parse_runs(parser: Parser | AttrParser) -> list[Run]:
    """`[ITEM, ...]`, ITEM ::= INT (`to` INT (`step` INT)?)? (stop exclusive);
    at most MAX_MESH_DEVICES ranks in all (a list is a team or the ranks of
    meshes: never more devices than a mesh may have)."""
    total = 0

    def item() -> Run:
        nonlocal total
        pos = parser.pos
        start = parser.parse_integer(allow_boolean=False)
        stop, step = start + 1, 1
        if parser.parse_optional_keyword("to"):
            stop = parser.parse_integer(allow_boolean=False)
            step = parser.parse_integer(allow_boolean=False) if parser.parse_optional_keyword("step") else 1
            if step < 1 or stop <= start:
                parser.raise_error(f"'{start} to {stop} step {step}' is not a range of ranks: it needs start < stop and step >= 1", pos, parser.pos)
        total += len(range(start, stop, step))
        if total > MAX_MESH_DEVICES:
            parser.raise_error(f"a rank list of more than {MAX_MESH_DEVICES:,} ranks (the most devices a mesh has)", pos, parser.pos)
        return (start, stop, step)

    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, item)


def _expand(runs: Sequence[Run]) -> list[int]:
    return [v for run in runs for v in range(*run)]


@dataclass(frozen=True)
class Ranks:
    """A set of ranks as increasing, disjoint runs (`rank_runs`): what
    `hir.if_rank` stores, so that its size, text and membership test grow
    with the runs of the program, not with the devices of its meshes (a
    mesh of 4,194,304 devices is one run). `Ranks.of` orders what it is
    given; duplicates are kept for the verifier to refuse."""

    runs: tuple[Run, ...]

    @classmethod
    def of(cls, ranks: Iterable[int] | Sequence[Run] | "Ranks", runs: bool = False) -> "Ranks":
        if isinstance(ranks, Ranks):
            return ranks
        given = tuple(ranks) if runs else rank_runs(ranks if isinstance(ranks, (range, tuple, list)) else tuple(ranks))  # type: ignore[arg-type]
        if cls(given).ordered():  # type: ignore[arg-type]
            return cls(given)  # type: ignore[arg-type]
        values = sorted(_expand(given))  # type: ignore[arg-type]
        if any(a == b for a, b in zip(values, values[1:])):
            return cls(given)  # type: ignore[arg-type]
        return cls(rank_runs(values))

    def ordered(self) -> bool:
        """Runs increasing and disjoint (each after the last rank of the one before)."""
        last = None
        for start, stop, step in self.runs:
            if step < 1 or stop <= start or (last is not None and start <= last):
                return False
            last = range(start, stop, step)[-1]
        return True

    def __contains__(self, rank: object) -> bool:
        return isinstance(rank, int) and any(a <= rank < b and (rank - a) % s == 0 for a, b, s in self.runs)

    def __iter__(self) -> Iterator[int]:
        for run in self.runs:
            yield from range(*run)

    def __len__(self) -> int:
        return sum(len(range(*run)) for run in self.runs)

    def __bool__(self) -> bool:
        return bool(self.runs)

    @property
    def last(self) -> int:
        """The largest rank (the runs are ordered)."""
        return max(range(*run)[-1] for run in self.runs)

    def __str__(self) -> str:
        return format_runs(self.runs)


@irdl_attr_definition
class RankSetAttr(ParametrizedAttribute):
    """`#hir.ranks<[0 to 4096, 5000]>`: a `Ranks`, stored as its runs'
    (start, stop, step) triples in one packed array."""

    name = "hir.ranks"

    runs: DenseArrayBase

    @staticmethod
    def get(ranks: Ranks) -> "RankSetAttr":
        attr = RankSetAttr(rank_array([v for run in ranks.runs for v in run]))
        attr.__dict__["_model"] = ranks
        return attr

    @property
    def model(self) -> Ranks:
        model = self.__dict__.get("_model")
        if model is None:
            flat = self.runs.get_values()
            triples = [tuple(flat[i : i + 3]) for i in range(0, len(flat) - len(flat) % 3, 3)]
            model = self.__dict__["_model"] = Ranks(tuple(triples))  # type: ignore[arg-type]
        return model

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            ranks = Ranks.of(parse_runs(parser), runs=True)
        return (rank_array([v for run in ranks.runs for v in run]),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.model}>")

    def verify(self) -> None:
        if len(self.runs.get_values()) % 3:
            raise VerifyException("#hir.ranks holds (start, stop, step) triples")


@irdl_custom_directive
class TeamList(CustomDirective):
    """A team: `[R, ...]` (runs of RANGE_MIN ranks or more as `A to B
    (step S)?`) for the `team` array of i64, then optionally `translated
    [N step S, ...]` (the `translates` property, `array<i64: N, S, ...>`):
    the team and its translates, one team per offset (`Team`)."""

    team: AttributeVariable
    translates: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> bool:
        self.team.set(state, rank_array(_expand(parse_runs(parser))))
        if parser.parse_optional_keyword("translated"):

            def factor() -> tuple[int, int]:
                count = parser.parse_integer(allow_boolean=False)
                parser.parse_keyword("step")
                return count, parser.parse_integer(allow_boolean=False)

            pairs = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, factor)
            self.translates.set(state, rank_array([v for pair in pairs for v in pair]))
        return True

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        attr = self.team.get(op)
        assert isinstance(attr, DenseArrayBase)
        printer.print_string(format_runs(rank_runs(_ints(attr))))
        translates = self.translates.get(op)
        if isinstance(translates, DenseArrayBase):
            printer.print_string(team_of(attr, translates).translates_text())


def team_of(team: DenseArrayBase, translates: DenseArrayBase | None) -> Team:
    """The `Team` of a `team` property and an optional `translates` one
    (flat (count, stride) pairs)."""
    flat = _ints(translates) if translates is not None else ()
    return Team(_ints(team), [tuple(flat[i : i + 2]) for i in range(0, len(flat) - 1, 2)])  # type: ignore[misc]


def team_props(team: Sequence[int]) -> dict[str, Attribute]:
    """The `team` property (and `translates` for a `Team` that has them)."""
    props: dict[str, Attribute] = {"team": rank_array(team)}
    translates = getattr(team, "translates", ())
    if translates:
        props["translates"] = rank_array([v for pair in translates for v in pair])
    return props


@irdl_custom_directive
class Word(CustomDirective):
    """A bare identifier (`nccl`, `sum`) for a string property."""

    word: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> bool:
        self.word.set(state, StringAttr(parser.parse_identifier()))
        return True

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        attr = self.word.get(op)
        assert isinstance(attr, StringAttr)
        printer.print_string(attr.data)


def check_ranks(ranks: Sequence[int] | Ranks, what: str) -> None:
    """A team or rank list: non-empty, distinct, non-negative (a `Ranks`
    checked on its runs)."""
    if isinstance(ranks, Ranks):
        if not ranks or not ranks.ordered() or ranks.runs[0][0] < 0:
            raise VerifyException(f"{what} must be a non-empty list of distinct non-negative ranks, got {ranks}")
        return
    if not ranks or min(ranks) < 0 or len(set(ranks)) != len(ranks):
        raise VerifyException(
            f"{what} must be a non-empty list of distinct non-negative ranks, got {format_runs(rank_runs(ranks))}"
        )


def _check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise VerifyException(f"{what} must be one of {', '.join(allowed)}, got '{value}'")


def _check_positive(value: int, what: str) -> None:
    if value <= 0:
        raise VerifyException(f"{what} must be positive, got {value}")


def verify_discardable(op: Operation) -> None:
    """The hir dialect's discardable attributes on any op (MLIR's
    `verifyOperationAttribute`): `hir.stream` is `[dim, S]`, two integers
    with dim >= 0 and S >= 1, so that no pass reading it divides by zero."""
    mark = op.attributes.get(STREAM_ATTR)
    if mark is None:
        return
    if not (isinstance(mark, ArrayAttr) and len(mark.data) == 2 and all(isinstance(a, IntegerAttr) for a in mark.data)):
        raise VerifyException(f"{STREAM_ATTR} must be [dim, S], two integers, got {mark}")
    dim, chunks = (a.value.data for a in mark.data)  # type: ignore[attr-defined]
    if dim < 0 or chunks < 1:
        raise VerifyException(f"{STREAM_ATTR} = [{dim}, {chunks}] needs dim >= 0 and S >= 1 chunks")


# --------------------------------------------------------------------------
# Buffers
# --------------------------------------------------------------------------

_TENSOR = TensorType.constr()
_INDEX = IndexType()


def check_buffer_type(t: Attribute) -> None:
    """Local buffers: a tensor type with a static shape and no encoding."""
    if not isinstance(t, TensorType):
        return
    if not isinstance(t.encoding, NoneAttr):
        raise VerifyException(f"{t} is not a local buffer: hir tensors have no encoding")
    if any(d < 0 for d in t.get_shape()):
        raise VerifyException(f"{t} is not a local buffer: hir tensors have static shapes")


def _same_elements(values: Sequence[SSAValue]) -> None:
    elems = [element_type_of(v) for v in values]
    if len(set(elems)) > 1:
        raise VerifyException(
            "operands must have one element type, got " + ", ".join(str(e) for e in elems)
        )


def _check_dim(shape: tuple[int, ...], dim: int) -> None:
    if not 0 <= dim < len(shape):
        raise VerifyException(f"dim {dim} is out of range for a tensor of rank {len(shape)}")


def select_shape(shape: Sequence[int], dim: int) -> tuple[int, ...]:
    """The shape of `hir.select` on `shape`: dim `dim` dropped."""
    return tuple(e for i, e in enumerate(shape) if i != dim)


def chunk_shape(shape: Sequence[int], dim: int, chunks: int) -> tuple[int, ...]:
    """The shape of one of `chunks` blocks of `shape` along `dim`."""
    return tuple(e // chunks if i == dim else e for i, e in enumerate(shape))


def _constant_value(v: SSAValue) -> int | None:
    """The value of an index defined by hir.constant (None otherwise)."""
    owner = v.owner
    return owner.value if isinstance(owner, Operation) and owner.name == "hir.constant" else None  # by name: hir.constant is defined in hir_control


def _check_position(v: SSAValue, size: int, what: str) -> None:
    """A team position known statically (hir.constant) must be in the team."""
    value = _constant_value(v)
    if value is not None and not 0 <= value < size:
        raise VerifyException(f"{what} {value} is out of range for a team of {size} ranks")


class HirOp(IRDLOperation):
    """Base of the hir ops: every tensor operand and result is a local buffer."""

    custom_directives = (TeamList, Word)

    def verify_(self) -> None:
        for v in (*self.operands, *self.results):
            check_buffer_type(v.type)
        self.verify_op()

    def verify_op(self) -> None:
        """Op-specific checks (after the buffer checks)."""

    def _init(
        self,
        operands: Sequence[SSAValue | Operation] = (),
        result_types: Sequence[Attribute] = (),
        properties: dict[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
    ) -> None:
        """The op from its flat operands, results, properties and regions,
        without IRDL's builder (which groups and checks each argument
        against the definition: most of the cost of making an op, and a
        host program has thousands). The verifier checks them instead."""
        Operation.__init__(
            self,
            operands=[v if type(v) is OpResult else SSAValue.get(v) for v in operands],  # the usual class first: SSAValue.get's isinstance check is a Python call
            result_types=result_types,
            properties=properties or {},
            location=UNKNOWN_LOC,  # what xDSL gives, without its import per op
            regions=regions,
        )

    def __init__(
        self,
        *,
        operands: Sequence[Any] | None = None,
        result_types: Sequence[Any] | None = None,
        properties: Mapping[str, Attribute | None] | None = None,
        attributes: Mapping[str, Attribute | None] | None = None,
        successors: Sequence[Any] | None = None,
        regions: Sequence[Any] | None = None,
    ) -> None:
        """IRDL's builder, or `_init` where the op's definition is flat
        (`flat_definition`: each operand, result and region one, no segment sizes) and
        it is given its operands, results and regions as they are: then the
        builder would make the same op, more slowly (stream-pipeline makes
        thousands of hir.chunk, hir.set_current_stream, ...)."""
        if not attributes and not successors and flat_definition(type(self)) and all(type(r) is Region for r in regions or ()):
            props = {k: v for k, v in properties.items() if v is not None} if properties else {}
            self._init(operands or (), result_types or (), props, regions or ())
            return
        super().__init__(
            operands=operands, result_types=result_types, properties=properties, attributes=attributes, successors=successors, regions=regions
        )


# --------------------------------------------------------------------------
# Allocation
# --------------------------------------------------------------------------


@irdl_op_definition
class AllocOp(HirOp):
    """`%b = hir.alloc "SITE" (storage N)? : tensor<...>`: a buffer from the
    persistent allocation cache, keyed by (site, type); the site is unique
    per program. Sites of one program with the same `storage` number share
    one block of memory (plan-memory gives it to buffers whose uses never
    overlap on the device)."""

    name = "hir.alloc"
    site_attr = prop_def(StringAttr, prop_name="site")
    storage_attr = opt_prop_def(IntegerAttr[I64], prop_name="storage")
    result = result_def(_TENSOR)

    assembly_format = "$site (`storage` $storage^)? attr-dict `:` type($result)"

    SIGNATURE_IGNORES: ClassVar[tuple[str, ...]] = ("site", "storage")
    """What `verify_` does not read (`fuserc.ir.verify` verifies one op
    per signature): the site's uniqueness is `verify_sites`, per program."""

    def __init__(self, site: str, result_type: TensorType, storage: int | None = None):
        props: dict[str, Attribute] = {"site": StringAttr(site)}
        if storage is not None:
            props["storage"] = i64_attr(storage)
        self._init(result_types=[result_type], properties=props)

    @property
    def site(self) -> str:
        return self.site_attr.data

    @property
    def storage(self) -> int | None:
        """The memory block this buffer shares with other sites, if any."""
        return None if self.storage_attr is None else self.storage_attr.value.data

    @storage.setter
    def storage(self, value: int | None) -> None:
        if value is None:
            self.properties.pop("storage", None)
        else:
            self.properties["storage"] = i64_attr(value)

    def verify_sites(self, seen: dict[tuple[Operation | None, str], "AllocOp"]) -> None:
        """That no earlier hir.alloc of its function uses its site; `seen`
        holds the allocations met so far, in program order (the module
        verifier, `fuserc.ir.verify`, passes it: one walk of the program
        instead of one per allocation)."""
        scope = self.parent_op()
        while scope is not None and not isinstance(scope, FuncOp):
            scope = scope.parent_op()
        key = (scope, self.site)
        if key in seen and seen[key] is not self:
            raise VerifyException(
                f'allocation site "{self.site}" is already used by another hir.alloc '
                "of this program"
            )
        seen[key] = self


@irdl_op_definition
class DeallocOp(HirOp):
    """`hir.dealloc %b : tensor<...>`: `%b` goes back to the cache (not freed)."""

    name = "hir.dealloc"
    buffer = operand_def(_TENSOR)

    assembly_format = "$buffer attr-dict `:` type($buffer)"

    def __init__(self, buffer: SSAValue | Operation):
        self._init(operands=[buffer])

    def verify_op(self) -> None:
        if not isinstance(self.buffer.owner, Operation) or self.buffer.owner.name not in ("hir.alloc", "hir.if_rank"):  # by name: hir.if_rank is in hir_control
            raise VerifyException(
                "operand must be a buffer made by hir.alloc (possibly through hir.if_rank), "
                "not a view or an argument"
            )

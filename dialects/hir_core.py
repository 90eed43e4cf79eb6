"""The hir dialect's types, attribute helpers, buffer checks, base op class and allocation ops.

Part of the hir dialect (`fuserc.dialects.hir` gathers the ops and defines the dialect; docs/hir.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
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
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from fuserc.dialects.fusion import element_type_of

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
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


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


def _fmt_ints(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _parse_int_list(parser: Parser) -> list[int]:
    return parser.parse_comma_separated_list(
        parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)
    )


@irdl_custom_directive
class RankList(CustomDirective):
    """`[0, 1, 2]` for an array of i64 (a team or a rank list)."""

    ranks: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> bool:
        self.ranks.set(state, rank_array(_parse_int_list(parser)))
        return True

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        attr = self.ranks.get(op)
        assert isinstance(attr, DenseArrayBase)
        printer.print_string(_fmt_ints(_ints(attr)))


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


def check_ranks(ranks: Sequence[int], what: str) -> None:
    """A team or rank list: non-empty, distinct, non-negative."""
    if not ranks or len(set(ranks)) != len(ranks) or any(r < 0 for r in ranks):
        raise VerifyException(
            f"{what} must be a non-empty list of distinct non-negative ranks, got {_fmt_ints(ranks)}"
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

    custom_directives = (RankList, Word)

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
            operands=[SSAValue.get(v) for v in operands],
            result_types=result_types,
            properties=properties or {},
            regions=regions,
        )


# --------------------------------------------------------------------------
# Allocation
# --------------------------------------------------------------------------


@irdl_op_definition
class AllocOp(HirOp):
    """`%b = hir.alloc "SITE" : tensor<...>`: a buffer from the persistent
    allocation cache, keyed by (site, type); the site is unique per program."""

    name = "hir.alloc"
    site_attr = prop_def(StringAttr, prop_name="site")
    result = result_def(_TENSOR)

    assembly_format = "$site attr-dict `:` type($result)"

    SIGNATURE_IGNORES: ClassVar[tuple[str, ...]] = ("site",)
    """What `verify_` does not read (`fuserc.ir.verify` verifies one op
    per signature): the site's uniqueness is `verify_sites`, per program."""

    def __init__(self, site: str, result_type: TensorType):
        self._init(result_types=[result_type], properties={"site": StringAttr(site)})

    @property
    def site(self) -> str:
        return self.site_attr.data

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

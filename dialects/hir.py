"""The hir dialect: host programs that every rank runs, SPMD (docs/hir.md).

Values are local buffers (builtin tensors without encoding), indices, and the
handles of the runtime: tokens of communications, streams, events and shared
memory handles. Keyword attributes are properties; each op class exposes them
as plain Python values (`team` as a tuple of ranks, `backend` as a string, ...)
for the evaluator and the passes, and has a builder taking those values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BytesAttr,
    DenseArrayBase,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i32,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    irdl_custom_directive,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, SingleBlockImplicitTerminator
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.dialects.fusion import element_type_of, shape_of

BACKENDS: tuple[str, ...] = ("nccl", "cuda_ipc", "mpi")
REDUCTION_OPS: tuple[str, ...] = ("sum", "max", "min", "prod")

HOST_ATTR = "hir.host"
"""Unit attribute marking a `func.func` as a host program."""
GLOBAL_ATTR = "hir.global"
"""Argument/result attribute: the global (sharded) type of a local tensor."""

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
    return owner.value if isinstance(owner, ConstantOp) else None


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
        if not isinstance(self.buffer.owner, (AllocOp, IfRankOp)):
            raise VerifyException(
                "operand must be a buffer made by hir.alloc (possibly through hir.if_rank), "
                "not a view or an argument"
            )


# --------------------------------------------------------------------------
# Control
# --------------------------------------------------------------------------


@irdl_op_definition
class YieldOp(HirOp):
    """`hir.yield %v... : T...`: ends the region of hir.for, hir.if_rank and
    hir.launch, giving the region's values."""

    name = "hir.yield"
    values = var_operand_def()

    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(ForOp, IfRankOp, LaunchOp)))

    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        self._init(operands=values)


@functools.lru_cache(maxsize=64)
def _segment_sizes(*sizes: int) -> DenseArrayBase:
    """The operand segment sizes of an op with variadic operands (one
    attribute per count: building one is slow)."""
    return DenseArrayBase.from_list(i32, sizes)


def _single_block(body: Region | Block | None, arg_types: Sequence[Attribute]) -> Region:
    """A single-block region (a new block with `arg_types` when `body` is None)."""
    if body is None:
        body = Block(arg_types=arg_types)
    region = Region(body) if isinstance(body, Block) else body
    if not region.blocks:  # `{ }` parses to a region without blocks
        region.add_block(Block(arg_types=arg_types))
    return region


def _ensure_yield(region: Region) -> None:
    """Append the implicit `hir.yield` unless the block already ends with a
    terminator (a wrong one is left for the verifier to report)."""
    block = region.blocks.first
    if block is None:
        return
    last = block.last_op
    if last is None or not last.has_trait(IsTerminator):
        block.add_op(YieldOp())


@irdl_op_definition
class ForOp(HirOp):
    """`hir.for %i = LB to UB (step S)? { ... }`: a host loop over the static
    range [LB, UB) with `%i : index`; the yield ending the body is implicit."""

    name = "hir.for"
    lb_attr = prop_def(IntegerAttr[I64], prop_name="lb")
    ub_attr = prop_def(IntegerAttr[I64], prop_name="ub")
    step_attr = prop_def(IntegerAttr[I64], prop_name="step")
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))

    def __init__(self, lb: int, ub: int, step: int = 1, body: Region | Block | None = None):
        """`body` defaults to a block with the index argument and a hir.yield."""
        region = _single_block(body, [_INDEX])
        _ensure_yield(region)
        super().__init__(
            properties={"lb": IntegerAttr(lb, i64), "ub": IntegerAttr(ub, i64), "step": IntegerAttr(step, i64)},
            regions=[region],
        )

    @property
    def lb(self) -> int:
        return self.lb_attr.value.data

    @property
    def ub(self) -> int:
        return self.ub_attr.value.data

    @property
    def step(self) -> int:
        return self.step_attr.value.data

    @property
    def induction_var(self) -> SSAValue:
        return self.body.block.args[0]

    @property
    def indices(self) -> range:
        """The values the loop index takes."""
        return range(self.lb, self.ub, self.step)

    def verify_op(self) -> None:
        if self.lb > self.ub:
            raise VerifyException(f"lower bound {self.lb} is greater than upper bound {self.ub}")
        _check_positive(self.step, "step")
        args = self.body.block.args
        if len(args) != 1 or args[0].type != _INDEX:
            raise VerifyException("body must have one index argument (the loop index)")
        last = self.body.block.last_op
        if isinstance(last, YieldOp) and last.values:
            raise VerifyException("the body's hir.yield takes no values")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.induction_var)
        printer.print_string(f" = {self.lb} to {self.ub}")
        if self.step != 1:
            printer.print_string(f" step {self.step}")
        printer.print_string(" ")
        printer.print_region(
            self.body, print_entry_block_args=False, print_empty_block=False, print_block_terminators=False
        )
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> "ForOp":
        index = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        lb = parser.parse_integer(allow_boolean=False)
        parser.parse_keyword("to")
        ub = parser.parse_integer(allow_boolean=False)
        step = 1
        if parser.parse_optional_keyword("step"):
            step = parser.parse_integer(allow_boolean=False)
        body = parser.parse_region((index.resolve(_INDEX),))
        attrs = parser.parse_optional_attr_dict()
        op = cls(lb, ub, step, body)
        op.attributes |= attrs
        return op


@irdl_op_definition
class IfRankOp(HirOp):
    """`%r... = hir.if_rank [R, ...] (-> (T, ...))? { ... hir.yield %v... }`:
    the region runs only on the listed ranks; elsewhere the results are absent.
    Without results the ending hir.yield is implicit."""

    name = "hir.if_rank"
    ranks_attr = prop_def(DenseArrayBase.constr(i64), prop_name="ranks")
    res = var_result_def()
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))

    def __init__(
        self,
        ranks: Sequence[int],
        result_types: Sequence[Attribute] = (),
        body: Region | Block | None = None,
    ):
        """Without results, an implicit hir.yield ends the body; with results
        the caller appends the hir.yield of the values."""
        region = _single_block(body, [])
        if not result_types:
            _ensure_yield(region)
        super().__init__(
            properties={"ranks": rank_array(ranks)}, result_types=[list(result_types)], regions=[region]
        )

    @property
    def ranks(self) -> tuple[int, ...]:
        return _ints(self.ranks_attr)

    def verify_op(self) -> None:
        check_ranks(self.ranks, "ranks")
        if self.body.block.args:
            raise VerifyException("body takes no arguments")
        last = self.body.block.last_op
        if isinstance(last, YieldOp):
            got = [v.type for v in last.values]
            want = [r.type for r in self.results]
            if got != want:
                raise VerifyException(
                    f"hir.yield types ({', '.join(map(str, got))}) do not match the "
                    f"result types ({', '.join(map(str, want))})"
                )

    def print(self, printer: Printer) -> None:
        printer.print_string(" " + _fmt_ints(self.ranks))
        if self.results:
            printer.print_string(" -> (")
            printer.print_list([r.type for r in self.results], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(
            self.body,
            print_entry_block_args=False,
            print_empty_block=False,
            print_block_terminators=bool(self.results),
        )
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> "IfRankOp":
        ranks = _parse_int_list(parser)
        types: list[Attribute] = []
        if parser.parse_optional_punctuation("->"):
            types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        body = parser.parse_region()
        attrs = parser.parse_optional_attr_dict()
        op = cls(ranks, types, body)
        op.attributes |= attrs
        return op


@irdl_op_definition
class ConstantOp(HirOp):
    """`%c = hir.constant N : index`."""

    name = "hir.constant"
    value_attr = prop_def(IntegerAttr[IndexType], prop_name="value")
    result = result_def(_INDEX)

    assembly_format = "$value attr-dict `:` type($result)"

    def __init__(self, value: int):
        super().__init__(properties={"value": IntegerAttr(value, _INDEX)}, result_types=[_INDEX])

    @property
    def value(self) -> int:
        return self.value_attr.value.data


class TeamOp(HirOp):
    """Ops with a `team = [R, ...]` property."""

    team_attr = prop_def(DenseArrayBase.constr(i64), prop_name="team")

    @property
    def team(self) -> tuple[int, ...]:
        return _ints(self.team_attr)

    def verify_op(self) -> None:
        check_ranks(self.team, "team")
        self.verify_team_op()

    def verify_team_op(self) -> None:
        """Checks beyond the team's."""


@irdl_op_definition
class TeamIndexOp(TeamOp):
    """`%p = hir.team_index team = [R, ...] : index`: this rank's position in
    the team (absent on ranks outside it)."""

    name = "hir.team_index"
    result = result_def(_INDEX)

    assembly_format = "`team` `=` custom<RankList>($team) attr-dict `:` type($result)"

    def __init__(self, team: Sequence[int]):
        super().__init__(properties={"team": rank_array(team)}, result_types=[_INDEX])


@irdl_op_definition
class TeamRankOp(TeamOp):
    """`%r = hir.team_rank %p team = [R, ...] : index`: the rank at position %p."""

    name = "hir.team_rank"
    position = operand_def(_INDEX)
    result = result_def(_INDEX)

    assembly_format = "$position `team` `=` custom<RankList>($team) attr-dict `:` type($result)"

    def __init__(self, position: SSAValue | Operation, team: Sequence[int]):
        super().__init__(operands=[position], properties={"team": rank_array(team)}, result_types=[_INDEX])

    def verify_team_op(self) -> None:
        _check_position(self.position, len(self.team), "position")


@irdl_op_definition
class AddModOp(HirOp):
    """`%s = hir.add_mod %a, %b mod N : index`: `(a + b) mod N`, for ring peers."""

    name = "hir.add_mod"
    lhs = operand_def(_INDEX)
    rhs = operand_def(_INDEX)
    modulus_attr = prop_def(IntegerAttr[I64], prop_name="modulus")
    result = result_def(_INDEX)

    assembly_format = "$lhs `,` $rhs `mod` $modulus attr-dict `:` type($result)"

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation, modulus: int):
        super().__init__(
            operands=[lhs, rhs], properties={"modulus": IntegerAttr(modulus, i64)}, result_types=[_INDEX]
        )

    @property
    def modulus(self) -> int:
        return self.modulus_attr.value.data

    def verify_op(self) -> None:
        _check_positive(self.modulus, "modulus N")


@irdl_op_definition
class DivOp(HirOp):
    """`%q = hir.div %a by N : index`: `floor(a / N)`, N > 0 (the device
    block a chunk of a pipeline belongs to)."""

    name = "hir.div"
    lhs = operand_def(_INDEX)
    divisor_attr = prop_def(IntegerAttr[I64], prop_name="divisor")
    result = result_def(_INDEX)

    assembly_format = "$lhs `by` $divisor attr-dict `:` type($result)"

    def __init__(self, lhs: SSAValue | Operation, divisor: int):
        super().__init__(operands=[lhs], properties={"divisor": IntegerAttr(divisor, i64)}, result_types=[_INDEX])

    @property
    def divisor(self) -> int:
        return self.divisor_attr.value.data

    def verify_op(self) -> None:
        _check_positive(self.divisor, "divisor N")


# --------------------------------------------------------------------------
# Streams and events
# --------------------------------------------------------------------------


@irdl_op_definition
class GetCurrentStreamOp(HirOp):
    """`%s = hir.get_current_stream : !hir.stream`."""

    name = "hir.get_current_stream"
    stream = result_def(StreamType)

    assembly_format = "attr-dict `:` type($stream)"

    def __init__(self):
        super().__init__(result_types=[StreamType()])


@irdl_op_definition
class SetCurrentStreamOp(HirOp):
    """`hir.set_current_stream %s : !hir.stream`: later ops enqueue on %s."""

    name = "hir.set_current_stream"
    stream = operand_def(StreamType)

    assembly_format = "$stream attr-dict `:` type($stream)"

    def __init__(self, stream: SSAValue | Operation):
        super().__init__(operands=[stream])


@irdl_op_definition
class StreamForOp(HirOp):
    """`%s = hir.stream_for %i mod N : !hir.stream`: worker stream i mod N of
    a pool of N, distinct from the main stream, created once."""

    name = "hir.stream_for"
    index = operand_def(_INDEX)
    count_attr = prop_def(IntegerAttr[I64], prop_name="count")
    stream = result_def(StreamType)

    assembly_format = "$index `mod` $count attr-dict `:` type($stream)"

    def __init__(self, index: SSAValue | Operation, count: int):
        super().__init__(
            operands=[index], properties={"count": IntegerAttr(count, i64)}, result_types=[StreamType()]
        )

    @property
    def count(self) -> int:
        return self.count_attr.value.data

    def verify_op(self) -> None:
        _check_positive(self.count, "stream count N")


@irdl_op_definition
class SyncStreamOp(HirOp):
    """`hir.sync_stream %s : !hir.stream`: the current stream waits (without
    blocking the host) for the work enqueued on %s so far."""

    name = "hir.sync_stream"
    stream = operand_def(StreamType)

    assembly_format = "$stream attr-dict `:` type($stream)"

    def __init__(self, stream: SSAValue | Operation):
        super().__init__(operands=[stream])


@irdl_op_definition
class RecordEventOp(HirOp):
    """`%e = hir.record_event : !hir.event`: an event recorded on the current stream."""

    name = "hir.record_event"
    event = result_def(EventType)

    assembly_format = "attr-dict `:` type($event)"

    def __init__(self):
        super().__init__(result_types=[EventType()])


@irdl_op_definition
class WaitEventOp(HirOp):
    """`hir.wait_event %e : !hir.event`: the current stream waits for %e."""

    name = "hir.wait_event"
    event = operand_def(EventType)

    assembly_format = "$event attr-dict `:` type($event)"

    def __init__(self, event: SSAValue | Operation):
        super().__init__(operands=[event])


# --------------------------------------------------------------------------
# Communications
# --------------------------------------------------------------------------


def _check_position(v: SSAValue, size: int, what: str) -> None:
    """A team position known statically (hir.constant) must be in the team."""
    value = _constant_value(v)
    if value is not None and not 0 <= value < size:
        raise VerifyException(f"{what} {value} is out of range for a team of {size} ranks")


def _check_rank_ge1(v: SSAValue, what: str) -> tuple[int, ...]:
    shape = shape_of(v)
    if not shape:
        raise VerifyException(f"{what} must have rank >= 1 (it is split along dim 0)")
    return shape


def _check_stacked(small: SSAValue, big: SSAValue, n: int, small_name: str, big_name: str) -> None:
    """`big` is n blocks of `small` stacked along dim 0."""
    s = _check_rank_ge1(small, small_name)
    b = _check_rank_ge1(big, big_name)
    if b[0] != s[0] * n or b[1:] != s[1:]:
        want = [s[0] * n, *s[1:]]
        raise VerifyException(
            f"{big_name} shape {list(b)} must be {want}: {small_name} shape {list(s)} "
            f"with dim 0 times the team size {n}"
        )


def _check_same_shape(a: SSAValue, b: SSAValue, a_name: str, b_name: str) -> None:
    if shape_of(a) != shape_of(b):
        raise VerifyException(
            f"{a_name} shape {list(shape_of(a))} and {b_name} shape {list(shape_of(b))} must be equal"
        )


class CommunicationOp(TeamOp):
    """A communication over `team` with `backend`, writing a destination
    buffer and returning a `!hir.token`; ranks outside the team skip it."""

    backend_attr = prop_def(StringAttr, prop_name="backend")
    token = result_def(TokenType)

    @property
    def backend(self) -> str:
        return self.backend_attr.data

    def verify_team_op(self) -> None:
        _check_choice(self.backend, BACKENDS, "backend")
        tensors = [v for v in self.operands if isinstance(v.type, TensorType)]
        _same_elements(tensors)
        for what in ("root", "peer"):
            position = getattr(self, what, None)  # the index operand, where the op has one
            if isinstance(position, SSAValue):
                _check_position(position, len(self.team), f"{what} position")
        self.verify_shapes()

    def verify_shapes(self) -> None:
        """Shape rules of the communication."""

    @staticmethod
    def _props(team: Sequence[int], backend: str, op: str | None = None) -> dict[str, Attribute]:
        props: dict[str, Attribute] = {"team": rank_array(team), "backend": StringAttr(backend)}
        if op is not None:
            props["op"] = StringAttr(op)
        return props


class ReducingOp(CommunicationOp):
    """Communications that combine values with `op` (sum, max, min, prod)."""

    op_attr = prop_def(StringAttr, prop_name="op")

    @property
    def reduction_op(self) -> str:
        return self.op_attr.data

    def verify_team_op(self) -> None:
        _check_choice(self.reduction_op, REDUCTION_OPS, "op")
        super().verify_team_op()


_TEAM_BACKEND = "`team` `=` custom<RankList>($team) `backend` `=` custom<Word>($backend) attr-dict `:` functional-type(operands, results)"


@irdl_op_definition
class AllgatherOp(CommunicationOp):
    """`%out` is the team's inputs concatenated along dim 0 in team order."""

    name = "hir.allgather"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output " + _TEAM_BACKEND

    def __init__(self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[input, output], properties=self._props(team, backend), result_types=[TokenType()])

    def verify_shapes(self) -> None:
        _check_stacked(self.input, self.output, len(self.team), "input", "output")


@irdl_op_definition
class BroadcastOp(CommunicationOp):
    """In place: the root's `%buf` is copied into every member's `%buf`."""

    name = "hir.broadcast"
    buffer = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$buffer `root` $root " + _TEAM_BACKEND

    def __init__(self, buffer: SSAValue | Operation, root: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[buffer, root], properties=self._props(team, backend), result_types=[TokenType()])


@irdl_op_definition
class ScatterOp(CommunicationOp):
    """The root's `%in` split along dim 0; block i to team position i."""

    name = "hir.scatter"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$input `,` $output `root` $root " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        output: SSAValue | Operation,
        root: SSAValue | Operation,
        team: Sequence[int],
        backend: str,
    ):
        super().__init__(operands=[input, output, root], properties=self._props(team, backend), result_types=[TokenType()])

    def verify_shapes(self) -> None:
        _check_stacked(self.output, self.input, len(self.team), "output", "input")


@irdl_op_definition
class GatherOp(CommunicationOp):
    """The team's `%in` concatenated along dim 0 into the root's `%out`."""

    name = "hir.gather"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$input `,` $output `root` $root " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        output: SSAValue | Operation,
        root: SSAValue | Operation,
        team: Sequence[int],
        backend: str,
    ):
        super().__init__(operands=[input, output, root], properties=self._props(team, backend), result_types=[TokenType()])

    def verify_shapes(self) -> None:
        _check_stacked(self.input, self.output, len(self.team), "input", "output")


@irdl_op_definition
class ReduceOp(ReducingOp):
    """The team's `%in` combined with `op` into the root's `%out`."""

    name = "hir.reduce"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$input `,` $output `root` $root `op` `=` custom<Word>($op) " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        output: SSAValue | Operation,
        root: SSAValue | Operation,
        team: Sequence[int],
        op: str,
        backend: str,
    ):
        super().__init__(
            operands=[input, output, root], properties=self._props(team, backend, op), result_types=[TokenType()]
        )

    def verify_shapes(self) -> None:
        _check_same_shape(self.input, self.output, "input", "output")


@irdl_op_definition
class AllreduceOp(ReducingOp):
    """The team's `%in` combined with `op` into every `%out` (`%in` may be `%out`)."""

    name = "hir.allreduce"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output `op` `=` custom<Word>($op) " + _TEAM_BACKEND

    def __init__(
        self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], op: str, backend: str
    ):
        super().__init__(operands=[input, output], properties=self._props(team, backend, op), result_types=[TokenType()])

    def verify_shapes(self) -> None:
        _check_same_shape(self.input, self.output, "input", "output")


@irdl_op_definition
class ReduceScatterOp(ReducingOp):
    """Reduce the team's `%in`, then block i of dim 0 to team position i."""

    name = "hir.reduce_scatter"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output `op` `=` custom<Word>($op) " + _TEAM_BACKEND

    def __init__(
        self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], op: str, backend: str
    ):
        super().__init__(operands=[input, output], properties=self._props(team, backend, op), result_types=[TokenType()])

    def verify_shapes(self) -> None:
        _check_stacked(self.output, self.input, len(self.team), "output", "input")


@irdl_op_definition
class AlltoallOp(CommunicationOp):
    """Block j of dim 0 of `%in` goes to position j; `%out` holds the blocks
    received, in team order, along dim 0."""

    name = "hir.alltoall"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output " + _TEAM_BACKEND

    def __init__(self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[input, output], properties=self._props(team, backend), result_types=[TokenType()])

    def verify_shapes(self) -> None:
        _check_same_shape(self.input, self.output, "input", "output")
        shape = _check_rank_ge1(self.input, "input")
        if shape[0] % len(self.team):
            raise VerifyException(
                f"dim 0 of input shape {list(shape)} must be divisible by the team size {len(self.team)}"
            )


@irdl_op_definition
class SendOp(CommunicationOp):
    """`%buf` to the member at team position `%peer`."""

    name = "hir.send"
    buffer = operand_def(_TENSOR)
    peer = operand_def(_INDEX)

    assembly_format = "$buffer `to` $peer " + _TEAM_BACKEND

    def __init__(self, buffer: SSAValue | Operation, peer: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[buffer, peer], properties=self._props(team, backend), result_types=[TokenType()])


@irdl_op_definition
class RecvOp(CommunicationOp):
    """`%buf` from the member at team position `%peer`."""

    name = "hir.recv"
    buffer = operand_def(_TENSOR)
    peer = operand_def(_INDEX)

    assembly_format = "$buffer `from` $peer " + _TEAM_BACKEND

    def __init__(self, buffer: SSAValue | Operation, peer: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[buffer, peer], properties=self._props(team, backend), result_types=[TokenType()])


@irdl_op_definition
class BarrierOp(CommunicationOp):
    """`%t = hir.barrier team = [..] backend = B : !hir.token`: a
    stream-ordered fence across the team: work every member enqueued on its
    current stream before the barrier is complete before work any member
    enqueues after it (once the token is waited for) starts. Used where a
    member reads a peer's shared buffer (`hir.get`) that the peer wrote."""

    name = "hir.barrier"

    assembly_format = "`team` `=` custom<RankList>($team) `backend` `=` custom<Word>($backend) attr-dict `:` type($token)"

    def __init__(self, team: Sequence[int], backend: str):
        super().__init__(properties=self._props(team, backend), result_types=[TokenType()])


@irdl_op_definition
class WaitOp(HirOp):
    """`hir.wait %t : !hir.token`: the current stream (and, on cpu, the host)
    waits for the communication or copy of %t."""

    name = "hir.wait"
    token = operand_def(TokenType)

    assembly_format = "$token attr-dict `:` type($token)"

    def __init__(self, token: SSAValue | Operation):
        self._init(operands=[token])


# --------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------


@irdl_op_definition
class SelectOp(HirOp):
    """`%v = hir.select %buf [%i] dim = D : (T, index) -> T2`: index %i of
    dim D, which is dropped (an aliasing view)."""

    name = "hir.select"
    source = operand_def(_TENSOR)
    index = operand_def(_INDEX)
    dim_attr = prop_def(IntegerAttr[I64], prop_name="dim")
    result = result_def(_TENSOR)

    assembly_format = "$source ` ` `[` $index `]` `dim` `=` $dim attr-dict `:` functional-type(operands, results)"

    def __init__(self, source: SSAValue | Operation, index: SSAValue | Operation, dim: int):
        src = SSAValue.get(source)
        t = src.type
        assert isinstance(t, TensorType)
        result_type = TensorType(t.element_type, select_shape(t.get_shape(), dim))
        super().__init__(operands=[src, index], properties={"dim": IntegerAttr(dim, i64)}, result_types=[result_type])

    @property
    def dim(self) -> int:
        return self.dim_attr.value.data

    def verify_op(self) -> None:
        shape = shape_of(self.source)
        _check_dim(shape, self.dim)
        _check_view_result(self.source, self.result, select_shape(shape, self.dim))
        value = _constant_value(self.index)
        if value is not None and not 0 <= value < shape[self.dim]:
            raise VerifyException(f"index {value} is out of range for dim {self.dim} of extent {shape[self.dim]}")


@irdl_op_definition
class ChunkOp(HirOp):
    """`%v = hir.chunk %buf [%i] dim = D chunks = N : (T, index) -> T2`: the
    i-th of N equal blocks along dim D, which keeps extent / N (a view)."""

    name = "hir.chunk"
    source = operand_def(_TENSOR)
    index = operand_def(_INDEX)
    dim_attr = prop_def(IntegerAttr[I64], prop_name="dim")
    chunks_attr = prop_def(IntegerAttr[I64], prop_name="chunks")
    result = result_def(_TENSOR)

    assembly_format = (
        "$source ` ` `[` $index `]` `dim` `=` $dim `chunks` `=` $chunks attr-dict `:` functional-type(operands, results)"
    )

    def __init__(self, source: SSAValue | Operation, index: SSAValue | Operation, dim: int, chunks: int):
        src = SSAValue.get(source)
        t = src.type
        assert isinstance(t, TensorType)
        result_type = TensorType(t.element_type, chunk_shape(t.get_shape(), dim, chunks))
        super().__init__(
            operands=[src, index],
            properties={"dim": IntegerAttr(dim, i64), "chunks": IntegerAttr(chunks, i64)},
            result_types=[result_type],
        )

    @property
    def dim(self) -> int:
        return self.dim_attr.value.data

    @property
    def chunks(self) -> int:
        return self.chunks_attr.value.data

    def verify_op(self) -> None:
        shape = shape_of(self.source)
        _check_dim(shape, self.dim)
        _check_positive(self.chunks, "chunks")
        if shape[self.dim] % self.chunks:
            raise VerifyException(
                f"extent {shape[self.dim]} of dim {self.dim} is not divisible by chunks = {self.chunks}"
            )
        _check_view_result(self.source, self.result, chunk_shape(shape, self.dim, self.chunks))
        value = _constant_value(self.index)
        if value is not None and not 0 <= value < self.chunks:
            raise VerifyException(f"chunk index {value} is out of range for chunks = {self.chunks}")


def _check_view_result(source: SSAValue, result: SSAValue, want: tuple[int, ...]) -> None:
    if shape_of(result) != want:
        raise VerifyException(f"result shape {list(shape_of(result))} does not match the expected {list(want)}")
    if element_type_of(result) != element_type_of(source):
        raise VerifyException(f"result element type {element_type_of(result)} does not match {element_type_of(source)}")


@irdl_op_definition
class ViewOp(HirOp):
    """`%v = hir.view %buf : T -> T2`: the same contiguous buffer with another
    shape (same number of elements)."""

    name = "hir.view"
    source = operand_def(_TENSOR)
    result = result_def(_TENSOR)

    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, shape: Sequence[int]):
        src = SSAValue.get(source)
        t = src.type
        assert isinstance(t, TensorType)
        self._init(operands=[src], result_types=[TensorType(t.element_type, shape)])

    def verify_op(self) -> None:
        a, b = shape_of(self.source), shape_of(self.result)
        if math.prod(a) != math.prod(b):
            raise VerifyException(
                f"cannot view {list(a)} ({math.prod(a)} elements) as {list(b)} ({math.prod(b)} elements)"
            )
        if element_type_of(self.result) != element_type_of(self.source):
            raise VerifyException(f"result element type {element_type_of(self.result)} does not match {element_type_of(self.source)}")


# --------------------------------------------------------------------------
# Compute
# --------------------------------------------------------------------------


def _check_out_shape(out: SSAValue, rule, *args) -> None:
    try:
        want = tuple(rule(*args))
    except shapes.ShapeError as e:
        raise VerifyException(str(e)) from None
    if shape_of(out) != want:
        raise VerifyException(f"output shape {list(shape_of(out))} does not match the expected {list(want)}")


def _check_acc(acc: SSAValue | None, out: SSAValue) -> None:
    """The accumulator is added to the GEMM's result: it has out's type."""
    if acc is None:
        return
    if element_type_of(acc) != element_type_of(out):
        raise VerifyException(
            f"acc element type {element_type_of(acc)} does not match the output element type {element_type_of(out)}"
        )
    if shape_of(acc) != shape_of(out):
        raise VerifyException(f"acc shape {list(shape_of(acc))} does not match the output shape {list(shape_of(out))}")


@irdl_op_definition
class MatmulOp(HirOp):
    """`hir.matmul %a, %b, %out (acc %c)? : Ta, Tb, Tout(, Tacc)?`:
    `torch.matmul(a, b) (+ c)` written into `%out`. The accumulator (out's
    type; `%out` itself or another buffer) is added in the GEMM's epilogue
    on cuda, so a running sum needs no separate add."""

    name = "hir.matmul"
    lhs = operand_def(_TENSOR)
    rhs = operand_def(_TENSOR)
    out = operand_def(_TENSOR)
    acc = opt_operand_def(_TENSOR)

    assembly_format = (
        "$lhs `,` $rhs `,` $out (`acc` $acc^)? attr-dict "
        "`:` type($lhs) `,` type($rhs) `,` type($out) (`,` type($acc)^)?"
    )

    def __init__(
        self,
        lhs: SSAValue | Operation,
        rhs: SSAValue | Operation,
        out: SSAValue | Operation,
        acc: SSAValue | Operation | None = None,
    ):
        super().__init__(operands=[lhs, rhs, out, [acc] if acc is not None else []])

    def verify_op(self) -> None:
        _check_acc(self.acc, self.out)
        _same_elements([self.lhs, self.rhs, self.out])
        _check_out_shape(self.out, shapes.matmul, shape_of(self.lhs), shape_of(self.rhs))


@irdl_op_definition
class LinearOp(HirOp):
    """`hir.linear %x, %w, (%bias,)? %out (acc %c)? {activation = "gelu_tanh"}? : Tx, Tw, (Tb,)? Tout(, Tacc)?`:
    `F.linear(x, w, bias) (+ c)` written into `%out` (w is [out, in]); the
    accumulator is as hir.matmul's. `activation = "gelu_tanh"` applies
    `gelu(approximate="tanh")` to the result in the GEMM's epilogue (the
    activation cuBLASLt's epilogues have), without an accumulator."""

    name = "hir.linear"
    input = operand_def(_TENSOR)
    weight = operand_def(_TENSOR)
    bias = opt_operand_def(_TENSOR)
    out = operand_def(_TENSOR)
    acc = opt_operand_def(_TENSOR)
    activation = opt_attr_def(StringAttr)

    ACTIVATIONS: ClassVar[tuple[str, ...]] = ("gelu_tanh",)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        input: SSAValue | Operation,
        weight: SSAValue | Operation,
        out: SSAValue | Operation,
        bias: SSAValue | Operation | None = None,
        acc: SSAValue | Operation | None = None,
        activation: str | None = None,
    ):
        super().__init__(
            operands=[input, weight, [bias] if bias is not None else [], out, [acc] if acc is not None else []],
            attributes={"activation": StringAttr(activation)} if activation is not None else {},
        )

    @property
    def activation_name(self) -> str | None:
        """The epilogue's activation ("gelu_tanh"), None without one."""
        return self.activation.data if self.activation is not None else None

    def verify_op(self) -> None:
        _check_acc(self.acc, self.out)
        if self.activation is not None:
            if self.activation.data not in self.ACTIVATIONS:
                raise VerifyException(
                    f"activation must be one of {', '.join(self.ACTIVATIONS)}, got \"{self.activation.data}\""
                )
            if self.acc is not None:
                raise VerifyException("an activation epilogue takes no accumulator (acc)")
        gemm = [self.input, self.weight, *([self.bias] if self.bias is not None else []), self.out]
        _same_elements(gemm)
        bias = shape_of(self.bias) if self.bias is not None else None
        _check_out_shape(self.out, shapes.linear, shape_of(self.input), shape_of(self.weight), bias)

    def print(self, printer: Printer) -> None:
        gemm = [self.input, self.weight, *([self.bias] if self.bias is not None else []), self.out]
        printer.print_string(" ")
        printer.print_list(gemm, printer.print_operand)
        if self.acc is not None:
            printer.print_string(" acc ")
            printer.print_operand(self.acc)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_list([v.type for v in self.operands], printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> "LinearOp":
        pos = parser.pos
        names: list[UnresolvedOperand] = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand
        )
        acc = parser.parse_unresolved_operand() if parser.parse_optional_keyword("acc") else None
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        n = len(names) + (acc is not None)
        if len(names) not in (3, 4) or len(types) != n:
            parser.raise_error(
                f"hir.linear takes 3 or 4 operands (input, weight, bias?, out) with one type each, got {n} "
                f"operands and {len(types)} types (an `acc %c` after out takes one more type, after out's)",
                pos,
                parser.pos,
            )
        ops = parser.resolve_operands(names + ([acc] if acc is not None else []), types, pos)
        acc_v = ops.pop() if acc is not None else None
        op = cls(ops[0], ops[1], ops[-1], ops[2] if len(ops) == 4 else None, acc_v)
        op.attributes |= attrs
        return op


@irdl_op_definition
class CopyOp(HirOp):
    """`hir.copy %src, %dst : Tsrc, Tdst`: element copy between equal shapes
    (converting the element type when they differ)."""

    name = "hir.copy"
    source = operand_def(_TENSOR)
    dest = operand_def(_TENSOR)

    assembly_format = "$source `,` $dest attr-dict `:` type($source) `,` type($dest)"

    def __init__(self, source: SSAValue | Operation, dest: SSAValue | Operation):
        super().__init__(operands=[source, dest])

    def verify_op(self) -> None:
        _check_same_shape(self.source, self.dest, "source", "destination")


@irdl_op_definition
class LaunchOp(HirOp):
    """`hir.launch ins(%a : Ta) outs(%o : To) { ^bb0(%x: Ta): ... hir.yield %r : To }`:
    local compute described by fusion tensor ops on the region's arguments
    (bound to `ins`); the yielded values are written into the `outs` buffers.
    The region is isolated: it uses only its arguments."""

    name = "hir.launch"
    ins = var_operand_def(_TENSOR)
    outs = var_operand_def(_TENSOR)
    body = region_def("single_block")

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "(`ins` `(` $ins^ `:` type($ins) `)`)? (`outs` `(` $outs^ `:` type($outs) `)`)? $body attr-dict"
    )

    def __init__(
        self,
        ins: Sequence[SSAValue | Operation],
        outs: Sequence[SSAValue | Operation],
        body: Region | Block | None = None,
    ):
        """`body` defaults to an empty block with one argument per input; the
        caller adds the fusion ops and the hir.yield."""
        ins_v = [SSAValue.get(v) for v in ins]
        region = _single_block(body, [v.type for v in ins_v])
        sizes = {AttrSizedOperandSegments.attribute_name: _segment_sizes(len(ins_v), len(outs))}
        self._init(operands=[*ins_v, *outs], properties=sizes, regions=[region])

    def verify_op(self) -> None:
        from fuserc.dialects.fusion import TENSOR_OPS

        block = self.body.block
        got = [a.type for a in block.args]
        want = [v.type for v in self.ins]
        if got != want:
            raise VerifyException(
                f"region argument types ({', '.join(map(str, got))}) do not match the ins types "
                f"({', '.join(map(str, want))})"
            )
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("region must end with hir.yield")
        got = [v.type for v in last.values]
        want = [v.type for v in self.outs]
        if got != want:
            raise VerifyException(
                f"hir.yield types ({', '.join(map(str, got))}) do not match the outs types "
                f"({', '.join(map(str, want))})"
            )
        for op in block.ops:
            if op is not last and not isinstance(op, TENSOR_OPS):
                raise VerifyException(f"region may contain only fusion tensor ops, got '{op.name}'")
            for v in op.operands:
                if not self._defines(v):
                    raise VerifyException(
                        f"'{op.name}' in the region uses a value defined outside it; pass it through ins(...)"
                    )
            for r in op.results:
                check_buffer_type(r.type)

    def _defines(self, v: SSAValue) -> bool:
        owner = v.owner
        op = owner.parent_op() if isinstance(owner, Block) else owner
        return op is not None and self.is_ancestor(op)


# --------------------------------------------------------------------------
# Peer-to-peer
# --------------------------------------------------------------------------


@irdl_op_definition
class ShareOp(TeamOp):
    """`%h = hir.share %buf team = [..] : T -> !hir.handle`: exchange the memory
    handles of `%buf` (one buffer of this type per member) across the team;
    done once per cached allocation, then reused."""

    name = "hir.share"
    buffer = operand_def(_TENSOR)
    handle = result_def(HandleType)

    assembly_format = "$buffer `team` `=` custom<RankList>($team) attr-dict `:` type($buffer) `->` type($handle)"

    def __init__(self, buffer: SSAValue | Operation, team: Sequence[int]):
        super().__init__(operands=[buffer], properties={"team": rank_array(team)}, result_types=[HandleType()])


class _PeerCopyOp(HirOp):
    """hir.put / hir.get: a one-sided copy through a shared handle, of the
    whole shared buffer or, with `block %i of N`, of its i-th of N equal
    blocks along dim 0."""

    backend_attr = prop_def(StringAttr, prop_name="backend")
    chunks_attr = opt_prop_def(IntegerAttr[I64], prop_name="chunks")
    token = result_def(TokenType)

    @property
    def backend(self) -> str:
        return self.backend_attr.data

    @property
    def chunks(self) -> int | None:
        """N of `block %i of N` (None: the whole shared buffer)."""
        return self.chunks_attr.value.data if self.chunks_attr is not None else None

    @staticmethod
    def _props(backend: str, chunks: int | None) -> dict[str, Attribute]:
        props: dict[str, Attribute] = {"backend": StringAttr(backend)}
        if chunks is not None:
            props["chunks"] = IntegerAttr(chunks, i64)
        return props

    def local_buffer(self) -> SSAValue:
        raise NotImplementedError

    def verify_op(self) -> None:
        _check_choice(self.backend, BACKENDS, "backend")
        if (self.block is None) != (self.chunks is None):
            raise VerifyException("`block %i` and `of N` go together")
        if self.chunks is not None:
            _check_positive(self.chunks, "block count N")
            value = _constant_value(self.block) if self.block is not None else None
            if value is not None and not 0 <= value < self.chunks:
                raise VerifyException(f"block index {value} is out of range for {self.chunks} blocks")
        _verify_peer_copy(self.local_buffer(), self.handle, self.peer, self.chunks)


_PEER_COPY_TAIL = (
    "(`block` $block^ `of` $chunks)? `backend` `=` custom<Word>($backend) attr-dict "
    "`:` functional-type(operands, results)"
)


@irdl_op_definition
class PutOp(_PeerCopyOp):
    """`%t = hir.put %src, %h, %peer (block %i of N)? backend = B : (T, !hir.handle, index(, index)?) -> !hir.token`:
    copy `%src` into the shared buffer of team position `%peer` (or into its
    i-th of N blocks along dim 0)."""

    name = "hir.put"
    source = operand_def(_TENSOR)
    handle = operand_def(HandleType)
    peer = operand_def(_INDEX)
    block = opt_operand_def(_INDEX)

    assembly_format = "$source `,` $handle `,` $peer " + _PEER_COPY_TAIL

    def __init__(
        self,
        source: SSAValue | Operation,
        handle: SSAValue | Operation,
        peer: SSAValue | Operation,
        backend: str,
        block: SSAValue | Operation | None = None,
        chunks: int | None = None,
    ):
        super().__init__(
            operands=[source, handle, peer, [block] if block is not None else []],
            properties=self._props(backend, chunks),
            result_types=[TokenType()],
        )

    def local_buffer(self) -> SSAValue:
        return self.source


@irdl_op_definition
class GetOp(_PeerCopyOp):
    """`%t = hir.get %h, %peer, %dst (block %i of N)? backend = B : (!hir.handle, index, T(, index)?) -> !hir.token`:
    copy the shared buffer of team position `%peer` (or its i-th of N blocks
    along dim 0) into `%dst`."""

    name = "hir.get"
    handle = operand_def(HandleType)
    peer = operand_def(_INDEX)
    dest = operand_def(_TENSOR)
    block = opt_operand_def(_INDEX)

    assembly_format = "$handle `,` $peer `,` $dest " + _PEER_COPY_TAIL

    def __init__(
        self,
        handle: SSAValue | Operation,
        peer: SSAValue | Operation,
        dest: SSAValue | Operation,
        backend: str,
        block: SSAValue | Operation | None = None,
        chunks: int | None = None,
    ):
        super().__init__(
            operands=[handle, peer, dest, [block] if block is not None else []],
            properties=self._props(backend, chunks),
            result_types=[TokenType()],
        )

    def local_buffer(self) -> SSAValue:
        return self.dest


def _verify_peer_copy(local: SSAValue, handle: SSAValue, peer: SSAValue, chunks: int | None = None) -> None:
    """When the handle's hir.share is in sight: the local buffer has the
    shared buffer's shape (or that of one of its `chunks` blocks along dim 0)
    and element type, and a static peer position lies inside its team."""
    share = handle.owner
    if not isinstance(share, ShareOp):
        return
    shared = shape_of(share.buffer)
    if chunks is not None:
        if not shared or shared[0] % chunks:
            raise VerifyException(
                f"the shared buffer {list(shared)} cannot be cut into {chunks} blocks along dim 0"
            )
        want = chunk_shape(shared, 0, chunks)
        if shape_of(local) != want:
            raise VerifyException(
                f"local buffer shape {list(shape_of(local))} must be {list(want)}: one of {chunks} blocks of "
                f"the shared buffer {list(shared)} along dim 0"
            )
    else:
        _check_same_shape(local, share.buffer, "local buffer", "shared buffer")
    _same_elements([local, share.buffer])
    _check_position(peer, len(share.team), "peer position")


# --------------------------------------------------------------------------
# Host programs
# --------------------------------------------------------------------------


def is_host_program(func_op: Operation) -> bool:
    """Whether `func_op` is a `func.func` carrying the `hir.host` unit attribute."""
    return isinstance(func_op, FuncOp) and HOST_ATTR in func_op.attributes


def mark_host_program(func_op: FuncOp) -> None:
    """Set the `hir.host` unit attribute."""
    func_op.attributes[HOST_ATTR] = UnitAttr()


def global_type(func_op: FuncOp, i: int, result: bool = False) -> TensorType | None:
    """The `hir.global` type of argument (or result) `i`: the global tensor
    type with its sharding; None when absent."""
    attrs = func_op.res_attrs if result else func_op.arg_attrs
    if attrs is None or i >= len(attrs.data):
        return None
    value = attrs.data[i].data.get(GLOBAL_ATTR)
    return value if isinstance(value, TensorType) else None


def set_global_type(func_op: FuncOp, i: int, t: TensorType, result: bool = False) -> None:
    """Set the `hir.global` type of argument (or result) `i`, keeping the
    other attributes of that argument."""
    n = len(func_op.function_type.outputs.data if result else func_op.function_type.inputs.data)
    old = func_op.res_attrs if result else func_op.arg_attrs
    dicts = list(old.data) if old is not None else [DictionaryAttr({}) for _ in range(n)]
    dicts[i] = DictionaryAttr({**dicts[i].data, GLOBAL_ATTR: t})
    if result:
        func_op.res_attrs = ArrayAttr(dicts)
    else:
        func_op.arg_attrs = ArrayAttr(dicts)


COMMUNICATION_OPS: tuple[type[CommunicationOp], ...] = (
    AllgatherOp, BroadcastOp, ScatterOp, GatherOp, ReduceOp,
    AllreduceOp, ReduceScatterOp, AlltoallOp, SendOp, RecvOp, BarrierOp,
)  # fmt: skip
"""Team communications: each has `team`, `backend` and returns a token."""

PEER_COPY_OPS: tuple[type[HirOp], ...] = (PutOp, GetOp)
"""One-sided copies through shared handles; they also return a token."""

VIEW_OPS: tuple[type[HirOp], ...] = (SelectOp, ChunkOp, ViewOp)
"""Ops whose result aliases their source buffer."""

COMPUTE_OPS: tuple[type[HirOp], ...] = (MatmulOp, LinearOp, CopyOp, LaunchOp)
"""Local compute writing into destination buffers."""

Hir = Dialect(
    "hir",
    [
        AllocOp, DeallocOp, ForOp, IfRankOp, YieldOp, ConstantOp, TeamIndexOp, AddModOp, TeamRankOp,
        GetCurrentStreamOp, SetCurrentStreamOp, StreamForOp, SyncStreamOp, RecordEventOp, WaitEventOp,
        DivOp, *COMMUNICATION_OPS, WaitOp,
        SelectOp, ChunkOp, ViewOp,
        MatmulOp, LinearOp, CopyOp, LaunchOp,
        ShareOp, PutOp, GetOp,
    ],
    [TokenType, StreamType, EventType, HandleType],
)  # fmt: skip

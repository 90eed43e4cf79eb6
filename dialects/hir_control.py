"""The hir dialect's control flow (loops, rank regions, index arithmetic) and streams and events.

Part of the hir dialect (`fuserc.dialects.hir` gathers the ops and defines the dialect; docs/hir.md)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    i32,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Operation,
    Region,
    SSAValue,
)
from xdsl.irdl import (
    opt_prop_def,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, SingleBlockImplicitTerminator
from xdsl.utils.exceptions import VerifyException

from fuserc.dialects.hir_core import (
    _INDEX,
    EventType,
    HirOp,
    STREAM,
    StreamType,
    _check_position,
    _check_positive,
    _ints,
    RankSetAttr,
    Ranks,
    check_ranks,
    format_runs,
    i64_attr,
    parse_runs,
    rank_array,
    rank_runs,
    team_of,
    team_props,
)
from fuserc.dialects.hir_team import Team

# --------------------------------------------------------------------------
# Control
# --------------------------------------------------------------------------


def _launch_op() -> type[Operation]:
    """hir.launch, which hir_compute defines (it needs this module's yield)."""
    from fuserc.dialects.hir_compute import LaunchOp

    return LaunchOp


@irdl_op_definition
class YieldOp(HirOp):
    """`hir.yield %v... : T...`: ends the region of hir.for, hir.if_rank and
    hir.launch, giving the region's values."""

    name = "hir.yield"
    values = var_operand_def()

    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(ForOp, IfRankOp, _launch_op())))

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
            properties={"lb": i64_attr(lb), "ub": i64_attr(ub), "step": i64_attr(step)},
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
    Without results the ending hir.yield is implicit. The ranks are a
    `Ranks` (runs: `[0 to 4096]`), however many devices they cover."""

    name = "hir.if_rank"
    ranks_attr = prop_def(RankSetAttr, prop_name="ranks")
    res = var_result_def()
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))

    def __init__(
        self,
        ranks: Sequence[int] | Ranks,
        result_types: Sequence[Attribute] = (),
        body: Region | Block | None = None,
    ):
        """Without results, an implicit hir.yield ends the body; with results
        the caller appends the hir.yield of the values."""
        region = _single_block(body, [])
        if not result_types:
            _ensure_yield(region)
        super().__init__(
            properties={"ranks": RankSetAttr.get(Ranks.of(ranks))}, result_types=[list(result_types)], regions=[region]
        )

    @property
    def ranks(self) -> Ranks:
        return self.ranks_attr.model

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
        printer.print_string(" " + str(self.ranks))
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
        ranks = Ranks.of(parse_runs(parser), runs=True)
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
    """Ops with a `team = [R, ...]` property, and optionally `translated
    [N step S, ...]` (the `translates` property): one op for each team of
    the family, each rank taking part in its own (`Team`)."""

    team_attr = prop_def(DenseArrayBase.constr(i64), prop_name="team")
    translates_attr = opt_prop_def(DenseArrayBase.constr(i64), prop_name="translates")

    @property
    def team(self) -> Team:
        """The team (a `Team`: the base's ranks, with its translates), made
        once per pair of properties."""
        attrs = (self.team_attr, self.translates_attr)
        cached = self.__dict__.get("_team")
        if cached is None or cached[0] is not attrs[0] or cached[1] is not attrs[1]:
            cached = (*attrs, team_of(*attrs))
            self.__dict__["_team"] = cached
        return cached[2]

    def verify_op(self) -> None:
        check_ranks(self.team, "team")
        if self.translates_attr is not None:
            flat = _ints(self.translates_attr)
            if not flat or len(flat) % 2:
                raise VerifyException(f"translates must be (count, stride) pairs, got {list(flat)}")
            why = self.team.check()
            if why is not None:
                raise VerifyException(f"the teams of team = {format_runs(rank_runs(self.team))}{self.team.translates_text()} are not disjoint: {why}")
        self.verify_team_op()

    def verify_team_op(self) -> None:
        """Checks beyond the team's."""


@irdl_op_definition
class TeamIndexOp(TeamOp):
    """`%p = hir.team_index team = [R, ...] : index`: this rank's position in
    the team (absent on ranks outside it)."""

    name = "hir.team_index"
    result = result_def(_INDEX)

    assembly_format = "`team` `=` custom<TeamList>($team, $translates) attr-dict `:` type($result)"

    def __init__(self, team: Sequence[int]):
        super().__init__(properties=team_props(team), result_types=[_INDEX])


@irdl_op_definition
class TeamRankOp(TeamOp):
    """`%r = hir.team_rank %p team = [R, ...] : index`: the rank at position %p."""

    name = "hir.team_rank"
    position = operand_def(_INDEX)
    result = result_def(_INDEX)

    assembly_format = "$position `team` `=` custom<TeamList>($team, $translates) attr-dict `:` type($result)"

    def __init__(self, position: SSAValue | Operation, team: Sequence[int]):
        super().__init__(operands=[position], properties=team_props(team), result_types=[_INDEX])

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
            operands=[lhs, rhs], properties={"modulus": i64_attr(modulus)}, result_types=[_INDEX]
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
        super().__init__(operands=[lhs], properties={"divisor": i64_attr(divisor)}, result_types=[_INDEX])

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
        super().__init__(result_types=[STREAM])


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
            operands=[index], properties={"count": i64_attr(count)}, result_types=[STREAM]
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

"""Dispatch and combine: the tokens of a mixture of experts moved to their
experts' slots and back, the form expert parallelism is written in.

- `fusion.dispatch %x, %ids experts = E`: x [T, H] (or one row per choice,
  [T, k, H]) and the chosen experts ids [T, k] (i64) -> [E, T, H]: expert
  e's slot holds the rows of the (token, choice) pairs routed to it, in
  token order from row 0, zeros after. An expert gets at most T rows when
  each token's k ids are distinct (as top-k's are): the layer is dropless.
- `fusion.combine %ye, %ids`: [E, T, H] slots and ids [T, k] -> [T, k, H],
  each pair's row read back from its expert's slot (dispatch's transpose).
- Token groups: ids [G, T, k] (x [G, T, (k,) H]) dispatch each group on
  its own into [E, G, T, H] slots and [E, G] counts; combine takes them
  back to [G, T, k, H]. Split over a mesh's other axis, each group is an
  expert-parallel team of its own (a 2-D mesh [dp, ep]).

The experts' GEMMs run on the slots by `grouped_matmul`'s batched form
([E, T, K] x [E, K, N] with each expert's row count: dispatch's optional
second result, `bincount(ids)`), which multiplies only the rows an expert
holds.

Sharding: the tokens of x and ids and the experts of the slots share one
split (token dim MAP expert dim). Tokens split over a mesh axis, experts
split over the same axis, is expert parallelism, lowered to all-to-alls by
passes/expert_parallel.py: the counts per (rank, expert) are exchanged
first (`hir.alltoall`), then `hir.alltoallv` moves each pair's row to the
rank owning its expert (combine: back), into a buffer bounded by the
global row count. Derivatives: each op's is the other.
"""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, TensorType, i64
from xdsl.irdl import irdl_op_definition, operand_def, opt_result_def, prop_def, result_def

from fuserc import shapes
from fuserc.diagnostics import Diagnostic, error_at
from fuserc.dialects.fusion import TENSOR, FusionOp, Shape, shape_of
from fuserc.dialects.interfaces import DROP, MAP, NONE, EvalContext, OpMap, Target


def _check_ids(ids: Shape, tokens: Shape, what: str) -> None:
    if len(ids) != len(tokens) + 1 or tuple(ids[:-1]) != tuple(tokens):
        raise shapes.ShapeError(f"fusion.{what}: ids must be {[*tokens, 'k']} (a row of expert ids per token), got {list(ids)}")


class _RoutedOp(FusionOp):
    """An op moving rows between tokens and their experts' slots."""

    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64")
    ALONE: ClassVar[bool] = True
    """A region of its own: split tokens lower it to all-to-alls."""

    def torch_alone(self) -> bool:
        """Data-dependent placement: run op by op with PyTorch."""
        return True


@irdl_op_definition
class DispatchOp(_RoutedOp):
    """Each (token, choice) pair's row into its expert's slot (module
    docstring): [T, H] or [T, k, H] with ids [T, k] -> [E, T, H], and
    optionally each expert's row count [E]."""

    name = "fusion.dispatch"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "ids")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("experts", "int"),)
    RESULTS: ClassVar[tuple[str, ...]] = ("result", "counts?")
    input = operand_def(TENSOR)
    ids = operand_def(TENSOR)
    result = result_def(TENSOR)
    counts = opt_result_def(TENSOR)
    experts = prop_def(IntegerAttr[I64])

    @classmethod
    def more_results(cls, operands: Any, kw: dict[str, Any], first: TensorType) -> list[tuple[Shape, Any]]:
        """The optional second result: each expert's row count [E] (i64;
        [E, G] with token groups), split like the experts (and groups): what
        each rank received, with expert parallelism: no collective of its
        own."""
        return [(tuple(first.get_shape()[:-2]), i64)]

    def more_shardings(self, first: Any) -> list[Any]:
        return [first.placement().with_dims(list(first.placement().dims[:-2]))]

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        x, ids = s
        g = len(ids) - 2  # a leading dimension of token groups
        if g not in (0, 1) or len(x) - g not in (2, 3):
            raise shapes.ShapeError(f"fusion.dispatch: input must be [(G,) T, H] or [(G,) T, k, H] with ids [(G,) T, k], got {list(x)} and {list(ids)}")
        _check_ids(ids, x[: g + 1], "dispatch")
        if len(x) - g == 3 and x[g + 1] != ids[-1]:
            raise shapes.ShapeError(f"fusion.dispatch: input {list(x)} must have a row per choice of ids {list(ids)}")
        if kw["experts"] < 1:
            raise shapes.ShapeError(f"fusion.dispatch: experts = {kw['experts']} must be >= 1")
        return (kw["experts"], *x[: g + 1], x[-1])

    def sharding_map(self) -> OpMap:
        """The token split becomes the experts' split (expert parallelism),
        the groups' split stays on the slots' groups (each group an expert
        parallel team of its own), the hidden dim maps, the choices are
        whole."""
        g = len(shape_of(self.ids)) - 2
        tokens = (Target(MAP, 1),) * g + (Target(MAP, 0),)
        choice = () if len(shape_of(self.input)) == g + 2 else (Target(DROP),)
        x = (*tokens, *choice, Target(MAP, 2 + g))
        return OpMap((x, (*tokens, Target(DROP))), 3 + g, None, NONE, False)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, self.keyword("experts")) if i == 1 else None

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels.dispatch import dispatch

        try:
            out, counts = dispatch(args[0], args[1], self.keyword("experts"))
            return (out, counts) if len(self.results) == 2 else out
        except Diagnostic as e:
            raise error_at(self, e.message) from None

    def vjp(self, b: Any, g: Any) -> list[Any]:
        """The slots' cotangent read back per pair (combine), summed over
        the choices for a row shared by them."""
        back = b.op("combine", g, self.ids)
        k = len(shape_of(self.ids)) - 1
        return [back if len(shape_of(self.input)) == k + 2 else b.op("sum", back, dims=[k]), None]


@irdl_op_definition
class CombineOp(_RoutedOp):
    """Each pair's row read back from its expert's slot (module
    docstring): [E, T, H] with ids [T, k] -> [T, k, H]."""

    name = "fusion.combine"
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "ids")
    input = operand_def(TENSOR)
    ids = operand_def(TENSOR)
    result = result_def(TENSOR)

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        ye, ids = s
        if len(ye) not in (3, 4):
            raise shapes.ShapeError(f"fusion.combine: input must be [E, (G,) T, H] (the experts' slots), got {list(ye)}")
        _check_ids(ids, ye[1:-1], "combine")
        return (*ye[1:-1], ids[-1], ye[-1])

    def sharding_map(self) -> OpMap:
        """The experts' split becomes the tokens' (expert parallelism), the
        groups' split the groups'."""
        g = len(shape_of(self.ids)) - 2
        groups = (Target(MAP, 0),) * g
        ye = (Target(MAP, g), *groups, Target(DROP), Target(MAP, 2 + g))
        return OpMap((ye, (*groups, Target(MAP, g), Target(MAP, g + 1))), 3 + g, None, NONE, False)

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        return (0, shape_of(self.input)[0]) if i == 1 else None

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels.dispatch import combine

        try:
            return combine(args[0], args[1])
        except Diagnostic as e:
            raise error_at(self, e.message) from None

    def vjp(self, b: Any, g: Any) -> list[Any]:
        return [b.op("dispatch", g, self.ids, experts=shape_of(self.input)[0]), None]  # [(G,) T, k, H] rows


# ---- the local steps of expert parallelism (made by passes/expert_parallel.py) ----


@irdl_op_definition
class PlaceRowsOp(FusionOp):
    """`fusion.place_rows %rows, %counts slots = S`: rows received from
    each team position p in turn, expert by expert (counts [P, E] i64:
    counts[p, e] rows of expert e from position p), into [E, S, H] slots,
    each expert's rows in team order from row 0, zeros after: a block of
    dispatch's result. Rows past the counts' sum are not read."""

    name = "fusion.place_rows"
    ALONE: ClassVar[bool] = True
    """Run by PyTorch op by op (data-dependent rows: no traced kernel)."""
    OPERANDS: ClassVar[tuple[str, ...]] = ("rows", "counts")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("slots", "int"),)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64")
    rows = operand_def(TENSOR)
    counts = operand_def(TENSOR)
    result = result_def(TENSOR)
    slots = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if len(s[0]) != 2 or len(s[1]) != 2:
            raise shapes.ShapeError(f"fusion.place_rows: rows [R, H] and counts [P, E], got {list(s[0])} and {list(s[1])}")
        return (s[1][1], kw["slots"], s[0][1])

    def sharding_map(self) -> OpMap:
        return OpMap(((Target(DROP), Target(MAP, 2)), (Target(DROP), Target(DROP))), 3, None, NONE, False)

    def torch_alone(self) -> bool:
        return True

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels.dispatch import place_rows

        try:
            return place_rows(args[0], args[1], self.keyword("slots"))
        except Diagnostic as e:
            raise error_at(self, e.message) from None


@irdl_op_definition
class PickRowsOp(FusionOp):
    """`fusion.pick_rows %slots, %counts rows = R`: place_rows' inverse:
    [E, S, H] slots -> [R, H] rows ordered by team position, then expert
    (counts [P, E] as for place_rows), zeros past the counts' sum."""

    name = "fusion.pick_rows"
    ALONE: ClassVar[bool] = True
    """Run by PyTorch op by op (data-dependent rows: no traced kernel)."""
    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "counts")
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("rows", "int"),)
    ELEMENTS: ClassVar[tuple[str, ...]] = ("num", "i64")
    input = operand_def(TENSOR)
    counts = operand_def(TENSOR)
    result = result_def(TENSOR)
    rows = prop_def(IntegerAttr[I64])

    @classmethod
    def result_shape(cls, s: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        if len(s[0]) != 3 or len(s[1]) != 2 or s[1][1] != s[0][0]:
            raise shapes.ShapeError(f"fusion.pick_rows: slots [E, S, H] and counts [P, E], got {list(s[0])} and {list(s[1])}")
        return (kw["rows"], s[0][2])

    def sharding_map(self) -> OpMap:
        return OpMap(((Target(DROP), Target(DROP), Target(MAP, 1)), (Target(DROP), Target(DROP))), 2, None, NONE, False)

    def torch_alone(self) -> bool:
        return True

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        from fuserc.runtime.kernels.dispatch import pick_rows

        return pick_rows(args[0], args[1], self.keyword("rows"))


OPS: tuple[type[FusionOp], ...] = (DispatchOp, CombineOp, PlaceRowsOp, PickRowsOp)

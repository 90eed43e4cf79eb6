"""The hir dialect's views (aliasing a buffer) and local compute (GEMMs, copies, launches).

Part of the hir dialect (`fuserc.dialects.hir` gathers the ops and defines the dialect; docs/hir.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    IntegerAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import (
    Block,
    Operation,
    Region,
    SSAValue,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    prop_def,
    region_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.dialects.fusion import element_type_of, shape_of
from fuserc.dialects.fusion_mesh import tensor_type
from fuserc.dialects.hir_comm import _check_same_shape
from fuserc.dialects.hir_control import YieldOp, _segment_sizes, _single_block
from fuserc.dialects.hir_core import (
    _INDEX,
    _TENSOR,
    HirOp,
    _check_dim,
    _check_positive,
    _constant_value,
    _same_elements,
    check_buffer_type,
    chunk_shape,
    i64_attr,
    select_shape,
)
from fuserc.ir import ClassTest

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
        result_type = tensor_type(t.element_type, select_shape(t.get_shape(), dim))
        super().__init__(operands=[src, index], properties={"dim": i64_attr(dim)}, result_types=[result_type])

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
        result_type = tensor_type(t.element_type, chunk_shape(t.get_shape(), dim, chunks))
        super().__init__(
            operands=[src, index],
            properties={"dim": i64_attr(dim), "chunks": i64_attr(chunks)},
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
        self._init(operands=[src], result_types=[tensor_type(t.element_type, tuple(shape))])

    def verify_op(self) -> None:
        a, b = shape_of(self.source), shape_of(self.result)
        if math.prod(a) != math.prod(b):
            raise VerifyException(
                f"cannot view {list(a)} ({math.prod(a)} elements) as {list(b)} ({math.prod(b)} elements)"
            )
        if element_type_of(self.result) != element_type_of(self.source):
            raise VerifyException(f"result element type {element_type_of(self.result)} does not match {element_type_of(self.source)}")


@irdl_op_definition
class TransposeOp(HirOp):
    """`%v = hir.transpose %buf : T -> T2`: a 2-D buffer with its two
    dimensions swapped, an aliasing strided view (what a GEMM reads with
    cuBLAS's transpose flags instead of a copy)."""

    name = "hir.transpose"
    source = operand_def(_TENSOR)
    result = result_def(_TENSOR)

    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation):
        src = SSAValue.get(source)
        t = src.type
        assert isinstance(t, TensorType)
        self._init(operands=[src], result_types=[tensor_type(t.element_type, tuple(reversed(t.get_shape())))])

    def verify_op(self) -> None:
        a = shape_of(self.source)
        if len(a) != 2:
            raise VerifyException(f"hir.transpose takes a 2-D buffer, got {list(a)}")
        _check_view_result(self.source, self.result, (a[1], a[0]))


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
            if op is not last and not _is_tensor_op(op):
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


def _is_tensor_op(op: Operation) -> bool:
    """Whether `op` is a fusion tensor op: the test against the 63 classes
    made once per class (`ClassTest`), as a launch's region is checked at
    every verification."""
    if not _TENSOR_OP:
        from fuserc.dialects.fusion import TENSOR_OPS

        _TENSOR_OP.append(ClassTest(TENSOR_OPS))
    return _TENSOR_OP[0](op)


_TENSOR_OP: list[ClassTest] = []

"""The fusion dialect: tensor ops at global shapes, sharding in the tensor type.

Every op has one custom form (DESIGN.md 2.3):

    %y = fusion.OP %a, %b KEY = VALUE ... {attr-dict} : (T0, T1) -> T2

Keyword attributes are properties of the op; `KEYWORDS` on each class lists
them in print order with their kind. Shape and type rules follow PyTorch's ops
of the same names; `fuserc.shapes` holds the shape arithmetic shared with the
reference evaluator and the passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, OpResult, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.sharding import DEVICE_TYPES, Mesh, Sharding, Split, format_axis

# --------------------------------------------------------------------------
# The sharding attribute
# --------------------------------------------------------------------------


@irdl_attr_definition
class ShardingAttr(ParametrizedAttribute):
    """`#fusion.sharding<@MESH, [AXIS, ...] (, partial = DIDx|DIDy|DIDz)?>`.

    Stored as the mesh symbol, one canonical axis string per dimension
    (`-`, `DIDx`, `Stream(2)*DIDx`, ...) and the partial type ("" if none);
    `model` gives the `fuserc.sharding.Sharding` the rest of fuserc works on."""

    name = "fusion.sharding"

    mesh: SymbolRefAttr
    axes: ArrayAttr[StringAttr]
    partial: StringAttr

    @staticmethod
    def get(sharding: Sharding) -> "ShardingAttr":
        return ShardingAttr(
            SymbolRefAttr(sharding.mesh),
            ArrayAttr([StringAttr(a) for a in sharding.axes_text()]),
            StringAttr(sharding.partial or ""),
        )

    @property
    def model(self) -> Sharding:
        return Sharding.from_axes(
            self.mesh.root_reference.data,
            [a.data for a in self.axes.data],
            self.partial.data or None,
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            mesh = parser.parse_symbol_name()
            parser.parse_punctuation(",", " after the mesh of a sharding")
            axes = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: _parse_axis(parser)
            )
            partial = ""
            if parser.parse_optional_punctuation(","):
                parser.parse_keyword("partial", " in a sharding")
                parser.parse_punctuation("=")
                pos = parser.pos
                partial = parser.parse_identifier(" (DIDx, DIDy or DIDz) after 'partial ='")
                if partial not in DEVICE_TYPES:
                    parser.raise_error(
                        f"partial must be DIDx, DIDy or DIDz, got '{partial}'", pos, parser.pos
                    )
        return (SymbolRefAttr(mesh), ArrayAttr([StringAttr(a) for a in axes]), StringAttr(partial))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<@{self.mesh.root_reference.data}, [")
        printer.print_string(", ".join(a.data for a in self.axes.data))
        printer.print_string("]")
        if self.partial.data:
            printer.print_string(f", partial = {self.partial.data}")
        printer.print_string(">")


def _parse_axis(parser: AttrParser) -> str:
    """AXIS ::= `-` | TERM (`*` TERM)*, TERM ::= DIDx | DIDy | DIDz | Stream(S)."""
    if parser.parse_optional_punctuation("-"):
        return "-"
    splits: list[Split] = []
    while True:
        pos = parser.pos
        word = parser.parse_identifier(" (a sharding axis: -, DIDx, DIDy, DIDz or Stream(S))")
        if word == "Stream":
            parser.parse_punctuation("(", " after Stream")
            factor = parser.parse_integer(allow_negative=True, allow_boolean=False)
            parser.parse_punctuation(")", " after Stream(S")
            splits.append(Split("Stream", factor))
        elif word in DEVICE_TYPES:
            splits.append(Split(word))
        else:
            parser.raise_error(
                f"unknown parallel type '{word}': expected DIDx, DIDy, DIDz or Stream(S)",
                pos,
                parser.pos,
            )
        if not parser.parse_optional_punctuation("*"):
            return format_axis(splits)


def sharding_of(value_or_type: SSAValue | Attribute) -> Sharding | None:
    """The sharding in a tensor type (None when undecided)."""
    t = value_or_type.type if isinstance(value_or_type, SSAValue) else value_or_type
    if isinstance(t, TensorType) and isinstance(t.encoding, ShardingAttr):
        return t.encoding.model
    return None


def with_sharding(t: TensorType, sharding: Sharding | None) -> TensorType:
    """`t` with its encoding replaced (None removes it)."""
    enc: Attribute = ShardingAttr.get(sharding) if sharding is not None else NoneAttr()
    return TensorType(t.element_type, t.get_shape(), enc)


# --------------------------------------------------------------------------
# Meshes
# --------------------------------------------------------------------------


@irdl_op_definition
class MeshOp(IRDLOperation):
    """`fusion.mesh @NAME shape = [..] (devices = [..])?`: a named mesh of
    device ids (MPI ranks), row-major; the default ids are 0..N-1."""

    name = "fusion.mesh"

    sym_name = prop_def(SymbolNameConstraint())
    shape = prop_def(ArrayAttr[IntegerAttr[I64]])
    devices = opt_prop_def(ArrayAttr[IntegerAttr[I64]])

    traits = traits_def(SymbolOpInterface(), HasParent(ModuleOp))

    @property
    def model(self) -> Mesh:
        shape = tuple(a.value.data for a in self.shape.data)
        devs = tuple(a.value.data for a in self.devices.data) if self.devices else ()
        return Mesh(self.sym_name.data, shape, devs)

    @classmethod
    def parse(cls, parser: Parser) -> "MeshOp":
        name = parser.parse_symbol_name()
        parser.parse_keyword("shape", " in fusion.mesh")
        parser.parse_punctuation("=")
        shape = _parse_int_list(parser)
        props: dict[str, Attribute] = {"sym_name": name, "shape": _int_array(shape)}
        if parser.parse_optional_keyword("devices"):
            parser.parse_punctuation("=")
            props["devices"] = _int_array(_parse_int_list(parser))
        attrs = parser.parse_optional_attr_dict()
        return cls.build(properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.sym_name.data} shape = ")
        printer.print_string(_fmt_ints(self.shape))
        if self.devices is not None:
            printer.print_string(" devices = " + _fmt_ints(self.devices))
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        shape = [a.value.data for a in self.shape.data]
        if not 1 <= len(shape) <= 3:
            raise VerifyException(
                f"mesh @{self.sym_name.data} has {len(shape)} axes; meshes have 1 to 3 (DIDx, DIDy, DIDz)"
            )
        if any(s <= 0 for s in shape):
            raise VerifyException(f"mesh @{self.sym_name.data} shape {shape} must be positive")
        if self.devices is not None:
            devs = [a.value.data for a in self.devices.data]
            n = 1
            for s in shape:
                n *= s
            if len(devs) != n:
                raise VerifyException(
                    f"mesh @{self.sym_name.data} of shape {shape} needs {n} devices, got {len(devs)}"
                )
            if len(set(devs)) != len(devs) or any(d < 0 for d in devs):
                raise VerifyException(
                    f"mesh @{self.sym_name.data} devices {devs} must be distinct non-negative ranks"
                )


def lookup_mesh(op: Operation, name: str) -> Mesh | None:
    """The mesh `@name` visible from `op`, or None."""
    found = SymbolTable.lookup_symbol(op, name)
    return found.model if isinstance(found, MeshOp) else None


def _int_array(values: Sequence[int]) -> ArrayAttr[IntegerAttr]:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


def _ints(attr: ArrayAttr[IntegerAttr]) -> list[int]:
    return [a.value.data for a in attr.data]


def _fmt_ints(attr: ArrayAttr[IntegerAttr]) -> str:
    return "[" + ", ".join(str(v) for v in _ints(attr)) + "]"


def _parse_int_list(parser: Parser | AttrParser) -> list[int]:
    return parser.parse_comma_separated_list(
        parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)
    )


# --------------------------------------------------------------------------
# Tensor ops: one generic custom form
# --------------------------------------------------------------------------

FLOATS = (Float32Type, Float16Type, BFloat16Type, Float64Type)


def _elem_ok(t: Attribute, allowed: str) -> bool:
    """`allowed`: 'float' (f32/f16/bf16/f64), 'num' (+ i64), 'any' (+ i1)."""
    if isinstance(t, FLOATS):
        return True
    if isinstance(t, IntegerType):
        w = t.width.data
        return (allowed in ("num", "any") and w == 64) or (allowed == "any" and w in (1, 64))
    return False


class FusionOp(IRDLOperation):
    """Base of the tensor ops: custom parse/print and common verification.

    Subclasses set KEYWORDS = ((name, kind), ...) with kind 'ints', 'int' or
    'bool', ELEMENTS ('float'|'num'|'any') and implement `infer_shape`."""

    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = ()
    ELEMENTS: ClassVar[str] = "float"

    # -- syntax ---------------------------------------------------------------
    @classmethod
    def parse(cls, parser: Parser):
        pos = parser.pos
        unresolved = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            unresolved.append(first)
            while parser.parse_optional_punctuation(","):
                unresolved.append(parser.parse_unresolved_operand())
        props: dict[str, Attribute] = {}
        kinds = dict(cls.KEYWORDS)
        while True:
            key_pos = parser.pos
            key = parser.parse_optional_identifier()
            if key is None:
                break
            if key not in kinds:
                expected = ", ".join(kinds) if kinds else "none"
                parser.raise_error(
                    f"unknown keyword '{key}' for {cls.name} (keywords: {expected})",
                    key_pos,
                    parser.pos,
                )
            if key in props:
                parser.raise_error(f"keyword '{key}' is given twice", key_pos, parser.pos)
            parser.parse_punctuation("=", f" after '{key}'")
            props[key] = _parse_keyword_value(parser, key, kinds[key])
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":", f" before the type of {cls.name}")
        type_pos = parser.pos
        ftype = parser.parse_function_type()
        if len(ftype.inputs.data) != len(unresolved):
            parser.raise_error(
                f"{cls.name} has {len(unresolved)} operands but its type lists "
                f"{len(ftype.inputs.data)}",
                type_pos,
            )
        if len(ftype.outputs.data) != 1:
            parser.raise_error(
                f"{cls.name} has one result but its type lists {len(ftype.outputs.data)}",
                type_pos,
            )
        operands = parser.resolve_operands(unresolved, ftype.inputs.data, pos)
        try:
            return cls.build(
                operands=cls.group_operands(operands),
                result_types=list(ftype.outputs.data),
                properties=props,
                attributes=attrs,
            )
        except (VerifyException, ValueError) as e:
            parser.raise_error(str(e), pos, type_pos)

    @classmethod
    def group_operands(cls, operands: Sequence[SSAValue]) -> list:
        """Operands grouped as the op's operand definitions expect them;
        raises VerifyException when their number cannot fit."""
        return list(operands)

    def print(self, printer: Printer) -> None:
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        for key, kind in self.KEYWORDS:
            value = self.properties.get(key)
            if value is not None:
                printer.print_string(f" {key} = {_format_keyword_value(value, kind)}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_operation_type(self)

    # -- semantics helpers ----------------------------------------------------
    def keyword(self, key: str):
        """Python value of a keyword attribute (None when absent)."""
        value = self.properties.get(key)
        if value is None:
            return None
        if isinstance(value, ArrayAttr):
            return [a.value.data for a in value.data]
        if isinstance(value, IntegerAttr):
            return bool(value.value.data) if value.type == IntegerType(1) else value.value.data
        return value

    def infer_shape(self, shapes_in: list[tuple[int, ...]]) -> tuple[int, ...]:
        raise NotImplementedError

    def infer_element_type(self) -> Attribute:
        return _tensor(self.operands[0]).element_type

    # -- verification ---------------------------------------------------------
    def verify_(self) -> None:
        for v in [*self.operands, *self.results]:
            t = _tensor(v)
            if any(e < 0 for e in t.get_shape()):
                raise VerifyException(
                    f"operands and results must have static shapes, got {_type_text(t)}"
                )
            if not isinstance(t.encoding, (ShardingAttr, NoneAttr)):
                raise VerifyException(
                    f"a tensor's encoding must be a #fusion.sharding, got {t.encoding}"
                )
        elems = [_tensor(v).element_type for v in self.operands]
        for e in elems:
            if not _elem_ok(e, self.ELEMENTS):
                raise VerifyException(f"element type {e} is not supported")
        self.verify_elements(elems)
        in_shapes = [tuple(_tensor(v).get_shape()) for v in self.operands]
        try:
            expected = tuple(self.infer_shape(in_shapes))
        except shapes.ShapeError as e:
            raise VerifyException(str(e)) from None
        res = _tensor(self.results[0])
        if tuple(res.get_shape()) != expected:
            raise VerifyException(
                f"result shape {list(res.get_shape())} does not match "
                f"the expected {list(expected)}"
            )
        want = self.infer_element_type()
        if res.element_type != want:
            raise VerifyException(
                f"result element type {res.element_type} does not match {want}"
            )
        verify_shardings(self, [*self.operands, *self.results])
        for err in alloc_order_errors(self):
            raise VerifyException(err)

    def verify_elements(self, elems: list[Attribute]) -> None:
        if len(set(elems)) > 1:
            raise VerifyException(
                "operands must have one element type, got "
                + ", ".join(str(e) for e in elems)
            )


def _tensor(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType)
    return v.type


def shape_of(v: SSAValue | Attribute) -> tuple[int, ...]:
    """The static shape of a tensor-typed value, or of a tensor type."""
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def element_type_of(v: SSAValue) -> Attribute:
    """The element type of a tensor-typed value."""
    return _tensor(v).element_type


def verify_shardings(op: Operation, values: Sequence[SSAValue]) -> None:
    """Check every sharding of `values` against its mesh and shape."""
    verify_sharding_types(op, [v.type for v in values])


def verify_sharding_types(op: Operation, types: Sequence[Attribute]) -> None:
    """Check the sharding of each tensor type in `types` (meshes are looked
    up from `op`): known mesh, one axis per dimension, each parallel type at
    most once and present on the mesh, every split dividing its extent."""
    for t in types:
        if not isinstance(t, TensorType) or not isinstance(t.encoding, ShardingAttr):
            continue
        s = t.encoding.model
        if any(e < 0 for e in t.get_shape()):
            errs = ["a sharded tensor must have a static shape"]
        else:
            errs = s.errors(t.get_shape(), lookup_mesh(op, s.mesh))
        if errs:
            raise VerifyException(f"invalid sharding {s} on {_type_text(t)}: {errs[0]}")


def _type_text(t: TensorType) -> str:
    """`tensor<64x16xf32>`: the type without its encoding, for messages."""
    dims = "".join(f"{'?' if e < 0 else e}x" for e in t.get_shape())
    return f"tensor<{dims}{t.element_type}>"


def _parse_keyword_value(parser: Parser, key: str, kind: str) -> Attribute:
    if kind == "ints":
        return _int_array(_parse_int_list(parser))
    if kind == "int":
        return IntegerAttr(parser.parse_integer(allow_boolean=False), i64)
    if kind == "bool":
        return IntegerAttr(int(parser.parse_boolean()), IntegerType(1))
    raise AssertionError(kind)


def _format_keyword_value(value: Attribute, kind: str) -> str:
    if kind == "ints":
        assert isinstance(value, ArrayAttr)
        return _fmt_ints(value)
    assert isinstance(value, IntegerAttr)
    if kind == "bool":
        return "true" if value.value.data else "false"
    return str(value.value.data)


_TENSOR = TensorType.constr()


# ---- contractions ----------------------------------------------------------


@irdl_op_definition
class MatmulOp(FusionOp):
    """`torch.matmul`: 1-D and N-D operands with broadcast batch dims."""

    name = "fusion.matmul"
    lhs = operand_def(_TENSOR)
    rhs = operand_def(_TENSOR)
    result = result_def(_TENSOR)

    def infer_shape(self, s):
        return shapes.matmul(s[0], s[1])


@irdl_op_definition
class LinearOp(FusionOp):
    """`torch.nn.functional.linear`: x @ w^T (+ bias), w is [out, in]."""

    name = "fusion.linear"
    input = operand_def(_TENSOR)
    weight = operand_def(_TENSOR)
    bias = opt_operand_def(_TENSOR)
    result = result_def(_TENSOR)

    @classmethod
    def group_operands(cls, operands):
        if len(operands) not in (2, 3):
            raise VerifyException("fusion.linear takes 2 or 3 operands (input, weight, bias?)")
        return [operands[0], operands[1], list(operands[2:])]

    def infer_shape(self, s):
        return shapes.linear(s[0], s[1], s[2] if len(s) > 2 else None)


# ---- elementwise -------------------------------------------------------------


class BinaryOp(FusionOp):
    ELEMENTS: ClassVar[str] = "num"
    lhs = operand_def(_TENSOR)
    rhs = operand_def(_TENSOR)
    result = result_def(_TENSOR)

    def infer_shape(self, s):
        return shapes.same(s[0], s[1])


@irdl_op_definition
class AddOp(BinaryOp):
    name = "fusion.add"


@irdl_op_definition
class SubOp(BinaryOp):
    name = "fusion.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    name = "fusion.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    name = "fusion.div"
    ELEMENTS: ClassVar[str] = "float"


@irdl_op_definition
class MaximumOp(BinaryOp):
    name = "fusion.maximum"


class UnaryOp(FusionOp):
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)

    def infer_shape(self, s):
        return s[0]


@irdl_op_definition
class ReluOp(UnaryOp):
    name = "fusion.relu"
    ELEMENTS: ClassVar[str] = "num"


@irdl_op_definition
class NegOp(UnaryOp):
    name = "fusion.neg"
    ELEMENTS: ClassVar[str] = "num"


@irdl_op_definition
class ExpOp(UnaryOp):
    name = "fusion.exp"


@irdl_op_definition
class TanhOp(UnaryOp):
    name = "fusion.tanh"


@irdl_op_definition
class SigmoidOp(UnaryOp):
    name = "fusion.sigmoid"


@irdl_op_definition
class SiluOp(UnaryOp):
    name = "fusion.silu"


@irdl_op_definition
class GeluOp(UnaryOp):
    """Erf form by default; `{approximate = "tanh"}` selects the tanh form."""

    name = "fusion.gelu"
    approximate = opt_attr_def(StringAttr)

    def verify_(self) -> None:
        if self.approximate is not None and self.approximate.data not in ("none", "tanh"):
            raise VerifyException(
                f'approximate must be "none" or "tanh", got "{self.approximate.data}"'
            )
        super().verify_()


@irdl_op_definition
class CastOp(UnaryOp):
    name = "fusion.cast"
    ELEMENTS: ClassVar[str] = "any"

    def infer_element_type(self) -> Attribute:
        res = _tensor(self.results[0]).element_type
        if not _elem_ok(res, "any"):
            raise VerifyException(f"cannot cast to element type {res}")
        return res


@irdl_op_definition
class SetOp(UnaryOp):
    """A copy; a different sharding on the result is a reshard."""

    name = "fusion.set"
    ELEMENTS: ClassVar[str] = "any"


# ---- reductions -------------------------------------------------------------


class ReductionOp(FusionOp):
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"), ("keepdim", "bool"))
    ELEMENTS: ClassVar[str] = "num"
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])
    keepdim = opt_prop_def(BoolAttr)

    def infer_shape(self, s):
        return shapes.reduce(s[0], self.keyword("dims"), bool(self.keyword("keepdim")))


@irdl_op_definition
class SumOp(ReductionOp):
    name = "fusion.sum"


@irdl_op_definition
class MaxOp(ReductionOp):
    name = "fusion.max"


# ---- layout --------------------------------------------------------------------


@irdl_op_definition
class PermuteOp(FusionOp):
    name = "fusion.permute"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"),)
    ELEMENTS: ClassVar[str] = "any"
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])

    def infer_shape(self, s):
        return shapes.permute(s[0], self.keyword("dims"))


@irdl_op_definition
class ReshapeOp(FusionOp):
    name = "fusion.reshape"
    ELEMENTS: ClassVar[str] = "any"
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)

    def infer_shape(self, s):
        return shapes.reshape(s[0], tuple(_tensor(self.results[0]).get_shape()))


@irdl_op_definition
class BroadcastInDimOp(FusionOp):
    """Operand dim i becomes result dim dims[i] (equal extent, or 1 expanded)."""

    name = "fusion.broadcast_in_dim"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dims", "ints"),)
    ELEMENTS: ClassVar[str] = "any"
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)
    dims = prop_def(ArrayAttr[IntegerAttr[I64]])

    def infer_shape(self, s):
        return shapes.broadcast_in_dim(s[0], tuple(_tensor(self.results[0]).get_shape()), self.keyword("dims"))


@irdl_op_definition
class SliceOp(FusionOp):
    name = "fusion.slice"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("starts", "ints"), ("limits", "ints"))
    ELEMENTS: ClassVar[str] = "any"
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)
    starts = prop_def(ArrayAttr[IntegerAttr[I64]])
    limits = prop_def(ArrayAttr[IntegerAttr[I64]])

    def infer_shape(self, s):
        return shapes.slice_(s[0], self.keyword("starts"), self.keyword("limits"))


@irdl_op_definition
class SoftmaxOp(FusionOp):
    name = "fusion.softmax"
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = (("dim", "int"),)
    input = operand_def(_TENSOR)
    result = result_def(_TENSOR)
    dim = prop_def(IntegerAttr[I64])

    def infer_shape(self, s):
        shapes.check_dim(s[0], self.keyword("dim"))
        return s[0]


# ---- memory layout ---------------------------------------------------------

ALLOC_ORDER = "alloc_order"
"""Discardable attribute `alloc_order = array<i64: p0, p1, ...>` on an op
with one tensor result: the result's buffer holds its local block with
dimension p0 outermost and p(r-1) innermost, i.e. it is allocated as the
local shape permuted by p, contiguous, and the op's logical result is the
view `buffer.permute(inverse(p))`. Absent means the identity (row-major).
Function arguments are always row-major."""


def alloc_order_attr(order: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(order))


def alloc_order_errors(op: Operation) -> list[str]:
    """Why `op`'s alloc_order attribute is malformed (empty when it is
    absent or valid: an array<i64> permutation of its result's rank)."""
    attr = op.attributes.get(ALLOC_ORDER)
    if attr is None:
        return []
    if len(op.results) != 1 or not isinstance(op.results[0].type, TensorType):
        return [f"{ALLOC_ORDER} needs an op with one tensor result"]
    if not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
        return [f"{ALLOC_ORDER} must be an array<i64: ...>, got {attr}"]
    order = list(attr.get_values())
    rank = len(op.results[0].type.get_shape())
    if sorted(order) != list(range(rank)):
        return [f"{ALLOC_ORDER} = {order} is not a permutation of the {rank} dimensions of the result"]
    return []


def alloc_order_of(value: SSAValue) -> tuple[int, ...]:
    """The memory order of `value`'s buffer, outermost first."""
    assert isinstance(value.type, TensorType)
    ident = tuple(range(len(value.type.get_shape())))
    if isinstance(value, OpResult):
        attr = value.op.attributes.get(ALLOC_ORDER)
        if isinstance(attr, DenseArrayBase):
            return tuple(int(v) for v in attr.get_values())
    return ident


TENSOR_OPS: tuple[type[FusionOp], ...] = (
    MatmulOp, LinearOp, AddOp, SubOp, MulOp, DivOp, MaximumOp,
    ReluOp, NegOp, ExpOp, TanhOp, SigmoidOp, SiluOp, GeluOp, CastOp, SetOp,
    SumOp, MaxOp, PermuteOp, ReshapeOp, BroadcastInDimOp, SliceOp, SoftmaxOp,
)  # fmt: skip

ELEMENTWISE_OPS: tuple[type[FusionOp], ...] = (
    AddOp, SubOp, MulOp, DivOp, MaximumOp,
    ReluOp, NegOp, ExpOp, TanhOp, SigmoidOp, SiluOp, GeluOp, CastOp,
)  # fmt: skip
"""Pointwise ops: one output element from the same-index input elements."""

Fusion = Dialect("fusion", [MeshOp, *TENSOR_OPS], [ShardingAttr])

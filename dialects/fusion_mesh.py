"""The fusion dialect's sharding attribute and meshes: `#fusion.sharding<@mesh,
[...]>` in tensor types, and `fusion.mesh @name shape = [...]` (docs/language.md).
fusion.py, the ops' base, re-exports them."""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    IntegerAttr,
    ModuleOp,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.mlir_lexer import MLIRTokenKind

from fuserc.sharding import (
    DEVICE_TYPES,
    MAX_MESH_DEVICES,
    Mesh,
    Sharding,
    Split,
    axis_order,
    format_axis,
    format_partial,
)

# --------------------------------------------------------------------------
# The sharding attribute
# --------------------------------------------------------------------------


@irdl_attr_definition
class ShardingAttr(ParametrizedAttribute):
    """`#fusion.sharding<@MESH, [AXIS, ...] (, partial = TYPE | [TYPE, ...])?>`,
    TYPE one of DIDx, DIDy, DIDz.

    Stored as the mesh symbol, one canonical axis string per dimension
    (`-`, `DIDx`, `Stream(2)*DIDx`, ...) and the partial types in mesh-axis
    order, comma-separated ("" if none: `DIDx`, `DIDy,DIDx`);
    `model` gives the `fuserc.sharding.Sharding` the rest of fuserc works on."""

    name = "fusion.sharding"

    mesh: SymbolRefAttr
    axes: ArrayAttr[StringAttr]
    partial: StringAttr

    @staticmethod
    def get(sharding: Sharding) -> "ShardingAttr":
        attr = ShardingAttr(
            SymbolRefAttr(sharding.mesh),
            ArrayAttr([StringAttr(a) for a in sharding.axes_text()]),
            StringAttr(",".join(sharding.partial)),
        )
        attr.__dict__["_model"] = sharding
        return attr

    @property
    def model(self) -> Sharding:
        """The sharding, parsed once per attribute (attributes are immutable;
        passes and verifiers ask for it many times)."""
        model = self.__dict__.get("_model")
        if model is None:
            model = self.__dict__["_model"] = Sharding.from_axes(
                self.mesh.root_reference.data,
                [a.data for a in self.axes.data],
                self.partial.data.split(",") if self.partial.data else None,
            )
        return model

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            if parser._current_token.kind == MLIRTokenKind.BARE_IDENT:
                word = parser._current_token.text
                parser.raise_error(f"expected the mesh's symbol name: mesh names start with @ (@{word}, not {word})")
            mesh = parser.parse_symbol_name()
            parser.parse_punctuation(",", " after the mesh of a sharding")
            axes = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: _parse_axis(parser)
            )
            partial = ""
            if parser.parse_optional_punctuation(","):
                parser.parse_keyword("partial", " in a sharding")
                parser.parse_punctuation("=")
                if parser._current_token.kind == MLIRTokenKind.L_SQUARE:
                    pos = parser.pos
                    types = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_partial_type(parser))
                    if not types:
                        parser.raise_error("partial = [] names no device type: leave partial out", pos, parser.pos)
                else:
                    types = [_parse_partial_type(parser)]
                partial = ",".join(axis_order(types))
        return (SymbolRefAttr(mesh), ArrayAttr([StringAttr(a) for a in axes]), StringAttr(partial))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<@{self.mesh.root_reference.data}, [")
        printer.print_string(", ".join(a.data for a in self.axes.data))
        printer.print_string("]")
        if self.partial.data:
            printer.print_string(f", partial = {format_partial(self.partial.data.split(','))}")
        printer.print_string(">")


def _parse_partial_type(parser: AttrParser) -> str:
    pos = parser.pos
    word = parser.parse_identifier(" (DIDx, DIDy or DIDz) after 'partial ='")
    if word not in DEVICE_TYPES:
        parser.raise_error(f"partial must be DIDx, DIDy or DIDz, got '{word}'", pos, parser.pos)
    return word


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
    cls = type(value_or_type)  # the usual classes first: an isinstance check that misses an ABC is a Python call
    if cls is OpResult or cls is BlockArgument:
        t = value_or_type._type  # type: ignore[union-attr]
    elif cls is TensorType or not isinstance(value_or_type, SSAValue):
        t = value_or_type
    else:
        t = value_or_type.type
    if isinstance(t, TensorType):
        enc = t.encoding
        if type(enc) is not NoneAttr and isinstance(enc, ShardingAttr):
            return enc.model
    return None


def with_sharding(t: TensorType, sharding: Sharding | None) -> TensorType:
    """`t` with its encoding replaced (None removes it). Equal requests
    give the same (immutable) type object: a program's values share a few
    types, and the verifier and the passes' caches compare them often."""
    return tensor_type(t.element_type, tuple(t.get_shape()), sharding)


@functools.lru_cache(maxsize=4096)
def tensor_type(element_type: Attribute, shape: tuple[int, ...], sharding: Sharding | None = None) -> TensorType:
    """The tensor type of that element type, shape and sharding (None: no
    encoding), one object per distinct request (`with_sharding`)."""
    enc: Attribute = ShardingAttr.get(sharding) if sharding is not None else NoneAttr()
    return TensorType(element_type, shape, enc)


# --------------------------------------------------------------------------
# Meshes
# --------------------------------------------------------------------------


MAX_RANK = 1 << 31
"""Ranks are C ints in MPI and torch.distributed: a device id is below."""


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
        n = math.prod(shape)
        if n > MAX_MESH_DEVICES:
            raise VerifyException(
                f"mesh @{self.sym_name.data} of shape {shape} has {n} devices; a mesh has at most "
                f"{MAX_MESH_DEVICES}"
            )
        if self.devices is not None:
            devs = [a.value.data for a in self.devices.data]
            if len(devs) != n:
                raise VerifyException(
                    f"mesh @{self.sym_name.data} of shape {shape} needs {n} devices, got {len(devs)}"
                )
            if len(set(devs)) != len(devs) or any(d < 0 for d in devs):
                raise VerifyException(
                    f"mesh @{self.sym_name.data} devices {devs} must be distinct non-negative ranks"
                )
            if max(devs) >= MAX_RANK:
                raise VerifyException(
                    f"mesh @{self.sym_name.data} device {max(devs)} is not a rank: ranks are below {MAX_RANK} "
                    "(2^31, MPI's and torch.distributed's)"
                )


_MESHES: "weakref.WeakKeyDictionary[Operation, dict[str, tuple[MeshOp, Mesh]]]" = weakref.WeakKeyDictionary()
"""Symbol table op -> meshes found in it by name (with their op, checked
on every hit: a mesh op moved or renamed is looked up again)."""


def lookup_mesh(op: Operation, name: str) -> Mesh | None:
    """The mesh `@name` visible from `op`, or None."""
    table: Operation | None = op
    while table is not None and not isinstance(table, ModuleOp):
        table = table.parent_op()
    if table is not None:
        hit = _MESHES.get(table, {}).get(name)
        if hit is not None and hit[0].parent_op() is table and hit[0].sym_name.data == name:
            return hit[1]
    found = SymbolTable.lookup_symbol(op, name)
    if not isinstance(found, MeshOp):
        return None
    model = found.model
    if table is not None and found.parent_op() is table:
        _MESHES.setdefault(table, {})[name] = (found, model)
    return model


@functools.lru_cache(maxsize=4096, typed=True)
def i64_attr(value: int) -> IntegerAttr:
    """`value : i64`, one object per value: passes give thousands of ops the
    same few dims, counts and storage numbers, and an attribute is slow to
    make (its parameters are verified) and to number (its hash)."""
    return IntegerAttr(value, i64)


def _int_array(values: Sequence[int]) -> ArrayAttr[IntegerAttr]:
    """`[0 : i64, 1 : i64, ...]`, one object per list of ints (`i64_attr`)."""
    values = tuple(values)
    if all(type(v) is int for v in values):  # a bool equals its int: not cached
        return _int_array_of(values)
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


@functools.lru_cache(maxsize=4096)
def _int_array_of(values: tuple[int, ...]) -> ArrayAttr[IntegerAttr]:
    return ArrayAttr([i64_attr(v) for v in values])


def _ints(attr: ArrayAttr[IntegerAttr]) -> list[int]:
    return [a.value.data for a in attr.data]


def _fmt_ints(attr: ArrayAttr[IntegerAttr]) -> str:
    return "[" + ", ".join(str(v) for v in _ints(attr)) + "]"


def _parse_int_list(parser: Parser | AttrParser) -> list[int]:
    """`[1, 2, ...]`, each an i64, refused at itself otherwise (xDSL's i64
    takes unsigned values too, and reads 2^63 as -2^63)."""

    def one() -> int:
        start = parser.pos
        value = parser.parse_integer(allow_boolean=False)
        if not -(1 << 63) <= value < 1 << 63:
            parser.raise_error(f"{value} is out of the range of i64", start, parser.pos)
        return value

    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, one)

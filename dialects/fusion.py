"""The fusion dialect: tensor ops at global shapes, sharding in the tensor type.

Every op has one custom form (docs/language.md):

    %y = fusion.OP %a, %b KEY = VALUE ... {attr-dict} : (T0, T1) -> T2

Keyword attributes are properties of the op; `KEYWORDS` on each class lists
them in print order with their kind. Shape and type rules follow PyTorch's ops
of the same names; `fuserc.shapes` holds the shape arithmetic shared with the
reference evaluator and the passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DenseArrayBase,
    FloatAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerAttr,
    IntegerType,
    NoneAttr,
    TensorType,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VariadicDef,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from fuserc import shapes
from fuserc.dialects.fusion_mesh import (  # noqa: F401  (MeshOp, ShardingAttr and the sharding helpers re-exported)
    MeshOp,
    ShardingAttr,
    _fmt_ints,
    _int_array,
    _parse_int_list,
    lookup_mesh,
    sharding_of,
    tensor_type,
    with_sharding,
)
from fuserc.dialects.interfaces import EvalContext, Math, OpMap
from fuserc.sharding import Sharding

# --------------------------------------------------------------------------
# Tensor ops: one generic custom form
# --------------------------------------------------------------------------

FLOATS = (Float32Type, Float16Type, BFloat16Type, Float64Type)

Shape = tuple[int, ...]

ELEMENT_KINDS = ("float", "num", "any", "i64", "i1")
"""What an operand may hold: floats (f32/f16/bf16/f64), 'num' (floats or
i64), 'any' (num or i1), or exactly i64 / i1."""


def elem_ok(t: Attribute, allowed: str) -> bool:
    """Whether element type `t` is of kind `allowed` (ELEMENT_KINDS)."""
    if isinstance(t, FLOATS):
        return allowed in ("float", "num", "any")
    if isinstance(t, IntegerType):
        w = t.width.data
        if allowed == "i64" or allowed == "num":
            return w == 64
        if allowed == "i1":
            return w == 1
        return allowed == "any" and w in (1, 64)
    return False


def is_float(t: Attribute) -> bool:
    return isinstance(t, FLOATS)


def stat_type(t: Attribute) -> Attribute:
    """The element type statistics of `t` values are computed in (as
    PyTorch's norms, softmax and attention do): f32 for 16-bit floats, `t`
    itself otherwise."""
    return Float32Type() if isinstance(t, (BFloat16Type, Float16Type)) else t


class FusionOp(IRDLOperation):
    """Base of the tensor ops: the custom syntax, verification, and the
    defaults of the interfaces of `fuserc.dialects.interfaces`.

    Class facts a subclass sets:
    - OPERANDS: operand names in order (`name?` optional, `*name` variadic),
      as the Python builder takes them;
    - KEYWORDS: ((name, kind), ...) printed in this order, kind 'ints',
      'int', 'bool' or 'float'; DEFAULTS the values of the optional ones;
      LEADING: one keyword printed as a bare literal right after the op
      name (a constant's value);
    - ELEMENTS: the element kind of every operand, or one per operand;
    - RESULT: what the result type needs besides the operands ('' inferred,
      'shape', 'dtype' or 'shape,dtype': the builder asks for them);
    - POINTWISE: one result element from the same-index elements of the
      (broadcast) operands, so the op fuses into elementwise kernels;
    - INDEXED: the op depends on where its local blocks lie in the global
      tensors (an iota, dropout's mask): lowering records the global types
      (`GLOBAL_ATTR`) and `reference` reads them through its EvalContext;
    - ROWWISE: the op is a normalization of each row along its last dim
      that the cuda backend's row kernels compute in one pass when it is a
      launch region of its own ('softmax', 'log_softmax',
      'cross_entropy': runtime/kernels/cuda_rows.py);
    - RESULTS: result names in order (`name?` optional); results after the
      first have the types `more_results` gives and the shardings
      `more_shardings` derives from the first's;
    - ALONE: the op is a launch region of its own, run by a kernel of its
      own on both backends (attention: runtime/kernels/attention.py);
    - `torch_alone()`, `torch_out(args, out)`: PyTorch's own kernel for
      the op (its `reference` writing `out`) outruns Inductor's where the
      op is a launch region by itself, which the cuda backend then runs
      with it (runtime/kernels/torch_regions.py), where `torch_fits(args,
      out)` takes the buffers as they are.
    """

    OPERANDS: ClassVar[tuple[str, ...]] = ()
    KEYWORDS: ClassVar[tuple[tuple[str, str], ...]] = ()
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    LEADING: ClassVar[str | None] = None
    ELEMENTS: ClassVar[str | tuple[str, ...]] = "float"
    RESULT: ClassVar[str] = ""
    POINTWISE: ClassVar[bool] = False
    INDEXED: ClassVar[bool] = False
    ROWWISE: ClassVar[str | None] = None
    RESULTS: ClassVar[tuple[str, ...]] = ("result",)
    ALONE: ClassVar[bool] = False
    PY_ARGS: ClassVar[tuple[str, ...] | None] = None
    """The Python builder's positional arguments after the operands
    (default: the keywords in order, then the RESULT items)."""
    ATTRS: ClassVar[tuple[str, ...]] = ()
    """String attributes (in the attribute dictionary) the builder takes."""
    DEFAULT_DTYPE: ClassVar[str | None] = None
    """The result element type the builder uses when none is given."""
    WEIGHTS: ClassVar[tuple[int, ...]] = ()
    """Operands that stay where the user placed them when the op can
    compute from them in place, even where moving them would cost fewer
    bytes: a GEMM's weight (a row-parallel layer stays GEMM + ReduceScatter
    instead of gathering its weight, as in nvFuser), an embedding table
    split over its vocabulary (lookups are summed across devices, the table
    is never gathered, as Megatron's vocabulary-parallel embedding)."""

    # -- syntax ---------------------------------------------------------------
    @classmethod
    def parse(cls, parser: Parser):
        pos = parser.pos
        unresolved = []
        props: dict[str, Attribute] = {}
        kinds = dict(cls.KEYWORDS)
        if cls.LEADING is not None:
            props[cls.LEADING] = _parse_keyword_value(parser, cls.LEADING, kinds[cls.LEADING])
        else:
            first = parser.parse_optional_unresolved_operand()
            if first is not None:
                unresolved.append(first)
                while parser.parse_optional_punctuation(","):
                    unresolved.append(parser.parse_unresolved_operand())
        while True:
            key_pos = parser.pos
            if parser._current_token.text not in kinds and parser.lexer.input.content.count("\n", *_gap_before(parser)):
                break  # a word on the next line that is not a keyword: this op's type is missing
            key = parser.parse_optional_identifier()
            if key is None:
                break
            if key not in kinds or key == cls.LEADING:
                expected = ", ".join(k for k in kinds if k != cls.LEADING) or "none"
                hint = (
                    f"; '{key}' is an attribute: write it in the attribute dictionary, {cls.name} ... {{{key} = ...}} : ..."
                    if key in cls.ATTRS else ""
                )
                parser.raise_error(
                    f"unknown keyword '{key}' for {cls.name} (keywords: {expected}){hint}",
                    key_pos,
                    parser.pos,
                )
            if key in props:
                parser.raise_error(f"keyword '{key}' is given twice", key_pos, parser.pos)
            parser.parse_punctuation("=", f" after '{key}'")
            props[key] = _parse_keyword_value(parser, key, kinds[key])
        attrs = parser.parse_optional_attr_dict()
        if parser._current_token.text != ":":
            end, at = _gap_before(parser)
            where = (end - 1, end) if parser.lexer.input.content.count("\n", end, at) else (at, at + len(parser._current_token.text))
            parser.raise_error(f"expected ': (operand types) -> result type' after {cls.name}'s operands", *where)
        parser.parse_punctuation(":", f" before the type of {cls.name}")
        type_pos = parser.pos
        ftype = parser.parse_function_type()
        if len(ftype.inputs.data) != len(unresolved):
            parser.raise_error(
                f"{cls.name} has {len(unresolved)} operands but its type lists "
                f"{len(ftype.inputs.data)}",
                type_pos,
            )
        low, high = cls.result_counts()
        if not low <= len(ftype.outputs.data) <= high:
            counts = "one result" if high == 1 else f"{low} to {high} results" if low != high else f"{high} results"
            parser.raise_error(
                f"{cls.name} has {counts} but its type lists {len(ftype.outputs.data)}",
                type_pos,
            )
        operands = parser.resolve_operands(unresolved, ftype.inputs.data, pos)
        try:
            grouped = cls.group_operands(operands)  # raises when their number cannot fit
            if flat_definition(cls):  # IRDL's builder would only count what is counted above
                op = cls.__new__(cls)
                Operation.__init__(op, operands=operands, result_types=ftype.outputs.data, properties=props, attributes=attrs)
                return op
            return cls.build(
                operands=grouped,
                result_types=cls.group_results(list(ftype.outputs.data)),
                properties=props,
                attributes=attrs,
            )
        except (VerifyException, ValueError) as e:
            parser.raise_error(str(e), pos, type_pos)

    @classmethod
    def group_operands(cls, operands: Sequence[SSAValue]) -> list:
        """Operands grouped as the op's operand definitions expect them (an
        optional one as a list of 0 or 1); raises VerifyException when their
        number cannot fit `OPERANDS`."""
        names = cls.OPERANDS
        if any(n.startswith("*") for n in names):
            return [list(operands)]
        required = [n for n in names if not n.endswith("?")]
        if not len(required) <= len(operands) <= len(names):
            counts = f"{len(required)}" if len(required) == len(names) else f"{len(required)} or {len(names)}"
            listing = ", ".join(n.rstrip("?") + ("?" if n.endswith("?") else "") for n in names)
            raise VerifyException(f"{cls.name} takes {counts} operands ({listing}), got {len(operands)}")
        out: list = []
        for i, n in enumerate(names):
            if n.endswith("?"):
                out.append(list(operands[i : i + 1]))
            else:
                out.append(operands[i])
        return out

    @classmethod
    def group_results(cls, types: Sequence[Attribute]) -> list:
        """Result types grouped as the op's result definitions expect them
        (an optional one as a list of 0 or 1)."""
        out: list = []
        for i, n in enumerate(cls.RESULTS):
            out.append(list(types[i : i + 1]) if n.endswith("?") else types[i])
        return out

    def print(self, printer: Printer) -> None:
        if self.LEADING is not None:
            value = self.properties.get(self.LEADING)
            assert value is not None
            printer.print_string(" " + _format_keyword_value(value, dict(self.KEYWORDS)[self.LEADING]))
        elif self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        for key, kind in self.KEYWORDS:
            value = self.properties.get(key)
            if value is not None and key != self.LEADING:
                printer.print_string(f" {key} = {_format_keyword_value(value, kind)}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_operation_type(self)

    @classmethod
    def result_counts(cls) -> tuple[int, int]:
        """(fewest, most) results the op may have (`RESULTS`)."""
        return sum(1 for n in cls.RESULTS if not n.endswith("?")), len(cls.RESULTS)

    # -- keywords -------------------------------------------------------------
    def rowwise(self) -> str | None:
        """ROWWISE when this op normalizes its first operand's rows (along
        its last dim; cross_entropy's classes always are)."""
        if self.ROWWISE is None or self.ROWWISE == "cross_entropy":
            return self.ROWWISE
        return self.ROWWISE if self.keyword("dim") == len(shape_of(self.operands[0])) - 1 else None

    def torch_alone(self) -> bool:
        """Whether a launch region of this op alone runs PyTorch's kernel
        (`torch_out`) rather than Inductor's, on the cuda backend."""
        return False

    def torch_out(self, args: list[Any], out: Any) -> None:
        """PyTorch's kernel for the op (its `reference`), writing `out`:
        what a launch region of the op alone runs where `torch_alone()`."""
        raise NotImplementedError(f"{self.name} has no torch_out")

    def torch_fits(self, args: list[Any], out: Any) -> bool:
        """Whether `torch_out` takes these tensors as they are (an
        elementwise op: operands of the output's shape and dtype, nothing
        to broadcast)."""
        return all(a.dtype == out.dtype and a.shape == out.shape for a in args)

    def lowered_attributes(self) -> dict[str, Attribute]:
        """Facts about the op known from the ops around it, which its copy
        on local blocks (in a launch region, where its operands are the
        region's arguments) keeps as attributes (lower-to-host-ir)."""
        return {}

    def keyword(self, key: str) -> Any:
        """Python value of a keyword attribute (its DEFAULTS entry, or None,
        when absent)."""
        value = self.properties.get(key)
        if value is None:
            return self.DEFAULTS.get(key)
        return keyword_value(value)

    def keywords(self) -> dict[str, Any]:
        """Every keyword given on this op, as Python values."""
        return {k: keyword_value(v) for k, v in self.properties.items() if k in dict(self.KEYWORDS)}

    # -- types (shared by the verifier and the builders) -------------------------
    @classmethod
    def element_kinds(cls, n: int) -> tuple[str, ...]:
        kinds = cls.ELEMENTS
        if isinstance(kinds, str):
            return (kinds,) * n
        return tuple(kinds[:n])

    @classmethod
    def infer(
        cls, operands: Sequence[TensorType], kw: dict[str, Any], result: TensorType | None = None
    ) -> tuple[Shape, Attribute]:
        """(shape, element type) of the result of this op on `operands` with
        keywords `kw` (missing ones take DEFAULTS); `result` is the declared
        result type, which ops with RESULT need. Raises ShapeError or
        VerifyException."""
        kw = {**cls.DEFAULTS, **{k: v for k, v in kw.items() if v is not None}}
        elems = [t.element_type for t in operands]
        for i, (e, kind) in enumerate(zip(elems, cls.element_kinds(len(elems)))):
            if not elem_ok(e, kind):
                what = {"float": "a float", "num": "a float or i64", "any": "a float, i64 or i1",
                        "i64": "i64", "i1": "i1"}[kind]
                raise VerifyException(f"operand #{i} has element type {e}; it must be {what}")
        cls.check_elements(elems, kw)
        shape = tuple(cls.result_shape([tuple(t.get_shape()) for t in operands], kw, result))
        return shape, cls.result_element(elems, kw, result)

    @classmethod
    def result_shape(cls, shapes: list[Shape], kw: dict[str, Any], result: TensorType | None) -> Shape:
        raise NotImplementedError

    @classmethod
    def check_elements(cls, elems: list[Attribute], kw: dict[str, Any]) -> None:
        """Operands of the same kind share one element type (no implicit
        promotion: a `cast` says it)."""
        kinds = cls.element_kinds(len(elems))
        shared = [e for e, k in zip(elems, kinds) if k in ("float", "num", "any")]
        if len(set(shared)) > 1:
            raise VerifyException(
                "operands must have one element type, got " + ", ".join(str(e) for e in shared)
            )

    @classmethod
    def result_element(cls, elems: list[Attribute], kw: dict[str, Any], result: TensorType | None) -> Attribute:
        kinds = cls.element_kinds(len(elems))
        return next(e for e, k in zip(elems, kinds) if k in ("float", "num", "any"))

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
        res = _tensor(self.results[0])
        try:
            expected, want = self.infer([_tensor(v) for v in self.operands], self.keywords(), res)
        except shapes.ShapeError as e:
            raise VerifyException(str(e)) from None
        if tuple(res.get_shape()) != expected:
            raise VerifyException(
                f"result shape {list(res.get_shape())} does not match "
                f"the expected {list(expected)}"
            )
        if res.element_type != want:
            raise VerifyException(
                f"result element type {res.element_type} does not match {want}"
            )
        low, high = self.result_counts()
        if not low <= len(self.results) <= high:
            raise VerifyException(f"{self.name} has {low} to {high} results, got {len(self.results)}")
        more = self.more_results([_tensor(v) for v in self.operands], self.keywords(), res)
        for k, (r, (shape, elem)) in enumerate(zip(self.results[1:], more), 1):
            t = _tensor(r)
            name = self.RESULTS[k].rstrip("?")
            if tuple(t.get_shape()) != tuple(shape) or t.element_type != elem:
                raise VerifyException(
                    f"result #{k} ({name}) has type {_type_text(t)}, expected "
                    f"{_type_text(TensorType(elem, list(shape)))}"
                )
        first = sharding_of(res)
        if first is not None and len(self.results) > 1:
            for k, (r, s) in enumerate(zip(self.results[1:], self.more_shardings(first)), 1):
                if sharding_of(r) is not None and sharding_of(r) != s:
                    raise VerifyException(
                        f"result #{k} ({self.RESULTS[k].rstrip('?')}) has sharding {sharding_of(r)}; "
                        f"with the first result's {first} it must be {s}"
                    )
        verify_shardings(self, [*self.operands, *self.results])
        for err in alloc_order_errors(self):
            raise VerifyException(err)

    # -- results after the first ----------------------------------------------
    @classmethod
    def more_results(
        cls, operands: Sequence[TensorType], kw: dict[str, Any], first: TensorType
    ) -> list[tuple[Shape, Attribute]]:
        """(shape, element type) of each result after the first, in
        `RESULTS` order (an optional one included)."""
        return []

    def more_shardings(self, first: Sharding) -> list[Sharding]:
        """The shardings of the results after the first, from the first's:
        they lie as the first does (the passes keep them so)."""
        return []

    # -- interfaces (fuserc.dialects.interfaces) ------------------------------
    def sharding_map(self) -> OpMap | str:
        """How operand dimensions relate to the result's (an OpMap, or
        RESHAPE)."""
        raise NotImplementedError(f"{self.name} has no sharding rule")

    def reference(self, args: list[Any], ctx: EvalContext) -> Any:
        """The result on torch tensors `args` (PyTorch's semantics), in
        `ctx.accumulate` for floats when set, else in the declared dtypes;
        a tuple, one tensor per result, for an op with several."""
        raise NotImplementedError(f"{self.name} has no reference semantics")

    def kernel(self, m: Math, *args: Any) -> Any:
        """The formula of a POINTWISE op over `m`'s values."""
        raise NotImplementedError(f"{self.name} is not pointwise")

    def vjp(self, g: Any, cotangent: SSAValue) -> list[SSAValue | None]:
        """The vector-Jacobian product: one gradient per operand (None where
        there is none), built with `g` (a fusion builder) at global shapes."""
        from fuserc.diagnostics import error_at

        raise error_at(self, f"'{self.name}' has no derivative rule")

    def operand_domain(self, i: int) -> tuple[float, float] | None:
        """The range [low, high) random values of operand i are drawn from
        (`fuserc run` without -i): where the op is defined (an embedding's
        ids, log's argument) and well conditioned (weights scaled as PyTorch
        initializes them); None: standard normal values."""
        return None

    def with_results(self, count: int) -> "FusionOp":
        """This op (operands, properties, attributes, location) with its
        first `count` results, those after the first typed and sharded from
        it (`more_results`, `more_shardings`): an optional result asked for
        (`for_derivative`) or dropped where nothing reads it."""
        first = self.results[0].type
        assert isinstance(first, TensorType)
        s = sharding_of(first)
        more = self.more_results([v.type for v in self.operands], self.keywords(), first)[: count - 1]  # type: ignore[misc]
        shardings = self.more_shardings(s) if s is not None else [None for _ in more]
        types = [first, *(tensor_type(elem, shape, sh) for (shape, elem), sh in zip(more, shardings))]
        new = type(self).create(operands=list(self.operands), result_types=types, properties=dict(self.properties), attributes=dict(self.attributes))
        new.location = self.location
        return new

    def for_derivative(self) -> "FusionOp | None":
        """The op in the form its derivative rule reads, when that differs
        (autodiff replaces it in the forward): an sdpa that also returns the
        log-sum-exp its backward needs. None: the op as it is."""
        return None

    def expand(self, b: Any) -> SSAValue | tuple[SSAValue, ...] | None:
        """The op in simpler ops built with `b` (a fusion builder before the
        op), where its operands' shardings need statistics across devices
        (a tuple, one value per result, for an op with several); None when
        it has no such form."""
        return None


def keyword_value(value: Attribute) -> Any:
    """The Python value of a keyword attribute."""
    if isinstance(value, ArrayAttr):
        return [a.value.data for a in value.data]
    if isinstance(value, FloatAttr):
        return value.value.data
    if isinstance(value, IntegerAttr):
        return bool(value.value.data) if value.type == i1 else value.value.data  # xDSL's i1, not a new IntegerType per read (30 us)
    return value


def keyword_attr(value: Any, kind: str) -> Attribute:
    """A keyword's attribute from its Python value (the builders' side)."""
    if kind == "ints":
        return _int_array([int(v) for v in ([value] if isinstance(value, int) else value)])
    if kind == "int":
        return IntegerAttr(int(value), i64)
    if kind == "bool":
        return IntegerAttr(int(bool(value)), i1)
    if kind == "float":
        return FloatAttr(float(value), f64)
    raise AssertionError(kind)


def _tensor(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType)
    return v.type


_FLAT: dict[type[IRDLOperation], bool] = {}


def flat_definition(cls: type[IRDLOperation]) -> bool:
    """Whether `cls`'s definition has no variadic or optional operand,
    result, region or successor and no option (segment sizes): IRDL's
    builder then only checks its arguments' numbers, and `Operation`'s
    own constructor makes the same op. Once per class."""
    flat = _FLAT.get(cls)
    if flat is None:
        d = cls.get_irdl_definition()
        defs = [x for _, x in (*d.operands, *d.results, *d.regions, *d.successors)]
        flat = _FLAT[cls] = not d.options and not any(isinstance(x, VariadicDef) for x in defs)
    return flat


def shape_of(v: SSAValue | Attribute) -> tuple[int, ...]:
    """The static shape of a tensor-typed value, or of a tensor type: read
    once per type object (xDSL's `get_shape` builds it each time; passes ask
    for the shapes of the same few types many times)."""
    cls = type(v)  # the usual classes first: an isinstance check that misses an ABC is a Python call
    t = v._type if cls is OpResult or cls is BlockArgument else v.type if isinstance(v, SSAValue) else v  # type: ignore[union-attr]
    shape = t.__dict__.get("_fuserc_shape")
    if shape is None:
        assert isinstance(t, TensorType)
        shape = t.__dict__["_fuserc_shape"] = tuple(t.get_shape())
    return shape


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


_SPECIAL_FLOATS = {"inf": math.inf, "nan": math.nan}


def _gap_before(parser: Parser) -> tuple[int, int]:
    """(end of the text read so far, start of the next token): a newline
    between them means the op ended on its line (comments are skipped)."""
    at = parser.pos
    content = parser.lexer.input.content
    end = at
    while end > 0:
        line_start = content.rfind("\n", 0, end) + 1
        code = content[line_start:end]
        cut = code.find("//")
        code = code[:cut] if cut >= 0 else code
        if code.strip():
            return line_start + len(code.rstrip()), at
        end = line_start - 1
    return 0, at

def _parse_keyword_value(parser: Parser, key: str, kind: str) -> Attribute:
    if kind == "ints":
        return _int_array(_parse_int_list(parser))
    if kind == "int":
        return IntegerAttr(parser.parse_integer(allow_boolean=False), i64)
    if kind == "bool":
        return IntegerAttr(int(parser.parse_boolean()), i1)
    if kind == "float":
        negative = parser.parse_optional_punctuation("-") is not None
        word = parser.parse_optional_identifier()
        if word is not None:
            if word not in _SPECIAL_FLOATS:
                parser.raise_error(f"expected a number, inf or nan for '{key}', got '{word}'")
            value = _SPECIAL_FLOATS[word]
        else:
            value = float(parser.parse_number(allow_boolean=True, context_msg=f" for '{key}'"))
        return FloatAttr(-value if negative else value, f64)
    raise AssertionError(kind)


def format_float(v: float) -> str:
    """A float as MLIR reads it back exactly (`1.0e-05`, `0.125`, `inf`)."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + ("e" + exponent if exponent else "")


def _format_keyword_value(value: Attribute, kind: str) -> str:
    if kind == "ints":
        assert isinstance(value, ArrayAttr)
        return _fmt_ints(value)
    if kind == "float":
        assert isinstance(value, FloatAttr)
        return format_float(value.value.data)
    assert isinstance(value, IntegerAttr)
    if kind == "bool":
        return "true" if value.value.data else "false"
    return str(value.value.data)


TENSOR = TensorType.constr()


# ---- memory layout ---------------------------------------------------------

ALLOC_ORDER = "alloc_order"
"""Discardable attribute `alloc_order = array<i64: p0, p1, ...>` on an op
with a tensor result: the result's buffer holds its local block with
dimension p0 outermost and p(r-1) innermost, i.e. it is allocated as the
local shape permuted by p, contiguous, and the op's logical result is the
view `buffer.permute(inverse(p))`. On an op with several results it lays
out each result of its rank (attention's gradients), the others are
row-major. Absent means the identity (row-major). Function arguments are
always row-major."""


def alloc_order_attr(order: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(order))


def alloc_order_errors(op: Operation) -> list[str]:
    """Why `op`'s alloc_order attribute is malformed (empty when it is
    absent or valid: an array<i64> permutation of its first result's rank)."""
    attr = op.attributes.get(ALLOC_ORDER)
    if attr is None:
        return []
    if not op.results or not isinstance(op.results[0].type, TensorType):
        return [f"{ALLOC_ORDER} needs an op with a tensor result"]
    if not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
        return [f"{ALLOC_ORDER} must be an array<i64: ...>, got {attr}"]
    order = list(attr.get_values())
    rank = len(op.results[0].type.get_shape())
    if sorted(order) != list(range(rank)):
        return [f"{ALLOC_ORDER} = {order} is not a permutation of the {rank} dimensions of the result"]
    return []


def alloc_order_of(value: SSAValue) -> tuple[int, ...]:
    """The memory order of `value`'s buffer, outermost first."""
    ident = tuple(range(len(shape_of(value))))
    if type(value) is OpResult:
        attr = value.op.attributes.get(ALLOC_ORDER)
        if attr is not None and isinstance(attr, DenseArrayBase) and len(attr) == len(ident):
            return tuple(int(v) for v in attr.get_values())
    return ident


GLOBAL_ATTR = "fusion.global"
"""Discardable attribute on an INDEXED op computing on local blocks (inside
a `hir.launch`): `[T0, ..., Tn, R]`, the global types (with shardings) of
its operands and result, from which each rank knows where its blocks lie."""


# The op classes live in their families' modules (fusion_*.py), which import
# this one; `fuserc.dialects.fusion.AddOp`, `TENSOR_OPS` and the dialect
# `Fusion` are found through the registry module on first use.
def __getattr__(name: str) -> Any:
    from fuserc.dialects import fusion_ops

    try:
        return getattr(fusion_ops, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

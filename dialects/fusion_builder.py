"""Building fusion ops in IR with their result types inferred: the builder
that op expansions (`FusionOp.expand`) and derivative rules (`vjp`) write
in, at global shapes.

    b = FusionBuilder(before=op)
    y = b.op("mul", x, b.constant(0.5, like=x))
    s = b.op("sum", y, dims=[1], keepdim=True)

Each op is inserted before `before` with its location; results have no
sharding (the passes propagate one). Python numbers given as operands
become rank-0 constants of the element type of the op's first tensor
operand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects.builtin import TensorType, bf16, f16, f32, f64, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from fuserc.dialects.fusion import FusionOp, ShardingAttr, keyword_attr, sharding_of, stat_type, tensor_type
from fuserc.sharding import Mesh, Sharding

ELEMENT_TYPES: dict[str, Attribute] = {"f32": f32, "f16": f16, "bf16": bf16, "f64": f64, "i64": i64, "i1": i1}


def element_attr(dtype: str | Attribute) -> Attribute:
    """An IR element type from its name (`"bf16"`) or itself."""
    if isinstance(dtype, str):
        if dtype not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type '{dtype}' (one of {', '.join(ELEMENT_TYPES)})")
        return ELEMENT_TYPES[dtype]
    return dtype


def make_op(
    name: str,
    operands: Sequence[SSAValue],
    kw: dict[str, Any],
    shape: Sequence[int] | None = None,
    dtype: str | Attribute | None = None,
    result_encoding: Attribute | None = None,
    results: int | None = None,
) -> FusionOp:
    """A fusion op (not inserted) of `name` on `operands` with keywords `kw`
    (Python values), its result types inferred; `shape`/`dtype` give what
    the op cannot infer (its RESULT); `results` how many of its results it
    has (default: its required ones)."""
    from fuserc.dialects.fusion_ops import op_class

    cls = op_class(name)
    kinds = dict(cls.KEYWORDS)
    unknown = [k for k in kw if k not in kinds]
    if unknown:
        raise ValueError(f"fusion.{name} has no keyword {', '.join(unknown)} (keywords: {', '.join(kinds) or 'none'})")
    props = {k: keyword_attr(v, kinds[k]) for k, v in kw.items() if v is not None}
    types = [v.type for v in operands]
    assert all(isinstance(t, TensorType) for t in types)
    given = None
    if shape is not None or dtype is not None:
        elem = element_attr(dtype) if dtype is not None else (types[0].element_type if types else f32)  # type: ignore[union-attr]
        given = TensorType(elem, list(shape) if shape is not None else [])
    rshape, elem = cls.infer(types, kw, given)  # type: ignore[arg-type]
    # Unencoded result types from the shared constructor (`tensor_type`): one object per type.
    result = TensorType(elem, list(rshape), result_encoding) if result_encoding is not None else tensor_type(elem, tuple(rshape))
    count = cls.result_counts()[0] if results is None else results
    more = [tensor_type(e, tuple(s)) for s, e in cls.more_results(types, kw, result)[: count - 1]]  # type: ignore[arg-type]
    return cls.create(operands=list(operands), result_types=[result, *more], properties=props)


class FusionBuilder:
    """Inserts fusion ops before `before` (see the module docstring).

    `mesh_of` resolves mesh names for `mesh`; `created` lists the ops made,
    in order."""

    def __init__(self, before: Operation, mesh_of: Callable[[str], Mesh | None] | None = None):
        self.before = before
        self.mesh_of = mesh_of
        self.created: list[Operation] = []

    # -- reading ----------------------------------------------------------------
    def sharding(self, v: SSAValue) -> Sharding | None:
        return sharding_of(v)

    def local(self, *values: SSAValue) -> bool:
        """Whether each of `values` is whole on every device: no split over
        more than one device, no partial sum (False where a mesh is unknown)."""
        for v in values:
            s = sharding_of(v)
            if s is None:
                continue
            mesh = self.mesh_of(s.mesh) if self.mesh_of is not None else None
            if mesh is None or s.partial or any(mesh.axis_size(t) > 1 for t in s.device_types()):
                return False
        return True

    def mesh(self, name: str) -> Mesh:
        mesh = self.mesh_of(name) if self.mesh_of is not None else None
        if mesh is None:
            raise ValueError(f"unknown mesh @{name}")
        return mesh

    # -- making -------------------------------------------------------------------
    def op(self, name: str, *operands: SSAValue | float | int, **kw: Any) -> SSAValue:
        """The (first) result of a new `fusion.<name>` on `operands`
        (`op_results` says what else it takes)."""
        return self.op_results(name, *operands, **kw)[0]

    def op_results(
        self,
        name: str,
        *operands: SSAValue | float | int,
        shape: Sequence[int] | None = None,
        dtype: str | Attribute | None = None,
        hint: str | None = None,
        placed_as: SSAValue | None = None,
        results: int | None = None,
        **kw: Any,
    ) -> list[SSAValue]:
        """Every result of a new `fusion.<name>` on `operands`, keywords
        `kw`, `results` of them (default: the op's required ones); `shape`
        and `dtype` give what the op cannot infer; with `placed_as`, the
        result is placed as that value (where it has a sharding): an op with
        no operands to take one from, an iota say, then computes only the
        blocks its users need."""
        tensors = [v for v in operands if isinstance(v, SSAValue)]
        # numbers take the element type of the values they combine with (not of a where's condition)
        like = next((v for v in tensors if v.type.element_type != i1), tensors[0] if tensors else None)  # type: ignore[attr-defined]
        values = [v if isinstance(v, SSAValue) else self.constant(v, like=like) for v in operands]
        placed = sharding_of(placed_as) if placed_as is not None else None
        encoding = ShardingAttr.get(placed.placement().with_partial(None)) if placed is not None else None
        op = make_op(name, values, kw, shape, dtype, encoding, results)
        op.location = self.before.location
        Rewriter.insert_op(op, InsertPoint.before(self.before))
        self.created.append(op)
        if hint is not None:
            base = next((v.name_hint for v in values if v.name_hint), None)
            op.results[0].name_hint = f"{base}_{hint}" if base else hint
        return list(op.results)

    def constant(self, value: float, like: SSAValue | None = None, dtype: str | Attribute | None = None) -> SSAValue:
        """A rank-0 constant of `like`'s element type (or `dtype`)."""
        if dtype is None:
            assert like is not None and isinstance(like.type, TensorType), "a constant needs a dtype or a tensor like it"
            dtype = like.type.element_type
        return self.op("constant", value=float(value), dtype=dtype)

    def stat(self, x: SSAValue) -> SSAValue:
        """`x` in the type statistics are computed in: f32 for 16-bit floats
        (as PyTorch's norms and softmax do), `x` itself otherwise."""
        t = x.type
        assert isinstance(t, TensorType)
        want = stat_type(t.element_type)
        return self.op("cast", x, dtype=want) if want != t.element_type else x

    def unstat(self, y: SSAValue, like: SSAValue) -> SSAValue:
        """`y` cast back to `like`'s element type where `stat` changed it."""
        want = like.type.element_type  # type: ignore[attr-defined]
        if y.type.element_type != want:  # type: ignore[attr-defined]
            return self.op("cast", y, dtype=want)
        return y



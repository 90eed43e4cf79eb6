"""The Python API: build, shard, print and run fusion programs from Python.

As nvFuser's FusionDefinition: define input tensors, call ops (`fd.ops.*`),
add outputs, then a schedule step shards tensors over meshes. The builder
emits the same fusion IR text that `fuserc opt` reads (`to_mlir`), and
`FusionDefinition.from_mlir` gives a builder back from text.

    fd = FusionDefinition()
    x = fd.define_tensor([64, 16], "f32")
    w = fd.define_tensor([16, 8], "f32")
    fd.add_output(fd.ops.gelu(fd.ops.matmul(x, w)))
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["DIDx", "-"])
    program = fd.compile()                 # fuserc.runtime Program
    outs = program.execute([x_np, w_np])   # under mpiexec, one process a rank
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fuserc import shapes
from fuserc.diagnostics import Diagnostic
from fuserc.sharding import Mesh, Sharding, format_axis, parse_axis

DTYPES = ("f32", "f16", "bf16", "f64", "i64", "i1")


@dataclass(eq=False)
class Tensor:
    """A value of the definition: global shape, element type, sharding.

    Arithmetic operators build ops of its definition: `x @ w`, `x * y`,
    `x + 1`, `-x`, `x / 2` (Python numbers become rank-0 constants)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    sharding: Sharding | None = None
    fd: "FusionDefinition | None" = field(default=None, repr=False)

    def type_text(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        body = f"{dims}x{self.dtype}" if self.shape else self.dtype
        return f"tensor<{body}, {self.sharding}>" if self.sharding else f"tensor<{body}>"

    def __repr__(self) -> str:
        return f"Tensor(%{self.name}: {self.type_text()})"

    def _op(self, name: str, *operands: Any) -> "Tensor":
        assert self.fd is not None
        return self.fd.ops.op(name, *operands)

    def __add__(self, other: Any) -> "Tensor":
        return self._op("add", self, other)

    def __radd__(self, other: Any) -> "Tensor":
        return self._op("add", other, self)

    def __sub__(self, other: Any) -> "Tensor":
        return self._op("sub", self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        return self._op("sub", other, self)

    def __mul__(self, other: Any) -> "Tensor":
        return self._op("mul", self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        return self._op("mul", other, self)

    def __truediv__(self, other: Any) -> "Tensor":
        return self._op("div", self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return self._op("div", other, self)

    def __matmul__(self, other: Any) -> "Tensor":
        return self._op("matmul", self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        return self._op("matmul", other, self)

    def __neg__(self) -> "Tensor":
        return self._op("neg", self)


@dataclass
class _Op:
    name: str
    operands: list[Tensor]
    result: Tensor
    keywords: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=dict)
    more: list[Tensor] = field(default_factory=list)
    """Results after the first (an sdpa's log-sum-exp, read from IR)."""


class _Ops:
    """`fd.ops.NAME(...)`: one builder per fusion op, made from the op
    class's own facts (`fuserc.dialects.fusion_ops`): its operands first
    (`OPERANDS`; a list for concat's; Python numbers become rank-0
    constants of the other operands' element type), then its keywords in
    order (`KEYWORDS`, an int where dims are expected), then what its result
    needs (`RESULT`: shape, dtype), positionally or by name; gelu takes
    `approximate`. Each builder has a real signature (`builder_signature`)
    and the op class's docstring: `help(fd.ops.layer_norm)` shows both."""

    def __init__(self, fd: "FusionDefinition"):
        self._fd = fd

    def __dir__(self) -> list[str]:
        from fuserc.dialects.fusion_ops import BY_NAME

        return sorted(set(super().__dir__()) | set(BY_NAME))

    def __getattr__(self, name: str) -> Any:
        from fuserc.dialects.fusion_ops import BY_NAME

        if name.startswith("_") or name not in BY_NAME:
            raise AttributeError(f"fusion has no op '{name}' (ops: {', '.join(sorted(BY_NAME))})")

        def build(*args: Any, **kwargs: Any) -> Tensor:
            return self.op(name, *args, **kwargs)

        build.__name__ = build.__qualname__ = name
        build.__doc__ = builder_doc(BY_NAME[name])
        build.__signature__ = builder_signature(BY_NAME[name])  # type: ignore[attr-defined]
        return build

    def op(self, name: str, *args: Any, **kwargs: Any) -> Tensor:
        """`fusion.<name>` on `args` (see the class docstring). A call that
        fails leaves the definition as it was (no constant made for it)."""
        fd = self._fd
        made = len(fd._ops)
        try:
            return self._build(name, list(args), kwargs)
        except Diagnostic:
            for dropped in fd._ops[made:]:
                fd._known.discard(dropped.result)
            del fd._ops[made:]
            raise

    def _build(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Tensor:
        from fuserc.dialects.fusion_ops import BY_NAME

        cls = BY_NAME[name]
        where = f"fusion.{name}"
        operands: list[Any] = []
        for n in cls.OPERANDS:
            if n.startswith("*"):  # concat([a, b], 0) or concat(a, b, dim=0)
                if args and isinstance(args[0], (list, tuple)):
                    operands = list(args.pop(0))
                else:
                    while args and isinstance(args[0], Tensor):
                        operands.append(args.pop(0))
                break
            key, optional = n.rstrip("?"), n.endswith("?")
            # A number after the operands is a keyword (layer_norm(x, w, 1):
            # dims = [1]), not an optional operand (give that one by name).
            number = isinstance(args[0], (int, float)) if args else False
            if args and (isinstance(args[0], Tensor) or (number and not optional) or (optional and args[0] is None)):
                value = args.pop(0)
            else:
                value = kwargs.pop(key, None)
            if value is None:
                if optional:
                    continue
                raise Diagnostic(f"{where}: missing operand '{key}'")
            operands.append(value)
        kinds = dict(cls.KEYWORDS)
        params = list(cls.PY_ARGS or [*kinds, *[r for r in cls.RESULT.split(",") if r]])
        values: dict[str, Any] = {}
        for p, v in zip(params, args):
            values[p] = v
        if len(args) > len(params):
            raise Diagnostic(f"{where}: too many arguments ({len(args)} after the operands; takes {', '.join(params) or 'none'})")
        for k, v in kwargs.items():
            if k in values:
                raise Diagnostic(f"{where}: '{k}' given twice")
            values[k] = v
        attrs = {a: values.pop(a) for a in cls.ATTRS if a in values}
        optional = _optional_results(cls)
        asked = [i for i, r in enumerate(optional) if values.pop(r, False)]
        shape = values.pop("shape", None)
        dtype = values.pop("dtype", None) or cls.DEFAULT_DTYPE
        unknown = [k for k in values if k not in kinds]
        if unknown:
            raise Diagnostic(f"{where}: unknown argument {', '.join(unknown)} (takes {', '.join(params) or 'no keywords'})")
        keywords = {k: _kw_value(v, kinds[k]) for k, v in values.items() if v is not None and v != cls.DEFAULTS.get(k)}
        kinds_of = cls.element_kinds(len(operands))
        tensors = self._operands(where, operands, kinds_of)
        result = self._infer(where, cls, tensors, keywords, shape, dtype)
        more = self._more(cls, tensors, keywords, result, cls.result_counts()[0] + (asked[-1] + 1 if asked else 0))
        self._add(name, tensors, result, keywords, {k: f'"{v}"' for k, v in attrs.items() if v != "none"}, more)
        return (result, *more) if more else result

    def _more(self, cls: Any, operands: list[Tensor], keywords: dict[str, Any], result: Tensor, count: int) -> list[Tensor]:
        """The results after the first of the `count` the op has (sdpa_grad's
        cotangents of k and v; sdpa's log-sum-exp when asked for with
        `lse=True`), as tensors of this definition."""
        from xdsl.dialects.builtin import TensorType

        from fuserc.dialects.fusion_builder import element_attr

        if count == 1:
            return []
        types = [TensorType(element_attr(t.dtype), list(t.shape)) for t in operands]
        first = TensorType(element_attr(result.dtype), list(result.shape))
        return [self._fd._new_tensor(tuple(s), _dtype_of(e)) for s, e in cls.more_results(types, keywords, first)[: count - 1]]

    def _operands(self, where: str, operands: list[Any], kinds: Sequence[str]) -> list[Tensor]:
        """Tensors of this definition; a number becomes a rank-0 constant:
        i64 or i1 where the operand must be, else of the element type of the
        op's tensor operands of the same kind."""
        fd = self._fd
        out: list[Tensor] = []
        for t, kind in zip(operands, kinds):
            if isinstance(t, bool) or not isinstance(t, (Tensor, int, float)):
                raise Diagnostic(f"{where}: operand {t!r} is not a tensor of this definition or a number")
            if not isinstance(t, Tensor):
                like = kind if kind in ("i64", "i1") else next(
                    (o.dtype for o, k in zip(operands, kinds) if isinstance(o, Tensor) and k == kind), None
                )
                if like is None:
                    raise Diagnostic(f"{where}: a number operand needs a tensor operand to take its type from")
                t = self.op("constant", float(t), dtype=like)
            elif t not in fd._known:
                raise Diagnostic(f"{where}: operand {t!r} is not a tensor of this definition")
            out.append(t)
        return out

    def _infer(self, where: str, cls: Any, operands: list[Tensor], keywords: dict[str, Any],
               shape: Any, dtype: Any) -> Tensor:
        from xdsl.dialects.builtin import TensorType
        from xdsl.utils.exceptions import VerifyException

        from fuserc.dialects.fusion_builder import element_attr

        types = [TensorType(element_attr(t.dtype), list(t.shape)) for t in operands]
        given = None
        if shape is not None or dtype is not None:
            elem = element_attr(_dtype(dtype)) if dtype is not None else (types[0].element_type if types else None)
            if elem is None:
                raise Diagnostic(f"{where}: give its dtype")
            given = TensorType(elem, [int(e) for e in (shape if shape is not None else [])])
        try:
            rshape, elem = cls.infer(types, keywords, given)
        except (shapes.ShapeError, VerifyException, KeyError, ValueError) as e:
            what = f"missing keyword {e}" if isinstance(e, KeyError) else str(e)
            raise Diagnostic(f"{where}: {what}") from None
        return self._fd._new_tensor(tuple(rshape), _dtype_of(elem))

    def _add(self, name: str, operands: list[Tensor], result: Tensor, keywords: dict[str, Any],
             attrs: dict[str, str], more: list[Tensor] | None = None) -> Tensor:
        self._fd._ops.append(_Op(name, list(operands), result, keywords, attrs, list(more or [])))
        return result


_ANNOTATIONS: dict[str, Any] = {"ints": list[int] | int, "int": int, "float": float, "bool": bool, "shape": list[int], "dtype": str}
"""The Python type a builder takes for each kind of keyword (KEYWORDS) and
result need (RESULT)."""


@functools.cache
def builder_signature(cls: type) -> inspect.Signature:
    """The signature of `fd.ops.<op>`, from the op class's facts: operands
    (OPERANDS; `name?` optional, `*name` variadic), then keywords and what
    the result needs (PY_ARGS, else KEYWORDS then RESULT), required unless
    they have a default (DEFAULTS, DEFAULT_DTYPE) or are optional properties
    of the op (None: absent), then string attributes (ATTRS) by name. After
    an optional or variadic operand the rest are keyword-only: a call may
    still give them positionally (`layer_norm(x, w, [2])`), which a Python
    signature cannot say."""
    from xdsl.irdl import OptPropertyDef

    P = inspect.Parameter
    properties = cls.get_irdl_definition().properties
    kinds = dict(cls.KEYWORDS)
    params: list[inspect.Parameter] = []
    kind = P.POSITIONAL_OR_KEYWORD
    for n in cls.OPERANDS:
        if n.startswith("*"):
            params.append(P(n[1:], P.VAR_POSITIONAL, annotation=Tensor))
            kind = P.KEYWORD_ONLY
        elif n.endswith("?"):
            params.append(P(n[:-1], kind, default=None, annotation=Tensor | None))
            kind = P.KEYWORD_ONLY
        else:
            params.append(P(n, kind, annotation=Tensor | float))
    for n in cls.PY_ARGS or [*kinds, *[r for r in cls.RESULT.split(",") if r]]:
        if n in cls.DEFAULTS:
            default = cls.DEFAULTS[n]
        elif n == "dtype" and cls.DEFAULT_DTYPE is not None:
            default = cls.DEFAULT_DTYPE
        elif isinstance(properties.get(n), OptPropertyDef):
            default = None
        else:
            default = P.empty
        if default is P.empty and params and params[-1].default is not P.empty and kind is P.POSITIONAL_OR_KEYWORD:
            kind = P.KEYWORD_ONLY  # a required one after an optional one
        annotation = _ANNOTATIONS[kinds.get(n, n)]
        params.append(P(n, kind, default=default, annotation=annotation if default is P.empty or default is not None else annotation | None))
    params += [P(a, P.KEYWORD_ONLY, default=None, annotation=str | None) for a in cls.ATTRS]
    params += [P(r, P.KEYWORD_ONLY, default=False, annotation=bool) for r in _optional_results(cls)]
    return inspect.Signature(params, return_annotation=Tensor)


def _optional_results(cls: type) -> list[str]:
    """The op's optional results (`lse?` of sdpa): the builder returns them
    too, after the others, when called with `name=True`."""
    return [r[:-1] for r in cls.RESULTS if r.endswith("?")]


def builder_doc(cls: type) -> str:
    """`help(fd.ops.<op>)`: the op class's documentation, then how the
    builder reads its arguments."""
    import textwrap

    doc = inspect.cleandoc(cls.__doc__ or "")
    how = (
        f"Builds `{cls.name}` (docs/language.md) in this definition and returns its result. Operands are "
        "tensors of the definition, or Python numbers (rank-0 constants of the other operands' element type); "
        "keywords may follow the operands positionally, in the signature's order."
        + "".join(f" With {r}=True it returns a tuple, the {r} result last." for r in _optional_results(cls))
    )
    return f"{doc}\n\n{textwrap.fill(how, 76)}"


class _Schedule:
    """`fd.sched`: meshes and shardings (DIDx/DIDy/DIDz, Stream(S), nesting)."""

    def __init__(self, fd: "FusionDefinition"):
        self._fd = fd

    def mesh(self, name: str, shape: Sequence[int], devices: Sequence[int] | None = None) -> Mesh:
        mesh = Mesh(name, tuple(shape), tuple(devices or ()))
        self._fd._meshes[name] = mesh
        return mesh

    def shard(
        self, t: Tensor, mesh: str | Mesh, axes: Sequence[str], partial: str | Sequence[str] | None = None
    ) -> Tensor:
        """Give `t` a sharding, one axis text per dimension: "-", "DIDx",
        "Stream(4)", "Stream(2)*DIDx", ...; `partial`: the device type, or
        types, over whose mesh axes `t` is a partial sum."""
        name = mesh.name if isinstance(mesh, Mesh) else mesh
        if name not in self._fd._meshes:
            raise Diagnostic(f"unknown mesh @{name}: declare it with fd.sched.mesh first")
        try:
            sharding = Sharding(name, tuple(parse_axis(a) for a in axes), partial)
        except ValueError as e:
            raise Diagnostic(str(e)) from None
        errs = sharding.errors(t.shape, self._fd._meshes[name])
        if errs:
            raise Diagnostic(f"invalid sharding {sharding} for {t!r}: {errs[0]}")
        t.sharding = sharding
        return t

    def __getattr__(self, name: str) -> Any:
        """A name that is not the schedule's: where it lives, when it is
        fuserc's (`fd.sched.shard_tensor`)."""
        if name in __all__ and not name.startswith("_"):
            raise AttributeError(f"fd.sched has no {name!r}; it is fuserc.api.{name}")
        raise AttributeError(f"fd.sched has no {name!r}; it has mesh, shard and parallelize")

    def parallelize(self, t: Tensor, dim: int, ptype: str, mesh: str | None = None) -> Tensor:
        """Add split `ptype` (outermost) to dimension `dim` of `t`."""
        mesh_name = mesh or (t.sharding.mesh if t.sharding else self._fd._only_mesh())
        axes = t.sharding.axes_text() if t.sharding else ["-"] * len(t.shape)
        cur = axes[dim]
        axes[dim] = ptype if cur == "-" else f"{ptype}*{cur}"
        return self.shard(t, mesh_name, axes, t.sharding.partial if t.sharding else None)


class FusionDefinition:
    """Builds one fusion function (`func.func @NAME`) and the meshes it uses."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.ops = _Ops(self)
        self.sched = _Schedule(self)
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._ops: list[_Op] = []
        self._meshes: dict[str, Mesh] = {}
        self._known: set[Tensor] = set()
        self._counter = itertools.count()
        self._propagated: tuple[str, dict[str, Sharding | None]] | None = None  # (text, sharding by name)

    def __enter__(self) -> "FusionDefinition":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    # -- definition ----------------------------------------------------------
    def _new_tensor(self, shape: tuple[int, ...], dtype: str, name: str | None = None) -> Tensor:
        t = Tensor(name or f"t{next(self._counter)}", shape, dtype, fd=self)
        self._known.add(t)
        return t

    def define_tensor(self, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        t = self._new_tensor(tuple(int(s) for s in shape), _dtype(dtype), f"in{len(self._inputs)}")
        self._inputs.append(t)
        return t

    def add_output(self, t: Tensor) -> None:
        if t not in self._known:
            raise Diagnostic(f"{t!r} is not a tensor of this definition")
        self._outputs.append(t)

    @property
    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[Tensor]:
        return list(self._outputs)

    def _only_mesh(self) -> str:
        if len(self._meshes) != 1:
            raise Diagnostic("name the mesh: the definition has " f"{len(self._meshes)} meshes")
        return next(iter(self._meshes))

    # -- text -----------------------------------------------------------------
    def to_mlir(self) -> str:
        """The fusion IR text of this definition (what `fuserc opt` reads)."""
        lines = []
        for m in self._meshes.values():
            line = f"fusion.mesh @{m.name} shape = [{', '.join(map(str, m.shape))}]"
            if m.devices != tuple(range(m.size)):
                line += f" devices = [{', '.join(map(str, m.devices))}]"
            lines.append(line)
        args = ", ".join(f"%{t.name}: {t.type_text()}" for t in self._inputs)
        res = ", ".join(t.type_text() for t in self._outputs)
        lines.append(f"func.func @{self.name}({args}) -> ({res}) {{")
        from fuserc.dialects.fusion_ops import BY_NAME

        for op in self._ops:
            cls = BY_NAME[op.name]
            kinds = dict(cls.KEYWORDS)
            if cls.LEADING is not None:
                operands = _kw_text(op.keywords[cls.LEADING], kinds[cls.LEADING])
            else:
                operands = ", ".join(f"%{t.name}" for t in op.operands)
            kws = "".join(
                f" {k} = {_kw_text(op.keywords[k], kind)}" for k, kind in cls.KEYWORDS
                if k in op.keywords and k != cls.LEADING
            )
            attrs = (
                " {" + ", ".join(f"{k} = {v}" for k, v in op.attrs.items()) + "}" if op.attrs else ""
            )
            tys = ", ".join(t.type_text() for t in op.operands)
            results = [op.result, *op.more]
            names = ", ".join(f"%{t.name}" for t in results)
            rtys = results[0].type_text() if len(results) == 1 else "(" + ", ".join(t.type_text() for t in results) + ")"
            lines.append(
                f"  {names} = fusion.{op.name}{' ' if operands else ''}{operands}{kws}{attrs} : ({tys}) -> {rtys}"
            )
        outs = ", ".join(f"%{t.name}" for t in self._outputs)
        out_tys = ", ".join(t.type_text() for t in self._outputs)
        lines.append(f"  func.return {outs} : {out_tys}" if self._outputs else "  func.return")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_mlir()

    def verify(self) -> None:
        """Parse and verify the emitted text (a Diagnostic if invalid)."""
        from fuserc.ir import parse

        parse(self.to_mlir(), f"<FusionDefinition {self.name}>")

    def sharding_of(self, t: Tensor) -> Sharding | None:
        """The sharding the program uses for `t`: the one written, else the
        one propagate-shardings gives it (None in a definition without a
        mesh: the tensor is whole on its one device)."""
        if t not in self._known:
            raise Diagnostic(f"{t!r} is not a tensor of this definition")
        if t.sharding is not None or not self._meshes:
            return t.sharding
        text = self.to_mlir()
        if self._propagated is None or self._propagated[0] != text:
            from xdsl.dialects.func import FuncOp

            from fuserc.dialects.fusion import sharding_of
            from fuserc.ir import parse
            from fuserc.pipeline import run_pipeline

            module = run_pipeline(parse(text, f"<FusionDefinition {self.name}>"), "propagate-shardings")
            func = next(f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data == self.name)
            values = [*func.body.block.args, *(r for op in func.body.block.ops for r in op.results)]
            self._propagated = (text, {v.name_hint: sharding_of(v) for v in values if v.name_hint})
        return self._propagated[1].get(t.name)

    @staticmethod
    def from_mlir(text: str, entry: str = "main", filename: str = "<string>") -> "FusionDefinition":
        """A builder holding function `entry` of fusion IR `text`."""
        from xdsl.dialects.builtin import TensorType
        from xdsl.dialects.func import FuncOp, ReturnOp

        from fuserc.dialects.fusion import FusionOp, MeshOp, sharding_of
        from fuserc.ir import parse

        module = parse(text, filename)
        fd = FusionDefinition(entry)
        for op in module.ops:
            if isinstance(op, MeshOp):
                m = op.model
                fd._meshes[m.name] = m
        func = next((f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data == entry), None)
        if func is None:
            raise Diagnostic(f"no function @{entry} in {filename}")
        env: dict[Any, Tensor] = {}

        def tensor_of(value, name: str | None) -> Tensor:
            ty = value.type
            assert isinstance(ty, TensorType)
            t = fd._new_tensor(tuple(ty.get_shape()), _dtype_of(ty.element_type), name)
            t.sharding = sharding_of(value)
            return t

        for arg in func.body.block.args:
            t = tensor_of(arg, f"in{len(fd._inputs)}")
            fd._inputs.append(t)
            env[arg] = t
        for op in func.body.block.ops:
            if isinstance(op, ReturnOp):
                fd._outputs = [env[v] for v in op.operands]
                continue
            if not isinstance(op, FusionOp):
                raise Diagnostic(f"unsupported op {op.name} in a fusion definition")
            result, *more = (tensor_of(r, None) for r in op.results)
            kws = op.keywords()
            attrs = {k: str(v) for k, v in op.attributes.items()}
            fd._ops.append(
                _Op(op.name.removeprefix("fusion."), [env[v] for v in op.operands], result, kws, attrs, more)
            )
            env.update(zip(op.results, [result, *more]))
        return fd

    def autodiff(self, save: str = "activations") -> tuple["FusionDefinition", "FusionDefinition"]:
        """The forward and the backward of this definition (the `autodiff`
        pass): the forward takes the same inputs and returns the outputs,
        then the tensors the backward needs (`save="inputs"`: the inputs
        themselves); the backward takes those, then one cotangent per
        output, and returns the gradient of every floating-point input."""
        from fuserc.ir import make_context, parse, to_text
        from fuserc.pipeline import run_pipeline

        where = f"<FusionDefinition {self.name}>"
        ctx = make_context()
        module = run_pipeline(parse(self.to_mlir(), where, ctx), f"autodiff{{entry={self.name} save={save}}}", ctx)
        text = to_text(module)
        return (
            FusionDefinition.from_mlir(text, f"{self.name}_fwd", where),
            FusionDefinition.from_mlir(text, f"{self.name}_bwd", where),
        )

    # -- running --------------------------------------------------------------
    def compile(self, pipeline: str = "default", backend: str = "auto", algorithm: str | None = None):
        """Compile once (parse, verify, run the pipeline) into a program that
        is executed many times under MPI: `CompiledProgram.execute(inputs,
        local=False, gather=True)`. `algorithm` sets stream-pipeline's
        option (auto|collective|ring|none), as `-p` does on the CLI."""
        from fuserc.pipeline import with_option
        from fuserc.runtime.evaluator.program import compile_text

        if algorithm is not None:
            pipeline = with_option(pipeline, "stream-pipeline", "algorithm", algorithm)
        return compile_text(
            self.to_mlir(), entry=self.name, pipeline=pipeline, backend=backend,
            filename=f"<FusionDefinition {self.name}>",
        )

    def comm_report(self, pipeline: str = "default", unit: Any = None) -> Any:
        """What the program communicates once lowered by `pipeline`, without
        running it (`fuserc.comm_report.CommReport`: print it, or read its
        lines and totals); `unit`, e.g. `"8192x4096xbf16"`, also gives the
        totals in that tensor's bytes. `pipeline="autodiff,default"`
        reports the forward and backward too."""
        from fuserc.comm_report import report
        from fuserc.ir import compiling, make_context, parse
        from fuserc.pipeline import run_pipeline

        ctx = make_context()
        with compiling():
            module = run_pipeline(parse(self.to_mlir(), f"<FusionDefinition {self.name}>", ctx), pipeline, ctx)
        return report(module, unit)

    def execute(
        self, inputs: Sequence[Any], local: bool = False, gather: bool = True, **compile_options: Any
    ) -> list[Any]:
        """Compile and run once (use `compile` to run many times)."""
        return self.compile(**compile_options).execute(inputs, local=local, gather=gather)


def _kw_text(v: Any, kind: str) -> str:
    """A keyword's value as the IR spells it."""
    from fuserc.dialects.fusion import format_float

    if kind == "bool":
        return "true" if v else "false"
    if kind == "ints":
        return "[" + ", ".join(str(x) for x in v) + "]"
    if kind == "float":
        return format_float(float(v))
    return str(v)


def _kw_value(v: Any, kind: str) -> Any:
    """A builder argument as the keyword's Python value (an int for dims)."""
    if kind == "ints":
        return [int(x) for x in ([v] if isinstance(v, int) else v)]
    if kind == "int":
        return int(v)
    if kind == "bool":
        return bool(v)
    return float(v)


_DTYPE_ALIASES = {
    "float": "f32", "float32": "f32", "half": "f16", "float16": "f16",
    "bfloat16": "bf16", "double": "f64", "float64": "f64", "int64": "i64", "bool": "i1",
}  # fmt: skip


def _dtype(d: Any) -> str:
    name = str(d).removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise Diagnostic(f"unsupported dtype {d}; use one of {', '.join(DTYPES)}")
    return name


def _dtype_of(element_type: Any) -> str:
    return _dtype(str(element_type))


def shard_tensor(array: Any, sharding: "Sharding | Tensor | Sequence[str]", mesh: Mesh, rank: int) -> Any:
    """The shard of a global tensor (torch or NumPy) that `rank` holds, as
    nvFuser's shard_tensor. `sharding` is a Sharding, a Tensor of a
    definition (the sharding its program uses: written, or given by
    propagation; whole when it has none), or axis texts such as
    ["DIDx", "-"]."""
    from fuserc.sharding import shard_array

    if isinstance(sharding, Tensor):
        t = sharding
        if tuple(array.shape) != tuple(t.shape):
            raise Diagnostic(
                f"shard_tensor: the global tensor has shape {list(array.shape)}, but {t!r} is declared "
                f"{list(t.shape)}: give the whole tensor, not a part or another"
            )
        sharding = t.fd.sharding_of(t) if t.fd is not None else t.sharding
        if sharding is None:  # whole on every device
            sharding = Sharding(mesh.name, tuple(parse_axis("-") for _ in t.shape))
    elif not isinstance(sharding, Sharding):
        sharding = Sharding(mesh.name, tuple(parse_axis(a) for a in sharding))
    return shard_array(array, sharding, mesh, rank)


def job_size() -> int:
    """The number of ranks of the job this process is part of (under
    mpiexec or torchrun; 1 for a process started alone), to make a mesh as
    large as the job. Collective the first time: it starts the job's
    communicator, as compiling does."""
    from fuserc.runtime.job.mpi_env import mpi_env

    return mpi_env().size


__all__ = ["FusionDefinition", "Tensor", "shard_tensor", "job_size", "Mesh", "Sharding", "format_axis"]

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
    """A value of the definition: global shape, element type, sharding."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    sharding: Sharding | None = None

    def type_text(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        body = f"{dims}x{self.dtype}" if self.shape else self.dtype
        return f"tensor<{body}, {self.sharding}>" if self.sharding else f"tensor<{body}>"

    def __repr__(self) -> str:
        return f"Tensor(%{self.name}: {self.type_text()})"


@dataclass
class _Op:
    name: str
    operands: list[Tensor]
    result: Tensor
    keywords: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=dict)


class _Ops:
    """`fd.ops.NAME(...)`: one method per fusion op, result type inferred."""

    def __init__(self, fd: "FusionDefinition"):
        self._fd = fd

    def _add(self, name, operands, shape, dtype=None, keywords=None, attrs=None) -> Tensor:
        fd = self._fd
        for t in operands:
            if not isinstance(t, Tensor) or t not in fd._known:
                raise Diagnostic(f"fusion.{name}: operand {t!r} is not a tensor of this definition")
        result = fd._new_tensor(tuple(shape), dtype or operands[0].dtype)
        fd._ops.append(_Op(name, list(operands), result, keywords or {}, attrs or {}))
        return result

    def _shape(self, name: str, fn, *args):
        try:
            return fn(*args)
        except shapes.ShapeError as e:
            raise Diagnostic(f"fusion.{name}: {e}") from None

    # contractions
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        return self._add("matmul", [a, b], self._shape("matmul", shapes.matmul, a.shape, b.shape))

    def linear(self, x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
        ops = [x, w] + ([bias] if bias is not None else [])
        shape = self._shape("linear", shapes.linear, x.shape, w.shape, bias.shape if bias else None)
        return self._add("linear", ops, shape)

    # elementwise
    def _binary(self, name: str, a: Tensor, b: Tensor) -> Tensor:
        return self._add(name, [a, b], self._shape(name, shapes.same, a.shape, b.shape))

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("add", a, b)

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("sub", a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("mul", a, b)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("div", a, b)

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("maximum", a, b)

    def relu(self, x: Tensor) -> Tensor:
        return self._add("relu", [x], x.shape)

    def neg(self, x: Tensor) -> Tensor:
        return self._add("neg", [x], x.shape)

    def exp(self, x: Tensor) -> Tensor:
        return self._add("exp", [x], x.shape)

    def tanh(self, x: Tensor) -> Tensor:
        return self._add("tanh", [x], x.shape)

    def sigmoid(self, x: Tensor) -> Tensor:
        return self._add("sigmoid", [x], x.shape)

    def silu(self, x: Tensor) -> Tensor:
        return self._add("silu", [x], x.shape)

    def gelu(self, x: Tensor, approximate: str = "none") -> Tensor:
        attrs = {"approximate": f'"{approximate}"'} if approximate != "none" else {}
        return self._add("gelu", [x], x.shape, attrs=attrs)

    def cast(self, x: Tensor, dtype: str) -> Tensor:
        return self._add("cast", [x], x.shape, _dtype(dtype))

    def set(self, x: Tensor) -> Tensor:
        """A copy; shard its result differently to reshard."""
        return self._add("set", [x], x.shape)

    # reductions
    def sum(self, x: Tensor, dims: Sequence[int], keepdim: bool = False) -> Tensor:
        shape = self._shape("sum", shapes.reduce, x.shape, list(dims), keepdim)
        kw: dict[str, Any] = {"dims": list(dims)} | ({"keepdim": True} if keepdim else {})
        return self._add("sum", [x], shape, keywords=kw)

    def max(self, x: Tensor, dims: Sequence[int], keepdim: bool = False) -> Tensor:
        shape = self._shape("max", shapes.reduce, x.shape, list(dims), keepdim)
        kw: dict[str, Any] = {"dims": list(dims)} | ({"keepdim": True} if keepdim else {})
        return self._add("max", [x], shape, keywords=kw)

    # layout
    def permute(self, x: Tensor, dims: Sequence[int]) -> Tensor:
        shape = self._shape("permute", shapes.permute, x.shape, list(dims))
        return self._add("permute", [x], shape, keywords={"dims": list(dims)})

    def reshape(self, x: Tensor, shape: Sequence[int]) -> Tensor:
        return self._add("reshape", [x], self._shape("reshape", shapes.reshape, x.shape, tuple(shape)))

    def broadcast_in_dim(self, x: Tensor, shape: Sequence[int], dims: Sequence[int]) -> Tensor:
        out = self._shape("broadcast_in_dim", shapes.broadcast_in_dim, x.shape, tuple(shape), list(dims))
        return self._add("broadcast_in_dim", [x], out, keywords={"dims": list(dims)})

    def slice(self, x: Tensor, starts: Sequence[int], limits: Sequence[int]) -> Tensor:
        out = self._shape("slice", shapes.slice_, x.shape, list(starts), list(limits))
        return self._add("slice", [x], out, keywords={"starts": list(starts), "limits": list(limits)})

    def softmax(self, x: Tensor, dim: int) -> Tensor:
        self._shape("softmax", shapes.check_dim, x.shape, dim)
        return self._add("softmax", [x], x.shape, keywords={"dim": dim})


class _Schedule:
    """`fd.sched`: meshes and shardings (DIDx/DIDy/DIDz, Stream(S), nesting)."""

    def __init__(self, fd: "FusionDefinition"):
        self._fd = fd

    def mesh(self, name: str, shape: Sequence[int], devices: Sequence[int] | None = None) -> Mesh:
        mesh = Mesh(name, tuple(shape), tuple(devices or ()))
        self._fd._meshes[name] = mesh
        return mesh

    def shard(
        self, t: Tensor, mesh: str | Mesh, axes: Sequence[str], partial: str | None = None
    ) -> Tensor:
        """Give `t` a sharding, one axis text per dimension: "-", "DIDx",
        "Stream(4)", "Stream(2)*DIDx", ..."""
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

    def __enter__(self) -> "FusionDefinition":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    # -- definition ----------------------------------------------------------
    def _new_tensor(self, shape: tuple[int, ...], dtype: str, name: str | None = None) -> Tensor:
        t = Tensor(name or f"t{next(self._counter)}", shape, dtype)
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
        for op in self._ops:
            operands = ", ".join(f"%{t.name}" for t in op.operands)
            kws = "".join(f" {k} = {_kw_text(v)}" for k, v in op.keywords.items())
            attrs = (
                " {" + ", ".join(f"{k} = {v}" for k, v in op.attrs.items()) + "}" if op.attrs else ""
            )
            tys = ", ".join(t.type_text() for t in op.operands)
            lines.append(
                f"  %{op.result.name} = fusion.{op.name} {operands}{kws}{attrs} : ({tys}) -> {op.result.type_text()}"
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

    @staticmethod
    def from_mlir(text: str, entry: str = "main", filename: str = "<string>") -> "FusionDefinition":
        """A builder holding function `entry` of fusion IR `text`."""
        from xdsl.dialects.builtin import TensorType
        from xdsl.dialects.func import FuncOp, ReturnOp

        from fuserc.dialects.fusion import FusionOp, GeluOp, MeshOp, sharding_of
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
            result = tensor_of(op.results[0], None)
            kws = {k: op.keyword(k) for k, _ in op.KEYWORDS if op.keyword(k) is not None}
            attrs = {}
            if isinstance(op, GeluOp) and op.approximate is not None:
                attrs["approximate"] = f'"{op.approximate.data}"'
            fd._ops.append(
                _Op(op.name.removeprefix("fusion."), [env[v] for v in op.operands], result, kws, attrs)
            )
            env[op.results[0]] = result
        return fd

    # -- running --------------------------------------------------------------
    def compile(self, pipeline: str = "default", backend: str = "auto", algorithm: str | None = None):
        """Compile once (parse, verify, run the pipeline) into a program that
        is executed many times under MPI: `CompiledProgram.execute(inputs,
        local=False, gather=True)`. `algorithm` sets stream-pipeline's
        option (auto|collective|ring|none), as `-p` does on the CLI."""
        from fuserc.pipeline import with_option
        from fuserc.runtime.program import compile_text

        if algorithm is not None:
            pipeline = with_option(pipeline, "stream-pipeline", "algorithm", algorithm)
        return compile_text(
            self.to_mlir(), entry=self.name, pipeline=pipeline, backend=backend,
            filename=f"<FusionDefinition {self.name}>",
        )

    def execute(
        self, inputs: Sequence[Any], local: bool = False, gather: bool = True, **compile_options: Any
    ) -> list[Any]:
        """Compile and run once (use `compile` to run many times)."""
        return self.compile(**compile_options).execute(inputs, local=local, gather=gather)


def _kw_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


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
    definition (its sharding), or axis texts such as ["DIDx", "-"]."""
    from fuserc.sharding import shard_array

    if isinstance(sharding, Tensor):
        if sharding.sharding is None:
            raise Diagnostic(f"{sharding!r} has no sharding")
        sharding = sharding.sharding
    elif not isinstance(sharding, Sharding):
        sharding = Sharding(mesh.name, tuple(parse_axis(a) for a in sharding))
    return shard_array(array, sharding, mesh, rank)


__all__ = ["FusionDefinition", "Tensor", "shard_tensor", "Mesh", "Sharding", "format_axis"]

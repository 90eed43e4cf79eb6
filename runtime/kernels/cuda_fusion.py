"""Fused elementwise kernels for `hir.launch` regions on the cuda backend.

A region that is a chain of pointwise fusion ops (`FusionOp.POINTWISE`) runs
as ONE CuPy `ElementwiseKernel`, not one launch per op. Layout ops that only
re-index a region argument (permute, broadcast_in_dim, reshape, set) become
strided views of the input, and a permute or reshape of a yielded value
becomes a view of the output buffer, so the lowering's buffer-order
permutes and bias broadcasts stay inside the one kernel.

The plan (which inputs, which views, the C code) is pure Python and made
once per region; the kernel is compiled once per generated source (CuPy
caches the binaries). Values are computed in float for f32, f16 and bf16
(double for f64): intermediates are not rounded to 16 bits, explicit casts
are. bf16 buffers are passed as their 16-bit words and converted in the
kernel (round to nearest even, as torch does), so no bf16 support is needed
from CuPy. Regions of any other shape return no plan: the backend runs them
op by op with torch on the GPU.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from fuserc import shapes
from fuserc.dialects import fusion, hir
from fuserc.dialects.fusion import FusionOp, shape_of
from fuserc.dialects.fusion_layout import VIEW_OPS
from fuserc.dialects.interfaces import Math, torch_dtype
from fuserc.runtime.kernels.spans import overlaps, same_view

# --------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------

PARAM_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "uint16",  # the bf16 word; converted in the kernel
    torch.float64: "float64",
    torch.int64: "int64",
    torch.bool: "bool",
}
"""The ElementwiseKernel parameter type (a NumPy dtype name) of each dtype."""

COMPUTE_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.float16: "float",
    torch.bfloat16: "float",
    torch.float64: "double",
    torch.int64: "long long",
    torch.bool: "bool",
}
"""The C type a value of each dtype is computed in."""

PREAMBLE = r"""
__device__ __forceinline__ float _fuserc_bf2f(unsigned short x) {
  return __uint_as_float(((unsigned int)x) << 16);
}
__device__ __forceinline__ unsigned short _fuserc_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
"""
"""bf16 <-> float conversions (round to nearest even; NaN stays NaN)."""


def _load(dtype: torch.dtype, name: str) -> str:
    """A parameter's value in its compute type."""
    if dtype == torch.bfloat16:
        return f"_fuserc_bf2f({name})"
    if dtype == torch.float16:
        return f"((float){name})"
    return name


def _store(dtype: torch.dtype, value: str) -> str:
    """A compute-type value as the element stored in a parameter."""
    if dtype == torch.bfloat16:
        return f"_fuserc_f2bf((float)({value}))"
    if dtype == torch.float16:
        return f"float16((float)({value}))"
    if dtype == torch.bool:
        return f"(({value}) != 0)"
    return f"(({COMPUTE_TYPES[dtype]})({value}))"


def _round(dtype: torch.dtype, value: str) -> str:
    """A value converted to `dtype` and back to its compute type (a cast)."""
    return _load(dtype, _store(dtype, value))


class CMath(Math):
    """`interfaces.Math` printing CUDA C expressions in compute type `ct`:
    the kernel formula each pointwise op gives (`FusionOp.kernel`)."""

    def __init__(self, ct: str):
        self.ct = ct

    def const(self, v: float) -> str:
        ct = self.ct
        if ct == "long long":
            return f"((long long){int(v)})"
        if ct == "bool":
            return "true" if v else "false"
        if v != v:
            return "__int_as_float(0x7fffffff)" if ct == "float" else "__longlong_as_double(0x7ff8000000000000LL)"
        if v in (float("inf"), float("-inf")):
            sign = "-" if v < 0 else ""
            inf = "__int_as_float(0x7f800000)" if ct == "float" else "__longlong_as_double(0x7ff0000000000000LL)"
            return f"({sign}{inf})"
        return f"(({ct}){float(v)!r})"

    def add(self, a, b): return f"({a} + {b})"
    def sub(self, a, b): return f"({a} - {b})"
    def mul(self, a, b): return f"({a} * {b})"
    def div(self, a, b): return f"({a} / {b})"
    def neg(self, a): return f"(-{a})"
    def exp(self, a): return f"exp({a})"
    def log(self, a): return f"log({a})"
    def tanh(self, a): return f"tanh({a})"
    def erf(self, a): return f"erf({a})"
    def sqrt(self, a): return f"sqrt({a})"
    def rsqrt(self, a): return f"rsqrt({a})"
    def abs(self, a): return f"llabs({a})" if self.ct == "long long" else f"fabs({a})"
    def sin(self, a): return f"sin({a})"
    def cos(self, a): return f"cos({a})"
    def pow(self, a, b): return f"pow({a}, {b})"
    def maximum(self, a, b): return f"(({a} > {b} || {a} != {a}) ? {a} : {b})"  # NaN propagates
    def minimum(self, a, b): return f"(({a} < {b} || {a} != {a}) ? {a} : {b})"
    def lt(self, a, b): return f"({a} < {b})"
    def le(self, a, b): return f"({a} <= {b})"
    def gt(self, a, b): return f"({a} > {b})"
    def ge(self, a, b): return f"({a} >= {b})"
    def eq(self, a, b): return f"({a} == {b})"
    def ne(self, a, b): return f"({a} != {b})"
    def where(self, c, a, b): return f"({c} ? {a} : {b})"
    def isnan(self, a): return f"({a} != {a})"
    def cast(self, a, dtype): return _round(dtype, a)


def _expression(op: FusionOp, args: Sequence[str]) -> str:
    """The C expression of one pointwise op on operands held in their
    compute types: the op's own kernel formula."""
    kind = op.operands[0] if op.operands else op.results[0]
    return op.kernel(CMath(COMPUTE_TYPES[_dtype_of(kind)]), *args)


def _dtype_of(v: SSAValue) -> torch.dtype:
    assert isinstance(v.type, TensorType)
    return torch_dtype(v.type.element_type)


# --------------------------------------------------------------------------
# Views: how a region argument or an output buffer is re-indexed
# --------------------------------------------------------------------------

Step = tuple[Any, ...]
"""("permute", dims) | ("broadcast", dims, shape) | ("reshape", shape)."""


def apply_steps(t: torch.Tensor, steps: Sequence[Step], writable: bool = False) -> torch.Tensor:
    """The view of `t` the steps describe. A reshape that cannot be a view
    copies an input, and raises RuntimeError for a `writable` output."""
    for step in steps:
        kind = step[0]
        if kind == "permute":
            t = t.permute(step[1])
        elif kind == "broadcast":
            dims, shape = step[1], step[2]
            view = [1] * len(shape)
            for i, d in enumerate(dims):
                view[d] = t.shape[i]
            t = t.reshape(view).expand(shape)
        elif kind == "reshape":
            t = t.view(step[1]) if writable else t.reshape(step[1])
        else:
            raise AssertionError(kind)
    return t


def _inverse(perm: Sequence[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


@dataclass(frozen=True)
class InputView:
    """A kernel input: region argument `arg` seen through `steps`."""

    arg: int
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class OutputView:
    """A kernel output: the buffer `outs[out]` seen through `steps` (the
    inverse of the layout ops between the computed value and the yield)."""

    out: int
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class FusedPlan:
    """One ElementwiseKernel for a region: its inputs, outputs and code."""

    inputs: tuple[InputView, ...]
    outputs: tuple[OutputView, ...]
    in_params: str
    out_params: str
    operation: str
    name: str
    ops: int  # elementwise ops fused

    @property
    def key(self) -> tuple[str, str, str]:
        """What its kernels are compiled from (kernels are cached by it)."""
        return (self.in_params, self.out_params, self.operation)

    def kernel(self) -> Any:
        """The compiled kernel (CuPy; compiled on first use, then cached)."""
        key = self.key
        k = _KERNELS.get(key)
        if k is None:
            import cupy

            k = _KERNELS[key] = cupy.ElementwiseKernel(
                self.in_params, self.out_params, self.operation, self.name, preamble=PREAMBLE
            )
        return k


_KERNELS: dict[tuple[str, str, str], Any] = {}

# --------------------------------------------------------------------------
# Vectorized kernels for contiguous buffers
# --------------------------------------------------------------------------

VECTOR_BYTES = 16
"""Bytes each thread loads per buffer at once (one `uint4`)."""

_VECTOR_WORDS = {"uint16": "unsigned short", "float32": "float"}
"""Element types the vectorized kernel takes (bf16 as its word, f32)."""

VECTOR_THREADS = 256


def vector_word(plan: FusedPlan) -> str | None:
    """The one C element type of every parameter of `plan`, when the plan
    can run vectorized; None otherwise."""
    types = {t for decl in (plan.in_params, plan.out_params) for t, _ in _param_list(decl)}
    if len(types) != 1:
        return None
    return _VECTOR_WORDS.get(next(iter(types)))


def _param_list(decl: str) -> list[tuple[str, str]]:
    return [(p.split()[0], p.split()[1]) for p in decl.split(", ")] if decl else []


def vector_source(plan: FusedPlan) -> tuple[str, str, int] | None:
    """(kernel name, CUDA source, lanes) of the plan's kernel over
    contiguous buffers: each thread loads `VECTOR_BYTES` of every input at
    once (`lanes` elements), computes them one by one with the plan's code,
    and stores `VECTOR_BYTES` of every output. All loads of a vector come
    before its stores, so an output may be an input element for element.
    Memory-bound sums of several buffers (the pull ring's final add) run at
    close to the memory's speed this way, about twice the one-element-per-
    thread kernel's."""
    word = vector_word(plan)
    if word is None:
        return None
    lanes = VECTOR_BYTES // (2 if word == "unsigned short" else 4)
    ins, outs = _param_list(plan.in_params), _param_list(plan.out_params)
    name = plan.name + "_v"
    sig = [f"const uint4* __restrict__ p_{n}" for _, n in ins] + [f"uint4* p_{n}" for _, n in outs]
    loads = "".join(f"    const uint4 r_{n} = p_{n}[v];\n" for _, n in ins)
    decls = "".join(f"    uint4 r_{n};\n" for _, n in outs)
    lane_in = "".join(f"      const {word} {n} = reinterpret_cast<const {word}*>(&r_{n})[l];\n" for _, n in ins)
    lane_out = "".join(f"      {word} {n};\n" for _, n in outs)
    lane_store = "".join(f"      reinterpret_cast<{word}*>(&r_{n})[l] = {n};\n" for _, n in outs)
    stores = "".join(f"    p_{n}[v] = r_{n};\n" for _, n in outs)
    body = "\n".join("        " + line for line in plan.operation.splitlines())
    source = (
        f"{PREAMBLE}\nextern \"C\" __global__ void {name}({', '.join(sig)}, long long nvec) {{\n"
        "  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < nvec;\n"
        "       v += (long long)gridDim.x * blockDim.x) {\n"
        f"{loads}{decls}"
        f"    #pragma unroll\n    for (int l = 0; l < {lanes}; ++l) {{\n"
        f"{lane_in}{lane_out}      {{\n{body}\n      }}\n{lane_store}    }}\n"
        f"{stores}  }}\n}}\n"
    )
    return name, source, lanes


_VECTOR_KERNELS: dict[tuple[str, str, str], tuple[Any, int] | None] = {}


def _vector_kernel(plan: FusedPlan) -> tuple[Any, int] | None:
    """The plan's vectorized kernel and its lanes (None: the plan has none),
    made once per plan code, as `FusedPlan.kernel`."""
    key = plan.key
    if key not in _VECTOR_KERNELS:
        made = vector_source(plan)
        if made is None:
            _VECTOR_KERNELS[key] = None
        else:
            import cupy

            name, source, lanes = made
            _VECTOR_KERNELS[key] = (cupy.RawKernel(source, name), lanes)
    return _VECTOR_KERNELS[key]


def _vectorizable(views: Sequence[torch.Tensor], lanes: int) -> bool:
    """Every buffer contiguous, of the same size (a multiple of `lanes`)
    and aligned to `VECTOR_BYTES`."""
    n = views[0].numel()
    return all(
        t.is_contiguous() and t.numel() == n and t.data_ptr() % VECTOR_BYTES == 0 for t in views
    ) and n % lanes == 0

def _view_step(op: Operation) -> Step | None:
    """The input-side view step of a layout op (None for a plain copy)."""
    if isinstance(op, fusion.PermuteOp):
        return ("permute", tuple(op.keyword("dims")))
    if isinstance(op, fusion.BroadcastInDimOp):
        return ("broadcast", tuple(op.keyword("dims")), shape_of(op.results[0]))
    if isinstance(op, fusion.ReshapeOp):
        return ("reshape", shape_of(op.results[0]))
    return None


def plan_region(body: Block) -> FusedPlan | None:
    """The fused kernel of a `hir.launch` region, or None when the region is
    not an elementwise chain over (views of) its arguments."""
    ops = list(body.ops)
    if not ops or not isinstance(ops[-1], hir.YieldOp):
        return None
    yield_op, ops = ops[-1], ops[:-1]
    sources: dict[SSAValue, tuple[int, tuple[Step, ...]]] = {}
    for arg in body.args:
        assert isinstance(arg, BlockArgument)
        sources[arg] = (arg.index, ())
    exprs: dict[SSAValue, str] = {}  # value -> the C variable holding it
    outside: dict[SSAValue, tuple[SSAValue, tuple[Step, ...]]] = {}  # yield-side views
    inputs: list[InputView] = []
    lines: list[str] = []
    shape: tuple[int, ...] | None = None

    def input_var(v: SSAValue, extra: tuple[Step, ...] = ()) -> str:
        arg, steps = sources[v]
        view = InputView(arg, steps + extra)
        if view not in inputs:
            inputs.append(view)
            k = len(inputs) - 1
            dtype = _dtype_of(body.args[arg])
            lines.append(f"const {COMPUTE_TYPES[dtype]} a{k} = {_load(dtype, f'in{k}')};")
        return f"a{inputs.index(view)}"

    pointwise = [op for op in ops if isinstance(op, FusionOp) and op.POINTWISE]
    # The shape every element of the kernel has: that of its first value
    # of rank > 0; rank-0 values (constants) are scalars inside it.
    shape = next((shape_of(op.results[0]) for op in pointwise if shape_of(op.results[0])), None)
    for op in ops:
        if isinstance(op, VIEW_OPS):
            src = op.operands[0]
            res = op.results[0]
            step = _view_step(op)
            if src in sources:
                arg, steps = sources[src]
                sources[res] = (arg, steps + ((step,) if step else ()))
            elif src in exprs and isinstance(op, fusion.SetOp):
                exprs[res] = exprs[src]
            elif src in exprs and isinstance(op, (fusion.PermuteOp, fusion.ReshapeOp)):
                if any(use.operation is not yield_op for use in res.uses):
                    return None
                outside[res] = (src, (step,))  # type: ignore[assignment]
            else:
                return None
            continue
        if op not in pointwise or shape is None:
            return None
        res = op.results[0]
        scalar = shape_of(res) == ()
        if not scalar and shape_of(res) != shape:
            return None
        args: list[str] = []
        for v in op.operands:
            vshape = shape_of(v)
            if scalar and vshape != ():
                return None
            if v in sources:
                if vshape == shape or scalar:
                    args.append(input_var(v))
                else:
                    try:
                        if shapes.broadcast(vshape, shape) != shape:
                            return None
                    except shapes.ShapeError:
                        return None
                    dims = tuple(range(len(shape) - len(vshape), len(shape)))
                    args.append(input_var(v, (("broadcast", dims, shape),)))
            elif v in exprs and (vshape == shape or vshape == ()):
                args.append(exprs[v])
            else:
                return None
        ct = COMPUTE_TYPES[_dtype_of(res)]
        var = f"v{len(exprs)}"
        lines.append(f"const {ct} {var} = {_expression(op, args)};")
        exprs[res] = var
    if shape is None:
        return None  # layout only: torch copies it as well as a kernel would

    outputs: list[OutputView] = []
    out_dtypes: list[torch.dtype] = []
    stores: list[str] = []  # after every load: an output may be an input
    for i, v in enumerate(yield_op.values):
        # Every output has the kernel's shape (CuPy's ElementwiseKernel
        # writes its outputs at the inputs' broadcast shape): a rank-0 value
        # yielded beside full ones (a constant) runs op by op.
        if v in outside and shape_of(outside[v][0]) == shape:
            base, steps = outside[v]
            value = exprs[base]
            inverse = _output_steps(base, steps)
            if inverse is None:
                return None
            outputs.append(OutputView(i, inverse))
        elif v in exprs and shape_of(v) == shape:
            value = exprs[v]
            outputs.append(OutputView(i))
        elif v in sources and shape_of(v) == shape:
            value = input_var(v)
            outputs.append(OutputView(i))
        else:
            return None
        dtype = _dtype_of(v)
        out_dtypes.append(dtype)
        stores.append(f"out{i} = {_store(dtype, value)};")

    in_params = ", ".join(
        f"{PARAM_TYPES[_dtype_of(body.args[view.arg])]} in{k}" for k, view in enumerate(inputs)
    )
    out_params = ", ".join(f"{PARAM_TYPES[d]} out{i}" for i, d in enumerate(out_dtypes))
    operation = "\n".join(lines + stores)
    digest = hashlib.sha1(f"{in_params}|{out_params}|{operation}".encode()).hexdigest()[:12]
    return FusedPlan(
        tuple(inputs), tuple(outputs), in_params, out_params, operation, f"fuserc_ew_{digest}", len(pointwise)
    )


def _output_steps(base: SSAValue, steps: Sequence[Step]) -> tuple[Step, ...] | None:
    """The view of an output buffer holding `steps(base)` that has base's
    shape: each permute undone by its inverse, each reshape by a reshape."""
    shapes = [shape_of(base)]
    for step in steps:
        if step[0] == "permute":
            shapes.append(tuple(shapes[-1][d] for d in step[1]))
        elif step[0] == "reshape":
            shapes.append(tuple(step[1]))
        else:
            return None
    inverse: list[Step] = []
    for k in range(len(steps) - 1, -1, -1):
        step = steps[k]
        if step[0] == "permute":
            inverse.append(("permute", tuple(_inverse(step[1]))))
        else:
            inverse.append(("reshape", shapes[k]))
    return tuple(inverse)


_PLANS: dict[Block, tuple[FusedPlan | None]] = {}


def plan_for(body: Block) -> FusedPlan | None:
    """`plan_region`, once per region."""
    cached = _PLANS.get(body)
    if cached is None:
        cached = _PLANS[body] = (plan_region(body),)
    return cached[0]


# --------------------------------------------------------------------------
# Running a plan on torch CUDA tensors
# --------------------------------------------------------------------------

_CUPY_DTYPES = {torch.bfloat16: "uint16"}


def as_cupy(t: torch.Tensor) -> Any:
    """A CuPy array over a CUDA tensor's memory (zero copy; bf16 as its
    16-bit words), keeping the tensor alive."""
    import cupy

    itemsize = t.element_size()
    dtype = _CUPY_DTYPES.get(t.dtype) or str(t.dtype).removeprefix("torch.")
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    mem = cupy.cuda.UnownedMemory(t.data_ptr(), extent * itemsize, t, t.device.index)
    ptr = cupy.cuda.MemoryPointer(mem, 0)
    return cupy.ndarray(tuple(t.shape), dtype, ptr, strides=tuple(s * itemsize for s in t.stride()))


def run_plan(plan: FusedPlan, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> bool:
    """Launch the plan's kernel on the current CuPy stream; False (nothing
    launched) when a view cannot be made or an output overlaps an input
    other than element for element, so the caller falls back."""
    try:
        in_views = [apply_steps(ins[v.arg], v.steps) for v in plan.inputs]
        out_views = [apply_steps(outs[v.out], v.steps, writable=True) for v in plan.outputs]
    except RuntimeError:
        return False
    for o in out_views:
        for i in in_views:
            if overlaps(o, i) and not same_view(o, i):
                return False
    if any(o.numel() == 0 for o in out_views):
        return True
    vector = _vector_kernel(plan)
    if vector is not None and _vectorizable([*in_views, *out_views], vector[1]):
        import numpy as np

        kernel, lanes = vector
        nvec = out_views[0].numel() // lanes
        blocks = max(1, min((nvec + VECTOR_THREADS - 1) // VECTOR_THREADS, 65535))
        ptrs = [as_cupy(t) for t in [*in_views, *out_views]]
        kernel((blocks,), (VECTOR_THREADS,), (*ptrs, np.int64(nvec)))
        return True
    plan.kernel()(*[as_cupy(t) for t in in_views], *[as_cupy(t) for t in out_views])
    return True

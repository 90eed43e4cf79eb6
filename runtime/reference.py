"""The reference evaluator of the fusion dialect: the ground truth.

It runs a function unsharded on one process with torch on the CPU, at global
shapes, ignoring every sharding; `fuserc run --check` and the tests compare
against it. With `accumulate=torch.float64` (the default) every floating
value is computed in float64, so the reference is free of the rounding of the
program's own element types. `reference_op` computes one op on given tensors
and is reused by the host evaluator for compute launches on local tensors.

This module is also the single home of the mapping between IR element types
and torch dtypes (`torch_dtype`, `element_type`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    ModuleOp,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i64,
)
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.traits import SymbolTable

from fuserc.diagnostics import Diagnostic, error_at, location_of
from fuserc.dialects import fusion
from fuserc.dialects.fusion import shape_of

# --------------------------------------------------------------------------
# Element types <-> torch dtypes
# --------------------------------------------------------------------------

_DTYPES: tuple[tuple[Attribute, torch.dtype], ...] = (
    (f32, torch.float32),
    (f16, torch.float16),
    (bf16, torch.bfloat16),
    (f64, torch.float64),
    (i64, torch.int64),
    (i1, torch.bool),
)


def torch_dtype(element_type: Attribute) -> torch.dtype:
    """The torch dtype holding values of an IR element type."""
    for attr, dtype in _DTYPES:
        if element_type == attr:
            return dtype
    raise Diagnostic(f"element type {element_type} has no torch dtype (f32, f16, bf16, f64, i64, i1)")


def element_type(dtype: torch.dtype) -> Attribute:
    """The IR element type of a torch dtype."""
    for attr, d in _DTYPES:
        if d == dtype:
            return attr
    raise Diagnostic(f"torch dtype {dtype} has no fuserc element type (f32, f16, bf16, f64, i64, i1)")


def _dtype_name(dtype: torch.dtype) -> str:
    """The IR spelling of a dtype where it has one (`f32`), else torch's."""
    return next((str(a) for a, d in _DTYPES if d == dtype), str(dtype))


def _is_float(element: Attribute) -> bool:
    return isinstance(element, (Float32Type, Float16Type, BFloat16Type, Float64Type))


def _compute_dtype(element: Attribute, accumulate: torch.dtype | None) -> torch.dtype:
    """The dtype a value of `element` is computed in: floats in `accumulate`
    when given, everything else as declared."""
    if accumulate is not None and _is_float(element):
        return accumulate
    return torch_dtype(element)


def _tensor_type(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType), f"{v.type} is not a tensor type"
    return v.type


# --------------------------------------------------------------------------
# One op
# --------------------------------------------------------------------------

_Impl = Callable[[fusion.FusionOp, list[torch.Tensor], torch.dtype | None], torch.Tensor]


def _linear(op, a, acc):
    return F.linear(a[0], a[1], a[2] if len(a) > 2 else None)


def _gelu(op, a, acc):
    approx = op.approximate.data if op.approximate is not None else "none"
    return F.gelu(a[0], approximate=approx)


def _cast(op, a, acc):
    return a[0].to(_compute_dtype(_tensor_type(op.results[0]).element_type, acc))


def _reduction(fn: Callable[..., torch.Tensor]) -> _Impl:
    def impl(op, a, acc):
        dims = op.keyword("dims")
        if not dims:  # torch would reduce over everything for dim=()
            return a[0]
        return fn(a[0], dim=tuple(dims), keepdim=bool(op.keyword("keepdim")))

    return impl


def _broadcast_in_dim(op, a, acc):
    out_shape = shape_of(op.results[0])
    view = [1] * len(out_shape)
    for i, d in enumerate(op.keyword("dims")):
        view[d] = a[0].shape[i]
    return a[0].reshape(view).expand(out_shape)


def _slice(op, a, acc):
    index = tuple(slice(s, l) for s, l in zip(op.keyword("starts"), op.keyword("limits")))
    return a[0][index]


_IMPLS: dict[type[fusion.FusionOp], _Impl] = {
    fusion.MatmulOp: lambda op, a, acc: torch.matmul(a[0], a[1]),
    fusion.LinearOp: _linear,
    fusion.AddOp: lambda op, a, acc: torch.add(a[0], a[1]),
    fusion.SubOp: lambda op, a, acc: torch.sub(a[0], a[1]),
    fusion.MulOp: lambda op, a, acc: torch.mul(a[0], a[1]),
    fusion.DivOp: lambda op, a, acc: torch.div(a[0], a[1]),
    fusion.MaximumOp: lambda op, a, acc: torch.maximum(a[0], a[1]),
    fusion.ReluOp: lambda op, a, acc: torch.relu(a[0]),
    fusion.NegOp: lambda op, a, acc: torch.neg(a[0]),
    fusion.ExpOp: lambda op, a, acc: torch.exp(a[0]),
    fusion.TanhOp: lambda op, a, acc: torch.tanh(a[0]),
    fusion.SigmoidOp: lambda op, a, acc: torch.sigmoid(a[0]),
    fusion.SiluOp: lambda op, a, acc: F.silu(a[0]),
    fusion.GeluOp: _gelu,
    fusion.CastOp: _cast,
    fusion.SetOp: lambda op, a, acc: a[0],
    fusion.SumOp: _reduction(torch.sum),
    fusion.MaxOp: _reduction(torch.amax),
    fusion.PermuteOp: lambda op, a, acc: a[0].permute(op.keyword("dims")),
    fusion.ReshapeOp: lambda op, a, acc: a[0].reshape(shape_of(op.results[0])),
    fusion.BroadcastInDimOp: _broadcast_in_dim,
    fusion.SliceOp: _slice,
    fusion.SoftmaxOp: lambda op, a, acc: torch.softmax(a[0], dim=op.keyword("dim")),
}


def reference_op(
    op: Operation, args: list[torch.Tensor], accumulate: torch.dtype | None = None
) -> torch.Tensor:
    """Compute one fusion op on `args` with PyTorch's semantics.

    Uses nothing but the op, its keywords and its result type (for reshape,
    broadcast_in_dim and cast), so it works on local tensors as well as
    global ones. With `accumulate`, a cast to a floating type yields that
    dtype instead. The result is a fresh contiguous tensor, never a view of
    an argument, so a caller may write into it."""
    impl = _IMPLS.get(type(op))
    if impl is None:
        raise error_at(op, f"the reference evaluator cannot run '{op.name}'")
    assert isinstance(op, fusion.FusionOp)
    out = impl(op, args, accumulate).contiguous()
    if any(out.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args):
        out = out.clone()
    return out


# --------------------------------------------------------------------------
# A function
# --------------------------------------------------------------------------


def evaluate(
    module_or_func: ModuleOp | FuncOp,
    inputs: Sequence[torch.Tensor | np.ndarray],
    entry: str = "main",
    accumulate: torch.dtype | None = torch.float64,
) -> list[torch.Tensor]:
    """Run function `entry` of a module (or the given function) unsharded.

    Inputs are global tensors, checked against the signature (a Diagnostic
    naming the argument otherwise). With `accumulate=torch.float64` floating
    values are upcast and computed in float64 and results come back in
    float64; with `accumulate=None` each value has its declared dtype."""
    func = _find_func(module_or_func, entry)
    args = _check_inputs(func, inputs)
    return _run(func, args, accumulate)


def _find_func(module_or_func: ModuleOp | FuncOp, entry: str) -> FuncOp:
    if isinstance(module_or_func, FuncOp):
        if not module_or_func.body.blocks:
            raise error_at(module_or_func, f"@{module_or_func.sym_name.data} has no body to run")
        return module_or_func
    found = SymbolTable.lookup_symbol(module_or_func, entry)
    if isinstance(found, FuncOp) and found.body.blocks:
        return found
    names = [f"@{op.sym_name.data}" for op in module_or_func.ops if isinstance(op, FuncOp)]
    listing = ", ".join(names) if names else "none"
    raise Diagnostic(
        f"no function @{entry} to run (functions: {listing})", location_of(module_or_func)
    )


def _arg_name(func: FuncOp, i: int) -> str:
    hint = func.body.block.args[i].name_hint
    return f"argument #{i}" + (f" (%{hint})" if hint else "")


def _check_inputs(func: FuncOp, inputs: Sequence[torch.Tensor | np.ndarray]) -> list[torch.Tensor]:
    """Inputs as CPU tensors of the declared dtypes; any mismatch of count,
    kind, shape or dtype is a Diagnostic at the function."""
    fname = f"@{func.sym_name.data}"
    params = list(func.function_type.inputs.data)
    if len(inputs) != len(params):
        raise error_at(func, f"{fname} takes {len(params)} inputs, got {len(inputs)}")
    out: list[torch.Tensor] = []
    for i, (value, param) in enumerate(zip(inputs, params)):
        where = f"{_arg_name(func, i)} of {fname}"
        if not isinstance(param, TensorType):
            raise error_at(func, f"{where} has type {param}; the reference evaluator runs tensors")
        want = torch_dtype(param.element_type)
        if isinstance(value, np.ndarray):
            value = _from_numpy(value, want)
        elif not isinstance(value, torch.Tensor):
            raise error_at(func, f"{where} must be a torch tensor or numpy array, got {type(value).__name__}")
        shape = tuple(param.get_shape())
        if tuple(value.shape) != shape:
            raise error_at(
                func, f"{where} has shape {list(value.shape)}, expected {list(shape)} ({param})"
            )
        if value.dtype != want:
            raise error_at(
                func, f"{where} has dtype {_dtype_name(value.dtype)}, expected {param.element_type} ({param})"
            )
        out.append(value.detach().cpu())
    return out


def _from_numpy(array: np.ndarray, want: torch.dtype) -> torch.Tensor:
    """NumPy has no bfloat16: a float32 array stands for a bf16 argument and
    is rounded to bf16, as the run does with it."""
    t = torch.from_numpy(np.ascontiguousarray(array))
    if want == torch.bfloat16 and t.dtype == torch.float32:
        t = t.to(torch.bfloat16)
    return t


def _run(func: FuncOp, args: list[torch.Tensor], accumulate: torch.dtype | None) -> list[torch.Tensor]:
    """Walk the body op by op; `args` are already checked."""
    env: dict[SSAValue, torch.Tensor] = {}
    for arg, value in zip(func.body.block.args, args):
        env[arg] = value.to(_compute_dtype(_tensor_type(arg).element_type, accumulate))
    for op in func.body.block.ops:
        if isinstance(op, ReturnOp):
            return [env[v] for v in op.arguments]
        operands = [env[v] for v in op.operands]
        if isinstance(op, CallOp):
            callee = SymbolTable.lookup_symbol(op, op.callee)
            if not isinstance(callee, FuncOp) or not callee.body.blocks:
                raise error_at(op, f"no function {op.callee} with a body to call")
            results = _run(callee, operands, accumulate)
        else:
            results = [reference_op(op, operands, accumulate)]
        for res, value in zip(op.results, results, strict=True):
            _expect(op, res, value, accumulate)
            env[res] = value
    raise error_at(func, f"@{func.sym_name.data} has no func.return")


def _expect(op: Operation, res: SSAValue, value: torch.Tensor, accumulate: torch.dtype | None) -> None:
    """An evaluator invariant: each value has its declared shape and dtype."""
    t = _tensor_type(res)
    want = _compute_dtype(t.element_type, accumulate)
    assert tuple(value.shape) == tuple(t.get_shape()) and value.dtype == want, (
        f"{op.name}: reference value {list(value.shape)} {value.dtype} "
        f"does not match {list(t.get_shape())} {want}"
    )

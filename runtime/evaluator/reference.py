"""The reference evaluator of the fusion dialect: the ground truth.

It runs a function unsharded on one process with torch on the CPU, at global
shapes, ignoring every sharding; `fuserc run --check` and the tests compare
against it. With `accumulate=torch.float64` (the default) every floating
value is computed in float64, so the reference is free of the rounding of the
program's own element types. Each op computes through its own `reference`
(PyTorch's function of the same name); `reference_op` runs one op on given
tensors and is reused by both backends for regions computed op by op on
local blocks, where `block_context` says where the blocks lie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, TensorType
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue
from xdsl.traits import SymbolTable

from fuserc.diagnostics import Diagnostic, error_at, location_of
from fuserc.dialects import fusion
from fuserc.dialects.fusion import GLOBAL_ATTR, sharding_of
from fuserc.dialects.interfaces import EvalContext, dtype_table, is_float_type, torch_dtype
from fuserc.sharding import Mesh


def _dtype_name(dtype: torch.dtype) -> str:
    """The IR spelling of a dtype where it has one (`f32`), else torch's."""
    return next((str(a) for a, d in dtype_table() if d == dtype), str(dtype))


def _compute_dtype(element, accumulate: torch.dtype | None) -> torch.dtype:
    """The dtype a value of `element` is computed in: floats in `accumulate`
    when given, everything else as declared."""
    if accumulate is not None and is_float_type(element):
        return accumulate
    return torch_dtype(element)


def _tensor_type(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType), f"{v.type} is not a tensor type"
    return v.type


# --------------------------------------------------------------------------
# One op
# --------------------------------------------------------------------------


def reference_op(op: Operation, args: list[torch.Tensor], ctx: EvalContext | None = None) -> torch.Tensor:
    """Compute one fusion op on `args` with PyTorch's semantics (the op's
    `reference`), in `ctx.accumulate` for floats when set, else in the
    declared dtypes; `ctx` also says where local blocks lie (INDEXED ops).
    The result is a fresh contiguous tensor, never a view of an argument,
    so a caller may write into it. The first result of an op with several
    (`reference_results` gives them all)."""
    return reference_results(op, args, ctx)[0]


def reference_results(op: Operation, args: list[torch.Tensor], ctx: EvalContext | None = None) -> list[torch.Tensor]:
    """Every result of one fusion op, as `reference_op` computes the first."""
    if not isinstance(op, fusion.FusionOp):
        raise error_at(op, f"the reference evaluator cannot run '{op.name}'")
    ctx = ctx if ctx is not None else EvalContext()
    if ctx.device is None and args:
        ctx.device = args[0].device
    value = op.reference(args, ctx)
    outs = list(value) if isinstance(value, (tuple, list)) else [value]
    fresh = []
    for out in outs[: len(op.results)]:
        out = out.contiguous()
        if any(out.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args):
            out = out.clone()
        fresh.append(out)
    return fresh


def block_context(op: Operation, rank: int, mesh_of: Callable[[str], Mesh | None]) -> EvalContext | None:
    """Where the local blocks of an INDEXED op lowered to local types lie on
    `rank`: global shapes and, along split dimensions, the global indices of
    the local elements (from its `fusion.global` types). None for other ops."""
    types = op.attributes.get(GLOBAL_ATTR)
    if not isinstance(types, ArrayAttr):
        return None
    ctx = EvalContext()
    values = [*op.operands, *op.results]
    for k, (value, gtype) in enumerate(zip(values, types.data)):
        key = k if k < len(op.operands) else -1
        assert isinstance(gtype, TensorType)
        gshape = tuple(gtype.get_shape())
        ctx.shapes[key] = gshape
        s = sharding_of(gtype)
        mesh = mesh_of(s.mesh) if s is not None else None
        if s is None or mesh is None:
            continue
        for d, extent in enumerate(gshape):
            if any(not sp.is_stream for sp in s.dims[d]) or s.has_outer_stream():
                idx = s.dim_indices(d, extent, mesh, rank)
                if list(idx) != list(range(extent)):  # a block that is the whole dim (an axis of one device) needs none
                    ctx.indices[(key, d)] = torch.tensor(idx, dtype=torch.int64)
        assert tuple(_tensor_type(value).get_shape()) == s.local_shape(gshape, mesh)
    return ctx


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
    func = function_to_run(module_or_func, entry)
    args = _check_inputs(func, inputs)
    return _run(func, args, accumulate)


def function_to_run(module_or_func: ModuleOp | FuncOp, entry: str) -> FuncOp:
    """`@entry` of a module (or the function given), with a body: else a
    Diagnostic naming the declaration, or the functions the module has."""
    found = module_or_func if isinstance(module_or_func, FuncOp) else SymbolTable.lookup_symbol(module_or_func, entry)
    if isinstance(found, FuncOp):
        if not found.body.blocks:
            raise error_at(found, f"@{found.sym_name.data} is a declaration (no body): nothing to run")
        return found
    names = [f"@{op.sym_name.data}" for op in module_or_func.ops if isinstance(op, FuncOp)]
    listing = ", ".join(names) if names else "none"
    base, _, made = entry.rpartition("_")
    hint = (
        f"; @{entry} is made by the autodiff pass from @{base}: -p autodiff,default"
        if made in ("fwd", "bwd") and f"@{base}" in names else ""
    )
    raise Diagnostic(
        f"no function @{entry} to run (functions: {listing}){hint}", location_of(module_or_func)
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
            results = reference_results(op, operands, EvalContext(accumulate))
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

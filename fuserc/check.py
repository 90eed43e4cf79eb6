"""`--check`: each output of a run against the unsharded float64 reference.

An output passes when it holds no NaN or infinity the reference does not
hold (and no finite value where the reference holds one), and either

- its normwise relative error, max|out - ref| / max|ref|, is within the
  tolerance of its element type (`CHECK_TOLERANCES`), or
- its max abs error is within `ROUNDING_FACTOR` times that of the same
  function computed unsharded, on one device, in the program's own element
  types (`reference(..., accumulate=None)`): the rounding the program cannot
  avoid, whatever its sharding. This is what decides an output whose
  reference is (near) zero by cancellation, such as the gradient of a
  bias that the softmax makes constant: a relative error means nothing
  there, while the unsharded computation shows how large its rounding is.

The second, costlier reference runs only for outputs the first criterion
fails. Outputs of a `<f>_bwd` entry are named by the argument of `@<f>`
whose gradient they are, and those of `<f>_fwd` by what they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.func import FuncOp

CHECK_TOLERANCES: dict[str, float] = {
    "f64": 1e-9,
    "f32": 1e-4,
    "f16": 1e-2,
    "bf16": 4e-2,
    "i64": 0.0,
    "i1": 0.0,
}
"""An output passes when max|out - ref| <= tol * max|ref| (normwise
relative error). tol is that of the least precise element type among the
values the output is computed from (an f32 result of bf16 work has bf16's).
The reference runs in float64 on the same (rounded) inputs, so the
tolerance covers the program's own rounding: accumulation over long
contractions in f32, and the 8-bit (bf16) or 11-bit (f16) significands of
the 16-bit types."""

ROUNDING_FACTOR = 10.0
"""An output also passes when its max abs error is at most this many times
that of the function computed unsharded in its own element types (the
sharded run's error is that size, give or take a factor of two, when it is
right: the same operations, summed in another order)."""


def nonfinite_counts(values: "np.ndarray") -> dict[str, int]:
    """How many NaN, +Inf and -Inf `values` holds, the kinds it has."""
    import numpy as np

    counts = (("NaN", np.isnan(values).sum()), ("+Inf", np.isposinf(values).sum()), ("-Inf", np.isneginf(values).sum()))
    return {kind: int(n) for kind, n in counts if n}


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


@dataclass(frozen=True)
class CheckResult:
    """One output against its reference: the figure compared (the max abs
    error over the max |reference|, on the values finite in both) and its
    tolerance; values that are NaN or infinite where the reference is not
    (or not the same), and finite values where the reference is not, are
    counted and fail the check. `rounding` is the max abs error of the
    function computed unsharded in its own element types, where it was
    needed."""

    index: int
    dtype: str  # the element type whose tolerance applies: f32, bf16, ...
    abs_err: float
    rel_err: float
    tolerance: float
    nonfinite: dict[str, int] = field(default_factory=dict)  # NaN/+Inf/-Inf where the reference differs
    size: int = 0
    shape_error: str = ""
    finite_where_not: int = 0  # finite values where the reference is NaN or infinite
    rounding: float | None = None
    label: str = ""  # what the output is: "gradient of %w"
    matched: dict[str, int] = field(default_factory=dict)  # NaN/+Inf/-Inf where the reference holds the same

    @property
    def within_rounding(self) -> bool:
        return self.rounding is not None and self.abs_err <= ROUNDING_FACTOR * self.rounding

    @property
    def ok(self) -> bool:
        if self.shape_error or self.nonfinite or self.finite_where_not:
            return False
        return self.rel_err <= self.tolerance or self.within_rounding

    def line(self) -> str:
        status = "ok" if self.ok else "FAILED"
        head = f"output {self.index}{f' ({self.label})' if self.label else ''}: "
        if self.shape_error:
            return head + f"{self.shape_error}: {status}"
        if self.nonfinite or self.finite_where_not:
            parts = []
            if self.nonfinite:
                parts.append(f"{_counts_text(self.nonfinite)} (of {self.size} values) where the reference differs")
            if self.finite_where_not:
                s = "s" if self.finite_where_not > 1 else ""
                parts.append(f"{self.finite_where_not} finite value{s} (of {self.size}) where the reference is NaN or infinite")
            return head + "; ".join(parts) + f": {status}"
        if self.matched and sum(self.matched.values()) == self.size:
            return head + f"{_counts_text(self.matched)} (all {self.size} values), as in the reference; no finite value to compare: {status}"
        if self.matched:  # said before the figures, which are those of the finite values
            head += f"{_counts_text(self.matched)} (of {self.size} values) as in the reference; "
        rel = f"max rel error {self.rel_err:.3e} {'<=' if self.rel_err <= self.tolerance else '>'} {self.tolerance:.0e}"
        if self.rounding is None or self.rel_err <= self.tolerance:
            return head + f"{rel} ({self.dtype} tolerance): {status} (max abs error {self.abs_err:.3e})"
        bound = f"{ROUNDING_FACTOR * self.rounding:.3e}, {ROUNDING_FACTOR:g} x the error of the function run unsharded in its own element types"
        if self.within_rounding:
            return head + f"max abs error {self.abs_err:.3e} <= {bound} ({self.rounding:.3e}): {status} ({rel}, {self.dtype} tolerance)"
        return head + f"{rel} ({self.dtype} tolerance): {status} (max abs error {self.abs_err:.3e} > {bound})"


def precision_of(func: "FuncOp") -> list[str]:
    """For each result of a fusion function, the least precise element type
    (the largest tolerance) among the values it is computed from."""
    from xdsl.dialects.builtin import TensorType
    from xdsl.dialects.func import ReturnOp
    from xdsl.ir import OpResult

    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    out = []
    for v in ret.operands:
        seen, stack, names = set(), [v], []
        while stack:
            value = stack.pop()
            if value in seen:
                continue
            seen.add(value)
            if isinstance(value.type, TensorType):
                names.append(str(value.type.element_type))
            if isinstance(value, OpResult):
                stack.extend(value.op.operands)
        known = [n for n in names if n in CHECK_TOLERANCES]
        out.append(max(known, key=lambda n: CHECK_TOLERANCES[n]) if known else "f32")
    return out


def _dtype_name(dtype: "torch.dtype") -> str:
    from fuserc.dialects.interfaces import element_type

    return str(element_type(dtype))


def _as_float64(t: Any) -> "np.ndarray":
    import numpy as np
    import torch

    if isinstance(t, torch.Tensor):
        return t.detach().cpu().to(torch.float64).numpy()
    return np.asarray(t).astype(np.float64)


def compare(
    index: int,
    got: "np.ndarray",
    ref: "torch.Tensor",
    dtype: "torch.dtype",
    precision: str | None = None,
    rounded: "torch.Tensor | None" = None,
    label: str = "",
) -> CheckResult:
    """The error of one output against its float64 reference; `precision`
    (an element type name) sets the tolerance, by default the output's;
    `rounded` is the output of the function computed unsharded in its own
    element types (its error against `ref` is the rounding allowed)."""
    import numpy as np

    name = precision or _dtype_name(dtype)
    tol = CHECK_TOLERANCES[name]
    r = _as_float64(ref)
    g = _as_float64(got)
    if g.shape != r.shape:
        return CheckResult(index, name, 0.0, 0.0, tol, size=g.size, label=label,
                           shape_error=f"shape {list(g.shape)} but the reference's is {list(r.shape)}")
    if g.size == 0:
        return CheckResult(index, name, 0.0, 0.0, tol, label=label)
    same = (g == r) | (np.isnan(g) & np.isnan(r))
    nonfinite = nonfinite_counts(g[~np.isfinite(g) & ~same])
    matched = nonfinite_counts(g[~np.isfinite(g) & same])
    finite_where_not = int((np.isfinite(g) & ~np.isfinite(r)).sum())
    both = np.isfinite(g) & np.isfinite(r)
    abs_err = _max_abs_diff(g, r, both)
    scale = float(np.abs(r[both]).max()) if both.any() else 0.0
    rel_err = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
    rounding = None
    if rounded is not None:
        low = _as_float64(rounded)
        if low.shape == r.shape:
            rounding = _max_abs_diff(low, r, both & np.isfinite(low))
    return CheckResult(index, name, abs_err, rel_err, tol, nonfinite, g.size, "", finite_where_not, rounding, label, matched)


def _max_abs_diff(a: "np.ndarray", b: "np.ndarray", where: "np.ndarray") -> float:
    import numpy as np

    return float(np.abs(a[where] - b[where]).max()) if where.any() else 0.0


def output_labels(source: "ModuleOp", entry: str, count: int) -> list[str]:
    """What each of the `count` outputs of `entry` is, where autodiff made
    it: for `<f>_bwd`, the gradient of each float argument of `@<f>` (by its
    name); for `<f>_fwd`, `@<f>`'s results, then the values saved for the
    backward. Empty labels otherwise."""
    from xdsl.dialects.builtin import TensorType
    from xdsl.dialects.func import FuncOp
    from xdsl.traits import SymbolTable

    from fuserc.dialects.fusion import is_float

    labels = [""] * count
    for suffix in ("_bwd", "_fwd"):
        if not entry.endswith(suffix):
            continue
        primal = SymbolTable.lookup_symbol(source, entry.removesuffix(suffix))
        if not isinstance(primal, FuncOp) or not primal.body.blocks:
            return labels
        if suffix == "_bwd":
            args = primal.body.block.args
            floats = [a for a in args if isinstance(a.type, TensorType) and is_float(a.type.element_type)]
            if len(floats) == count:
                return [f"gradient of %{a.name_hint}" if a.name_hint else f"gradient of argument {a.index}" for a in floats]
        else:
            results = len(primal.function_type.outputs.data)
            if results <= count:
                return [f"result {i} of @{primal.sym_name.data}" for i in range(results)] + [
                    f"saved for @{primal.sym_name.data}_bwd" for _ in range(count - results)
                ]
    return labels


def input_notes(func: "FuncOp", inputs: Sequence[Any]) -> list[str]:
    """A line for each input holding NaN or infinities: the reference
    computes with them too, so an output may match NaN for NaN."""
    lines = []
    for i, t in enumerate(inputs):
        counts = nonfinite_counts(_as_float64(t))
        if counts:
            args = func.body.block.args
            name = f" (%{args[i].name_hint})" if i < len(args) and args[i].name_hint else ""
            size = int(_as_float64(t).size)
            lines.append(f"input {i}{name}: {_counts_text(counts)} (of {size} values); the reference computes with them too")
    return lines


def check_outputs(
    source: "ModuleOp",
    func: "FuncOp",
    entry: str,
    inputs: Sequence[Any],
    gathered: Sequence["np.ndarray"],
    dtypes: Sequence["torch.dtype"],
    reference: Callable[[Any], list["torch.Tensor"]],
) -> list[CheckResult]:
    """Every output of a run against `reference(accumulate)` (the function
    run unsharded: in float64, then, for the outputs over their tolerance,
    in the program's own element types)."""
    import torch

    refs = reference(torch.float64)
    precisions = precision_of(func)
    labels = output_labels(source, entry, len(gathered))
    results = [
        compare(i, g, r, d, p, label=lab)
        for i, (g, r, d, p, lab) in enumerate(zip(gathered, refs, dtypes, precisions, labels))
    ]
    over = [r.index for r in results if not r.ok and not (r.shape_error or r.nonfinite or r.finite_where_not)]
    if over:
        try:
            rounded = reference(None)
        except Exception:  # noqa: BLE001 - an op without a kernel in a 16-bit type on the CPU: no rounding bound
            return results
        for i in over:
            results[i] = compare(i, gathered[i], refs[i], dtypes[i], precisions[i], rounded[i], labels[i])
    return results

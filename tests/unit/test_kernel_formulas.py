"""The kernel formula of every pointwise op (`FusionOp.kernel`) against its
reference semantics (PyTorch), twice: evaluated by `TorchMath` op by op,
special values included; and as the CUDA C code the cuda backend generates
for one fused kernel holding a chain of every pointwise op (f32, i64, i1 and
bf16 values), built for the CPU with g++ and run on the same inputs as the
region run op by op with torch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cpu_kernels import compile_plan, needs_gxx, run_on_cpu
from fuserc.dialects import hir
from fuserc.dialects.fusion import FusionOp
from fuserc.dialects.fusion_ops import POINTWISE_OPS
from fuserc.dialects.interfaces import EvalContext, TorchMath, torch_dtype
from fuserc.ir import parse
from fuserc.runtime.backends.cpu import launch_with_torch
from fuserc.runtime.kernels.cuda_fusion import plan_region

SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, -1e30, float("inf"), float("-inf"), float("nan")])
"""Values each formula is also checked on (NaN propagates as in torch)."""

# op name -> (operand types, result type, keywords/attributes)
FORMS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "cast": (("f32",), "bf16", ""),
    "where": (("i1", "f32", "f32"), "f32", ""),
    "constant": ((), "f32", ""),
    **{n: (("f32", "f32"), "i1", "") for n in ("lt", "le", "gt", "ge", "eq", "ne")},
}
GELU_TANH = '{approximate = "tanh"}'


def _one_op(cls: type[FusionOp], attrs: str = "") -> tuple[FusionOp, list[str]]:
    name = cls.name.removeprefix("fusion.")
    n = len([o for o in cls.OPERANDS if not o.endswith("?")])
    ins, res, _ = FORMS.get(name, (("f32",) * n, "f32", ""))
    shape = "" if name == "constant" else "12x"
    types = [f"tensor<{shape}{t}>" for t in ins]
    rtype = f"tensor<{shape}{res}>"
    lead = " 0.375" if name == "constant" else ""
    operands = ", ".join(f"%a{i}" for i in range(len(ins)))
    text = (
        f"func.func @main({', '.join(f'%a{i}: {t}' for i, t in enumerate(types))}) -> {rtype} {{\n"
        f"  %r = {cls.name}{lead} {operands} {attrs} : ({', '.join(types)}) -> {rtype}\n"
        f"  func.return %r : {rtype}\n}}\n"
    )
    op = next(o for o in parse(text).walk() if isinstance(o, cls))
    return op, list(ins)


def _inputs(op: FusionOp, kinds: list[str], special: bool) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for i, k in enumerate(kinds):
        if k == "i1":
            out.append(torch.randint(0, 2, (12,), generator=gen).bool())
            continue
        domain = op.operand_domain(i)
        if special:
            x = SPECIAL.roll(i * 5)  # other pairs for the second operand
        elif domain is not None:
            x = torch.rand(12, generator=gen) * (domain[1] - domain[0]) + domain[0]
        else:
            x = torch.randn(12, generator=gen) * 2
        out.append(x.to(torch_dtype_of(k)))
    return out


def torch_dtype_of(name: str) -> torch.dtype:
    return {"f32": torch.float32, "i1": torch.bool, "i64": torch.int64, "bf16": torch.bfloat16}[name]


CASES = [pytest.param(c, "", id=c.name.removeprefix("fusion.")) for c in POINTWISE_OPS]
CASES.append(pytest.param(next(c for c in POINTWISE_OPS if c.name == "fusion.gelu"), GELU_TANH, id="gelu-tanh"))


def test_every_pointwise_op_is_checked() -> None:
    names = {c.name.removeprefix("fusion.") for c in POINTWISE_OPS}
    new = {"rsqrt", "sqrt", "log", "abs", "erf", "reciprocal", "sin", "cos", "pow", "minimum",
           "lt", "le", "gt", "ge", "eq", "ne", "where", "constant"}  # fmt: skip
    assert new <= names


@pytest.mark.parametrize("special", [False, True], ids=["random", "special-values"])
@pytest.mark.parametrize("cls, attrs", CASES)
def test_formula_matches_reference(cls: type[FusionOp], attrs: str, special: bool) -> None:
    op, kinds = _one_op(cls, attrs)
    args = _inputs(op, kinds, special)
    want = op.reference(args, EvalContext())
    if want.is_floating_point():  # some float32 CPU kernels of torch give NaN where the limit exists
        wide = op.reference([a.double() if a.is_floating_point() else a for a in args], EvalContext())
        want = torch.where(want.isnan() & ~wide.isnan(), wide.to(want.dtype), want)
    got = op.kernel(TorchMath(torch.float32), *args)
    got = torch.as_tensor(got).expand(want.shape) if want.dim() else torch.as_tensor(got)
    if cls.name == "fusion.cast":  # the formula rounds and reads back in the compute type
        want = want.float()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    # atol: float32 cancellation where gelu(x) nears 0 (x around -3), as in torch
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6, equal_nan=True)


def test_a_wrong_formula_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from fuserc.dialects.fusion_elementwise import RsqrtOp

    monkeypatch.setattr(RsqrtOp, "kernel", lambda self, m, a: m.div(m.const(1), m.abs(a)))
    with pytest.raises(AssertionError):
        test_formula_matches_reference(RsqrtOp, "", False)


# ---- one fused kernel of every pointwise op, generated C built with g++ -------------------------

T = "tensor<8x6xf32>"
CHAIN = f"""
func.func @main(%x: {T}, %p: {T}, %b: tensor<6xf32>, %s: tensor<f32>, %i: tensor<8x6xi64>, %m: tensor<8x6xi1>,
                %o: {T}, %om: tensor<8x6xi1>, %oi: tensor<8x6xi64>, %ob: tensor<8x6xbf16>) attributes {{hir.host}} {{
  hir.launch ins(%x, %p, %b, %s, %i, %m : {T}, {T}, tensor<6xf32>, tensor<f32>, tensor<8x6xi64>, tensor<8x6xi1>)
      outs(%o, %om, %oi, %ob : {T}, tensor<8x6xi1>, tensor<8x6xi64>, tensor<8x6xbf16>) {{
  ^bb0(%X: {T}, %P: {T}, %B: tensor<6xf32>, %S: tensor<f32>, %I: tensor<8x6xi64>, %M: tensor<8x6xi1>):
    %c = fusion.constant 0.75 : () -> tensor<f32>
    %r0 = fusion.rsqrt %P : ({T}) -> {T}
    %r1 = fusion.sqrt %P : ({T}) -> {T}
    %r2 = fusion.log %P : ({T}) -> {T}
    %r3 = fusion.reciprocal %P : ({T}) -> {T}
    %r4 = fusion.abs %X : ({T}) -> {T}
    %r5 = fusion.erf %X : ({T}) -> {T}
    %r6 = fusion.sin %X : ({T}) -> {T}
    %r7 = fusion.cos %X : ({T}) -> {T}
    %r8 = fusion.pow %P, %c : ({T}, tensor<f32>) -> {T}
    %r9 = fusion.minimum %X, %B : ({T}, tensor<6xf32>) -> {T}
    %r10 = fusion.maximum %r9, %S : ({T}, tensor<f32>) -> {T}
    %r11 = fusion.relu %r10 : ({T}) -> {T}
    %r12 = fusion.exp %r5 : ({T}) -> {T}
    %r13 = fusion.tanh %r6 : ({T}) -> {T}
    %r14 = fusion.sigmoid %r7 : ({T}) -> {T}
    %r15 = fusion.silu %r8 : ({T}) -> {T}
    %r16 = fusion.gelu %r4 : ({T}) -> {T}
    %r17 = fusion.gelu %r3 {{approximate = "tanh"}} : ({T}) -> {T}
    %r18 = fusion.neg %r2 : ({T}) -> {T}
    %a0 = fusion.add %r0, %r1 : ({T}, {T}) -> {T}
    %a1 = fusion.sub %a0, %r11 : ({T}, {T}) -> {T}
    %a2 = fusion.mul %a1, %r12 : ({T}, {T}) -> {T}
    %a3 = fusion.div %a2, %r14 : ({T}, {T}) -> {T}
    %a4 = fusion.add %a3, %r13 : ({T}, {T}) -> {T}
    %a5 = fusion.add %a4, %r15 : ({T}, {T}) -> {T}
    %a6 = fusion.sub %a5, %r16 : ({T}, {T}) -> {T}
    %a7 = fusion.add %a6, %r17 : ({T}, {T}) -> {T}
    %a8 = fusion.mul %a7, %r18 : ({T}, {T}) -> {T}
    %l0 = fusion.lt %X, %B : ({T}, tensor<6xf32>) -> tensor<8x6xi1>
    %l1 = fusion.le %X, %S : ({T}, tensor<f32>) -> tensor<8x6xi1>
    %l2 = fusion.gt %X, %c : ({T}, tensor<f32>) -> tensor<8x6xi1>
    %l3 = fusion.ge %r9, %X : ({T}, {T}) -> tensor<8x6xi1>
    %l4 = fusion.eq %r9, %X : ({T}, {T}) -> tensor<8x6xi1>
    %l5 = fusion.ne %I, %I : (tensor<8x6xi64>, tensor<8x6xi64>) -> tensor<8x6xi1>
    %w0 = fusion.where %l0, %a8, %r4 : (tensor<8x6xi1>, {T}, {T}) -> {T}
    %w1 = fusion.where %l1, %w0, %c : (tensor<8x6xi1>, {T}, tensor<f32>) -> {T}
    %w2 = fusion.where %M, %w1, %r13 : (tensor<8x6xi1>, {T}, {T}) -> {T}
    %w3 = fusion.where %l2, %w2, %r14 : (tensor<8x6xi1>, {T}, {T}) -> {T}
    %k0 = fusion.where %l3, %l4, %l5 : (tensor<8x6xi1>, tensor<8x6xi1>, tensor<8x6xi1>) -> tensor<8x6xi1>
    %n = fusion.constant -3.0 : () -> tensor<i64>
    %i0 = fusion.abs %I : (tensor<8x6xi64>) -> tensor<8x6xi64>
    %i1 = fusion.minimum %i0, %n : (tensor<8x6xi64>, tensor<i64>) -> tensor<8x6xi64>
    %i2 = fusion.relu %I : (tensor<8x6xi64>) -> tensor<8x6xi64>
    %i3 = fusion.sub %i2, %i1 : (tensor<8x6xi64>, tensor<8x6xi64>) -> tensor<8x6xi64>
    %i4 = fusion.where %k0, %i3, %I : (tensor<8x6xi1>, tensor<8x6xi64>, tensor<8x6xi64>) -> tensor<8x6xi64>
    %h = fusion.cast %w3 : ({T}) -> tensor<8x6xbf16>
    %h1 = fusion.erf %h : (tensor<8x6xbf16>) -> tensor<8x6xbf16>
    %h2 = fusion.rsqrt %h1 : (tensor<8x6xbf16>) -> tensor<8x6xbf16>
    %h3 = fusion.abs %h2 : (tensor<8x6xbf16>) -> tensor<8x6xbf16>
    hir.yield %w3, %k0, %i4, %h3 : {T}, tensor<8x6xi1>, tensor<8x6xi64>, tensor<8x6xbf16>
  }}
  func.return
}}
"""


def _chain() -> tuple[hir.LaunchOp, int]:
    module = parse(CHAIN, "chain.mlir")
    (launch,) = [op for op in module.walk() if isinstance(op, hir.LaunchOp)]
    count = sum(1 for op in launch.body.block.ops if isinstance(op, FusionOp))
    return launch, count


def test_chain_of_every_pointwise_op_is_one_kernel() -> None:
    launch, count = _chain()
    names = {op.name for op in launch.body.block.ops if isinstance(op, FusionOp)}
    assert names == {c.name for c in POINTWISE_OPS}  # every pointwise op of the dialect
    plan = plan_region(launch.body.block)
    assert plan is not None and plan.ops == count


@needs_gxx
def test_chain_generated_code_matches_torch(tmp_path: Path) -> None:
    launch, _ = _chain()
    plan = plan_region(launch.body.block)
    assert plan is not None
    lib = compile_plan(plan, tmp_path)
    gen = torch.Generator().manual_seed(11)
    ins = [
        torch.randn(8, 6, generator=gen),
        torch.rand(8, 6, generator=gen) * 3.75 + 0.25,
        torch.randn(6, generator=gen),
        torch.randn((), generator=gen),
        torch.randint(-6, 7, (8, 6), generator=gen),
        torch.randint(0, 2, (8, 6), generator=gen).bool(),
    ]
    ins[0][0, :3] = ins[2][:3]  # some equal elements for eq, le and ge
    outs = [torch.zeros(8, 6, dtype=torch_dtype(v.type.element_type)) for v in launch.outs]
    ref = [t.clone() for t in outs]
    launch_with_torch(launch.body.block, [t.clone() for t in ins], ref)
    run_on_cpu(plan, lib, ins, outs)
    # f32 and i64/i1 exactly as torch up to float rounding; the bf16 output
    # is computed in float from the rounded cast (one rounding at the end).
    torch.testing.assert_close(outs[0], ref[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(outs[1], ref[1]) and torch.equal(outs[2], ref[2])
    assert outs[1].any() and not outs[1].all()
    torch.testing.assert_close(outs[3].float(), ref[3].float(), rtol=1e-2, atol=1e-2)


SPECIAL_CONSTANTS = """
func.func @main(%x: tensor<12x{t}>, %o: tensor<12x{t}>) attributes {{hir.host}} {{
  hir.launch ins(%x : tensor<12x{t}>) outs(%o : tensor<12x{t}>) {{
  ^bb0(%X: tensor<12x{t}>):
    %inf = fusion.constant inf : () -> tensor<{t}>
    %ninf = fusion.constant -inf : () -> tensor<{t}>
    %nan = fusion.constant nan : () -> tensor<{t}>
    %tiny = fusion.constant 1.0e-300 : () -> tensor<{t}>
    %a = fusion.minimum %X, %inf : (tensor<12x{t}>, tensor<{t}>) -> tensor<12x{t}>
    %b = fusion.maximum %a, %ninf : (tensor<12x{t}>, tensor<{t}>) -> tensor<12x{t}>
    %m = fusion.gt %b, %tiny : (tensor<12x{t}>, tensor<{t}>) -> tensor<12xi1>
    %c = fusion.where %m, %b, %nan : (tensor<12xi1>, tensor<12x{t}>, tensor<{t}>) -> tensor<12x{t}>
    %d = fusion.pow %c, %inf : (tensor<12x{t}>, tensor<{t}>) -> tensor<12x{t}>
    %e = fusion.where %m, %d, %c : (tensor<12xi1>, tensor<12x{t}>, tensor<12x{t}>) -> tensor<12x{t}>
    hir.yield %e : tensor<12x{t}>
  }}
  func.return
}}
"""


@needs_gxx
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_special_constants_in_generated_code(t: str, tmp_path: Path) -> None:
    """inf, -inf, NaN and a constant below f32's range, in float and double
    kernels: the literals the generator prints read back as torch's values."""
    module = parse(SPECIAL_CONSTANTS.format(t=t), "special.mlir")
    (launch,) = [op for op in module.walk() if isinstance(op, hir.LaunchOp)]
    plan = plan_region(launch.body.block)
    assert plan is not None and plan.ops == 10
    lib = compile_plan(plan, tmp_path)
    dtype = torch.float32 if t == "f32" else torch.float64
    x = SPECIAL.to(dtype)
    got, ref = torch.zeros(12, dtype=dtype), torch.zeros(12, dtype=dtype)
    launch_with_torch(launch.body.block, [x.clone()], [ref])
    run_on_cpu(plan, lib, [x], [got])
    torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)

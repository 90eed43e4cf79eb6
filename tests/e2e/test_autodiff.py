"""The autodiff pass end to end, against PyTorch's autograd: every
transformer op (the program of test_transformer_ops.py: sharded operands,
normalized and reduced dims split, heads split, a vocabulary split), the
GPT layer of examples/gpt_layer.mlir, and a program of partial sums (a
partial result, a partial activation, a move between meshes), differentiated by `-p
autodiff{save=...},default`, run as @main_fwd then @main_bwd by `fuserc run`
on 1, 2 and 4 ranks; each gradient of a float argument against
torch.autograd.grad of the same computation in float64, on the same inputs
and cotangents."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

import ops_program as ops
from harness import mpirun_python, ok

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt_layer.mlir"


def _save(path: Path, t: torch.Tensor) -> str:
    np.save(path, (t.float() if t.is_floating_point() else t).numpy())
    return str(path)


@dataclass
class Case:
    """A program, its global inputs and cotangents, and what autograd says."""

    ident: str
    n: int
    text: str
    save: str
    args: list[torch.Tensor]
    cts: list[torch.Tensor]
    names: list[str]
    want: list[torch.Tensor]
    tol: float


def _run_cases(n: int, cases: list[Case], d: Path) -> dict[str, list[np.ndarray]]:
    """Every case of job size n in one launch (autodiff_batch.py): the
    gradients by case id."""
    listing = []
    for c in cases:
        cd = d / c.ident
        cd.mkdir(parents=True)
        (cd / "prog.mlir").write_text(c.text)
        listing.append({
            "id": c.ident, "file": str(cd / "prog.mlir"), "save": c.save, "out": str(cd / "grads"),
            "inputs": [_save(cd / f"a{i}.npy", a) for i, a in enumerate(c.args)],
            "cts": [_save(cd / f"ct{i}.npy", t) for i, t in enumerate(c.cts)],
        })  # fmt: skip
    spec = d / f"cases{n}.json"
    spec.write_text(json.dumps(listing))
    ok(mpirun_python(n, Path(__file__).parent / "autodiff_batch.py", [str(spec), "--backend", "cpu"], timeout=900))
    return {c.ident: [np.load(d / c.ident / "grads" / f"grad{i}.npy") for i in range(len(c.want))] for c in cases}


def torch_grads(fn: Callable[[list[torch.Tensor]], list[torch.Tensor]], args: list[torch.Tensor], cts: list[torch.Tensor]) -> list[torch.Tensor]:
    leaves = [a.detach().double().clone().requires_grad_(True) if a.is_floating_point() else a for a in args]
    outs = fn(leaves)
    total = sum((o.double() * c.double()).sum() for o, c in zip(outs, cts) if o.requires_grad)
    floats = [a for a in leaves if a.is_floating_point()]
    return list(torch.autograd.grad(total, floats, allow_unused=True))


def _check(got: list[np.ndarray], want: list[torch.Tensor], names: list[str], tol: float) -> None:
    assert len(got) == len(want), (len(got), len(want))
    for g, w, name in zip(got, want, names):
        w = torch.zeros(g.shape, dtype=torch.float64) if w is None else w.detach()
        g = torch.from_numpy(g).double()
        assert tuple(g.shape) == tuple(w.shape), name
        err = (g - w).abs().max().item() / max(w.abs().max().item(), 1.0)
        assert err <= tol, f"gradient of {name}: max error {err:.3e}"


# --------------------------------------------------------------------------
# Every op, and the GPT layer
# --------------------------------------------------------------------------


def _on(text: str, n: int) -> str:
    return text.replace("fusion.mesh @tp shape = [4]", f"fusion.mesh @tp shape = [{n}]")


def _ops_case(n: int, save: str, t: str) -> Case:
    """The program of test_transformer_ops.py: every op, sharded operands."""
    text, results = ops.program(t)
    inputs = ops._inputs()
    dtype = torch.float32 if t == "f32" else torch.bfloat16
    args = [v.to(dtype).double() if v.is_floating_point() else v for v in inputs.values()]
    g = torch.Generator().manual_seed(7)
    cts = [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).double() for _, shape, _ in results]

    def fn(leaves: list[torch.Tensor]) -> list[torch.Tensor]:
        a = dict(zip(inputs, leaves))
        return [f(a) for _, _, f in results]

    names = [k for k, v in inputs.items() if v.is_floating_point()]
    return Case(f"ops-{n}-{save}-{t}", n, _on(text, n), save, args, cts, names, torch_grads(fn, args, cts), 2e-5 if t == "f32" else 6e-2)


def _gpt_case(n: int, save: str) -> Case:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpt_layer_example", ROOT / "examples" / "python" / "gpt_layer.py")
    assert spec is not None and spec.loader is not None
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    args = [a.float().double() for a in ex.inputs(64, 64, 256)]
    ct = torch.randn(64, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64).float().double()
    want = torch_grads(lambda leaves: [ex.reference(leaves, heads=8)], args, [ct])
    names = "x ln1_w ln1_b wq bq wk bk wv bv wo bo ln2_w ln2_b w1 b1 w2 b2".split()
    return Case(f"gpt-{n}-{save}", n, _on(GPT.read_text(), n), save, args, [ct], names, want, 2e-5)


PARTIAL = """fusion.mesh @tp shape = [4]
fusion.mesh @pair shape = [2] devices = [3, 1]
func.func @main(%a: tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, %b: tensor<16x12xf32, #fusion.sharding<@tp, [DIDx, -]>>, %c: tensor<12x6xf32, #fusion.sharding<@tp, [-, -]>>) -> (tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>, tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>) {
  %p = fusion.matmul %a, %b : (tensor<8x16xf32, #fusion.sharding<@tp, [-, DIDx]>>, tensor<16x12xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>
  %q = fusion.matmul %p, %c : (tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>, tensor<12x6xf32, #fusion.sharding<@tp, [-, -]>>) -> tensor<8x6xf32>
  %t = fusion.tanh %q : (tensor<8x6xf32>) -> tensor<8x6xf32>
  %r = fusion.set %t : (tensor<8x6xf32>) -> tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>
  func.return %p, %r : tensor<8x12xf32, #fusion.sharding<@tp, [-, -], partial = DIDx>>, tensor<8x6xf32, #fusion.sharding<@pair, [DIDx, -]>>
}
"""


def _partial_case(save: str) -> Case:
    """A partial result (its cotangent is whole), a partial activation the
    backward reads (saved reduced), a product carrying it, and a move to
    another mesh (its cotangent moves back)."""
    g = torch.Generator().manual_seed(11)
    args = [torch.randn(shape, generator=g, dtype=torch.float64).float().double() for shape in ((8, 16), (16, 12), (12, 6))]
    cts = [torch.randn(shape, generator=g, dtype=torch.float64).float().double() for shape in ((8, 12), (8, 6))]

    def fn(leaves: list[torch.Tensor]) -> list[torch.Tensor]:
        a, b, c = leaves
        p = a @ b
        return [p, torch.tanh(p @ c)]

    return Case(f"partial-4-{save}", 4, PARTIAL, save, args, cts, ["a", "b", "c"], torch_grads(fn, args, cts), 2e-5)


CASES = [
    ("ops", 1, "activations", "f32"), ("ops", 4, "activations", "f32"),
    ("ops", 4, "inputs", "f32"), ("ops", 2, "activations", "bf16"),
    ("gpt", 1, "activations", ""), ("gpt", 2, "inputs", ""), ("gpt", 4, "activations", ""), ("gpt", 4, "inputs", ""),
    ("partial", 4, "activations", ""), ("partial", 4, "inputs", ""),
]  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], tuple[dict[str, Case], dict[str, list[np.ndarray]]]]:
    cache: dict[int, tuple[dict[str, Case], dict[str, list[np.ndarray]]]] = {}

    def get(n: int) -> tuple[dict[str, Case], dict[str, list[np.ndarray]]]:
        if n not in cache:
            make = {"ops": lambda m, s, t: _ops_case(m, s, t), "gpt": lambda m, s, t: _gpt_case(m, s), "partial": lambda m, s, t: _partial_case(s)}
            cases = [make[kind](m, s, t) for kind, m, s, t in CASES if m == n]
            cache[n] = ({c.ident: c for c in cases}, _run_cases(n, cases, tmp_path_factory.mktemp(f"ad{n}")))
        return cache[n]

    return get


@pytest.mark.parametrize("kind, n, save, t", CASES, ids=[f"{k}-{n}-{s}{'-' + t if t else ''}" for k, n, s, t in CASES])
def test_gradients_match_autograd(kind: str, n: int, save: str, t: str, results: Callable) -> None:
    cases, got = results(n)
    ident = f"{kind}-{n}-{save}" + (f"-{t}" if t else "")
    case = cases[ident]
    _check(got[ident], case.want, case.names, case.tol)


# --------------------------------------------------------------------------
# From Python
# --------------------------------------------------------------------------

SCRIPT = """
import sys
import torch
from fuserc.api import FusionDefinition

fd = FusionDefinition()
x = fd.define_tensor([8, 4], "f32")
w = fd.define_tensor([4, 6], "f32")
fd.add_output(fd.ops.sum(fd.ops.gelu(x @ w) * 2.0, 1))
fd.sched.mesh("tp", [2])
fd.sched.shard(x, "tp", ["DIDx", "-"])
fwd, bwd = fd.autodiff(save=sys.argv[1])
torch.manual_seed(0)
xs, ws, ct = torch.randn(8, 4), torch.randn(4, 6), torch.randn(8)
outs = fwd.compile(backend=sys.argv[3]).execute([xs, ws])
grads = bwd.compile(backend=sys.argv[3]).execute([*outs[1:], ct])
xr, wr = xs.double().requires_grad_(), ws.double().requires_grad_()
(torch.nn.functional.gelu(xr @ wr) * 2).sum(1).backward(ct.double())
err = max((g.double() - r.grad).abs().max().item() for g, r in zip(grads, (xr, wr)))
print(f"gradients of {len(grads)} inputs, max error {err:.2e}")
assert len(grads) == 2 and err < 1e-4
"""


def test_python_autodiff(tmp_path: Path, save: str = "activations") -> None:
    script = tmp_path / "ad.py"
    script.write_text(SCRIPT)
    proc = ok(mpirun_python(2, script, [save, "--backend", "cpu"]))
    assert "gradients of 2 inputs" in proc.stdout


# --------------------------------------------------------------------------
# The README's command
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [4, 2, 1])
def test_readme_backward_passes_its_check(n: int) -> None:
    """`mpiexec -n 4 fuserc run examples/gpt_layer.mlir -p autodiff,default
    --entry main_bwd --check` (and at --mesh tp=2, tp=1): every gradient
    passes and each output is named by its argument. (The key bias's
    gradient is not the zero the softmax makes of it in training: the
    attention output and log-sum-exp @main_bwd reads are random inputs
    here, not the forward's.)"""
    from harness import mpirun

    args: list[object] = [GPT, "-p", "autodiff,default", "--entry", "main_bwd", "--check"]
    if n < 4:
        args += ["--mesh", f"tp={n}"]
    proc = ok(mpirun(n, args, timeout=180))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("output ")]
    assert len(lines) == 17 and all(line.endswith(")") and ": ok (" in line for line in lines), proc.stdout
    assert lines[0].startswith("output 0 (gradient of %x): max rel error")
    assert lines[6].startswith("output 6 (gradient of %bk): max")


# --------------------------------------------------------------------------
# Degenerate corrections
# --------------------------------------------------------------------------

VAR = """func.func @main(%x: tensor<4xNxf32>) -> tensor<4xf32> {
  %v = fusion.var %x dims = [1] correction = C : (tensor<4xNxf32>) -> tensor<4xf32>
  func.return %v : tensor<4xf32>
}
"""


@pytest.mark.parametrize("n, correction", [(1, 1), (2, 2), (2, 3), (3, 1)])
def test_var_gradient_where_the_correction_reaches_the_count(n: int, correction: int) -> None:
    """var over N elements with a correction of N or more: the gradient is
    PyTorch's (NaN where x is at its mean, +-inf, or finite for a correction
    above N), compiled and run in this process, never a ZeroDivisionError."""
    from fuserc.runtime.evaluator.program import compile_text

    text = VAR.replace("N", str(n)).replace("C", str(correction))
    bwd = compile_text(text, "main_bwd", "autodiff{save=inputs},default", backend="cpu")
    x = torch.randn(4, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64).float()
    ct = torch.ones(4)
    got = np.asarray(bwd.execute([x, ct])[0])
    xr = x.double().requires_grad_()
    with torch.autograd.set_grad_enabled(True), pytest.warns(UserWarning) if correction >= n else _no_warning():
        torch.var(xr, dim=1, correction=correction).backward(ct.double())
    np.testing.assert_allclose(got, xr.grad.numpy(), rtol=1e-5, equal_nan=True)


def _no_warning():
    import contextlib

    return contextlib.nullcontext()

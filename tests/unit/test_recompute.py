"""What the forward saves for the backward: no more than PyTorch's autograd
saves for the same model, and under autodiff's `budget` no more than
the budget, the report's buffers shrinking with it (the gradients under a
budget: tests/e2e/torch_function_worker.py, `model_budget`)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest
import torch
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import BlockArgument

from fuserc.ir import make_context, parse
from fuserc.passes.plan_memory import host_funcs, memory_plan
from fuserc.passes.reshard_util import element_bytes
from fuserc.pipeline import run_pipeline
from fuserc.runtime.evaluator.program import compile_module

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "python"))
import train_gpt  # noqa: E402

sys.path.pop(0)


def _model(dtype: str, layers: int = 2, hidden: int = 32, tokens: int = 16, ffn: int = 64) -> argparse.Namespace:
    return argparse.Namespace(layers=layers, hidden=hidden, tokens=tokens, heads=4, ffn=ffn, vocab=64, dropout=0.0, dtype=dtype, seed=0)


def _saved(funcs: dict[str, FuncOp], main: str = "main") -> list[TensorType]:
    """The types of what @main_fwd returns for the backward, less main's
    arguments returned as they are (the caller's own tensors)."""
    ret = funcs[f"{main}_fwd"].body.block.last_op
    results = len(funcs[main].body.block.last_op.operands)  # type: ignore[union-attr]
    return [v.type for v in ret.operands[results:] if not isinstance(v, BlockArgument)]  # type: ignore[union-attr,misc]


def _bytes(types: list[TensorType]) -> int:
    return sum(math.prod(t.get_shape()) * element_bytes(t) for t in types)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_saved_no_more_than_pytorch(dtype: str) -> None:
    """The 2-layer GPT model: fuserc's saved tensors against those torch's
    autograd saves for the same model (`saved_tensors_hooks`; the
    parameters and the data, which both keep as they are, left out; a
    tensor saved twice counted once), in count and in bytes."""
    a = _model(dtype)
    fd, _ = train_gpt.build(a, 1)
    ctx = make_context()
    module = run_pipeline(parse(fd.to_mlir(), "model.mlir", ctx), "autodiff", ctx)
    saved = _saved({f.sym_name.data: f for f in module.ops if isinstance(f, FuncOp)})

    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    params = [w.to(torch_dtype).requires_grad_(True) for w in train_gpt.initial_weights(a)]
    gen = torch.Generator().manual_seed(0)
    ids, labels = (torch.randint(0, a.vocab, (a.tokens,), generator=gen) for _ in range(2))
    leaves = {t.untyped_storage().data_ptr() for t in [*params, ids, labels]}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in leaves:
            # A 16-bit layer norm's mean and rstd ([tokens, 1]) are kept in f32
            # on a GPU, as fuserc keeps them; torch's cpu kernel keeps them in
            # the input's type.
            stats = t.dtype in (torch.bfloat16, torch.float16) and t.dim() == 2 and t.shape[-1] == 1
            kept[s.data_ptr()] = s.nbytes() * (2 if stats else 1)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        train_gpt.reference_loss(ids, labels, params, a)
    assert 0 < len(saved) <= len(kept), (len(saved), len(kept))
    assert 0 < _bytes(saved) <= sum(kept.values()), (_bytes(saved), sum(kept.values()))


def test_a_budget_bounds_the_saved_tensors_and_the_buffers() -> None:
    """The 2-layer model at d = 1 (8 MiB of activations a layer): with
    `budget = 6` the saved tensors fit 6 MiB; with 0 only the residual
    stream stays (the input of each attention and MLP block and of the
    final norm: 5 [tokens, hidden] values); the report's buffers of
    @main_fwd shrink with the budget and @main_bwd's recompute."""
    a = _model("f32", hidden=256, tokens=512, ffn=1024)
    fd, _ = train_gpt.build(a, 1)
    text = fd.to_mlir()
    row = a.tokens * a.hidden * 4
    saved, fwd = {}, {}
    for budget in (None, 6, 0):
        option = "" if budget is None else f"{{budget={budget}}}"
        host = compile_module(text, "model.mlir", "main_fwd", f"autodiff{option},default", ranks=1).host
        funcs = {f.sym_name.data: f for f in host_funcs(host)}
        saved[budget] = _bytes(_saved(funcs))
        fwd[budget] = memory_plan(funcs["main_fwd"]).planned
    assert saved[None] > 12 * 2**20 and saved[6] <= 6 * 2**20 and saved[0] == (2 * a.layers + 1) * row, saved
    assert fwd[None] > fwd[6] > fwd[0], fwd


def test_the_backward_lets_each_saved_tensor_go_after_its_last_read() -> None:
    """fuserc.torch on the cpu backend: the backward owns the saved tensors
    (the autograd ctx keeps no reference) and drops each once read for the
    last time, as PyTorch's autograd frees its saved tensors: some are
    gone while the backward still reads others, all are gone after it,
    and the gradients are float64 autograd's."""
    from torch.multiprocessing.reductions import StorageWeakRef

    import fuserc.torch

    a = _model("f32")
    fd, _ = train_gpt.build(a, 1)
    gen = torch.Generator().manual_seed(5)
    glob = [w + 0.1 * torch.randn(w.shape, generator=gen) for w in train_gpt.initial_weights(a)]
    ids, labels = (torch.randint(0, a.vocab, (a.tokens,), generator=gen) for _ in range(2))
    ref = [w.double().requires_grad_(True) for w in glob]
    train_gpt.reference_loss(ids, labels, ref, a).backward()
    f = fuserc.torch.function(fd, backend="cpu")
    params = [w.clone().requires_grad_(True) for w in glob]
    loss = f(ids, labels, *params)
    mine = {t.untyped_storage().data_ptr() for t in [*params, ids, labels]}
    saved = [StorageWeakRef(v.untyped_storage()) for v in loss.grad_fn.saved.values if v.untyped_storage().data_ptr() not in mine]
    (loaded,) = f._loaded.values()
    bwd = loaded.program("main_bwd")
    at: list[tuple[int, int]] = []  # at each let-go: the saved tensors gone, the backward's flops so far
    loaded.backend.let_go = lambda array: at.append((sum(r.expired() for r in saved), bwd._interp.flops))
    loss.backward()
    assert len(saved) >= 10 and len(at) >= len(saved), (len(saved), at)
    # freed while the backward goes on: some are gone before its last GEMMs
    assert any(0 < gone and flops < bwd.last_flops / 2 for gone, flops in at), (at, bwd.last_flops)
    assert all(r.expired() for r in saved)
    for p, r in zip(params, ref):
        assert p.grad is not None and torch.allclose(p.grad.double(), r.grad, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="ran twice"):
        loss.backward()
    f.close()

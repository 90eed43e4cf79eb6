"""tools/bench_model.py's parts on the CPU: its PyTorch model is train_gpt's
(the same loss as `reference_loss` on the same weights), its options make
the shapes and autodiff's options, and fuserc.torch.function hands those
options to the autodiff pass."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "examples" / "python"))

import bench_model  # noqa: E402
from train_gpt import initial_weights, reference_loss  # noqa: E402


class OneRank:
    """The job of one process on the CPU, as bench_model's `torch_model` reads it."""

    d, device = 1, torch.device("cpu")


def test_the_pytorch_model_is_train_gpts() -> None:
    s = bench_model.Shape(layers=2, hidden=32, tokens=16, head_dim=16, vocab=64)
    a = s.model_args("f32")
    weights = [w.double() for w in initial_weights(a)]
    for w in weights:  # biases and norms away from 0 and 1, so that a swapped parameter shows
        w.add_(torch.randn(w.shape, dtype=w.dtype) * 0.1)
    ids = torch.randint(0, s.vocab, (s.tokens,))
    labels = torch.randint(0, s.vocab, (s.tokens,))
    model = bench_model.torch_model(s, weights, OneRank())  # type: ignore[arg-type]
    got = F.cross_entropy(model(ids), labels)
    want = reference_loss(ids, labels, weights, argparse.Namespace(**vars(a)))
    assert torch.allclose(got, want, rtol=1e-12), (got, want)


def test_options() -> None:
    p = bench_model.parser()
    a = bench_model.resolve(p.parse_args(["--shapes", "12x2048x8192,24x4096x4096", "--budget", "2048", "--autodiff-options", "x=1"]))
    assert [(s.layers, s.hidden, s.tokens, s.heads, s.vocab) for s in a.shape_list] == [(12, 2048, 8192, 16, 32768), (24, 4096, 4096, 32, 32768)]
    assert a.autodiff == "x=1 budget=2048" and a.dtype == "bf16"
    a = bench_model.resolve(p.parse_args(["--small"]))
    assert [(s.layers, s.hidden, s.tokens) for s in a.shape_list] == [(2, 64, 32)] and a.dtype == "f32" and a.autodiff == ""
    assert bench_model.Shape(2, 512, 30, 128, 64).problem(4) == "30 tokens are not divisible by 4 ranks"
    with pytest.raises(argparse.ArgumentTypeError):
        bench_model.resolve(p.parse_args(["--shapes", "1x64x32", "--layers", "2"]))
    with pytest.raises(SystemExit):
        p.parse_args(["--shapes", "12x2048"])


def test_autodiff_options_reach_the_pass() -> None:
    """An option autodiff does not have is refused by name (the function
    then has no backward, and says why)."""
    import fuserc.torch as ft
    from fuserc.api import FusionDefinition
    from fuserc.diagnostics import Diagnostic

    fd = FusionDefinition()
    x = fd.define_tensor([4, 8], "f32")
    fd.add_output(fd.ops.tanh(x))
    x0 = torch.randn(4, 8, requires_grad=True)
    ft.function(fd, autodiff="gathered-mib=64")(x0).sum().backward()
    assert torch.allclose(x0.grad, 1 - torch.tanh(x0.detach()) ** 2, atol=1e-6)
    with pytest.raises(Diagnostic, match="has no option .no-such-option."):
        ft.function(fd, autodiff="no_such_option=3")(torch.randn(4, 8, requires_grad=True))

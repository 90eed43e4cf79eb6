"""tools/bench_model.py's parts on the CPU: its PyTorch model is train_gpt's
(the same loss as `reference_loss` on the same weights), its options make
the shapes and autodiff's options, fuserc.torch.function hands those
options to the autodiff pass, and a shape's variants are timed in turn
where they fit in memory together, else one after another, each closed
before the next is made."""

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


class Recorded:
    """bench_model's variants as stand-ins that log what happens to them
    (made, a step, closed), and a job of one process on the CPU."""

    d, rank, cuda, device = 1, 0, False, torch.device("cpu")
    compile_reason, async_tp_reason = None, "needs CUDA (symmetric memory)"

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[str] = []
        self.comm = self
        monkeypatch.setattr(bench_model, "inputs", lambda s, job, dtype: ([], None, None))
        monkeypatch.setattr(bench_model, "module_variant", lambda s, w, i, l, job, options, reset=True: self.variant("eager" if options is None else f"compile reset={reset}"))
        monkeypatch.setattr(bench_model, "fuserc_variant", lambda *args: self.variant("fuserc"))

    def variant(self, name: str) -> bench_model.Variant:
        name, _, how = name.partition(" ")
        self.log.append(f"make {name} {how}".strip())
        w = torch.nn.Parameter(torch.ones(2))

        def loss() -> torch.Tensor:
            self.log.append(name)
            return (w * w).sum()

        return bench_model.Variant(loss, [w], close=lambda: self.log.append(f"close {name}"))

    def Barrier(self) -> None:
        pass

    def allgather(self, x: object) -> list[object]:
        return [x]

    def drain(self) -> None:
        pass

    release = reset_peak = drain

    def peak_mib(self) -> None:
        return None


def shape_run(monkeypatch: pytest.MonkeyPatch, free: float | None = None) -> tuple[bench_model.ShapeResult, list[str]]:
    """One shape's run; with `free` MiB, as on a GPU where each open variant
    holds 1,000 MiB."""
    job = Recorded(monkeypatch)
    if free is not None:
        opened = lambda: sum(e.startswith("make") for e in job.log) - sum(e.startswith("close") for e in job.log)  # noqa: E731
        monkeypatch.setattr(bench_model, "allocated_mib", lambda job: 1000.0 * opened())
        monkeypatch.setattr(bench_model, "free_mib", lambda job: free)
    a = bench_model.resolve(bench_model.parser().parse_args(["--small", "--warmup", "1", "--iters", "2", "--repeats", "3"]))
    res = bench_model.bench_shape(a.shape_list[0], job, a)  # type: ignore[arg-type]
    assert all(res.results[k].step_ms for k in ("eager", "fuserc", "compile")), res.results
    assert res.results["async_tp"].reason == "needs CUDA (symmetric memory)"
    return res, job.log


def alone(name: str) -> list[str]:
    """A variant's first step, warm-up step and its 3 x 2 steps alone."""
    return [name] * 8


def test_variants_that_fit_together_are_timed_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU always: all three made (torch.compile's without dropping
    Dynamo's caches, the others' being timed beside it), each with its
    steps alone; then 3 rounds of 1 warm-up + 2 timed steps each, round r
    starting with the r-th; then each closed."""
    res, log = shape_run(monkeypatch)
    want = ["make eager", *alone("eager"), "make fuserc", *alone("fuserc"), "make compile reset=False", *alone("compile")]
    for first in range(3):
        for i in range(3):
            want += [("eager", "fuserc", "compile")[(first + i) % 3]] * 3
    want += ["close eager", "close fuserc", "close compile"]
    assert log == want
    assert res.timing.startswith("interleaved, 3 rounds"), res.timing


def test_variants_that_do_not_fit_are_timed_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the first variant's memory (1,000 MiB held) times 3 variants
    times the margin does not fit in what is free at the start, each is
    timed alone and closed before the next is made (compiled afresh); where
    it fits, they are timed in turn."""
    res, log = shape_run(monkeypatch, free=4000.0)
    assert log == ["make eager", *alone("eager"), "close eager", "make fuserc", *alone("fuserc"), "close fuserc",
                   "make compile reset=True", *alone("compile"), "close compile"]  # fmt: skip
    assert res.timing == "one after another (the variants would need about 4,500 MiB together, 4,000 MiB free)", res.timing
    res, log = shape_run(monkeypatch, free=4500.0)
    assert res.timing.startswith("interleaved") and log.index("close eager") > log.index("make compile reset=False")


def test_a_variant_failing_on_another_rank_is_closed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variant begins here but fails on a second rank: each is closed
    here before the next is made, and each reads the other rank's reason."""
    job = Recorded(monkeypatch)
    job.allgather = lambda x: [x, "RuntimeError: no memory" if x == "" else x]  # type: ignore[method-assign]
    a = bench_model.resolve(bench_model.parser().parse_args(["--small", "--warmup", "1", "--iters", "2", "--repeats", "3"]))
    res = bench_model.bench_shape(a.shape_list[0], job, a)  # type: ignore[arg-type]
    assert job.log == ["make eager", *alone("eager"), "close eager", "make fuserc", *alone("fuserc"), "close fuserc",
                       "make compile reset=True", *alone("compile"), "close compile"]  # fmt: skip
    assert all(res.results[k].reason == "rank 1: RuntimeError: no memory" for k in ("eager", "fuserc", "compile")), res.results


def test_the_peak_counts_what_a_variant_keeps_between_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The peak is taken above the inputs, the variant's parameters and its
    optimizer state: what else it keeps between steps (fuserc's captured
    graphs' pools, cached buffers) is part of its peak, as it is of the
    memory a training step needs."""
    job = Recorded(monkeypatch)
    held, made = 700.0, []
    # before the variant: 100 MiB of inputs; after its steps: those, its own 50 MiB and 700 held
    monkeypatch.setattr(bench_model, "allocated_mib", lambda job: 100.0 + (50.0 + held if made else 0.0))
    monkeypatch.setattr(bench_model, "owned_mib", lambda v: 50.0)
    monkeypatch.setattr(job, "peak_mib", lambda: 100.0 + 50.0 + held + 30.0, raising=False)
    a = bench_model.resolve(bench_model.parser().parse_args(["--small", "--warmup", "1", "--iters", "2", "--repeats", "1"]))

    def make() -> bench_model.Variant:
        made.append(True)
        return job.variant("fuserc")

    v, r = bench_model.begin(make, job, a, "fuserc")  # type: ignore[arg-type]
    bench_model.end(v)
    assert r.peak_mib == held + 30.0


def test_owned_memory_is_the_parameters_and_the_optimizer_state() -> None:
    w = torch.nn.Parameter(torch.ones(256, 1024))  # 1 MiB in f32
    v = bench_model.Variant(lambda: (w * w).sum(), [w])
    assert bench_model.owned_mib(v) == 1.0
    v.step()  # AdamW's two moments (and its step count)
    assert bench_model.owned_mib(v) == pytest.approx(3.0, abs=1e-3)


def test_the_device_time_of_a_step_is_shown_beside_the_baselines() -> None:
    """Each variant's device time alone (`device_ms`: n/a off CUDA) in its
    own table, each baseline's over fuserc's as a ratio."""
    res = bench_model.ShapeResult(bench_model.Shape(12, 2048, 8192, 128, 32768))
    for key, ms in (("fuserc", 85.86), ("eager", 86.5), ("compile", 83.74), ("async_tp", None)):
        res.results[key] = bench_model.Result(step_ms=90.0, tokens_per_s=1.0, device_ms=ms, reason="" if ms else "n/a here")
    text = bench_model.markdown([res], 1, "bf16", "H200")
    row = next(line for line in text.splitlines() if line.startswith("| 12 x 2048 x 8192 | 85.9 |"))
    assert row == "| 12 x 2048 x 8192 | 85.9 | 86.5 | 83.7 | n/a | 1.01 | 0.98 | n/a |", row
    assert bench_model.device_ms(lambda: None, Recorded.__new__(Recorded), 2) is None  # a job off CUDA

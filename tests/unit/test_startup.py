"""Where the time to a first result goes (runtime/startup.py): the report's
phases, the job's figures from every rank's, and
`fuserc.torch.function(..., time=True)` on its first call and backward.
`fuserc run --time` is in tests/e2e/test_run.py."""

from __future__ import annotations

import re

import pytest
import torch

from fuserc.runtime.startup import PHASES, KernelCounts, Startup, combined, process_age


def test_the_report_and_the_jobs_figures() -> None:
    a, b = Startup(), Startup()
    for i, phase in enumerate(PHASES):
        a.add(phase, 0.5 * i)
        b.add(phase, 1.0 if phase == "passes" else 0.1)
    a.kernels, b.kernels = KernelCounts(loaded=3, built=1), KernelCounts(waited=1, built=3)
    job = combined([a, b])
    assert job.seconds["passes"] == 1.0 and job.seconds["kernels"] == 2.0
    assert (job.kernels.loaded, job.kernels.built, job.kernels.waited) == (3, 4, 1)
    text = job.report("startup of @main", ranks=2)
    assert text.startswith("startup of @main (slowest of 2 ranks per phase):\n")
    assert "  kernels            2.000 s  8 kernels: 3 from the cache, 4 built, 1 built by another process over the ranks" in text
    first = sum(job.seconds[p] for p in PHASES if p != "steady run")
    assert f"  to first result {first:8.3f} s\n" in text
    assert Startup().report() == "startup:\n  to first result    0.000 s\n"
    age = process_age()
    assert age is None or 0 < age < 1e6


def test_function_reports_its_first_call(capsys: pytest.CaptureFixture[str]) -> None:
    import fuserc.torch
    from fuserc.api import FusionDefinition

    fd = FusionDefinition()
    x = fd.define_tensor([8, 16])
    w = fd.define_tensor([16, 4])
    fd.add_output(fd.ops.sum(fd.ops.tanh(x @ w), dims=[0, 1]))
    f = fuserc.torch.function(fd, backend="cpu", time=True)
    xt, wt = torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    f(xt, wt).backward()
    err = capsys.readouterr().err
    assert "fuserc.torch.function: startup to the first run of @main_fwd:" in err
    assert "fuserc.torch.function: startup to the first run of @main_bwd:" in err
    for phase in ("passes", "backend", "communicators", "kernels", "first run"):
        assert re.search(rf"^  {phase} +\d+\.\d{{3}} s", err, re.M), phase
        assert phase in f.startup.seconds
    f(xt, wt)
    assert "startup" not in capsys.readouterr().err  # once
    assert wt.grad is not None

"""tools/profile_model.py: its reading of a profile (kernels by name, the
idle time between kernels, the host's lead, the kernel pairs around the
idle time), on events made here, and its small run on the CPU beside
eager."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import profile_model  # noqa: E402

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


@dataclass
class Event:
    """A kineto event as profile_model reads one (times in microseconds here)."""

    label: str
    kind: torch.autograd.DeviceType
    start: float
    end: float
    corr: int = 0
    thread: int = 1
    annotation: bool = False

    def name(self) -> str:
        return self.label

    def device_type(self) -> torch.autograd.DeviceType:
        return self.kind

    def start_ns(self) -> int:
        return int(self.start * 1e3)

    def end_ns(self) -> int:
        return int(self.end * 1e3)

    def duration_ns(self) -> int:
        return self.end_ns() - self.start_ns()

    def correlation_id(self) -> int:
        return self.corr

    def start_thread_id(self) -> int:
        return self.thread

    def is_user_annotation(self) -> bool:
        return self.annotation


class Prof:
    def __init__(self, events: list[Event]):
        results = type("Results", (), {"events": lambda _self: events})()
        self.profiler = type("Profiler", (), {"kineto_results": results})()


def test_kernels_gaps_and_leads() -> None:
    """Two steps of three kernels behind the hold: the gaps between them
    (the hold's kernel and a `record_function` range left out), the pairs around them, the leads of the
    kernels with a launch call, and the idle time before a kernel the host
    launched only just in time."""
    events = [
        Event("cudaLaunchKernel", CPU, 0, 1, corr=9),
        Event("spin_kernel", CUDA, 0, 1000, corr=9),
        Event("cudaLaunchKernel", CPU, 10, 11, corr=1),
        Event("cuLaunchKernelEx", CPU, 20, 21, corr=2),
        Event("cudaMemsetAsync", CPU, 30, 31, corr=3),
        Event("nvjet_gemm", CUDA, 1001, 1101, corr=1),
        Event("Optimizer.step#AdamW.step", CUDA, 1001, 1240, annotation=True),  # a range, no kernel
        Event("triton_red_fused_sum_0", CUDA, 1104, 1114, corr=2),
        Event("Memset (Device)", CUDA, 1115, 1116, corr=3),
        Event("cudaLaunchKernel", CPU, 1130, 1131, corr=4),  # the host behind: launched 10 us before it starts
        Event("nvjet_gemm", CUDA, 1140, 1240, corr=4),
    ]
    p = profile_model.read_profile(Prof(events), steps=2, device=True)
    assert p.by_name == {"nvjet_gemm": [2, 200.0], "triton_red_fused_sum_0": [1, 10.0], "Memset (Device)": [1, 1.0]}
    assert [round(g) for g, _, _ in p.gaps] == [3, 1, 24]
    assert p.gaps[0][1:] == ("nvjet_gemm", "triton_red_fused_sum_0")
    assert sorted(round(x) for x in p.leads_us) == [10, 991, 1084, 1085]
    assert round(p.behind_us) == 24 and round(p.span_us) == 239
    text = "\n".join(profile_model.report("fuserc", p, top=3))
    assert "idle between them 0.014 ms" in text  # (3 + 1 + 24 us) over 2 steps
    assert "1 kernels a step waited for the host" not in text and "waited for the host (idle before them 0.012 ms)" in text
    assert "by kind: gemm 0.100 ms (1)" in text
    assert p.behind == [p.gaps[2]]  # listed apart: where the device waited for the host
    assert "waiting for the host, between (a step):\n    0.012 ms     0x  Memset (Device) -> nvjet_gemm" in text


def test_the_cpus_top_level_ops() -> None:
    """On the CPU the "kernels" are the main thread's aten ops not inside
    another one; there is no lead."""
    events = [
        Event("aten::linear", CPU, 0, 50),
        Event("aten::matmul", CPU, 5, 45),
        Event("aten::add", CPU, 60, 70),
        Event("aten::add", CPU, 0, 100, thread=2),
    ]
    p = profile_model.read_profile(Prof(events), steps=1, device=False)
    assert p.by_name == {"aten::linear": [1, 50.0], "aten::add": [1, 10.0]}
    assert [(round(g), a, b) for g, a, b in p.gaps] == [(10, "aten::linear", "aten::add")]
    assert p.leads_us == []


def test_small_run_beside_eager() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "profile_model.py"), "--small", "--variants", "fuserc,eager", "--top", "3"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for line in ("fuserc: span", "eager: span", "fuserc - eager, by name", "idle by gap:", "top top-level ops"):
        assert line in out, out

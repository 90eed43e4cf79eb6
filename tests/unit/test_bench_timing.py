"""The benchmarks' timed repeats (tools/bench.py `measure`,
tools/bench_layer.py `timed`): every timed step runs with Python's garbage
collector off, garbage made before a repeat is collected before it, and
the collector is on again after the repeats (and after a step that
raises). Variants timed in turn (tools/bench_torch.py `interleaved_ms`):
each round runs every variant's warm-up then its window, the first
variant rotating from round to round, and each figure is the median of
its rounds."""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from bench import gc_paused, host_clock, measure  # noqa: E402
from bench_layer import timed  # noqa: E402
from bench_torch import interleaved_ms  # noqa: E402


class OneRank:
    """mpi4py's communicator as one rank sees it alone."""

    def Barrier(self) -> None:
        pass

    def allgather(self, x: Any) -> list[Any]:
        return [x]


class Cycle:
    """Garbage only a collection frees (a reference cycle), whose
    collection is seen."""

    collected = 0

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        Cycle.collected += 1


def steps() -> tuple[list[bool], Any]:
    seen: list[bool] = []
    return seen, lambda: seen.append(gc.isenabled())


def test_measure_runs_its_timed_steps_with_the_collector_off() -> None:
    seen, step = steps()
    times = measure(step, host_clock(), OneRank(), warmup=2, iters=3, repeats=2)
    assert len(times) == 2
    assert seen == [True, True] + [False] * 6  # the warm-up runs as the caller has it
    assert gc.isenabled()


def test_bench_layer_times_its_steps_with_the_collector_off() -> None:
    seen, step = steps()
    job = argparse.Namespace(drain=lambda: None, comm=OneRank())
    times = timed(step, job, argparse.Namespace(warmup=1, iters=2, repeats=3))  # type: ignore[arg-type]
    assert len(times) == 3
    assert seen == [True] + [False] * 6
    assert gc.isenabled()


def test_garbage_is_collected_before_a_repeat_and_the_collector_restored() -> None:
    Cycle.collected = 0
    Cycle()
    with gc_paused():
        assert Cycle.collected == 1 and not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("a failing step")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


def test_variants_are_timed_in_turn_each_round_rotating() -> None:
    """3 variants, 4 rounds of 2 warm-up + 3 timed calls: round r runs
    c, a, b from its (r mod 3)-th, each its warm-up right before its
    window; each figure is the median of its 4 windows' figures (not their
    mean, nor the first or last)."""
    calls: list[str] = []
    windows: list[str] = []
    figures = {"a": iter([4.0, 1.0, 2.0, 100.0]), "b": iter([7.0, 5.0, 6.0, 9.0]), "c": iter([3.0, 3.0, 3.0, 3.0])}

    def window(step: Any, iters: int) -> float:
        step_name = step.__name__
        windows.append(step_name)
        calls.append("[")
        for _ in range(iters):
            step()
        calls.append("]")
        return next(figures[step_name])

    def step(name: str) -> Any:
        def run() -> None:
            calls.append(name)

        run.__name__ = name
        return run

    got = interleaved_ms({n: step(n) for n in "abc"}, argparse.Namespace(repeats=4, warmup=2, iters=3), window=window)
    assert windows == list("abc" "bca" "cab" "abc")
    assert calls == [c for n in "abcbcacababc" for c in [n, n, "[", n, n, n, "]"]]
    assert got == {"a": 3.0, "b": 6.5, "c": 3.0}


def test_interleaved_ms_times_calls_on_the_host() -> None:
    """On the CPU a window is the host's time per call: a step of at least
    2 ms reads at least 2 ms, not the window's total or its seconds."""
    import time

    got = interleaved_ms({"slow": lambda: time.sleep(0.002), "fast": lambda: None}, argparse.Namespace(repeats=3, warmup=1, iters=10))
    assert 2.0 <= got["slow"] < 15.0 and got["fast"] < 1.0, got

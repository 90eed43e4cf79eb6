"""The benchmarks' timed repeats (tools/bench.py `measure`,
tools/bench_layer.py `timed`): every timed step runs with Python's garbage
collector off, garbage made before a repeat is collected before it, and
the collector is on again after the repeats (and after a step that
raises)."""

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

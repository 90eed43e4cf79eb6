"""tools/bench_layer.py --profile: the device timeline read from a Chrome
trace (busy and idle time, the longest idle gaps, each stream's busy time),
on events made here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from bench import device_timeline  # noqa: E402


def ev(cat: str, ts: float, dur: float, stream: int) -> dict:
    return {"ph": "X", "cat": cat, "name": "k", "ts": ts, "dur": dur, "args": {"stream": stream}}


def test_busy_idle_and_gaps() -> None:
    """Stream 7 runs 0-100 and 400-500 us, stream 9 50-150 (overlapping
    the first) and a copy 600-650: busy 300 of a 650 us span, idle gaps of
    250 us at 0.150 ms and 100 at 0.500; host events do not count."""
    events = [
        ev("kernel", 0, 100, 7), ev("kernel", 50, 100, 9), ev("kernel", 400, 100, 7),
        ev("gpu_memcpy", 600, 50, 9), {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},
    ]  # fmt: skip
    lines = device_timeline(events).splitlines()
    assert lines[0] == "device timeline: span 0.650 ms, some stream busy 0.300 ms, idle 0.350 ms"
    assert lines[1] == "  longest idle gaps (us at ms): 250 at 0.150, 100 at 0.500"
    assert lines[2] == "  busy per stream (ms): 7 0.200, 9 0.150"


def test_no_device_work() -> None:
    assert device_timeline([{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 0, "dur": 1}]) == "device timeline: no device work recorded"

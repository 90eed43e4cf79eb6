#!/usr/bin/env python
"""Render a fuserc trace (`fuserc run --trace FILE.json`) as a PNG timeline.

    python tools/trace_png.py TRACE.json [-o OUT.png] [--title TEXT] [--labels]

One row per (rank, stream), in rank then stream order, named by the trace's
metadata ("rank 1 / worker0/2"); each op a bar from its start to its end,
colored by category (compute, communication, copy, sync; the legend sits
under the time axis), so that overlap of communication with compute across
streams is visible at a glance. Time is in milliseconds from the trace's
origin. With --labels, every bar wide enough to hold its op's name shows
it. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLORS: dict[str, str] = {
    "compute": "#2b7bba",
    "communication": "#e8731a",
    "copy": "#3aa655",
    "sync": "#9a9a9a",
}
OTHER_COLOR = "#c44e52"


@dataclass
class Row:
    """One (rank, stream) of the timeline and its bars (start ms, length ms)."""

    pid: int
    tid: int
    label: str
    bars: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    names: list[tuple[float, float, str]] = field(default_factory=list)


def load_events(path: str | Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace file (object or bare array form)."""
    data = json.loads(Path(path).read_text())
    return data["traceEvents"] if isinstance(data, dict) else list(data)


def rows(events: Sequence[dict[str, Any]]) -> list[Row]:
    """The rows of a timeline: every (pid, tid) with a complete event,
    labelled from the process_name/thread_name metadata."""
    process: dict[int, str] = {}
    thread: dict[tuple[int, int], str] = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        name = (e.get("args") or {}).get("name")
        if e.get("name") == "process_name" and name is not None:
            process[e["pid"]] = str(name)
        elif e.get("name") == "thread_name" and name is not None:
            thread[(e["pid"], e["tid"])] = str(name)
    out: dict[tuple[int, int], Row] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (int(e["pid"]), int(e["tid"]))
        row = out.get(key)
        if row is None:
            label = f"{process.get(key[0], f'rank {key[0]}')} / {thread.get(key, f'stream {key[1]}')}"
            row = out[key] = Row(key[0], key[1], label)
        start, length = float(e["ts"]) / 1e3, float(e.get("dur", 0.0)) / 1e3
        row.bars.setdefault(str(e.get("cat", "")), []).append((start, length))
        row.names.append((start, length, str(e.get("name", ""))))
    return [out[k] for k in sorted(out)]


def render(events: Sequence[dict[str, Any]], out: str | Path, title: str = "", labels: bool = False) -> Path:
    """Draw the timeline of `events` into the PNG `out`."""
    import matplotlib.pyplot as plt

    fig = draw(events, title, labels)
    path = Path(out)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


DPI = 120


def draw(events: Sequence[dict[str, Any]], title: str = "", labels: bool = False) -> Any:
    """The figure of the timeline of `events`: the legend in its own band
    under the time axis (never over it), and with `labels` the op name on
    every bar wide enough to hold it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    timeline = rows(events)
    if not timeline:
        raise ValueError("the trace has no complete ('X') events to draw")
    end = max(s + d for r in timeline for bars in r.bars.values() for s, d in bars)
    min_width = end / 2000 if end > 0 else 1e-3  # keep the shortest ops visible
    height = max(2.5, 0.45 * len(timeline) + 1.6)
    fig, ax = plt.subplots(figsize=(14, height), layout="constrained", dpi=DPI)
    used: set[str] = set()
    for y, row in enumerate(timeline):
        for cat, bars in row.bars.items():
            color = COLORS.get(cat, OTHER_COLOR)
            used.add(cat if cat in COLORS else "other")
            ax.broken_barh([(s, max(d, min_width)) for s, d in bars], (y - 0.4, 0.8), facecolors=color, edgecolor="none")
    ax.set_yticks(range(len(timeline)))
    ax.set_yticklabels([r.label for r in timeline])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.grid(axis="x", linestyle=":", alpha=0.5)
    order = [c for c in (*COLORS, "other") if c in used]
    fig.legend(
        handles=[Patch(color=COLORS.get(c, OTHER_COLOR), label=c) for c in order],
        loc="outside lower center", ncol=len(order), frameon=False,
    )  # fmt: skip
    if title:
        ax.set_title(title)
    if labels:
        _label_bars(fig, ax, timeline)
    return fig


LABEL_PAD_PX = 4


def _label_bars(fig: Any, ax: Any, timeline: Sequence[Row]) -> None:
    """Write each op's name (without `hir.`) in its bar when the text fits
    in the bar's width on the final layout, measured in pixels."""
    fig.canvas.draw()  # the layout (and so the pixels per ms) is final
    renderer = fig.canvas.get_renderer()
    x0, x1 = ax.get_xlim()
    px_per_ms = ax.get_window_extent(renderer).width / (x1 - x0)
    for y, row in enumerate(timeline):
        for s, d, name in row.names:
            if d * px_per_ms < 2 * LABEL_PAD_PX:
                continue
            text = ax.text(s + d / 2, y, name.removeprefix("hir."), ha="center", va="center", fontsize=7, color="white", clip_on=True)
            text.set_in_layout(False)
            if text.get_window_extent(renderer).width + 2 * LABEL_PAD_PX > d * px_per_ms:
                text.remove()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render a fuserc trace as a PNG timeline.")
    parser.add_argument("trace", help="a trace written by `fuserc run --trace`")
    parser.add_argument("-o", "--output", help="the PNG to write (default: the trace's name with .png)")
    parser.add_argument("--title", default=None, help="a title (default: the trace's file name)")
    parser.add_argument("--labels", action="store_true", help="write op names on the bars wide enough to hold them")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        print("error: trace_png needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 1
    try:
        events = load_events(args.trace)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read the trace {args.trace}: {e}", file=sys.stderr)
        return 1
    out = args.output or str(Path(args.trace).with_suffix(".png"))
    try:
        render(events, out, args.title if args.title is not None else Path(args.trace).name, args.labels)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tracing in-process on one rank: categories, spans per stream, the
backend's default (host clock) marks, the merged Chrome trace, and the PNG
timeline of tools/trace_png.py."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import hir
from fuserc.ir import parse
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.evaluator.evaluator import Program
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.runtime.evaluator.trace import (
    CATEGORIES,
    Tracer,
    category_of,
    gather_trace,
    load_trace,
    merge,
    tracing,
    write_trace,
)

ROOT = Path(__file__).parents[2]

STREAMS = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<8x4xf32> {hir.global = tensor<8x4xf32, #fusion.sharding<@m, [-, -]>>},
                %w: tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<8x2xf32> {hir.global = tensor<8x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %main = hir.get_current_stream : !hir.stream
  %xc = hir.alloc "xc" : tensor<8x4xf32>
  hir.copy %x, %xc : tensor<8x4xf32>, tensor<8x4xf32>
  %xg = hir.alloc "xg" : tensor<8x4xf32>
  %t = hir.allgather %xc, %xg team = [0] backend = mpi : (tensor<8x4xf32>, tensor<8x4xf32>) -> !hir.token
  hir.wait %t : !hir.token
  %y = hir.alloc "y" : tensor<8x2xf32>
  hir.for %i = 0 to 2 {
    %s = hir.stream_for %i mod 2 : !hir.stream
    hir.set_current_stream %s : !hir.stream
    hir.sync_stream %main : !hir.stream
    %xi = hir.chunk %xg [%i] dim = 0 chunks = 2 : (tensor<8x4xf32>, index) -> tensor<4x4xf32>
    %yi = hir.chunk %y [%i] dim = 0 chunks = 2 : (tensor<8x2xf32>, index) -> tensor<4x2xf32>
    hir.matmul %xi, %w, %yi : tensor<4x4xf32>, tensor<4x2xf32>, tensor<4x2xf32>
    hir.set_current_stream %main : !hir.stream
    hir.sync_stream %s : !hir.stream
  }
  hir.dealloc %xc : tensor<8x4xf32>
  hir.dealloc %xg : tensor<8x4xf32>
  func.return %y : tensor<8x2xf32>
}
"""


@pytest.fixture
def program():
    prog = Program.load(parse(STREAMS, "streams.mlir"), "main", CpuBackend(mpi_env()))
    yield prog
    prog.close()


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)]


def _complete(events: list[dict]) -> list[dict]:
    return [e for e in events if e["ph"] == "X"]


def test_categories() -> None:
    module = parse(STREAMS, "streams.mlir")
    cats = {op.name: category_of(op) for op in module.walk()}
    assert cats["hir.matmul"] == "compute"
    assert cats["hir.copy"] == "copy"
    assert cats["hir.allgather"] == "communication"
    assert cats["hir.wait"] == "sync" and cats["hir.sync_stream"] == "sync"
    for untraced in ("hir.alloc", "hir.dealloc", "hir.for", "hir.chunk", "hir.stream_for", "hir.set_current_stream"):
        assert cats[untraced] is None, untraced
    assert set(c for c in cats.values() if c) <= set(CATEGORIES)


def test_traced_run_has_one_span_per_op_on_its_stream(program: Program) -> None:
    inputs = program.prepare_inputs(_inputs())
    with tracing(program) as tracer:
        program.run_prepared(inputs)
    assert program.tracer is None  # tracing ends with the block
    events = tracer.events()
    ops = _complete(events)
    names = [e["name"] for e in ops]
    assert names.count("hir.matmul") == 2 and names.count("hir.copy") == 1
    assert names.count("hir.allgather") == 1 and names.count("hir.wait") == 1
    assert names.count("hir.sync_stream") == 4
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {0: "main", 1: "worker0/2", 2: "worker1/2"}
    matmuls = [e for e in ops if e["name"] == "hir.matmul"]
    assert sorted(e["tid"] for e in matmuls) == [1, 2]  # one per worker stream
    assert all(e["tid"] == 0 for e in ops if e["name"] in ("hir.copy", "hir.allgather", "hir.wait"))
    for e in ops:
        assert e["pid"] == 0 and e["ts"] >= 0 and e["dur"] >= 0 and e["cat"] in CATEGORIES
    # ops run in program order on cpu: spans do not go back in time
    starts = [e["ts"] for e in ops]
    assert starts == sorted(starts)
    mm = matmuls[0]["args"]
    assert mm["shapes"] == ["4x4xf32", "4x2xf32", "4x2xf32"] and mm["flops"] == 2 * 4 * 2 * 4
    assert mm["loc"].startswith("streams.mlir:")
    ag = next(e for e in ops if e["name"] == "hir.allgather")["args"]
    assert ag["team"] == [0] and ag["bytes"] == 8 * 4 * 4


def test_untraced_runs_record_nothing(program: Program) -> None:
    inputs = program.prepare_inputs(_inputs())
    with tracing(program) as tracer:
        program.run_prepared(inputs)
    program.run_prepared(inputs)  # after the block: not traced
    assert len(_complete(tracer.events())) == 9


def test_tracer_needs_start(program: Program) -> None:
    program.tracer = Tracer(program.backend)
    try:
        with pytest.raises(RuntimeError, match="start"):
            program.run(_inputs())
    finally:
        program.tracer = None


def test_default_marks_are_host_clock() -> None:
    backend = CpuBackend(mpi_env())
    stream = backend.get_current_stream()
    origin = backend.trace_begin(stream)
    begin = backend.trace_begin(stream)
    time.sleep(0.01)
    end = backend.trace_end(begin, None)
    assert backend.trace_seconds(begin, end) >= 0.009
    assert 0 <= backend.trace_seconds(origin, begin) <= backend.trace_seconds(origin, end)


def test_merge_orders_metadata_first_then_ranks() -> None:
    r0 = [{"name": "hir.matmul", "ph": "X", "ts": 5.0, "dur": 1.0, "pid": 0, "tid": 1, "cat": "compute"},
          {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "w"}}]  # fmt: skip
    r1 = [{"name": "hir.wait", "ph": "X", "ts": 1.0, "dur": 1.0, "pid": 1, "tid": 0, "cat": "sync"}]
    trace = merge([r1, r0], {"program": "main"})
    assert [e["ph"] for e in trace["traceEvents"]] == ["M", "X", "X"]
    assert [e["pid"] for e in trace["traceEvents"][1:]] == [0, 1]
    assert trace["otherData"] == {"program": "main"} and trace["displayTimeUnit"] == "ms"


def test_write_and_load(program: Program, tmp_path: Path) -> None:
    inputs = program.prepare_inputs(_inputs())
    with tracing(program) as tracer:
        program.run_prepared(inputs)
    events = tracer.events()
    with pytest.raises(Diagnostic, match="cannot write the trace"):  # no folder made: as `fuserc opt -o`
        write_trace(tmp_path / "sub" / "t.json", events, mpi_env(), {"backend": "cpu"})
    path = tmp_path / "t.json"
    write_trace(path, events, mpi_env(), {"backend": "cpu"})
    data = json.loads(path.read_text())
    assert data["otherData"] == {"ranks": 1, "backend": "cpu"}
    assert load_trace(path) == data["traceEvents"]
    assert gather_trace(events, mpi_env())["traceEvents"] == data["traceEvents"]


def _trace_png():
    spec = importlib.util.spec_from_file_location("trace_png", ROOT / "tools" / "trace_png.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["trace_png"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_trace_png_rows() -> None:
    tp = _trace_png()
    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "rank 1"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "worker1/2"}},
        {"name": "hir.matmul", "ph": "X", "ts": 2000.0, "dur": 500.0, "pid": 1, "tid": 2, "cat": "compute"},
        {"name": "hir.broadcast", "ph": "X", "ts": 0.0, "dur": 1000.0, "pid": 0, "tid": 0, "cat": "communication"},
    ]
    rows = tp.rows(events)
    assert [(r.pid, r.tid, r.label) for r in rows] == [(0, 0, "rank 0 / stream 0"), (1, 2, "rank 1 / worker1/2")]
    assert rows[1].bars == {"compute": [(2.0, 0.5)]}


def test_trace_png_renders(program: Program, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    tp = _trace_png()
    inputs = program.prepare_inputs(_inputs())
    with tracing(program) as tracer:
        program.run_prepared(inputs)
    path = tmp_path / "t.json"
    write_trace(path, tracer.events(), mpi_env())
    assert tp.main([str(path), "-o", str(tmp_path / "t.png"), "--labels"]) == 0
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    assert tp.main([str(empty), "-o", str(tmp_path / "e.png")]) == 1


def _bar(name: str, start_ms: float, dur_ms: float, tid: int = 0) -> dict[str, object]:
    return {"name": name, "ph": "X", "ts": start_ms * 1e3, "dur": dur_ms * 1e3, "pid": 0, "tid": tid, "cat": "compute"}


@pytest.mark.parametrize("rows", [1, 24])
def test_trace_png_legend_clear_of_the_axes(rows: int) -> None:
    """The legend sits in its own band: it overlaps neither the plot nor
    the time axis's label, for a short and a tall timeline."""
    pytest.importorskip("matplotlib")
    tp = _trace_png()
    fig = tp.draw([_bar("hir.matmul", 0, 10, tid) for tid in range(rows)], "title")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = fig.legends[0].get_window_extent(r)
    for other in (ax.get_window_extent(r), ax.xaxis.label.get_window_extent(r), *(t.get_window_extent(r) for t in ax.get_xticklabels())):
        assert not legend.overlaps(other)
    assert legend.y1 <= ax.xaxis.label.get_window_extent(r).y0


def test_trace_png_labels_every_bar_that_holds_one() -> None:
    """--labels names every bar whose width holds its name (measured on the
    drawn figure), also narrow ones, and no bar too narrow for it."""
    pytest.importorskip("matplotlib")
    tp = _trace_png()
    events = [
        _bar("hir.wait", 0, 50),  # wide
        _bar("hir.get", 60, 3),  # 3% of the time axis: room for 'get'
        _bar("hir.reduce_scatter", 70, 3),  # the same width: no room for its name
        _bar("hir.matmul", 80, 0.05),  # a sliver
        _bar("hir.matmul", 90, 10, tid=1),
    ]
    fig = tp.draw(events, labels=True)
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["get", "matmul", "wait"]
    assert len(tp.draw(events).axes[0].texts) == 0


def test_every_communication_copy_and_compute_op_is_traced() -> None:
    """The e2e collectives program holds every communication, peer copy
    and compute op: each gets the category of its kind."""
    spec = importlib.util.spec_from_file_location("e2e_harness", ROOT / "tests" / "e2e" / "harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)  # type: ignore[union-attr]
    text = harness.expand((ROOT / "tests" / "e2e" / "programs" / "collectives.mlir.in").read_text(), 2)
    seen: dict[str, str | None] = {}
    for op in parse(text, "c.mlir").walk():
        seen[op.name] = category_of(op)
    expected = {"hir.put": "copy", "hir.get": "copy", "hir.copy": "copy", "hir.share": "communication",
                "hir.launch": "compute", "hir.linear": "compute", "hir.matmul": "compute"}  # fmt: skip
    for cls in hir.COMMUNICATION_OPS:
        if cls.name in seen:
            expected[cls.name] = "sync" if cls is hir.BarrierOp else "communication"
    assert {"hir.allgather", "hir.alltoall", "hir.send", "hir.recv", "hir.reduce_scatter"} <= set(expected)
    assert {k: seen.get(k) for k in expected} == expected

"""The evaluator prepares each op once per program and runs each block as
one function: later runs read no IR, yet give the right results for new
inputs, keep absent values absent, hand back every if_rank value, keep
nothing of a run alive after it, and keep the failure hook (read at every
run), diagnostics and error notes (naming the op that failed) (MPI
singleton, in-process). `per_op_costs` measures the host's cost per op
(printed by `pytest -s` or by running this file)."""

from __future__ import annotations

import gc
import os
import time
import weakref

import numpy as np
import pytest
import torch

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import hir, hir_comm
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.evaluator.evaluator import FAIL_RANK_ENV, InjectedFailure
from fuserc.runtime.job.mpi_env import MpiEnv, mpi_env
from fuserc.runtime.evaluator.trace import tracing

# the loader, the collectives program and the fixture that closes loaded
# programs are test_evaluator's (tests/unit is on sys.path under pytest)
from test_evaluator import _close_programs, collectives, load  # noqa: E402, F401


def _assert_broken_matmul_notes(text: str, places: list[str]) -> None:
    """Each of two runs fails in its hir.matmul (inside a hir.for), with
    notes naming the matmul, then the loop, at `places`."""
    prog = load(text, _BrokenMatmul(mpi_env()))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="matmul broke") as info:
            prog.run([torch.eye(2)])
        assert info.value.__notes__ == [
            f"while running 'hir.matmul' at {places[0]} on rank 0",
            f"while running 'hir.for' at {places[1]} on rank 0",
        ]


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((3, 4)).astype(np.float32),
        rng.standard_normal((4, 3)).astype(np.float32),
        rng.standard_normal((4,)).astype(np.float32),
    ]


BLOCKS = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %c0 = hir.constant 0 : index
  %buf = hir.alloc "buf" : tensor<4x2xf32>
  %h = hir.share %buf team = [0] : tensor<4x2xf32> -> !hir.handle
  hir.for %i = 0 to 4 step 2 {
    %b = hir.div %i by 2 : index
    %src = hir.chunk %x [%b] dim = 0 chunks = 2 : (tensor<4x2xf32>, index) -> tensor<2x2xf32>
    %t = hir.put %src, %h, %c0 block %b of 2 backend = cuda_ipc : (tensor<2x2xf32>, !hir.handle, index, index) -> !hir.token
    hir.wait %t : !hir.token
  }
  %f = hir.barrier team = [0] backend = nccl : !hir.token
  hir.wait %f : !hir.token
  %out = hir.alloc "out" : tensor<4x2xf32>
  hir.for %j = 0 to 2 {
    %dst = hir.chunk %out [%j] dim = 0 chunks = 2 : (tensor<4x2xf32>, index) -> tensor<2x2xf32>
    %t = hir.get %h, %c0, %dst block %j of 2 backend = cuda_ipc : (!hir.handle, index, tensor<2x2xf32>, index) -> !hir.token
    hir.wait %t : !hir.token
  }
  func.return %out : tensor<4x2xf32>
}
"""

_STATIC_PROPERTIES: list[tuple[type, str]] = [
    (hir.AllocOp, "site"),
    (hir.ForOp, "indices"),
    (hir.IfRankOp, "ranks"),
    (hir.ConstantOp, "value"),
    (hir.TeamOp, "team"),
    (hir.AddModOp, "modulus"),
    (hir.DivOp, "divisor"),
    (hir.StreamForOp, "count"),
    (hir.CommunicationOp, "backend"),
    (hir.ReducingOp, "reduction_op"),
    (hir.SelectOp, "dim"),
    (hir.ChunkOp, "dim"),
    (hir.ChunkOp, "chunks"),
    (hir_comm._PeerCopyOp, "chunks"),
]
"""Op properties a run used to read on every op."""


def _forbid_ir_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(self: object) -> None:
        raise AssertionError(f"'{type(self).__name__}' property read during a run")

    for cls, name in _STATIC_PROPERTIES:
        monkeypatch.setattr(cls, name, property(forbidden))


@pytest.mark.parametrize("forbid", [False, True], ids=["plain", "no-ir-reads"])
def test_later_runs_compute_fresh_results(forbid: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same Program run on new inputs gives their results (nothing of
    the first run's values is kept); after the first run, a run reads no
    op property."""
    prog = load(collectives())
    prog.run(_inputs(0))
    if forbid:
        _forbid_ir_reads(monkeypatch)
    for seed in (1, 2):
        x, w, wl, b = _inputs(seed)
        out = prog.run([x, w, wl, b])
        np.testing.assert_allclose(out[0], x, rtol=1e-6)
        np.testing.assert_allclose(out[12], x @ w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[16], x @ wl.T + b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[15], (x @ w).reshape(-1), rtol=1e-5, atol=1e-6)
        assert prog.last_flops == 2 * 2 * 4 * 3 * 3


def test_block_copies_and_barrier_on_later_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """hir.div, hir.put/get with blocks and hir.barrier, with new inputs."""
    prog = load(BLOCKS)
    x = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    torch.testing.assert_close(prog.run([x])[0], x)
    _forbid_ir_reads(monkeypatch)
    for k in (2.0, -3.0):
        torch.testing.assert_close(prog.run([k * x])[0], k * x)
    (shared,) = [e for e in prog.cache if e.key[0] == "buf"]
    assert len(shared.registrations) == 1  # shared once, on the first run


ABSENT = """
fusion.mesh @all shape = [2]
fusion.mesh @zero shape = [1]
func.func @main(%x: tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@all, [-, -]>>})
    -> (tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@zero, [-, -]>>},
        tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@all, [-, -]>>},
        tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@all, [-, -]>>}) attributes {hir.host} {
  %b = hir.if_rank [0] -> (tensor<2x2xf32>) {
    %a = hir.alloc "a" : tensor<2x2xf32>
    hir.yield %a : tensor<2x2xf32>
  }
  %p = hir.team_index team = [0] : index
  %v = hir.select %x [%p] dim = 0 : (tensor<2x2xf32>, index) -> tensor<2xf32>
  hir.copy %x, %b : tensor<2x2xf32>, tensor<2x2xf32>
  %y = hir.alloc "y" : tensor<2x2xf32>
  hir.matmul %x, %x, %y : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  %c0 = hir.constant 0 : index
  %q = hir.team_index team = [0, 1] : index
  %r = hir.alloc "r" : tensor<2x2xf32>
  hir.copy %x, %r : tensor<2x2xf32>, tensor<2x2xf32>
  %row = hir.chunk %r [%q] dim = 0 chunks = 2 : (tensor<2x2xf32>, index) -> tensor<1x2xf32>
  %x0 = hir.chunk %x [%c0] dim = 0 chunks = 2 : (tensor<2x2xf32>, index) -> tensor<1x2xf32>
  hir.copy %x0, %row : tensor<1x2xf32>, tensor<1x2xf32>
  func.return %b, %y, %r : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}
"""


class _Rank1Of2(CpuBackend):
    """Rank 1 of a job of 2 without communicators (its ops fail or are
    skipped before any communication)."""

    def __init__(self) -> None:
        super().__init__(MpiEnv(comm=None, rank=1, size=2))

    def prepare_teams(self, teams: object) -> None:
        pass


def test_non_member_results_stay_absent_on_every_run() -> None:
    """Rank 1: outside if_rank [0] and team [0] (absent results, ops using
    them skipped), at position 1 of team [0, 1] (row 1 of %r gets row 0 of
    %x), on every run."""
    prog = load(ABSENT, _Rank1Of2())
    for k in (1.0, 2.0, 5.0):
        x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]) * k
        b, y, r = prog.run([x])
        assert b is None
        torch.testing.assert_close(y, x @ x)
        torch.testing.assert_close(r, torch.stack([x[0], x[0]]))


def test_absent_operand_of_a_member_is_a_diagnostic_on_every_run() -> None:
    text = """
fusion.mesh @m shape = [2]
func.func @main(%x: tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>}) -> () attributes {hir.host} {
  %b = hir.if_rank [0] -> (tensor<2xf32>) {
    %a = hir.alloc "a" : tensor<2xf32>
    hir.yield %a : tensor<2xf32>
  }
  %t = hir.allgather %x, %b team = [1] backend = mpi : (tensor<2xf32>, tensor<2xf32>) -> !hir.token
  func.return
}
"""
    prog = load(text, _Rank1Of2())
    for _ in range(2):
        with pytest.raises(Diagnostic, match="'hir.allgather': an operand is absent on rank 1, a member") as info:
            prog.run([torch.zeros(2)])
        assert str(info.value.loc) == "test.mlir:8:3"


def test_failure_hook_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    prog = load(collectives())
    prog.run(_inputs(0))
    monkeypatch.setenv(FAIL_RANK_ENV, "0")
    for _ in range(2):
        with pytest.raises(InjectedFailure, match="FUSERC_FAIL_RANK=0: injected failure at 'hir.constant'"):
            prog.run(_inputs(1))
    monkeypatch.delenv(FAIL_RANK_ENV)
    x, w, wl, b = _inputs(2)
    np.testing.assert_allclose(prog.run([x, w, wl, b])[12], x @ w, rtol=1e-5, atol=1e-6)


def test_tracing_after_untraced_runs() -> None:
    """Tracing starts on a program already run: every traced op of the
    traced run gets its span, the runs around it none."""
    prog = load(BLOCKS)
    x = torch.ones(4, 2)
    prog.run([x])
    with tracing(prog) as tracer:
        prog.run([x])
    prog.run([x])
    names = [e["name"] for e in tracer.events() if e["ph"] == "X"]
    assert sorted(set(names)) == ["hir.barrier", "hir.get", "hir.put", "hir.share", "hir.wait"]
    assert (names.count("hir.put"), names.count("hir.get"), names.count("hir.wait")) == (2, 2, 5)


class _BrokenMatmul(CpuBackend):
    def matmul(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        raise RuntimeError("matmul broke")


def test_errors_carry_the_op_and_its_location_on_every_run() -> None:
    """A backend error gets a note per enclosing op; a range error is a
    Diagnostic at the op, with the run's value."""
    text = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@m, [-, -]>>}) -> () attributes {hir.host} {
  %y = hir.alloc "y" : tensor<2x2xf32>
  hir.for %i = 0 to 2 {
    hir.matmul %x, %x, %y : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  }
  func.return
}
"""
    _assert_broken_matmul_notes(text, ["test.mlir:6:5", "test.mlir:5:3"])
    chunked = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4xf32> {hir.global = tensor<4xf32, #fusion.sharding<@m, [-]>>}) -> () attributes {hir.host} {
  hir.for %i = 0 to 3 {
    %c = hir.chunk %x [%i] dim = 0 chunks = 2 : (tensor<4xf32>, index) -> tensor<2xf32>
  }
  func.return
}
"""
    prog = load(chunked)
    for _ in range(2):
        with pytest.raises(Diagnostic, match="chunk index 2 is out of range for chunks = 2") as info:
            prog.run([torch.zeros(4)])
        assert str(info.value.loc) == "test.mlir:5:5"


def test_unknown_op_is_a_diagnostic_when_reached() -> None:
    """An op the evaluator has no handler for fails where a run reaches it,
    not at load (here: only inside a loop that runs)."""
    text = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>}) -> (tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>}) attributes {hir.host} {
  hir.for %i = 0 to 0 {
    %t = hir.barrier team = [0] backend = nccl : !hir.token
  }
  hir.for %j = 0 to 1 {
    %s = fusion.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  }
  func.return %x : tensor<2xf32>
}
"""
    prog = load(text)
    for _ in range(2):
        with pytest.raises(Diagnostic, match="the host evaluator cannot run 'fusion.add'") as info:
            prog.run([torch.zeros(2)])
        assert str(info.value.loc) == "test.mlir:8:5"


def test_errors_name_the_op_that_failed_among_several() -> None:
    """In a block of several steps, the note names the step that raised,
    not its neighbours, on every run (also inside a loop, after steps
    that ran)."""
    text = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@m, [-, -]>>}) -> () attributes {hir.host} {
  %c0 = hir.constant 0 : index
  %y = hir.alloc "y" : tensor<2x2xf32>
  hir.copy %x, %y : tensor<2x2xf32>, tensor<2x2xf32>
  hir.for %i = 0 to 2 {
    %r = hir.select %x [%i] dim = 0 : (tensor<2x2xf32>, index) -> tensor<2xf32>
    %d = hir.div %i by 1 : index
    hir.matmul %x, %y, %y : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
    %c1 = hir.constant 1 : index
  }
  func.return
}
"""
    _assert_broken_matmul_notes(text, ["test.mlir:10:5", "test.mlir:7:3"])


MULTI = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>})
    -> (tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>},
        tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>},
        tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>}) attributes {hir.host} {
  %a, %b = hir.if_rank [0] -> (tensor<2xf32>, tensor<2xf32>) {
    %p = hir.alloc "p" : tensor<2xf32>
    hir.copy %x, %p : tensor<2xf32>, tensor<2xf32>
    %q = hir.alloc "q" : tensor<2xf32>
    hir.yield %q, %p : tensor<2xf32>, tensor<2xf32>
  }
  hir.if_rank [0] {
    hir.copy %b, %a : tensor<2xf32>, tensor<2xf32>
  }
  %n = hir.if_rank [1] -> (tensor<2xf32>) {
    %s = hir.alloc "s" : tensor<2xf32>
    hir.yield %s : tensor<2xf32>
  }
  %z = hir.alloc "z" : tensor<2xf32>
  hir.copy %n, %z : tensor<2xf32>, tensor<2xf32>
  func.return %a, %b, %n : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}
"""


class _TwoRanks(CpuBackend):
    """Rank 0 of a job of 2, without communicators (the program has none)."""

    def __init__(self) -> None:
        super().__init__(MpiEnv(comm=None, rank=0, size=2))

    def prepare_teams(self, teams: object) -> None:
        pass


def test_if_rank_hands_back_every_yielded_value_on_every_run() -> None:
    """An if_rank of two results gives each its own value (in order); one
    without results runs its region; one this rank is outside of gives an
    absent result, and the copy from it is skipped."""
    prog = load(MULTI, _TwoRanks())
    for k in (1.0, -2.0, 3.0):
        x = torch.tensor([1.0, 2.0]) * k
        a, b, n = prog.run([x])
        torch.testing.assert_close(b, x)
        torch.testing.assert_close(a, x)  # copied from %b by the second if_rank
        assert n is None


class _Recording(CpuBackend):
    """Keeps a weak reference to every view it makes."""

    def __init__(self) -> None:
        super().__init__(mpi_env())
        self.views: list[weakref.ref] = []

    def select(self, array: torch.Tensor, dim: int, index: int) -> torch.Tensor:
        view = super().select(array, dim, index)
        self.views.append(weakref.ref(view))
        return view


def test_a_run_keeps_none_of_its_values_alive() -> None:
    """Once a run returns (or fails), the values it made and does not
    return (views, tokens) are dropped, as a run's own state is."""
    text = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@m, [-, -]>>}) -> (tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %y = hir.alloc "y" : tensor<2x2xf32>
  hir.for %i = 0 to 2 {
    %r = hir.select %x [%i] dim = 0 : (tensor<2x2xf32>, index) -> tensor<2xf32>
    %o = hir.select %y [%i] dim = 0 : (tensor<2x2xf32>, index) -> tensor<2xf32>
    hir.copy %r, %o : tensor<2xf32>, tensor<2xf32>
  }
  func.return %y : tensor<2x2xf32>
}
"""
    backend = _Recording()
    prog = load(text, backend)
    x = torch.arange(4, dtype=torch.float32).reshape(2, 2)
    for _ in range(2):
        (y,) = prog.run([x])
        torch.testing.assert_close(y, x)
        gc.collect()
        assert len(backend.views) > 0 and all(ref() is None for ref in backend.views)
        backend.views.clear()


def test_a_block_of_many_steps() -> None:
    """A long straight-line block runs every step in order, traced or not."""
    steps = 400
    lines = ["  %v0 = hir.constant 0 : index"]
    lines += [f"  %v{i} = hir.add_mod %v{i - 1}, %c1 mod 7 : index" for i in range(1, steps)]
    lines += [f"  %r = hir.select %x [%v{steps - 1}] dim = 0 : (tensor<7x2xf32>, index) -> tensor<2xf32>"]
    lines += ["  %out = hir.alloc \"out\" : tensor<2xf32>", "  hir.copy %r, %out : tensor<2xf32>, tensor<2xf32>"]
    text = f"""
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<7x2xf32> {{hir.global = tensor<7x2xf32, #fusion.sharding<@m, [-, -]>>}}) -> (tensor<2xf32> {{hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>}}) attributes {{hir.host}} {{
  %c1 = hir.constant 1 : index
{chr(10).join(lines)}
  func.return %out : tensor<2xf32>
}}
"""
    prog = load(text)
    x = torch.arange(14, dtype=torch.float32).reshape(7, 2)
    row = (steps - 1) % 7
    torch.testing.assert_close(prog.run([x])[0], x[row])
    with tracing(prog) as tracer:
        torch.testing.assert_close(prog.run([2 * x])[0], 2 * x[row])
    assert [e["name"] for e in tracer.events() if e["ph"] == "X"] == ["hir.copy"]


def test_failure_hook_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook is read at every run: set (with spaces), set to another
    rank, unset, and with `os.environ` replaced by a plain mapping."""
    prog = load(collectives())
    monkeypatch.setenv(FAIL_RANK_ENV, " 0 ")
    with pytest.raises(InjectedFailure):
        prog.run(_inputs(0))
    monkeypatch.setenv(FAIL_RANK_ENV, "1")
    prog.run(_inputs(0))
    monkeypatch.delenv(FAIL_RANK_ENV)
    prog.run(_inputs(0))
    monkeypatch.setattr(os, "environ", {**os.environ, FAIL_RANK_ENV: "0"})
    with pytest.raises(InjectedFailure):
        prog.run(_inputs(0))
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != FAIL_RANK_ENV})
    prog.run(_inputs(0))


# ---- the host's cost per op ------------------------------------------------------

_PER_OP_BODIES: dict[str, str] = {
    "hir.constant": "%c = hir.constant 1 : index",
    "hir.div": "%c = hir.div %i by 2 : index",
    "hir.add_mod": "%c = hir.add_mod %i, %i mod 4 : index",
    "hir.chunk": "%c = hir.chunk %x [%k] dim = 0 chunks = 2 : (tensor<4x4xf32>, index) -> tensor<2x4xf32>",
    "hir.matmul": "hir.matmul %x, %x, %y : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>",
    "hir.alloc/dealloc": '%z = hir.alloc "z" : tensor<4x4xf32>\n    hir.dealloc %z : tensor<4x4xf32>',
    "hir.get/set_current_stream": "%s = hir.get_current_stream : !hir.stream\n    hir.set_current_stream %s : !hir.stream",
}
"""Loop bodies whose host cost per op `per_op_costs` measures (the mean of
a body's ops where it has two)."""


class _NoCompute(CpuBackend):
    """The cpu backend without the work of a matmul or a view: what remains
    of a run is the evaluator's own cost."""

    def __init__(self) -> None:
        super().__init__(mpi_env())
        self.matmuls = 0

    def matmul(self, a: object, b: object, out: object, acc: object = None) -> None:
        self.matmuls += 1

    def chunk(self, array: torch.Tensor, dim: int, index: int, chunks: int) -> torch.Tensor:
        return array


def _loop_program(body: str, iterations: int) -> str:
    return f"""
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x4xf32> {{hir.global = tensor<4x4xf32, #fusion.sharding<@m, [-, -]>>}}) -> () attributes {{hir.host}} {{
  %y = hir.alloc "y" : tensor<4x4xf32>
  %k = hir.constant 1 : index
  hir.for %i = 0 to {iterations} {{
    {body}
  }}
  func.return
}}
"""


def per_op_costs(iterations: int = 1000, runs: int = 30) -> dict[str, float]:
    """Nanoseconds of host time per op (per iteration for the empty loop):
    the best of `runs` runs of a loop of `iterations` over each body of
    `_PER_OP_BODIES`, backend compute stubbed, less the empty loop's
    cost, divided by the body's ops."""

    def best(body: str) -> float:
        backend = _NoCompute()
        prog = load(_loop_program(body, iterations), backend)
        inputs = prog.prepare_inputs([torch.zeros(4, 4)])
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            prog.run_prepared(inputs, synchronize=False)
            times.append(time.perf_counter() - start)
        assert backend.matmuls == (runs * iterations if "matmul" in body else 0)
        return min(times) / iterations * 1e9

    loop = best("")
    costs = {"hir.for iteration (empty body)": loop}
    for name, body in _PER_OP_BODIES.items():
        costs[name] = (best(body) - loop) / (body.count("\n") + 1)
    return costs


def test_per_op_costs_are_measured() -> None:
    """Every op kind of the table runs in a loop of the evaluator (the
    figures are printed with `pytest -s`; nothing is asserted on them)."""
    costs = per_op_costs(iterations=50, runs=3)
    assert set(costs) == {"hir.for iteration (empty body)", *_PER_OP_BODIES}
    for name, ns in costs.items():
        print(f"{name:32s} {ns:8.0f} ns")


if __name__ == "__main__":
    for name, ns in per_op_costs().items():
        print(f"{name:32s} {ns:8.0f} ns")

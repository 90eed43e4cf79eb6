"""The evaluator prepares each op once per program: later runs read no IR,
yet give the right results for new inputs, keep absent values absent,
and keep the failure hook, diagnostics and error notes (MPI singleton,
in-process)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import hir
from fuserc.runtime.cpu import CpuBackend
from fuserc.runtime.evaluator import FAIL_RANK_ENV, InjectedFailure
from fuserc.runtime.mpi_env import MpiEnv, mpi_env
from fuserc.runtime.trace import tracing

# the loader, the collectives program and the fixture that closes loaded
# programs are test_evaluator's (tests/unit is on sys.path under pytest)
from test_evaluator import _close_programs, collectives, load  # noqa: E402, F401


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
    (hir._PeerCopyOp, "chunks"),
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
    prog = load(text, _BrokenMatmul(mpi_env()))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="matmul broke") as info:
            prog.run([torch.eye(2)])
        assert info.value.__notes__ == [
            "while running 'hir.matmul' at test.mlir:6:5 on rank 0",
            "while running 'hir.for' at test.mlir:5:3 on rank 0",
        ]
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

"""The host evaluator in-process on one rank (MPI singleton): interpretation
of every op, the allocation cache across runs, absent values, input and
rank checks, the failure hook, and the cpu backend's staging paths."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fuserc.diagnostics import Diagnostic
from fuserc.ir import parse
from fuserc.runtime.evaluator.alloc_cache import AllocationCache
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.evaluator.evaluator import FAIL_RANK_ENV, InjectedFailure, Program
from fuserc.runtime.job.mpi_env import MpiEnv, mpi_env
from fuserc.runtime.evaluator.program import compile_text

E2E = Path(__file__).parents[1] / "e2e"
_spec = importlib.util.spec_from_file_location("e2e_harness", E2E / "harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)  # type: ignore[union-attr]


_LOADED: list[Program] = []


@pytest.fixture(autouse=True)
def _close_programs():
    """Free each test's MPI windows and communicators."""
    yield
    while _LOADED:
        _LOADED.pop().close()


def load(text: str, backend: CpuBackend | None = None) -> Program:
    prog = Program.load(parse(text, "test.mlir"), "main", backend or CpuBackend(mpi_env()))
    _LOADED.append(prog)
    return prog


def collectives(n: int = 1) -> str:
    return harness.expand((E2E / "programs" / "collectives.mlir.in").read_text(), n)


def _inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((3, 4)).astype(np.float32),
        rng.standard_normal((4, 3)).astype(np.float32),
        rng.standard_normal((4,)).astype(np.float32),
    ]


def test_every_op_on_one_rank() -> None:
    """The collectives program with a team of one: each op's result."""
    x, w, wl, b = _inputs(np.random.default_rng(0))
    prog = compile_text(collectives(1), pipeline="", backend="cpu", filename="c1.mlir")
    out = prog.execute([x, w, wl, b])
    xt = torch.from_numpy(x)
    expected = [x, x, x, x, x, x, x, x, x, x, x, x, x @ w, x,
                (torch.nn.functional.gelu(xt[0]) * xt[0]).numpy(), (x @ w).reshape(-1),
                x @ wl.T + b, x @ wl.T, xt.bfloat16().float().numpy(), x, x]  # fmt: skip
    assert len(out) == len(expected)
    for i, (g, e) in enumerate(zip(out, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6, err_msg=f"output {i}")
    assert prog.program.last_flops == 2 * 2 * 4 * 3 * 3  # one matmul, two linears
    prog.close()


def test_execute_returns_torch_for_torch_inputs() -> None:
    x, w, wl, b = (torch.from_numpy(a) for a in _inputs(np.random.default_rng(1)))
    prog = compile_text(collectives(1), pipeline="", backend="cpu")
    out = prog.execute([x, w, wl, b])
    assert isinstance(out[0], torch.Tensor) and out[18].dtype == torch.bfloat16
    torch.testing.assert_close(out[0], x)
    prog.close()


def test_allocation_cache_reused_across_runs() -> None:
    """The same buffer objects come back on the second run, and the shared
    handle of a cached buffer is made once."""
    prog = load(collectives(1))
    inputs = prog.prepare_inputs(_inputs(np.random.default_rng(2)))
    first = prog.run_prepared(inputs)
    misses = prog.cache.misses
    second = prog.run_prepared(inputs)
    assert prog.cache.misses == misses and prog.cache.hits >= misses
    for a, b in zip(first, second):
        assert a is b  # results are the cached buffers themselves
    (shared,) = [e for e in prog.cache if e.key[0] == "sh"]
    assert len(shared.registrations) == 1
    handle = next(iter(shared.registrations.values()))
    prog.run_prepared(inputs)
    assert next(iter(shared.registrations.values())) is handle
    prog.close()


def test_run_copies_outputs() -> None:
    prog = load(collectives(1))
    values = _inputs(np.random.default_rng(3))
    a = prog.run(values)
    b = prog.run(values)
    assert a[0] is not b[0] and torch.equal(a[0], b[0])


def test_cache_slots_for_a_site_live_twice() -> None:
    cache = AllocationCache(lambda shape, dtype: torch.empty(shape, dtype=dtype))
    a = cache.acquire("s", (2,), torch.float32)
    b = cache.acquire("s", (2,), torch.float32)
    assert a.buffer is not b.buffer and (a.slot, b.slot) == (0, 1)
    c = cache.acquire("s", (3,), torch.float32)  # another type: another key
    assert c.slot == 0 and c.buffer is not a.buffer
    cache.release_all()
    assert cache.acquire("s", (2,), torch.float32).buffer is a.buffer
    assert cache.acquire("s", (2,), torch.float32).buffer is b.buffer
    cache.release(a)
    assert cache.acquire("s", (2,), torch.float32).buffer is a.buffer
    assert len(cache) == 3 and cache.nbytes() == 4 * (2 + 2 + 3)


def test_a_pool_block_is_held_while_a_buffer_on_it_is_in_use() -> None:
    """A block goes back to the allocator when its last buffer in use is
    released (and at the end of a run) and comes back at the next one
    taken: the cached buffers on it stay and see it; a block taken again
    while another buffer on it is still in use keeps that one's contents;
    a pinned pool keeps its blocks."""
    from fuserc.runtime.evaluator.alloc_cache import MemoryPool

    pool = MemoryPool(lambda shape, dtype: torch.empty(shape, dtype=dtype), {0: 64, 1: 16})
    cache = AllocationCache(lambda shape, dtype: torch.empty(shape, dtype=dtype), pool)
    big = cache.acquire("big", (16,), torch.float32, storage=0)  # 64 bytes
    b = cache.acquire("b", (2,), torch.float64, storage=1)
    own = cache.acquire("c", (3,), torch.float32)
    assert (big.storage, b.storage, own.storage) == (0, 1, None) and pool.nbytes() == 64 + 16
    cache.release(big)
    assert pool.released == {0} and pool.nbytes() == 16 and big.buffer.untyped_storage().nbytes() == 0
    small = cache.acquire("small", (2,), torch.float32, storage=0)
    assert pool.nbytes() == 64 + 16 and not pool.released
    small.buffer.fill_(2.0)
    early = cache.acquire("early", (4,), torch.float32, storage=0)  # taken before `small` is let go
    cache.release(small)
    assert pool.nbytes() == 64 + 16 and torch.equal(early.buffer[:2], torch.full((2,), 2.0))  # `early` still in use
    cache.release(early)
    assert pool.released == {0}
    cache.release_all()
    pool.release()  # the end of a run
    assert pool.nbytes() == 0 and pool.released == {0, 1}
    assert own.buffer.untyped_storage().nbytes() == 12  # not in a block: kept
    again = cache.acquire("big", (16,), torch.float32, storage=0)
    assert again is big and pool.nbytes() == 64
    big.buffer.fill_(3.0)
    assert torch.equal(big.buffer, torch.full((16,), 3.0))
    cache.release_all()
    pool.pin("a captured graph reads its blocks")
    assert pool.nbytes() == 64 + 16
    cache.release(cache.acquire("small", (2,), torch.float32, storage=0))
    pool.release()
    assert pool.nbytes() == 64 + 16 and not pool.released


def test_dealloc_returns_the_buffer_within_a_run() -> None:
    """A site allocated in a loop and deallocated each iteration uses one
    buffer; without the dealloc each live iteration gets its own."""
    body = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4xf32> {hir.global = tensor<4xf32, #fusion.sharding<@m, [-]>>}) -> (tensor<4xf32> {hir.global = tensor<4xf32, #fusion.sharding<@m, [-]>>}) attributes {hir.host} {
  %acc = hir.alloc "acc" : tensor<4xf32>
  hir.copy %x, %acc : tensor<4xf32>, tensor<4xf32>
  hir.for %i = 0 to 3 {
    %t = hir.alloc "tmp" : tensor<4xf32>
    hir.launch ins(%acc, %x : tensor<4xf32>, tensor<4xf32>) outs(%t : tensor<4xf32>) {
    ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
      %s = fusion.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      hir.yield %s : tensor<4xf32>
    }
    hir.copy %t, %acc : tensor<4xf32>, tensor<4xf32>
    DEALLOC
  }
  func.return %acc : tensor<4xf32>
}
"""
    x = torch.arange(4, dtype=torch.float32)
    with_dealloc = load(body.replace("DEALLOC", 'hir.dealloc %t : tensor<4xf32>'))
    (out,) = with_dealloc.run([x])
    torch.testing.assert_close(out, 4 * x)
    assert len(with_dealloc.cache) == 2
    without = load(body.replace("DEALLOC", ""))
    without.run([x])
    assert len(without.cache) == 4


ABSENT = """
fusion.mesh @all shape = [2]
fusion.mesh @zero shape = [1]
func.func @main(%x: tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@all, [-, -]>>})
    -> (tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@zero, [-, -]>>},
        tensor<2x2xf32> {hir.global = tensor<2x2xf32, #fusion.sharding<@all, [-, -]>>}) attributes {hir.host} {
  %b = hir.if_rank [0] -> (tensor<2x2xf32>) {
    %a = hir.alloc "a" : tensor<2x2xf32>
    hir.yield %a : tensor<2x2xf32>
  }
  %t = hir.allgather %x, %b team = [0] backend = nccl : (tensor<2x2xf32>, tensor<2x2xf32>) -> !hir.token
  hir.wait %t : !hir.token
  %p = hir.team_index team = [0] : index
  %v = hir.select %x [%p] dim = 0 : (tensor<2x2xf32>, index) -> tensor<2xf32>
  hir.copy %x, %b : tensor<2x2xf32>, tensor<2x2xf32>
  %y = hir.alloc "y" : tensor<2x2xf32>
  hir.matmul %x, %x, %y : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  func.return %b, %y : tensor<2x2xf32>, tensor<2x2xf32>
}
"""


class _Rank1Of2(CpuBackend):
    """Rank 1 of a job of 2, for ops that rank 1 skips (it is in no team)."""

    def __init__(self) -> None:
        super().__init__(MpiEnv(comm=None, rank=1, size=2))


def test_absent_values_on_a_rank_outside_the_team() -> None:
    prog = load(ABSENT, _Rank1Of2())
    x = torch.eye(2) * 3
    b, y = prog.run([x])
    assert b is None  # if_rank result, allgather, copy: all skipped
    torch.testing.assert_close(y, x @ x)
    assert prog.results[0].present_on(1) is False and prog.results[1].present_on(1)


def test_wrong_input_is_a_diagnostic() -> None:
    prog = load(collectives(1))
    x, w, wl, b = _inputs(np.random.default_rng(4))
    with pytest.raises(Diagnostic, match=r"argument #2 \(%wl\).*\[4, 3\].*got \[3, 4\]"):
        prog.run([x, w, wl.T.copy(), b])
    with pytest.raises(Diagnostic, match="argument #0 \\(%x\\).*float64"):
        prog.run([x.astype(np.float64), w, wl, b])
    with pytest.raises(Diagnostic, match="takes 4 inputs, got 2"):
        prog.run([x, w])


def test_too_few_ranks_is_refused_before_any_communication() -> None:
    with pytest.raises(Diagnostic, match="needs 4 ranks \\(mesh @m uses device 3\\) but the job has 1"):
        load(collectives(4))


def test_failure_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    prog = load(collectives(1))
    monkeypatch.setenv(FAIL_RANK_ENV, "0")
    with pytest.raises(InjectedFailure, match="FUSERC_FAIL_RANK=0"):
        prog.run(_inputs(np.random.default_rng(5)))
    monkeypatch.setenv(FAIL_RANK_ENV, "1")  # another rank: this one runs
    prog.run(_inputs(np.random.default_rng(5)))


STAGED = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x6xbf16> {hir.global = tensor<4x6xbf16, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x6xbf16> {hir.global = tensor<4x6xbf16, #fusion.sharding<@m, [-, -]>>},
        tensor<4x6xbf16> {hir.global = tensor<4x6xbf16, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %c0 = hir.constant 0 : index
  %c1 = hir.constant 1 : index
  %g = hir.alloc "g" : tensor<4x6xbf16>
  %left = hir.chunk %x [%c0] dim = 1 chunks = 2 : (tensor<4x6xbf16>, index) -> tensor<4x3xbf16>
  %gl = hir.chunk %g [%c1] dim = 1 chunks = 2 : (tensor<4x6xbf16>, index) -> tensor<4x3xbf16>
  %t0 = hir.allgather %left, %gl team = [0] backend = nccl : (tensor<4x3xbf16>, tensor<4x3xbf16>) -> !hir.token
  %right = hir.chunk %x [%c1] dim = 1 chunks = 2 : (tensor<4x6xbf16>, index) -> tensor<4x3xbf16>
  %gr = hir.chunk %g [%c0] dim = 1 chunks = 2 : (tensor<4x6xbf16>, index) -> tensor<4x3xbf16>
  %t1 = hir.allreduce %right, %gr op = sum team = [0] backend = nccl : (tensor<4x3xbf16>, tensor<4x3xbf16>) -> !hir.token
  %r = hir.alloc "r" : tensor<4x6xbf16>
  hir.copy %x, %r : tensor<4x6xbf16>, tensor<4x6xbf16>
  %rc = hir.chunk %r [%c1] dim = 1 chunks = 2 : (tensor<4x6xbf16>, index) -> tensor<4x3xbf16>
  %t2 = hir.allreduce %rc, %rc op = max team = [0] backend = nccl : (tensor<4x3xbf16>, tensor<4x3xbf16>) -> !hir.token
  func.return %g, %r : tensor<4x6xbf16>, tensor<4x6xbf16>
}
"""


def test_non_contiguous_and_bf16_buffers_are_staged() -> None:
    """Communication into strided views and bf16 reductions: staged through
    contiguous float32 buffers and copied back when the work completes,
    which happens before anything reads them (no hir.wait here)."""
    prog = load(STAGED)
    x = torch.randn(4, 6).to(torch.bfloat16)
    g, r = prog.run([x])
    torch.testing.assert_close(g[:, 3:], x[:, :3])
    torch.testing.assert_close(g[:, :3], x[:, 3:])
    torch.testing.assert_close(r, x)


def test_out_of_range_root_is_a_diagnostic() -> None:
    text = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@m, [-]>>}) -> () attributes {hir.host} {
  %c = hir.constant 0 : index
  %k = hir.add_mod %c, %c mod 5 : index
  %five = hir.add_mod %k, %c mod 7 : index
  %n = hir.constant 3 : index
  %bad = hir.add_mod %n, %c mod 7 : index
  %t = hir.broadcast %x root %bad team = [0] backend = nccl : (tensor<2xf32>, index) -> !hir.token
  func.return
}
"""
    prog = load(text)
    with pytest.raises(Diagnostic, match="root position 3 is out of range for a team of 1"):
        prog.run([torch.zeros(2)])


def test_missing_host_attribute_is_a_diagnostic() -> None:
    text = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<2xf32, #fusion.sharding<@m, [-]>>) -> tensor<2xf32, #fusion.sharding<@m, [-]>> {
  func.return %x : tensor<2xf32, #fusion.sharding<@m, [-]>>
}
"""
    with pytest.raises(Diagnostic, match="not a host program"):
        load(text)


def test_owned_results_are_the_callers() -> None:
    """`run_prepared(owned_results=True)`: result buffers are made for the
    caller (not cached, not reused by the next run); inputs returned as they
    are come back as copies; the cached path is unchanged."""
    x, w, wl, b = (torch.from_numpy(a) for a in _inputs(np.random.default_rng(2)))
    prog = compile_text(collectives(1), pipeline="", backend="cpu")
    p = prog.program
    assert p.result_sites, "no result is an allocation site"
    ins = p.prepare_inputs([x, w, wl, b])
    first = p.run_prepared(ins, owned_results=True)
    kept = [t.clone() for t in first]
    second = p.run_prepared(ins, owned_results=True)
    cached = {id(e.buffer) for e in p.cache}
    for i, (a, k, c) in enumerate(zip(first, kept, second)):
        assert a.data_ptr() != c.data_ptr(), f"result {i}: two runs handed out one buffer"
        assert id(p.backend.base(a)) not in cached, f"result {i} is still in the allocation cache"
        assert all(a.data_ptr() != t.data_ptr() for t in ins), f"result {i} is an input itself"
        torch.testing.assert_close(a, k)
    again = p.run_prepared(ins)  # cached buffers: the same every run
    assert [t.data_ptr() for t in again] == [t.data_ptr() for t in p.run_prepared(ins)]
    prog.close()


def test_module_meshes_reads_the_top_level_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every launch of a run's planning asks for the module's meshes: a
    walk into the functions (a whole model's program, per launch) made a
    24-layer model's first run seconds slower."""
    from xdsl.dialects.func import FuncOp

    from fuserc.runtime.evaluator.interpreter import module_meshes

    module = parse("fusion.mesh @tp shape = [2]\nfusion.mesh @dp shape = [3]\nfunc.func @main() {\n  func.return\n}\n")

    def no_walk(self: FuncOp, *a: object, **k: object) -> None:
        raise AssertionError("walked into a function")

    monkeypatch.setattr(FuncOp, "walk", no_walk)
    meshes = module_meshes(module)
    assert {name: m.shape for name, m in meshes.items()} == {"tp": (2,), "dp": (3,)}


def test_a_team_of_one_rank_shares_without_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffer shared in a team of this rank alone makes no MPI window (some
    MPI builds make none in a process started without a launcher: Open MPI
    4.1's singleton raised MPI_ERR_WIN), and the copies through it, whole or
    by blocks, are copies in memory with the same results."""
    from test_evaluator_speed import BLOCKS
    from test_graphs import SHARES_ITS_INPUT

    def refuse(self: Any, mem: Any, comm: Any) -> Any:
        raise AssertionError("no window for a team of one rank")

    monkeypatch.setattr(MpiEnv, "share_memory", refuse)
    for text in (BLOCKS, SHARES_ITS_INPUT):  # put and get by blocks; a whole get
        x = torch.randn(4, 2)
        (out,) = load(text).run([x])
        torch.testing.assert_close(out, x)

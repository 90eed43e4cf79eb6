"""Rank lists as runs (dialects/hir_core.py: `rank_runs`, `Ranks`,
`hir.if_rank`'s `#hir.ranks`): the host IR of a mesh of many devices grows
with its runs, not its ranks, and the evaluator decides membership from the
runs."""

from __future__ import annotations

import random

import pytest
import torch

from fuserc import ir
from fuserc.dialects import hir
from fuserc.dialects.hir_core import Ranks, format_runs, rank_runs
from fuserc.runtime.evaluator.program import compile_module

from test_evaluator_speed import _Rank1Of2, load


def _expand(runs: tuple[tuple[int, int, int], ...]) -> list[int]:
    return [v for run in runs for v in range(*run)]


def test_runs_keep_every_list() -> None:
    """Any list (order kept, duplicates kept) is its runs; a set of ranks
    is its increasing runs; membership is the set's."""
    rng = random.Random(5)
    for _ in range(500):
        values = rng.sample(range(200), rng.randint(0, 60))
        if rng.random() < 0.5:
            values.sort()
        if values and rng.random() < 0.2:
            values.append(values[0])  # a duplicate
        assert _expand(rank_runs(values)) == values
        ranks = Ranks.of(values)
        assert sorted(ranks) == sorted(values) and len(ranks) == len(values)
        assert ranks.ordered() == (len(set(values)) == len(values))
        assert all((r in ranks) == (r in values) for r in range(-3, 205))


def test_runs_print_compactly() -> None:
    assert format_runs(rank_runs(range(4194304))) == "[0 to 4194304]"
    assert format_runs(rank_runs([*range(0, 64, 4), 100, 3, 2])) == "[0 to 64 step 4, 100, 3, 2]"
    assert format_runs(rank_runs(range(15))) == "[" + ", ".join(map(str, range(15))) + "]"  # shorter than RANGE_MIN
    assert str(Ranks.of(range(2048, 4194304, 2048))) == "[2048 to 4194304 step 2048]"


def test_host_ir_of_a_big_mesh_grows_with_its_runs() -> None:
    """A mesh of 65,536 devices: the if_rank and the team are one run each
    (the text used to list every rank, 900 KB here, 73 MB at 4,194,304)."""
    n = 65536
    text = f"""fusion.mesh @tp shape = [{n}]
func.func @main(%x: tensor<{n}x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<{n}x16xf32, #fusion.sharding<@tp, [-, -]>> {{
  %g = fusion.relu %x : (tensor<{n}x16xf32, #fusion.sharding<@tp, [DIDx, -]>>) -> tensor<{n}x16xf32, #fusion.sharding<@tp, [-, -]>>
  func.return %g : tensor<{n}x16xf32, #fusion.sharding<@tp, [-, -]>>
}}
"""
    module = compile_module(text, "big.mlir").host
    host = ir.to_text(module)
    assert len(host) < 4000, len(host)
    assert f"hir.if_rank [0 to {n}]" in host and f"team = [0 to {n}]" in host
    region = next(op for op in module.walk() if isinstance(op, hir.IfRankOp))
    assert region.ranks.runs == ((0, n, 1),) and region.ranks_attr.runs.get_values() == (0, n, 1)


RUNS = """
fusion.mesh @all shape = [2]
func.func @main(%x: tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@all, [-]>>})
    -> (tensor<2xf32> {hir.global = tensor<2xf32, #fusion.sharding<@all, [-]>>}) attributes {hir.host} {
  %b = hir.if_rank [1 to 2] -> (tensor<2xf32>) {
    %a = hir.alloc "a" : tensor<2xf32>
    hir.copy %x, %a : tensor<2xf32>, tensor<2xf32>
    hir.yield %a : tensor<2xf32>
  }
  hir.if_rank [0] {
    hir.copy %x, %b : tensor<2xf32>, tensor<2xf32>
  }
  func.return %b : tensor<2xf32>
}
"""


def test_the_evaluator_reads_runs_without_listing_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 of 2 runs the region of `[1 to 2]` and skips `[0]`, deciding
    from the runs (listing a Ranks fails the test)."""

    def listed(self: Ranks) -> None:
        raise AssertionError("a Ranks was listed rank by rank")

    monkeypatch.setattr(Ranks, "__iter__", listed)
    monkeypatch.setattr(Ranks, "__len__", listed)
    prog = load(RUNS, _Rank1Of2())
    x = torch.tensor([1.0, 2.0])
    (b,) = prog.run([x])
    torch.testing.assert_close(b, x)

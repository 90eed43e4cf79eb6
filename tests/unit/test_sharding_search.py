"""The plan search of propagate-shardings (passes/sharding_search.py):
a trial is priced by the ops it changes, so the search's work grows
linearly with the program, also where one weight is read by every GEMM;
and that incremental price is the whole component's price, exactly."""

from __future__ import annotations

import argparse
import sys
from collections import ChainMap
from pathlib import Path

import pytest

from fuserc.ir import compiling, make_context, parse
from fuserc.passes import sharding_search as search
from fuserc.pipeline import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
from gpt_model import build  # noqa: E402


def shared_weight_chain(gemms: int, ranks: int = 2) -> str:
    """`gemms` GEMMs in a chain, each reading the same column-split weight
    %w, with elementwise ops between them; rows split over the mesh (each
    GEMM's row-split input meets a column-split weight: a place that
    communicates, so a trial of the search, next to every GEMM)."""
    m, h = 16 * ranks, 8 * ranks
    rows = f"tensor<{m}x{h}xf32, #fusion.sharding<@tp, [DIDx, -]>>"
    w = f"tensor<{h}x{h}xf32, #fusion.sharding<@tp, [-, DIDx]>>"
    t = f"tensor<{m}x{h}xf32>"
    lines = [f"fusion.mesh @tp shape = [{ranks}]", f"func.func @main(%x: {rows}, %w: {w}) -> {t} {{"]
    cur, ty = "%x", rows
    for i in range(gemms):
        lines.append(f"  %m{i} = fusion.matmul {cur}, %w : ({ty}, {w}) -> {t}")
        lines.append(f"  %g{i} = fusion.gelu %m{i} : ({t}) -> {t}")
        lines.append(f"  %n{i} = fusion.tanh %g{i} : ({t}) -> {t}")
        cur, ty = f"%n{i}", t
    lines += [f"  func.return {cur} : {t}", "}", ""]
    return "\n".join(lines)


def priced(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(op parts the search asked for, trials it made) in propagate-shardings of `text`."""
    from fuserc.passes.propagate_shardings import _FunctionPropagation

    counts = {"priced": 0, "trials": 0}
    part, trial = search.PlanCost.op_part, _FunctionPropagation.repropagate

    def counted_part(self, *a, **k):  # type: ignore[no-untyped-def]
        counts["priced"] += 1
        return part(self, *a, **k)

    def counted_trial(self, *a, **k):  # type: ignore[no-untyped-def]
        counts["trials"] += 1
        return trial(self, *a, **k)

    monkeypatch.setattr(search.PlanCost, "op_part", counted_part)
    monkeypatch.setattr(_FunctionPropagation, "repropagate", counted_trial)
    ctx = make_context()
    with compiling():
        run_pipeline(parse(text, "chain", ctx), "propagate-shardings", ctx)
    return counts["priced"], counts["trials"]


def test_shared_weight_priced_linearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """N GEMMs reading one weight: the search makes a trial next to every
    GEMM and each trial prices the few ops next to it, so the ops priced
    grow as N (11 per GEMM), not as N x the weight's readers (re-pricing
    every reader of the weight per trial priced 59, 109, 209 and 409 ops
    per GEMM at N = 25, 50, 100, 200)."""
    sizes = (25, 50, 100, 200)
    counts = [priced(shared_weight_chain(n), monkeypatch) for n in sizes]
    for (_, trials), n in zip(counts, sizes):
        assert trials >= n - 1, (n, trials)  # a trial next to every GEMM but the first: the search is not cut short
    per_gemm = [p / n for (p, _), n in zip(counts, sizes)]
    assert max(per_gemm) <= 1.05 * min(per_gemm), per_gemm
    per_trial = [p / trials for p, trials in counts]
    assert max(per_trial) <= 1.05 * min(per_trial), per_trial


def _checked_trials(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """Make every trial of the search also price the whole component before
    and after the change (PlanCost.total, from scratch) and record (the
    ledger's change, the whole price's change); every commit checks the
    ledger's total against the whole price."""
    seen: list[tuple[float, float]] = []
    trial, commit = search.Ledger.trial, search.Ledger.commit

    def checked_trial(self: search.Ledger, new):  # type: ignore[no-untyped-def]
        better = trial(self, new)
        before = self.cost.total(self.ops, self.known, self.ext)
        after = self.cost.total(self.ops, ChainMap(new, self.known), self.ext)  # type: ignore[arg-type]
        assert self.total == pytest.approx(before, rel=1e-12)
        if self._staged is not None and before != float("inf"):
            seen.append((self._staged[3], after - before))
            assert better == (after < before * (1 - 1e-9)) or abs(after - before) < 1e-9 * before
        return better

    def checked_commit(self: search.Ledger):  # type: ignore[no-untyped-def]
        requeued = commit(self)
        assert self.total == pytest.approx(self.cost.total(self.ops, self.known, self.ext), rel=1e-12)
        return requeued

    monkeypatch.setattr(search.Ledger, "trial", checked_trial)
    monkeypatch.setattr(search.Ledger, "commit", checked_commit)
    return seen


@pytest.mark.parametrize("layers,devices", [(2, 2), (2, 4), (3, 8)])
def test_ledger_prices_whole_component(layers: int, devices: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT model's forward and backward: each trial's incremental price
    equals the change of the whole component's price computed from scratch,
    and the kept total stays the whole price after every pin."""
    seen = _checked_trials(monkeypatch)
    a = argparse.Namespace(layers=layers, hidden=64, tokens=32, heads=4, ffn=128, vocab=256, dropout=0.0, dtype="bf16")
    ctx = make_context()
    with compiling():
        run_pipeline(parse(build(a, devices)[0].to_mlir(), "model", ctx), "autodiff,propagate-shardings", ctx)
    assert len(seen) > 20
    assert any(whole < 0 for _, whole in seen)  # some pins pay
    for mine, whole in seen:
        assert mine == pytest.approx(whole, rel=1e-9, abs=1e-6)


def test_ledger_on_shared_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on the shared-weight chain under autodiff (the weight's
    gradient sums a partial product of every GEMM)."""
    seen = _checked_trials(monkeypatch)
    ctx = make_context()
    with compiling():
        text = shared_weight_chain(12).replace("-> tensor<32x16xf32> {", "-> tensor<f32, #fusion.sharding<@tp, []>> {")
        lines = text.splitlines()
        ret = next(i for i, line in enumerate(lines) if "func.return" in line)
        cur = lines[ret].split()[1]
        lines[ret : ret + 1] = [
            f"  %loss = fusion.sum {cur} dims = [0, 1] : (tensor<32x16xf32>) -> tensor<f32, #fusion.sharding<@tp, []>>",
            "  func.return %loss : tensor<f32, #fusion.sharding<@tp, []>>",
        ]
        run_pipeline(parse("\n".join(lines), "chain", ctx), "autodiff,propagate-shardings", ctx)
    assert len(seen) > 12
    for mine, whole in seen:
        assert mine == pytest.approx(whole, rel=1e-9, abs=1e-6)


def test_pin_that_lets_an_op_split() -> None:
    """An op that cannot be split under the plan makes the component's
    price infinite (as PlanCost.total prices it): a change that lets it
    split pays whatever else it moves, and the kept price is then the
    whole component's again."""
    from xdsl.dialects.func import FuncOp

    from fuserc.dialects.fusion import FusionOp, MeshOp, MatmulOp, sharding_of
    from fuserc.passes.propagate_shardings import propagate_function
    from fuserc.sharding import Sharding

    module = parse(shared_weight_chain(3))
    func = next(o for o in module.ops if isinstance(o, FuncOp))
    propagate_function(func, search=False)
    meshes = [m for m in module.ops if isinstance(m, MeshOp)]
    ops = [o for o in func.body.block.ops if isinstance(o, FusionOp)]
    known = {v: s for o in ops for v in (*o.operands, *o.results) if (s := sharding_of(v)) is not None}
    gemm = [o for o in ops if isinstance(o, MatmulOp)][1]
    stuck = known[gemm.results[0]]

    class Stuck(search.PlanCost):
        def op_part(self, op, known, made=None, avail=None):  # type: ignore[no-untyped-def]
            if op is gemm and known[op.results[0]] == stuck:
                return None
            return super().op_part(op, known, made, avail)

    cost = Stuck({m.sym_name.data: m.model for m in meshes}, meshes)
    ledger = search.Ledger(ops, known, cost, None)
    assert ledger.total == float("inf") and ledger.unsplit == 1
    new = {gemm.results[0]: Sharding.replicated(stuck.mesh, 2)}
    assert new[gemm.results[0]] != stuck
    assert ledger.trial(new)
    known.update(new)
    assert gemm in [ops[j] for j in ledger.commit()]
    assert ledger.unsplit == 0 and ledger.total == pytest.approx(cost.total(ops, known, {}), rel=1e-12)
    assert not ledger.trial({gemm.results[0]: stuck})  # back to the op that cannot be split

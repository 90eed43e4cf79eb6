"""The property test on a small seeded budget: random valid programs
(program_gen.py) through `fuserc opt -p default`, a sample of them run
under `mpiexec` against the reference (check_programs.py), and each one
that compiles through `-p autodiff,default` too (the sample's backwards
run as well). An internal error, invalid
IR after a pass, a wrong answer or a timeout fails it; so does a backward
refused anywhere but at an op of the user's program.

The long run is by hand: `python3 tests/property/check_programs.py
--programs 3000` (its table: programs by outcome)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "e2e")]

from check_programs import OK, check, failures, table  # noqa: E402
from harness import MPIEXEC  # noqa: E402
from program_gen import OPS, generate  # noqa: E402

PROGRAMS = 40
SEED = 20_000
RUN_EVERY = 10


def test_random_programs(tmp_path: Path) -> None:
    if MPIEXEC is None:
        pytest.skip("mpiexec is not installed")
    results = check(PROGRAMS, SEED, RUN_EVERY, ranks=4, keep=tmp_path, run_backward=True)
    report = table(results, 0.0)
    failed = failures(results)
    details = "\n\n".join(f"seed {r.program.seed} (-p {pipe}): {outcome}\n{detail[-3000:]}\n{r.program.text}" for r, pipe, outcome, detail in failed[:3])
    assert not failed, f"{report}\n\n{details}"
    outcomes = collections.Counter(r.outcome for r in results)
    assert outcomes[OK] >= 0.8 * PROGRAMS, report  # the generator writes programs fuserc accepts
    assert sum(1 for r in results if r.ran) >= PROGRAMS // RUN_EVERY - 1, report
    assert sum(r.grad == OK for r in results) >= 0.8 * outcomes[OK], report  # backwards compile too
    assert sum(r.grad_ran for r in results) >= PROGRAMS // RUN_EVERY - 2, report


def test_every_op_family_is_generated() -> None:
    """Each entry of program_gen.OPS (one per op family) is reachable: a
    new op added there is exercised."""
    seen = collections.Counter(f for seed in range(400) for f in generate(seed).families)
    assert {f.name for f in OPS} <= set(seen), sorted({f.name for f in OPS} - set(seen))

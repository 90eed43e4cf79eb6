"""`hir.alltoallv` on 2 and 4 ranks (mpiexec) and 2 (torchrun): uneven and
zero counts, ranks that send or receive nothing, inputs sent in part,
bf16 rows of rank 2, a second run with new counts; the rows and counts
received against NumPy's (alltoallv_worker.py, all cases in one job)."""

from __future__ import annotations

import re

import pytest

from harness import BACKEND
from test_torch_function import HERE, launch

JOBS = [("mpiexec", 2), ("mpiexec", 4), ("torchrun", 2)]


@pytest.mark.parametrize("how,n", JOBS, ids=[f"{h}-n{n}" for h, n in JOBS])
def test_alltoallv_against_numpy(how: str, n: int) -> None:
    proc = launch(how, n, HERE / "alltoallv_worker.py", ["--backend", BACKEND], timeout=120)
    cases = re.findall(r"^CASE (\S+) (ok|FAILED.*)$", proc.stdout, re.M)
    failed = [f"{name}: {what}" for name, what in cases if what != "ok"]
    assert not failed, "\n".join(failed) + "\n" + proc.stderr[-3000:]
    assert len(cases) == 4 and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

"""`hir.alltoallv` in-process on one rank (a team of one): the rows kept,
the counts received, and the run-time diagnostics of counts that do not
fit the buffers (multi-rank exchanges: tests/e2e/test_alltoallv_job.py). On
the backend $FUSERC_TEST_BACKEND names (cpu by default; cuda on a GPU)."""

from __future__ import annotations

import os

import pytest
import torch

from fuserc.diagnostics import Diagnostic
from fuserc.ir import parse
from fuserc.runtime.backends.backend import make_backend
from fuserc.runtime.evaluator.evaluator import Program
from fuserc.runtime.job.mpi_env import mpi_env

TEXT = """
func.func @main(%x: tensor<5x2xf32>, %sc: tensor<1xi64>) -> (tensor<4x2xf32>, tensor<1xi64>) attributes {hir.host} {
  %y = hir.alloc "y" : tensor<4x2xf32>
  %rc = hir.alloc "rc" : tensor<1xi64>
  %t = hir.alltoallv %x, %sc, %y, %rc team = [0] backend = mpi : (tensor<5x2xf32>, tensor<1xi64>, tensor<4x2xf32>, tensor<1xi64>) -> !hir.token
  hir.wait %t : !hir.token
  func.return %y, %rc : tensor<4x2xf32>, tensor<1xi64>
}
"""


@pytest.fixture
def prog():
    p = Program.load(parse(TEXT, "alltoallv.mlir"), "main", make_backend(os.environ.get("FUSERC_TEST_BACKEND", "cpu"), mpi_env()))
    yield p
    p.close()


def test_rows_to_self(prog: Program) -> None:
    x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    y, rc = prog.run([x, torch.tensor([3])])
    assert rc.tolist() == [3]
    torch.testing.assert_close(y[:3], x[:3])


@pytest.mark.parametrize(
    "count,why",
    [
        (6, r"send counts \[6\] on rank 0 add up to 6 rows, more than the input's 5"),
        (5, r"rank 0 receives 5 rows \(counts \[5\]\), more than the output's bound of 4 rows"),
        (-1, r"negative send counts \[-1\] on rank 0"),
    ],
)
def test_counts_that_do_not_fit(prog: Program, count: int, why: str) -> None:
    with pytest.raises(Diagnostic, match=why) as e:
        prog.run([torch.zeros(5, 2), torch.tensor([count])])
    assert e.value.render().startswith("alltoallv.mlir:5:3: error: hir.alltoallv: ")

"""The communication report against the bytes the backend really moves
(comm_report_worker.py, under `mpiexec -n 4`), and `fuserc run
--comm-report` on rank 0."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import mpirun, mpirun_python, ok

WORKER = Path(__file__).parent / "comm_report_worker.py"
EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize(
    "cases, env",
    [
        ("sp_mlp,ring,collective,ring_sum,alltoall,stages,roots,grid,gpt", {}),
        # two nodes of 2 ranks: the rings' steps between nodes are send/recv pairs
        ("ring,ring_sum", {"FUSERC_GPUS_PER_NODE": "2"}),
    ],
    ids=["one-node", "two-nodes"],
)
def test_report_bytes_are_the_bytes_moved(cases: str, env: dict[str, str]) -> None:
    proc = ok(mpirun_python(4, WORKER, ["--backend", "cpu", "--cases", cases], env=env, timeout=240))
    lines = re.findall(r"^CASE (\S+) (.*)$", proc.stdout, re.MULTILINE)
    assert [name for name, _ in lines] == cases.split(","), proc.stdout + proc.stderr
    assert all(verdict == "ok" for _, verdict in lines), proc.stdout


def test_run_prints_the_report_once() -> None:
    """`fuserc run --comm-report-unit` on 2 ranks: rank 0 prints the report
    (the allgather and reduce-scatter of sp_mlp's 128x64 f32 activations,
    1/2 of 32768 bytes each: 1.00 unit of 128x64xf32 per rank), then runs."""
    proc = ok(mpirun(2, [str(EXAMPLES / "sp_mlp.mlir"), "--mesh", "tp=2", "--backend", "cpu", "-p", "default{algorithm=none}", "--comm-report-unit", "128x64xf32", "--check"]))
    out = proc.stdout
    assert out.count("// communication report") == 1, out
    assert re.search(r"^  1  allgather\s+f32\s+128x64\s+2\s+\[0-1\]\s+1\s+16384\s+0\.500\s+DIDx->-\s+no$", out, re.MULTILINE), out
    assert re.search(r"^  2  reduce_scatter\s+f32\s+128x64\s+2\s+\[0-1\]\s+1\s+16384\s+0\.500\s+partial->DIDx\s+no$", out, re.MULTILINE), out
    assert "total per rank (2 ranks): 2 communications, 32768 bytes (0.03 MiB) = 1.00 x 128x64xf32" in out
    assert out.index("// communication report") < out.index("output 0:") and "ok" in out

"""The Python API under mpiexec on 4 ranks (cpu backend). The cases of
api_cases.py share one launch (cli_batch.mpirun_many), each run as
`python api_cases.py CASE` in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_batch import CliRun, Ran, launches
from harness import mpirun_python, ok

from api_cases import CASES


@pytest.mark.parametrize("case", sorted(CASES))
@launches(lambda d, case: CliRun(4, [case], script=Path(__file__).parent / "api_cases.py"))
def test_api_case(case: str, ran: Ran) -> None:
    proc = ok(ran.proc)
    assert proc.stdout.count(f"OK {case}") == 4


def test_api_error_is_exception_with_cli_message() -> None:
    from fuserc.api import FusionDefinition
    from fuserc.diagnostics import Diagnostic

    fd = FusionDefinition()
    x = fd.define_tensor([6, 8])
    fd.add_output(fd.ops.relu(x))
    fd.sched.mesh("tp", [4])
    with pytest.raises(Diagnostic, match=r"dimension 0 of extent 6 is not divisible by 4"):
        fd.sched.shard(x, "tp", ["DIDx", "-"])


ROOT = Path(__file__).parents[2]


def test_docs_example_runs_as_written() -> None:
    """docs/python.md's complete example is examples/python/sp_mlp.py, and it
    runs on a mesh as large as the job (here mpiexec -n 2)."""
    example = ROOT / "examples" / "python" / "sp_mlp.py"
    doc = (ROOT / "docs" / "python.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.strip() in example.read_text(), "docs/python.md and examples/python/sp_mlp.py differ"
    proc = ok(mpirun_python(2, example, []))
    assert "max abs error" in proc.stdout and "fusion.mesh @tp shape = [2]" in proc.stdout

"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import pytest
from cli_batch import Ran, mpirun_many


@pytest.fixture(scope="module")
def module_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """The runs of every selected test of the module marked with
    `cli_batch.launches`, by test id: made together, in as few launches as
    job sizes and launch environments allow (a launch costs seconds of
    MPI, Python and torch start-up, a run a fraction of that)."""
    root = tmp_path_factory.mktemp("runs")
    specs, dirs = {}, {}
    for i, item in enumerate(request.session.items):
        spec = getattr(getattr(item, "function", None), "cli_runs", None)
        if spec is None or item.module is not request.module:
            continue
        dirs[item.nodeid] = d = root / f"test{i}"
        d.mkdir()
        made = spec(d, **(item.callspec.params if hasattr(item, "callspec") else {}))
        for name, run in (made if isinstance(made, dict) else {"": made}).items():
            specs[(item.nodeid, name)] = run
    out = {nodeid: Ran(d, {}) for nodeid, d in dirs.items()}
    for (nodeid, name), proc in mpirun_many(specs, root).items():
        out[nodeid].procs[name] = proc
    return out


@pytest.fixture
def ran(request: pytest.FixtureRequest, module_runs: dict[str, Ran]) -> Ran:
    """The runs of this test (marked with `cli_batch.launches`)."""
    return module_runs[request.node.nodeid]

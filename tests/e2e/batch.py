"""Many fusion programs compiled and checked under ONE mpiexec launch.

    mpiexec -n N python tests/e2e/batch.py CASES.json [--backend cpu]

(`launch_batches` starts such jobs and reads their lines: the e2e tests and
the property test call it.)

CASES.json is a list of `{"id": ..., "file": ..., "pipelines": {NAME: SPEC}}`
(SPEC a pipeline, or `PIPELINE --entry FUNCTION` to run another function
than main, `@main_bwd` say)
(with `"save": DIR`, rank 0 also writes the global inputs and results of
each pipeline's checked run as DIR/PIPELINE/in<i>.npy and out<i>.npy, as
`fuserc run --save-outputs` does, for tests computing their own reference).
For each case and pipeline every rank does what `fuserc run FILE -p SPEC
--check --iters 1 --warmup 0` does (runtime/evaluator/program.py, runtime/job/io.py,
fuserc.check.compare): compile, random global inputs from the seed, each rank's
shards, a run on other inputs then the checked run (reusing the cached
buffers), the results gathered to rank 0 and compared there with the
unsharded float64 reference under the same tolerances. Rank 0 prints one line per case and pipeline:

    E2E-START <id>/<pipeline>
    E2E-RESULT {"id": ..., "status": "ok" | "fail" | "error" | "skip", ...}

so that a starting process pays MPI and import start-up once for the whole
batch. A case that fails to compile (a Diagnostic, the same on every rank)
is reported and the batch goes on. A failure while running may leave other
ranks inside a collective, so the failing rank reports it and aborts the job;
a case that hangs is ended by a per-case watchdog (faulthandler). The
driver (test_pipeline.py) then relaunches the batch with the cases left.

A pipeline whose host program is the same as the one of the pipeline named
before it in the case (stream-pipeline found nothing to pipeline) is not run
again: its result is that one's.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CASE_TIMEOUT_S = 60
"""A case running longer than this on a rank ends the job (a hang)."""

DEFAULT_SEED = 0
FIRST_RUN_SEED_OFFSET = 1000
"""The first run of each program takes the inputs of this other seed."""


BATCH_TIMEOUT_S = 900
"""Last resort for one launch; a hanging case ends its job itself."""


# --------------------------------------------------------------------------
# The driver's side: launching batches and reading their lines
# --------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # ok | fail | error | skip | crash
    detail: str
    seconds: float = 0.0


Work = tuple[str, str, dict[str, str]]
"""(id, program text, pipelines by name) of one case."""


def _launch(
    n: int, work: list[Work], directory: Path, backend: str, save: Path | None = None, launch: str = "mpiexec"
) -> tuple[dict[str, Outcome], list[str], str]:
    """One batch job over `work`, started by `launch` (mpiexec or torchrun):
    (outcomes by id, ids started in order, the job's output)."""
    from harness import MPI_ENV, launcher

    listing = []
    for ident, text, pipelines in work:
        path = directory / f"{ident}.mlir"
        path.write_text(text)
        entry: dict[str, Any] = {"id": ident, "file": str(path), "pipelines": pipelines}
        if save is not None:
            entry["save"] = str(save / ident)
        listing.append(entry)
    spec = directory / f"cases-{len(list(directory.glob('cases-*.json')))}.json"
    spec.write_text(json.dumps(listing))
    python = [sys.executable] if launch == "mpiexec" else []  # torchrun starts Python itself
    cmd = [*launcher(launch, n), *python, str(Path(__file__)), str(spec), "--backend", backend]
    if shutil.which("timeout"):
        cmd = ["timeout", "-k", "5", str(BATCH_TIMEOUT_S), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **MPI_ENV}, timeout=BATCH_TIMEOUT_S + 30)
    outcomes: dict[str, Outcome] = {}
    started: list[str] = []
    for line in proc.stdout.splitlines():
        if line.startswith("E2E-START "):
            started.append(line.split(" ", 1)[1].strip())
        elif line.startswith("E2E-RESULT "):
            r = json.loads(line.split(" ", 1)[1])
            if r["id"] not in outcomes or r["status"] == "crash":
                outcomes[r["id"]] = Outcome(r["status"], r.get("detail", ""), r.get("seconds", 0.0))
    output = f"exit {proc.returncode}\nstdout (tail):\n{proc.stdout[-3000:]}\nstderr (tail):\n{proc.stderr[-6000:]}"
    return outcomes, started, output


def launch_batches(
    n: int, work: list[Work], directory: Path, backend: str = "cpu", save: Path | None = None,
    launch: str = "mpiexec",
) -> dict[str, Outcome]:
    """Every case of `work` under each of its pipelines on `n` ranks, by
    outcome id `CASE/PIPELINE`, in as few launches as failures allow: a case
    that crashes or hangs ends its launch (it is the last one started), and
    what is left runs in the next one. With `save`, each checked run's
    global inputs and results are written under save/CASE/PIPELINE/."""
    results: dict[str, Outcome] = {}
    while True:
        left = [(i, t, {p: s for p, s in pipes.items() if f"{i}/{p}" not in results}) for i, t, pipes in work]
        left = [(i, t, pipes) for i, t, pipes in left if pipes]
        if not left:
            return results
        outcomes, started, output = _launch(n, left, directory, backend, save, launch)
        progress = len(outcomes)
        results.update(outcomes)
        if started and started[-1] not in outcomes:
            results[started[-1]] = Outcome("crash", f"the job ended during this case\n{output}")
            progress += 1
        if not progress:  # the job failed outside any case: no retry helps
            for i, _, pipes in left:
                for p in pipes:
                    results[f"{i}/{p}"] = Outcome("crash", f"the batch job failed\n{output}")


# --------------------------------------------------------------------------
# The job's side (under mpiexec)
# --------------------------------------------------------------------------


def _report(record: dict[str, Any]) -> None:
    sys.stdout.write("E2E-RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()


def _describe(error: BaseException) -> str:
    from fuserc.diagnostics import Diagnostic

    if isinstance(error, Diagnostic):
        return error.render()
    return "internal error: " + "".join(traceback.format_exception(type(error), error, error.__traceback__))


class _RunFailure(Exception):
    """A failure after communication may have started (not the same on
    every rank): the job must end."""


ENTRY = " --entry "
"""A pipeline spec `PIPELINE --entry NAME` runs function NAME (default main),
as `fuserc run -p PIPELINE --entry NAME` does."""


def compile_case(text: str, name: str, spec: str, backend: Any) -> Any:
    """The program compiled by pipeline `spec` and loaded on this rank (a
    failure here is the same on every rank: nothing communicated yet)."""
    from fuserc.runtime.evaluator.program import CompiledProgram, compile_module

    pipeline, _, entry = spec.partition(ENTRY)
    return CompiledProgram(compile_module(text, name, entry or "main", pipeline), backend)


def run_case(program: Any, env: Any, seed: int, save: str | None = None) -> tuple[str, str]:
    """(status, detail) of the second of two runs (on other inputs first,
    as `--iters` runs before the run it checks: cached buffers then hold
    the first run's data), checked against the reference, on rank 0
    ("", "" on the others). Raises _RunFailure when a run fails."""
    from fuserc.check import compare, precision_of
    from fuserc.runtime.job import io

    try:
        first = program.random_inputs(seed + FIRST_RUN_SEED_OFFSET)
        program.program.run_prepared(program.program.prepare_inputs(io.shard_inputs(first, program.params, env.rank)))
        globals_ = program.random_inputs(seed)
        local = program.program.prepare_inputs(io.shard_inputs(globals_, program.params, env.rank))
        results = program.program.run_prepared(local, copy_outputs=True)
        gathered = io.gather_outputs(results, program.results, env)
    except Exception as e:  # noqa: BLE001
        raise _RunFailure(_describe(e)) from e
    if env.rank != 0:
        return "", ""
    assert gathered is not None
    if save is not None:
        os.makedirs(save, exist_ok=True)
        for i, t in enumerate(globals_):
            np.save(os.path.join(save, f"in{i}.npy"), io.to_numpy(t))
        io.save_outputs(save, gathered)
    try:  # rank 0 alone from here: no communication
        refs = program.reference(list(globals_))
        precisions = precision_of(program.compiled.source_function())
        checks = [
            compare(i, g, r, s.dtype, p)
            for i, (g, r, s, p) in enumerate(zip(gathered, refs, program.results, precisions))
        ]
    except Exception as e:  # noqa: BLE001
        return "error", "the reference failed: " + _describe(e)
    detail = "\n".join(c.line() for c in checks)
    return ("ok" if all(c.ok for c in checks) else "fail"), detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", help="a JSON list of cases")
    parser.add_argument("--backend", default="cpu", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)

    from fuserc.runtime.backends.backend import make_backend
    from fuserc.runtime.job.mpi_env import mpi_env

    env = mpi_env()
    backend = make_backend(args.backend, env)
    with open(args.cases) as f:
        cases = json.load(f)
    for case in cases:
        with open(case["file"]) as f:
            text = f.read()
        hosts: dict[str, tuple[str, str, str]] = {}  # host IR -> (pipeline, status, detail)
        for pipe, spec in case["pipelines"].items():
            ident = f"{case['id']}/{pipe}"
            if env.rank == 0:
                sys.stdout.write(f"E2E-START {ident}\n")
                sys.stdout.flush()
            start = time.monotonic()
            faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
            try:
                try:
                    program = compile_case(text, case["file"], spec, backend)
                    host = program.host_ir()
                except Exception as e:  # noqa: BLE001 - reported per case
                    status, detail, host = "error", _describe(e), ""
                else:
                    if host in hosts:  # the same on every rank
                        program.close()
                        first, status, detail = hosts[host]
                        detail = f"same host program as {first}\n{detail}"
                    else:
                        save = os.path.join(case["save"], pipe) if "save" in case else None
                        status, detail = run_case(program, env, args.seed, save)
                        program.close()
                        hosts[host] = (pipe, status, detail)
            except _RunFailure as e:
                sys.stdout.write("E2E-RESULT " + json.dumps({"id": ident, "status": "crash", "rank": env.rank, "detail": str(e)}) + "\n")
                sys.stdout.flush()
                env.comm.Abort(1)
                os._exit(1)  # pragma: no cover - Abort does not return
            finally:
                faulthandler.cancel_dump_traceback_later()
            if env.rank == 0:
                _report({"id": ident, "status": status, "detail": detail, "seconds": round(time.monotonic() - start, 3)})
    backend.close()
    if env.rank == 0:
        sys.stdout.write("E2E-DONE\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

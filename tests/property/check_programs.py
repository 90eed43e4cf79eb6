"""The property test's driver: random valid programs through the compiler
and, for a sample, through a run checked against the reference.

    python3 tests/property/check_programs.py --programs 3000 [--seed 0]
        [--run-every 10] [--ranks 4] [--keep DIR] [--no-autodiff] [--run-backward]

Each program of program_gen.py goes through `fuserc opt FILE -p default`
(the command, run in this process) and its printed output is read back;
every tenth (`--run-every`) also runs as `fuserc run --check` does, on the
CPU under one `mpiexec -n RANKS` for all of them (tests/e2e/batch.py).
Each program `default` compiles also goes through `-p autodiff,default`:
its backward must compile too, or be refused by a diagnostic on the
user's program, as the forward (`Result.grad` is its outcome); with
`--run-backward` the sample's backwards run too (`fuserc run -p
'autodiff{save=inputs},default' --entry main_bwd --check`). Outcomes:

- ok: compiled (and, when run, within --check's tolerance);
- diagnostic: refused with a located message about the user's program (the
  program asks for what fuserc does not do, such as a partial sum where no
  contraction makes one): at an op the user wrote, naming no other op and
  no function the compiler derived;
- refused off the program: a located refusal anywhere else (at, or about,
  an op the compiler inserted, or a derived function);
- internal error: a Python exception, or a diagnostic without a location;
- invalid IR: a pass left IR that the verifier or the next pass rejects,
  broke its contract, or printed text that does not read back;
- wrong answer: a run outside --check's tolerance;
- timeout: `fuserc opt` over TIMEOUT_S, or a run that hangs.

All but the first two are failures: the table is printed, and each failing program
written to --keep (default: a temporary folder) with its message. Exit code
1 when any program fails.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import re
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "e2e")]

from program_gen import Program, generate  # noqa: E402

OK, DIAGNOSTIC, INTERNAL, INVALID, WRONG, TIMEOUT, ELSEWHERE = (
    "ok", "diagnostic", "internal error", "invalid IR", "wrong answer", "timeout", "refused off the program",
)  # fmt: skip
OUTCOMES = (OK, DIAGNOSTIC, INTERNAL, INVALID, WRONG, TIMEOUT, ELSEWHERE)
FAILURES = (INTERNAL, INVALID, WRONG, TIMEOUT, ELSEWHERE)
AUTODIFF = "autodiff,default"
TIMEOUT_S = 60
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ", re.MULTILINE)
WHERE = re.compile(r"^(\S+):(\d+):(\d+): error: (.*)$", re.MULTILINE)
OP_AT = re.compile(r"(?:%[\w.]+(?:, %[\w.]+)* = )?((?:fusion|func)\.\w+)")
ZERO_EXTENT = re.compile(r"tensor<(\d+x)*0x")


@dataclass
class Result:
    program: Program
    outcome: str
    detail: str = ""
    ran: bool = False
    grad: str = ""  # the outcome of `-p autodiff,default` (programs `default` compiles)
    grad_detail: str = ""
    grad_ran: bool = False


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout()


def compile_program(text: str, path: Path, pipeline: str = "default") -> tuple[str, str]:
    """(outcome, detail) of `fuserc opt PATH -p PIPELINE`, run in this
    process, and of reading its output back."""
    from fuserc.cli import main
    from fuserc.diagnostics import Diagnostic
    from fuserc.ir import make_context, parse

    path.write_text(text)
    out = path.with_suffix(".out.mlir")
    err = io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main.main(["opt", str(path), "-p", pipeline, "-o", str(out)], standalone_mode=False)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    except _Timeout:
        return TIMEOUT, f"fuserc opt took over {TIMEOUT_S} s"
    except BaseException as e:  # noqa: BLE001 - any escape is an internal error
        return INTERNAL, "".join(traceback.format_exception(type(e), e, e.__traceback__))
    finally:
        signal.alarm(0)
    message = err.getvalue()
    if code != 0:
        if "IR is invalid after pass" in message or "broke its contract" in message:
            return INVALID, message
        if "Traceback" in message or "internal error" in message or not LOCATED.search(message):
            return INTERNAL, message
        return DIAGNOSTIC, message
    try:
        parse(out.read_text(), str(out), make_context())
    except Diagnostic as d:
        return INVALID, f"the output does not read back: {d.render()}"
    return OK, ""


def on_users_program(message: str, text: str, path: Path) -> bool:
    """Whether the first diagnostic of `message` is located at an op of
    `text` (the file at `path`), names no other op of the dialects and no
    function the compiler derived (`@main_fwd`, `@main_bwd`)."""
    m = WHERE.search(message)
    if m is None or m.group(1) != str(path):
        return False
    line, col, what = int(m.group(2)), int(m.group(3)), m.group(4)
    lines = text.split("\n")
    if not 1 <= line <= len(lines) or re.search(r"@main_(fwd|bwd)\b", what):
        return False
    at = OP_AT.match(lines[line - 1], col - 1)
    if at is None or lines[line - 1][: col - 1].strip():
        return False
    named = re.findall(r"'((?:fusion|func|hir)\.\w+)'", what)
    return all(n == at.group(1) for n in named)


def compile_checked(text: str, path: Path, pipeline: str = "default") -> tuple[str, str]:
    """`compile_program`, a diagnostic off the user's program (at an op the
    compiler made, naming one, or a function it derived) counted as
    ELSEWHERE: a refusal is about what the user wrote."""
    outcome, detail = compile_program(text, path, pipeline)
    if outcome == DIAGNOSTIC and not on_users_program(detail, text, path):
        outcome = ELSEWHERE
    return outcome, detail


BACKWARD = "autodiff{save=inputs},default --entry main_bwd"
"""How a sampled program's backward runs (tests/e2e/batch.py's spec): its
arguments are main's and the cotangents, random in their domains."""


def run_sample(results: list[Result], ranks: int, directory: Path, backward: bool = False) -> None:
    """Run the compiled programs of `results` under one mpiexec job (more
    when one crashes) and set their outcomes from the checks; with
    `backward`, also each @main_bwd that compiled (`Result.grad`)."""
    from batch import launch_batches

    work = []
    for r in results:
        pipes = {"default": "default"}
        if backward and r.grad == OK:
            pipes["backward"] = BACKWARD
        work.append((f"p{r.program.seed}", r.program.text, pipes))
    outcomes = launch_batches(ranks, work, directory)
    for r in results:
        r.ran = True
        r.outcome, r.detail = _run_outcome(outcomes.get(f"p{r.program.seed}/default"), r.outcome, r.detail)
        if backward and r.grad == OK:
            r.grad_ran = True
            r.grad, r.grad_detail = _run_outcome(outcomes.get(f"p{r.program.seed}/backward"), r.grad, r.grad_detail)


def _run_outcome(o: Any, outcome: str, detail: str) -> tuple[str, str]:
    """(outcome, detail) after a checked run `o` (a batch.Outcome)."""
    if o is None:
        return INTERNAL, "the batch reported nothing for it"
    if o.status == "ok":
        return outcome, detail
    if o.status == "fail":
        return WRONG, o.detail
    if o.status == "crash" and ("Timeout" in o.detail or "timed out" in o.detail):
        return TIMEOUT, o.detail
    if o.status == "error" and "internal error" not in o.detail and LOCATED.search(o.detail):
        return DIAGNOSTIC, o.detail
    return INTERNAL, o.detail


def check(
    programs: int, seed: int = 0, run_every: int = 10, ranks: int = 4, keep: Path | None = None, autodiff: bool = True,
    run_backward: bool = False,
) -> list[Result]:
    """Generate, compile and (every `run_every`-th) run `programs` programs;
    with `autodiff`, compile the backward of each one that compiles (and
    with `run_backward`, run those of the sample too)."""
    directory = Path(tempfile.mkdtemp(prefix="fuserc-property-")) if keep is None else keep
    directory.mkdir(parents=True, exist_ok=True)
    results = []
    for i in range(programs):
        runs = run_every > 0 and i % run_every == 0
        p = generate(seed + i, max_devices=ranks if runs else 8)
        path = directory / f"p{p.seed}.mlir"
        outcome, detail = compile_checked(p.text, path)
        results.append(Result(p, outcome, detail, runs))
        if autodiff and outcome == OK:
            results[-1].grad, results[-1].grad_detail = compile_checked(p.text, path, AUTODIFF)
    sample = [r for r in results if r.ran and r.outcome == OK]
    for r in results:
        r.ran = False
    if sample:
        run_sample(sample, ranks, directory, run_backward and autodiff)
    for r in results:
        if r.outcome in FAILURES:
            (directory / f"FAILED-{r.program.seed}.txt").write_text(f"{r.outcome}\n{r.detail}\n\n{r.program.text}")
        if r.grad in FAILURES:
            (directory / f"FAILED-{r.program.seed}-autodiff.txt").write_text(f"{r.grad}\n{r.grad_detail}\n\n{r.program.text}")
    return results


def failures(results: list[Result]) -> list[tuple[Result, str, str, str]]:
    """(result, pipeline, outcome, detail) of each failure, forward or backward."""
    out = [(r, "default", r.outcome, r.detail) for r in results if r.outcome in FAILURES]
    return out + [(r, AUTODIFF, r.grad, r.grad_detail) for r in results if r.grad in FAILURES]


def table(results: list[Result], seconds: float) -> str:
    """Programs by outcome (all, and those also run), and by op family."""
    by = collections.Counter(r.outcome for r in results)
    ran = collections.Counter(r.outcome for r in results if r.ran)
    lines = [f"{'outcome':<16}{'programs':>10}{'of them run':>13}"]
    lines += [f"{o:<16}{by[o]:>10}{ran[o]:>13}" for o in OUTCOMES]
    lines.append(f"{'total':<16}{len(results):>10}{sum(ran.values()):>13}")
    grads = collections.Counter(r.grad for r in results if r.grad)
    if grads:
        runs = sum(r.grad_ran for r in results)
        lines.append(
            f"{AUTODIFF} of the {sum(grads.values())} compiled: " + ", ".join(f"{o} {grads[o]}" for o in OUTCOMES if grads[o])
            + (f" ({runs} backwards run)" if runs else "")
        )
    several = sum(1 for r in results if r.program.text.count("fusion.mesh") > 1)
    empty = sum(1 for r in results if ZERO_EXTENT.search(r.program.text))
    lines.append(f"({seconds:.0f} s; {several} with several meshes, {empty} with a zero extent)")
    fams = collections.Counter(f for r in results for f in set(r.program.families))
    fams_ok = collections.Counter(f for r in results if r.outcome == OK for f in set(r.program.families))
    lines.append("op family: programs using it (of them ok) " + ", ".join(f"{f} {n} ({fams_ok[f]})" for f, n in sorted(fams.items())))
    return "\n".join(lines)


def diagnostics_summary(results: list[Result], top: int = 12) -> str:
    """The most frequent diagnostics, locations and names stripped."""
    counts = collections.Counter()
    for r, detail in [(r, r.detail) for r in results if r.outcome == DIAGNOSTIC] + [(r, r.grad_detail) for r in results if r.grad == DIAGNOSTIC]:
        if detail:
            first = LOCATED.sub("", detail.strip().splitlines()[0])
            counts[re.sub(r"#fusion\.sharding<[^>]*>|tensor<[^>]*>|%\w+|@\w+|\d+", "_", first)[:140]] += 1
    return "\n".join(f"{n:6}  {msg}" for msg, n in counts.most_common(top))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-every", type=int, default=10, help="run every k-th program (0: none)")
    parser.add_argument("--ranks", type=int, default=4, help="the job size of the runs")
    parser.add_argument("--keep", type=Path, default=None, help="folder for the programs and the failures")
    parser.add_argument("--no-autodiff", action="store_true", help=f"skip -p {AUTODIFF}")
    parser.add_argument("--run-backward", action="store_true", help="also run the sample's @main_bwd, checked")
    args = parser.parse_args(argv)
    start = time.monotonic()
    results = check(args.programs, args.seed, args.run_every, args.ranks, args.keep, not args.no_autodiff, args.run_backward)
    print(table(results, time.monotonic() - start))
    print("most frequent diagnostics:\n" + diagnostics_summary(results))
    failed = failures(results)
    for r, pipeline, outcome, detail in failed[:10]:
        print(f"\n--- seed {r.program.seed} (-p {pipeline}): {outcome}\n{detail.strip()[-2000:]}\n{r.program.text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

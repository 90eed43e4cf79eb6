"""The `fuserc` command: `opt` prints IR after passes; `run` executes it.

Exit codes: 0 success, 1 a diagnostic, 2 bad usage. A user's mistake never
shows a Python traceback."""

from __future__ import annotations

import sys
from typing import TextIO

import click

from fuserc.diagnostics import Diagnostic


def read_source(path: str) -> tuple[str, str]:
    """(text, name) of FILE, or of standard input for `-`."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as e:
        raise Diagnostic(f"cannot read {path}: {e.strerror}") from None


def fail(d: Diagnostic) -> None:
    """Print a diagnostic and exit with its code (2 for usage errors)."""
    from fuserc.pipeline import PipelineSpecError

    click.echo(d.render(), err=True)
    sys.exit(2 if isinstance(d, PipelineSpecError) else 1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fuserc")
def main() -> None:
    """fuserc: compile and run tensor programs sharded over many GPUs."""


@main.command()
@click.argument("file", default="-")
@click.option("-p", "--pipeline", "pipeline", default="", help="Passes to run, e.g. 'default' or 'propagate-shardings,lower-to-host-ir'.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, writable=True), help="Write the IR here instead of standard output.")
@click.option("--print-generic", is_flag=True, help="Print ops in the generic form.")
@click.option("--split-input-file", is_flag=True, help="Process each '// -----' chunk on its own.")
@click.option("--verify-diagnostics", is_flag=True, help="Check diagnostics against expected-error comments.")
@click.option("--print-ir-after-all", is_flag=True, help="Print the IR to stderr after every pass.")
@click.option("--time-passes", is_flag=True, help="Print the time each pass took to stderr.")
def opt(
    file: str,
    pipeline: str,
    output: str | None,
    print_generic: bool,
    split_input_file: bool,
    verify_diagnostics: bool,
    print_ir_after_all: bool,
    time_passes: bool,
) -> None:
    """Parse FILE (or - for stdin), run passes, print the IR."""
    from fuserc import expected, ir
    from fuserc import pipeline as pl

    try:
        text, name = read_source(file)
        passes = pl.build(pipeline)  # usage errors before any work
    except Diagnostic as d:
        fail(d)
        return
    chunks = list(ir.split_input(text)) if split_input_file else [(0, text)]
    outputs: list[str] = []
    problems: list[str] = []
    failed = False
    timings: list[tuple[str, float]] = []
    for offset, chunk in chunks:
        produced: list[Diagnostic] = []
        try:
            ctx = ir.make_context()
            module = ir.parse(chunk, name, ctx)
            after = (lambda n, m: click.echo(pl.dump(n, m), err=True)) if print_ir_after_all else None
            runner = pl.PassRunner(passes, after)
            runner.run(ctx, module)
            timings.extend(runner.timings)
            outputs.append(ir.to_text(module, print_generic))
        except Diagnostic as d:
            if not verify_diagnostics:
                if not split_input_file:
                    fail(d)
                click.echo(d.render(), err=True)
                failed = True
            produced.append(d)
        if verify_diagnostics:
            exp = expected.expectations(chunk.split("\n", offset)[-1] if offset else chunk, offset + 1)
            problems.extend(expected.check(exp, produced, name))
    if time_passes:
        _print_timings(timings, sys.stderr)
    if problems:
        for p in problems:
            click.echo(p, err=True)
        sys.exit(1)
    result = "// -----\n".join(outputs)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(result)
    else:
        click.echo(result, nl=False)
    if failed:
        sys.exit(1)


def _print_timings(timings: list[tuple[str, float]], out: TextIO) -> None:
    total = sum(t for _, t in timings) or 1e-12
    out.write("===-------------------------------------------------------------------------===\n")
    out.write("                         ... Pass execution timing report ...\n")
    out.write("===-------------------------------------------------------------------------===\n")
    out.write(f"  Total Execution Time: {total:.4f} seconds\n\n")
    out.write("  ----Wall Time----  ----Name----\n")
    for n, t in timings:
        out.write(f"  {t:.4f} ({100 * t / total:5.1f}%)  {n}\n")
    out.write(f"  {total:.4f} (100.0%)  Total\n")


def _register_run() -> None:
    """`fuserc run` lives with the runtime (fuserc/run_cli.py)."""
    try:
        from fuserc.run_cli import run
    except ModuleNotFoundError as e:
        if e.name != "fuserc.run_cli":
            raise
        return
    main.add_command(run)


_register_run()

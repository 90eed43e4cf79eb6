"""The `fuserc` command: `opt` prints IR after passes; `run` executes it;
`cache` shows or empties the cache of generated kernels.

Exit codes: 0 success, 1 a diagnostic, 2 bad usage. A user's mistake never
shows a Python traceback."""

from __future__ import annotations

import gc
import os
import stat
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

import click

from fuserc.diagnostics import Diagnostic, Location

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.passes import ModulePass


def file_kind(path: str) -> str | None:
    """What `path` is when it is not a regular file ('a named pipe', 'a
    character device', ...), found without opening it (opening a named pipe
    waits for a writer); None for a regular file or one that cannot be
    looked at (reading it says why)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kinds = (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    )
    return next((kind for test, kind in kinds if test(mode)), None)


def read_source(path: str) -> tuple[str, str]:
    """(text, name) of FILE, or of standard input for `-`; a file that
    cannot be read or is not UTF-8 text is a Diagnostic, and so is a
    device (reading one may never end)."""
    name = "<stdin>" if path == "-" else path
    kind = file_kind(path) if path != "-" else None
    if kind in ("a character device", "a block device"):
        raise Diagnostic(f"cannot read {path}: it is {kind}, not a program file")
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        elif kind in ("a named pipe", "a socket"):
            data = _read_pipe(path)
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as e:
        raise Diagnostic(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        col = e.start - (before.rfind(b"\n") + 1) + 1
        raise Diagnostic(
            f"input is not UTF-8 text (byte 0x{data[e.start]:02x} cannot be decoded)",
            Location(name, line, col),
        ) from None


PIPE_SILENCE_S = 30.0
"""How long a named pipe may stay silent (no writer, or a writer that
writes nothing) before reading it is given up: `fuserc opt <(gen)` reads
a generator's output, `fuserc opt fifo` with no writer ends."""


def _read_pipe(path: str) -> bytes:
    """All a named pipe delivers, until its writers close it; a Diagnostic
    when it stays silent for PIPE_SILENCE_S (opened without waiting for a
    writer, then polled)."""
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        while True:
            if not poller.poll(PIPE_SILENCE_S * 1000):
                got = f" after {sum(map(len, chunks))} bytes" if chunks else ""
                raise Diagnostic(
                    f"cannot read {path}: it is a named pipe and nothing was written to it for "
                    f"{PIPE_SILENCE_S:g} s{got} (is its writer running?)"
                )
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def fail(d: Diagnostic) -> None:
    """Print a diagnostic and exit with its code (2 for usage errors)."""
    from fuserc.pipeline import PipelineSpecError

    click.echo(d.render(), err=True)
    sys.exit(2 if isinstance(d, PipelineSpecError) else 1)


class _Group(click.Group):
    """click's group, except that under a launcher (mpiexec, torchrun) a
    usage error is printed by rank 0 alone: every rank finds the same one;
    and `fuserc run`, which lives with the runtime, is imported when it is
    named or listed (`_register_run`), not by every command."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        _register_run()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "run":
            _register_run()
        return super().get_command(ctx, cmd_name)

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:  # type: ignore[override]
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        from fuserc.runtime.job.job import launcher_rank

        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            if launcher_rank() in (None, 0):
                e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as e:
            if not _from_echo(e):
                raise
            fail(Diagnostic(f"cannot write the output to standard output: {e.strerror or e}"))
        sys.exit(code if isinstance(code, int) else 0)


def _from_echo(error: BaseException) -> bool:
    """Whether `error` was raised writing with click.echo (to a full device,
    a closed pipe): the output's failure, not the command's."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is click.utils.echo.__code__


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fuserc")
def main() -> None:
    """fuserc: compile and run tensor programs sharded over many GPUs."""


def entry() -> None:
    """The `fuserc` command and `python -m fuserc`: `main`, then the
    process ends without Python's teardown of torch (`quick_exit`: a second
    or more after the results are out). `main` itself returns by raising
    SystemExit, as click's commands do, for callers in one process.

    It starts with Python's cyclic garbage collector off: importing xDSL,
    the dialects and the passes makes some hundred thousand objects that
    live until the process ends (classes, functions, IRDL definitions),
    and each collection meanwhile scans them again for nothing (some 15 ms
    of `fuserc opt`'s 0.3 s of imports). `opt` keeps it off for the input
    it compiles last and on between earlier inputs; `run` turns it on."""
    gc.disable()  # for the imports (docstring); each command sets it for its work
    from fuserc.runtime.job.job import follow_launcher, launcher_size

    follow_launcher()  # first, before the imports of seconds: a launcher that dies meanwhile ends this rank too
    import_xdsl()
    from fuserc.runtime.job.mpi_env import ENDS_PROCESS, quick_exit

    ENDS_PROCESS[0] = True
    try:
        main()
        code = 0
    except SystemExit as e:
        code = exit_status(e)
    try:  # what is left of the output: one that cannot be written fails the command
        sys.stdout.flush()
    except (OSError, ValueError) as e:
        if code == 0:
            click.echo(f"error: cannot write the output to standard output: {getattr(e, 'strerror', None) or e}", err=True)
            code = 1
    if code != 0 and (launcher_size() or 1) > 1:
        # A launcher ends every rank once one fails: the rank that prints the
        # job's message (rank 0 for bad usage, the lowest holding it after a
        # failure every rank knows) must have written it by then.
        import time

        time.sleep(FAILED_RANK_GRACE_S)
    quick_exit(code)


XDSL_MODULES = ("xdsl.dialects.builtin", "xdsl.dialects.func", "xdsl.parser", "xdsl.printer", "xdsl.passes", "xdsl.builder", "xdsl.rewriter")
"""The xDSL modules every command reads IR with (`import_xdsl`)."""


def import_xdsl() -> None:
    """Import `XDSL_MODULES` without asyncio, unless it is in already.

    `typing_extensions.deprecated`, which xDSL puts on some of its
    functions as they are defined, imports `asyncio.coroutines` to ask
    whether the function is a coroutine function, and with it all of
    asyncio (sockets, ssl, subprocesses, logging, threads): 15 to 25 ms
    of the 0.3 s it takes `fuserc opt` to import what it runs, for
    nothing a command uses. While these modules import, `asyncio` is its
    package unrun and `asyncio.coroutines` that file alone (the one module
    the question needs; it imports no other part of asyncio); both are
    dropped after, so that whatever imports asyncio later (torch, for
    `fuserc run`) runs the whole package as always."""
    import importlib
    import importlib.util

    package_spec = spec = None
    if "asyncio" not in sys.modules:
        package_spec = importlib.util.find_spec("asyncio")
        folders = (package_spec.submodule_search_locations or []) if package_spec is not None else []
        path = os.path.join(folders[0], "coroutines.py") if folders else ""
        spec = importlib.util.spec_from_file_location("asyncio.coroutines", path) if os.path.isfile(path) else None
    if spec is None or spec.loader is None:  # asyncio is in already, or is not a folder of sources: as it comes
        for name in XDSL_MODULES:
            importlib.import_module(name)
        return
    before = set(sys.modules)
    package = importlib.util.module_from_spec(package_spec)  # type: ignore[arg-type]
    coroutines = importlib.util.module_from_spec(spec)
    package.coroutines = coroutines  # type: ignore[attr-defined]
    sys.modules["asyncio"], sys.modules["asyncio.coroutines"] = package, coroutines
    try:
        spec.loader.exec_module(coroutines)
        for name in XDSL_MODULES:
            importlib.import_module(name)
    finally:
        for name in set(sys.modules) - before:
            if name == "asyncio" or name.startswith("asyncio."):
                del sys.modules[name]


def exit_status(error: SystemExit) -> int:
    """The status a process ending with `error` has, as Python sets it (a
    code that is not a number is printed, and the status is 1)."""
    if error.code is None or isinstance(error.code, int):
        return error.code or 0
    print(error.code, file=sys.stderr)
    return 1


FAILED_RANK_GRACE_S = 0.5
"""How long a failing rank of a job waits before it ends (see `entry`)."""


def _list_passes(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from fuserc import pipeline as pl

    click.echo(pl.describe(), nl=False)
    ctx.exit(0)


@main.command()
@click.argument("file", default="-")
@click.option(
    "-p", "--pipeline", "--pass-pipeline", "pipeline", default="",
    help="Passes to run: 'a,b{opt=value other=value}' or MLIR's 'builtin.module(a,b{opt=value})'; "
    "'default' is the whole pipeline, 'default{opt=value}' gives the option to its pass that has it.",
)  # fmt: skip
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, writable=True, allow_dash=True), help="Write the IR here ('-': standard output, the default).")
@click.option("--print-generic", is_flag=True, help="Print ops in the generic form.")
@click.option("--split-input-file", is_flag=True, help="Process each '// -----' chunk on its own.")
@click.option("--verify-diagnostics", is_flag=True, help="Check diagnostics against expected-error comments.")
@click.option("--print-ir-after-all", is_flag=True, help="Print the IR to stderr after every pass.")
@click.option("--time-passes", is_flag=True, help="Print the time each pass took to stderr.")
@click.option("--mesh", "meshes", multiple=True, metavar="NAME=SHAPE", help="Give a declared mesh another shape, devices 0..n-1 (--mesh tp=2, --mesh grid=2x4).")
@click.option("--comm-report", is_flag=True, help="After the passes, print to stderr each host program's communications: kind, dtype, shape, team, bytes per rank, reshard, overlap, and the totals.")
@click.option("--comm-report-unit", "comm_unit", metavar="SHAPExDTYPE", callback=lambda c, p, v: comm_unit(v), help="Also give the report's bytes in units of this tensor's (8192x4096xbf16); implies --comm-report.")
@click.option("--list-passes", is_flag=True, expose_value=False, is_eager=True, callback=_list_passes, help="List every pass with its options, their defaults and meaning, and the pipelines; then exit.")
def opt(
    file: str,
    pipeline: str,
    output: str | None,
    print_generic: bool,
    split_input_file: bool,
    verify_diagnostics: bool,
    print_ir_after_all: bool,
    time_passes: bool,
    meshes: tuple[str, ...],
    comm_report: bool,
    comm_unit: Any,
) -> None:
    """Parse FILE (or - for stdin), run passes, print the IR.

    \b
    fuserc opt prog.mlir -p default
    fuserc opt prog.mlir -p 'default{algorithm=ring}' -o -
    fuserc opt prog.mlir --pass-pipeline 'builtin.module(propagate-shardings,stream-pipeline{num-streams=2})'
    fuserc opt prog.mlir -p autodiff,default --comm-report -o /dev/null

    --list-passes prints every pass and its options (docs/passes.md has the details)."""
    from fuserc import ir
    from fuserc import pipeline as pl
    from fuserc.runtime.job.mpi_env import ENDS_PROCESS

    shapes = mesh_options(meshes)
    if output == "-":
        output = None
    if output:
        check_output_dir(output)
    try:
        text, name = read_source(file)
        passes = pl.build(pipeline)  # usage errors before any work
    except Diagnostic as d:
        fail(d)
        return
    chunks = list(ir.split_input(text)) if split_input_file else [(0, text)]
    after = (lambda n, m: click.echo(pl.dump(n, m), err=True)) if print_ir_after_all else None
    report = _comm_reporter(comm_unit) if comm_report or comm_unit else None
    outputs: list[str] = []
    problems: list[str] = []
    failed = False
    timings: list[list[tuple[str, float]]] = []  # per input, in pipeline order
    for i, (offset, chunk) in enumerate(chunks):
        produced: list[Diagnostic] = []
        if ENDS_PROCESS[0]:
            # The process ends after the output (`entry`, which turned the
            # collector off for the imports): the collector, kept off while
            # a program compiles (`ir.compiling`), stays off from the last
            # input on, else its first collection after the compile scans
            # all of the IR for nothing (0.3 s of the 48-layer GPT's 10).
            # Earlier inputs' IR is collected between inputs.
            if i == len(chunks) - 1:
                gc.disable()
            else:
                gc.enable()
        try:
            outputs.append(_process(chunk, name, passes, after, timings, print_generic, shapes, report))
        except Diagnostic as d:
            if not verify_diagnostics:
                if not split_input_file:
                    fail(d)
                click.echo(d.render(), err=True)
                failed = True
            produced.append(d)
        if verify_diagnostics:
            from fuserc import expected

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
        from fuserc.files import replacing

        try:
            with replacing(output) as f:
                f.write(result.encode("utf-8"))
        except OSError as e:
            fail(Diagnostic(f"cannot write {output}: {e.strerror or e}"))
    else:
        click.echo(result, nl=False)
    if failed:
        sys.exit(1)


def mesh_options(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """`--mesh NAME=SHAPE` options as {name: shape}; bad usage if malformed."""
    from fuserc.ir import mesh_option

    out: dict[str, tuple[int, ...]] = {}
    for v in values:
        try:
            name, shape = mesh_option(v)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--mesh'") from None
        out[name] = shape
    return out


def comm_unit(text: str | None) -> Any:
    """`--comm-report-unit`'s value as a `comm_report.Unit` (bad usage if malformed)."""
    if text is None:
        return None
    from fuserc.comm_report import Unit

    try:
        return Unit.parse(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--comm-report-unit'") from None


def _comm_reporter(unit: Any) -> Callable[[ModuleOp], None]:
    """Prints the communication report of a module to stderr."""
    from fuserc.comm_report import report

    return lambda module: click.echo(report(module, unit).text(), err=True, nl=False)


def check_output_dir(output: str, option: str = "'-o' / '--output'") -> None:
    """A file to write into a folder that does not exist is bad usage,
    found before any work (`opt -o`, `run --trace`)."""
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise click.BadParameter(f"folder '{folder}' {what}", param_hint=option)


def _process(
    chunk: str,
    name: str,
    passes: list[ModulePass],
    after: Callable[[str, ModuleOp], None] | None,
    timings: list[list[tuple[str, float]]],
    generic: bool,
    meshes: dict[str, tuple[int, ...]],
    report: Callable[[ModuleOp], None] | None = None,
) -> str:
    """Parse, verify and transform one input; the printed result (`report`
    sees the module after the passes)."""
    from xdsl.utils.exceptions import DiagnosticException

    from fuserc import ir
    from fuserc import pipeline as pl

    ctx = ir.make_context()
    with ir.compiling():
        module = ir.parse(chunk, name, ctx, meshes)
        runner = pl.PassRunner(passes, after)
        try:
            runner.run(ctx, module)
        except DiagnosticException as e:  # xDSL's own failure reports, from a pass
            raise Diagnostic(str(e)) from None
        except Diagnostic as d:  # a pass's, at an op: with its source line, as the parser's
            raise ir.with_context(d, chunk) from None
        finally:
            timings.append(runner.timings)
        if report is not None:
            report(module)
        return ir.to_text(module, generic)


def _print_timings(timings: list[list[tuple[str, float]]], out: TextIO) -> None:
    """MLIR-style report, one line per pass of the pipeline; the times of a
    pass on several inputs (--split-input-file) are summed."""
    per_pass: list[tuple[str, float]] = []
    for run in timings:
        for i, (n, t) in enumerate(run):
            if i < len(per_pass):
                per_pass[i] = (n, per_pass[i][1] + t)
            else:
                per_pass.append((n, t))
    total = sum(t for _, t in per_pass)
    share = total or 1.0
    out.write("===-------------------------------------------------------------------------===\n")
    out.write("                         ... Pass execution timing report ...\n")
    out.write("===-------------------------------------------------------------------------===\n")
    out.write(f"  Total Execution Time: {total:.4f} seconds\n\n")
    out.write("  ----Wall Time----  ----Name----\n")
    for n, t in per_pass:
        out.write(f"  {t:.4f} ({100 * t / share:5.1f}%)  {n}\n")
    out.write(f"  {total:.4f} (100.0%)  Total\n")


@main.group(short_help="Show or empty the cache of generated kernels.")
def cache() -> None:
    """The cache of generated kernels: $FUSERC_CACHE_DIR, else
    $XDG_CACHE_HOME/fuserc, else ~/.cache/fuserc (docs/runtime.md)."""


@cache.command("info")
def cache_info() -> None:
    """Where the cache is and what it holds."""
    from fuserc.runtime.kernels.kernel_cache import KernelCache

    info = KernelCache().info()
    click.echo(f"cache: {info['root']}" + ("" if info["exists"] else " (empty: not created yet)"))
    if info["untrusted"]:
        click.echo(f"not used: {info['untrusted']}")
    kinds = info["kinds"]
    count = sum(kinds.values())
    by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    click.echo(f"kernels: {count}" + (f" ({by_kind})" if count else "") + f", {_size(info['entry_bytes'])}")
    if info["damaged"]:
        click.echo(f"unreadable entries: {info['damaged']} (rebuilt when next needed)")
    click.echo(f"working files: TorchInductor {_size(info['inductor_bytes'])}, Triton {_size(info['triton_bytes'])}")


@cache.command("clear")
def cache_clear() -> None:
    """Remove every cached kernel (and the compilers' working files)."""
    from fuserc.runtime.kernels.kernel_cache import KernelCache, Untrusted

    kc = KernelCache()
    count = len(kc.entries())
    try:
        freed = kc.clear()
    except (Untrusted, OSError) as e:
        click.echo(f"error: cannot clear {kc.root}: {e}", err=True)
        raise SystemExit(1) from None
    click.echo(f"cleared {kc.root}: {count} kernel{'s' if count != 1 else ''}, {_size(freed)} freed")


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"


def _register_run() -> None:
    """Add `fuserc run`, which lives with the runtime (fuserc/run_cli.py),
    once: its imports (the runtime's checks, the job's launch) are not
    `fuserc opt`'s."""
    if "run" in main.commands:
        return
    try:
        from fuserc.run_cli import run
    except ModuleNotFoundError as e:
        if e.name != "fuserc.run_cli":
            raise
        return
    main.add_command(run)

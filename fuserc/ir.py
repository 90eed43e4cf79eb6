"""Reading, verifying and printing IR, with source locations on every op."""

from __future__ import annotations

import io
from collections.abc import Iterator

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.dialects.func import Func, FuncOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from fuserc.diagnostics import Diagnostic, Location, location_of

SPLIT_MARKER = "// -----"


def make_context() -> Context:
    """A context with every dialect fuserc reads."""
    from fuserc.dialects.fusion import Fusion
    from fuserc.dialects.hir import Hir

    ctx = Context()
    for d in (Builtin, Func, Fusion, Hir):
        ctx.load_dialect(d)
    return ctx


class _LocatingParser(Parser):
    """xDSL's parser, also recording each op's file:line:col (xDSL keeps
    locations only where the text spells `loc(...)`)."""

    def __init__(self, ctx: Context, text: str, filename: str):
        super().__init__(ctx, text, filename)
        self._filename = filename

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            loc = start.get_location()
            op.location = FileLineColLoc(
                StringAttr(self._filename), IntAttr(loc.line), IntAttr(loc.col)
            )
        return op


def _parse_error(e: ParseError) -> Diagnostic:
    loc = e.span.get_location()
    context = e.span.print_with_context().split("\n", 1)[1].rstrip("\n")
    return Diagnostic(e.msg, Location(loc.file, loc.line, loc.col), context)


def parse(text: str, filename: str = "<stdin>", ctx: Context | None = None) -> ModuleOp:
    """Parse and verify a module; every failure is a located Diagnostic."""
    try:
        module = _LocatingParser(ctx or make_context(), text, filename).parse_module()
    except ParseError as e:
        raise _parse_error(e) from None
    verify(module)
    return module


def split_input(text: str) -> Iterator[tuple[int, str]]:
    """Chunks between `// -----` lines, each padded with blank lines so that
    line numbers stay those of the whole file."""
    offset = 0
    lines = text.split("\n")
    chunk: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() == SPLIT_MARKER:
            yield offset, "\n" * offset + "\n".join(chunk)
            chunk, offset = [], i + 1
        else:
            chunk.append(line)
    yield offset, "\n" * offset + "\n".join(chunk)


def verify(module: ModuleOp) -> None:
    """Verify every op; the first failure becomes a Diagnostic at its op."""
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
            if isinstance(op, FuncOp):
                _verify_func_signature(op)
        except VerifyException as e:
            raise Diagnostic(f"'{op.name}' op {e}", location_of(op)) from None


def _verify_func_signature(func: FuncOp) -> None:
    from fuserc.dialects.fusion import verify_shardings

    if func.body.blocks:
        verify_shardings(func, func.body.block.args)


def to_text(op: Operation, generic: bool = False) -> str:
    out = io.StringIO()
    printer = Printer(stream=out, print_generic_format=generic)
    printer.print_op(op)
    return out.getvalue().rstrip("\n") + "\n"

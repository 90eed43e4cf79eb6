"""Reading, verifying and printing IR, with source locations on every op."""

from __future__ import annotations

import gc
import io
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, Builtin, FileLineColLoc, FunctionType, IntAttr, ModuleOp, StringAttr, TensorType, UnknownLoc, UnregisteredOp
from xdsl.dialects.func import Func, FuncOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, Region, SSAValue, TypeAttribute
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, SymbolTable
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Position, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRToken, MLIRTokenKind

from fuserc.diagnostics import Diagnostic, Location, location_of

SPLIT_MARKER = "// -----"

MAX_NESTING = 64
"""The deepest nesting of brackets ((), [], {}, <>) an input may have: the
parser and the passes recurse once (or more) per level, so a deeper input
is refused with a located diagnostic before parsing, never a RecursionError.
Real programs nest a dozen levels."""

_NESTING_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|->|[(\[{<]|[)\]}>]')
_OPENERS = frozenset("([{<")
_CLOSERS = frozenset(")]}>")
_DIMENSIONS = re.compile(r"(?:\d+|\?)(?:x(?:\d+|\?))*", re.ASCII)  # 0-9 only: `4٣` is not 43

MAX_INT_DIGITS = 1000
"""The longest integer literal read, in digits: Python converts at most
4,300 decimal digits to and from text, and no value of a fuserc program
(dimensions, mesh shapes, ranks: below 2^63) needs more than 19."""

MAX_DIM = (1 << 63) - 1
"""The largest extent of a tensor dimension, as in MLIR (int64_t)."""


def make_context() -> Context:
    """A context with every dialect fuserc reads."""
    from fuserc.dialects.fusion import Fusion
    from fuserc.dialects.hir import Hir

    ctx = Context()
    for d in (Builtin, Func, Fusion, Hir):
        ctx.load_dialect(d)
    return ctx


class _Lexer(MLIRLexer):
    """xDSL's lexer with a string literal pattern that cannot backtrack:
    xDSL's (`"(?:[^"\\...]+|\\...)*"`) nests a repetition in a repetition,
    and takes time exponential in the length of an unterminated string
    (a minute for 30 characters). This one matches the same strings."""

    _unescaped_characters_regex = re.compile(r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"')

    def __init__(self, input: Input[str]) -> None:
        super().__init__(input)
        self._all_ascii = input.content.isascii()

    def lex(self) -> MLIRToken:
        """xDSL's, refusing a token that starts with a character outside
        ASCII: integers are ASCII digits (xDSL reads `٣` or `４` as 3 and 4,
        and fails with a ValueError on `²`), names ASCII letters. Strings
        and comments hold any character. An input all ASCII (the usual one)
        is not looked at token by token."""
        if self._all_ascii:
            return super().lex()
        self._consume_whitespace()
        self._refuse_non_ascii(self.pos)
        return super().lex()

    def _lex_number(self, start_pos: Position) -> MLIRToken:
        """xDSL's, refusing a literal longer than MAX_INT_DIGITS at itself
        (xDSL would fail converting it, or printing it in a message)."""
        token = super()._lex_number(start_pos)
        if token.kind == MLIRTokenKind.INTEGER_LIT and len(token.text) > MAX_INT_DIGITS:
            raise ParseError(token.span, too_long(len(token.text)))
        return token

    def _lex_at_ident(self, start_pos: Position) -> MLIRToken:
        if not self._all_ascii:
            self._refuse_non_ascii(self.pos)  # `@é`: symbol names are ASCII too (or quoted)
        return super()._lex_at_ident(start_pos)

    def _refuse_non_ascii(self, pos: Position) -> None:
        c = self.input.at(pos)
        if c is not None and not c.isascii():
            shown = f"'{c}' (U+{ord(c):04X})" if c.isprintable() else f"U+{ord(c):04X}"
            what = "a digit that is not 0-9" if c.isnumeric() else "a character that is not ASCII"
            raise ParseError(
                Span(pos, pos + 1, self.input),
                f"unexpected {shown}: {what}; outside strings and comments the IR is ASCII (integers are written with 0-9)",
            )


_ANGLES = re.compile(r'[<>"]')


def _bracket_end(text: str, pos: int) -> int | None:
    """The index after the `>` closing the `<` at `pos` (spaces before it
    allowed); None when there is none or a string comes first."""
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    if pos >= len(text) or text[pos] != "<":
        return None
    depth = 0
    for m in _ANGLES.finditer(text, pos):
        ch = m.group(0)
        if ch == '"':
            return None
        depth += 1 if ch == "<" else -1
        if depth == 0:
            return m.end()
    return None


MAX_INT_WIDTH = (1 << 24) - 1
"""The widest integer type, as in MLIR (IntegerType::kMaxWidth)."""


class _LocatingParser(Parser):
    """xDSL's parser, also recording each op's file:line:col (xDSL keeps
    locations only where the text spells `loc(...)`), reading an input with
    no operations as an empty module (as mlir-opt does), and turning an
    op that cannot be built into a parse error at that op."""

    def __init__(self, ctx: Context, text: str, filename: str):
        super().__init__(ctx, "", filename)
        self._parser_state = ParserState(_Lexer(Input(text, filename)))
        self._filename = filename
        self._op_start: Span = self._current_token.span
        self._types: dict[str, TypeAttribute] = {}
        self._function_types: dict[str, FunctionType] = {}
        self._line_start, self._line = 0, 0  # a line start and its number - 1 (`_file_loc`)
        self._file_attr = StringAttr(filename)
        self._columns: dict[int, IntAttr] = {}
        """`_file_loc`'s attributes made once: making an attribute verifies its parameters."""
        self._regions: list[Span] = []  # where each region being read opens

    def _file_loc(self, span: Span) -> FileLineColLoc:
        """file:line:col of `span`, counting newlines from the last op's line
        (ops come in order; xDSL's `get_location` counts from the start of
        the input each time, quadratic in the input's length)."""
        content = span.input.content
        line_start = span.input.get_start_of_line(span.start)
        if line_start < self._line_start:
            self._line_start, self._line = 0, 0
        self._line += content.count("\n", self._line_start, line_start)
        self._line_start = line_start
        line = self._line + 1 + span.line_offset
        col = span.start - line_start + 1
        col_attr = self._columns.get(col)
        if col_attr is None:  # most ops start in one of a few columns
            col_attr = self._columns[col] = IntAttr(col)
        return FileLineColLoc(self._file_attr, IntAttr(line), col_attr)

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        start = self._current_token.span
        while self._current_token.kind in (
            MLIRTokenKind.HASH_IDENT,
            MLIRTokenKind.EXCLAMATION_IDENT,
        ):
            self._parse_alias_def()
        if self._current_token.kind == MLIRTokenKind.EOF:
            module = ModuleOp([])
        else:
            try:
                module = super().parse_module(allow_implicit_module)
            except ParseError as e:
                if e.msg.startswith("values used but not defined"):
                    self._raise_undefined_values()
                raise
        if isinstance(module.location, UnknownLoc):
            module.location = self._file_loc(start)
        return module

    def _raise_undefined_values(self) -> None:
        """xDSL reports values used but never defined at the end of the
        input; report them at their first use instead: the `%name` in the
        op that uses it first, with its line."""
        uses: list[tuple[tuple[int, int], str, FileLineColLoc]] = []
        for name, refs in self.forward_ssa_references.items():
            for value in refs.values():
                for use in value.uses:
                    loc = use.operation.location
                    if isinstance(loc, FileLineColLoc):
                        uses.append(((loc.line.data, loc.column.data), name, loc))
        if uses:
            _, name, loc = min(uses, key=lambda u: u[0])
            message = f"use of undefined value %{name}"
            content = self.lexer.input.content
            lines = content.split("\n", loc.line.data - 1)
            if len(lines) == loc.line.data:  # the op's offset in the input, then the name's after it
                op_at = len(content) - len(lines[-1]) + loc.column.data - 1
                m = re.compile(rf"%{re.escape(name)}(?![\w$.-])").search(content, op_at)
                if m is not None:
                    self.raise_error(message, m.start(), m.end())
            raise Diagnostic(message, Location(loc.filename.data, loc.line.data, loc.column.data))

    def _get_op_by_name(self, name: str) -> type[Operation]:
        """An unknown op is reported at its name, with the ops its dialect
        has (and the closest to the name)."""
        found = self.ctx.get_optional_op(name, dialect_stack=self._parser_state.dialect_stack)
        if found is None:
            start = self.lexer.input.content.find(name, self._op_start.start)
            if start < 0:
                self.raise_error(unknown_op_message(name), self._op_start)
            self.raise_error(unknown_op_message(name), start, start + len(name))
        return found

    def _parse_optional_integer_or_float_type(self):  # type: ignore[no-untyped-def]
        """xDSL's, with an integer width over MLIR's limit (2^24 - 1 bits)
        refused at the type: xDSL would build the type's value range, and
        run out of memory (`i9223372036854775807`)."""
        token = self._current_token
        match = self._builtin_integer_type_regex.match(token.text) if token.kind == MLIRTokenKind.BARE_IDENT else None
        if match is not None and int(match.group(1)) > MAX_INT_WIDTH:
            self.raise_error(f"integer type {token.text} is wider than {MAX_INT_WIDTH} bits", token.span.start, token.span.end)
        return super()._parse_optional_integer_or_float_type()

    def _parse_builtin_densearray_attr(self):  # type: ignore[no-untyped-def]
        """xDSL's, with an element type it cannot store (`array<i100: ...>`)
        reported where the array begins, not as xDSL's NotImplementedError."""
        start = self.pos
        try:
            return super()._parse_builtin_densearray_attr()
        except NotImplementedError as e:
            self.raise_error(f"dense array: its element type cannot be stored ({e})", start, self.pos)

    def parse_optional_region(self, arguments=None):  # type: ignore[no-untyped-def]
        """xDSL's, giving each entry-block argument (a function's) the
        location of its name, so that diagnostics about an argument point
        at it, and keeping where the region opens (`_parse_block`)."""
        for arg in arguments or ():
            if arg.location is None:
                arg.location = self._file_loc(arg.name)
        self._regions.append(self._current_token.span)
        try:
            return super().parse_optional_region(arguments)
        finally:
            self._regions.pop()

    def _parse_block(self):  # type: ignore[no-untyped-def]
        """xDSL's, with what is wrong where no op, block label or `}`
        follows: at the end of the input, the region left open."""
        token = self._current_token
        if token.kind == MLIRTokenKind.EOF and self._regions:
            opened = self._regions[-1]
            raise ParseError(opened, "this region is not closed: '}' is missing before the end of the input")
        if token.kind != MLIRTokenKind.CARET_IDENT:
            self.raise_error("expected an operation, a block label (^bb0:) or the '}' closing the region", token.span)
        return super()._parse_block()

    def resolve_operand(self, operand, type):  # type: ignore[no-untyped-def]
        """xDSL's, blaming a value used with another type than its op's
        result type on that op (the type written there is the one to
        check), at the op, naming the use."""
        values = self.ssa_values.get(operand.operand_name)
        if values is not None and operand.index < len(values):
            value = values[operand.index]
            loc = value.owner.location if isinstance(value, OpResult) else None
            if value.type != type and isinstance(loc, FileLineColLoc) and loc.filename.data == self._filename:
                use = operand.span.get_location()
                name = f"%{operand.operand_name}" + (f"#{operand.index}" if len(values) > 1 else "")
                start = _offset(self.lexer.input.content, loc.line.data, loc.column.data)
                raise ParseError(
                    Span(start, start + len(operand.operand_name) + 1, self.lexer.input),
                    f"{value.owner.name} gives {name} the type {value.type}, but {use.line}:{use.col} uses it as "
                    f"{type}: one of the two types is wrong",
                )
        return super().resolve_operand(operand, type)

    def parse_optional_type(self) -> TypeAttribute | None:
        """xDSL's, reading each distinct `tensor<...>` text once: programs
        repeat a few tensor types on every op, and building one (its
        sharding attribute, its shape) costs far more than a lookup. A type
        holding a string is always parsed (brackets inside quotes)."""
        token = self._current_token
        if token.kind != MLIRTokenKind.BARE_IDENT or token.text != "tensor":
            return super().parse_optional_type()
        content = self.lexer.input.content
        end = _bracket_end(content, token.span.end)
        if end is None:
            return super().parse_optional_type()
        key = content[token.span.start : end]
        known = self._types.get(key)
        if known is not None:
            self._resume_from(end)
            return known
        parsed = super().parse_optional_type()
        after = self._current_token.span.start
        if parsed is not None and after >= end and not content[end:after].strip():
            self._types[key] = parsed
        return parsed

    def parse_optional_function_type(self) -> FunctionType | None:
        """xDSL's, reading each distinct `(...) -> ...` that ends its line
        (an op's signature) once: programs repeat a few on every op."""
        token = self._current_token
        if token.kind != MLIRTokenKind.L_PAREN:
            return None
        content = self.lexer.input.content
        start = token.span.start
        end = content.find("\n", start)
        key = content[start : len(content) if end < 0 else end].rstrip()
        known = self._function_types.get(key)
        if known is not None:
            self._resume_from(start + len(key))
            return known
        parsed = super().parse_optional_function_type()
        if parsed is not None and content[start : self._current_token.span.start].rstrip() == key:
            self._function_types[key] = parsed  # it took the rest of the line (a comment aside): the same text, the same type
        return parsed

    def parse_dimension_list(self) -> list[int]:
        """xDSL's, in time linear in the number of dimensions: a run of
        `4x8x?` is read at once (xDSL lexes the rest of the run, as one bare
        identifier `x8x?...`, again after each dimension)."""
        accepted = (MLIRTokenKind.INTEGER_LIT, MLIRTokenKind.QUESTION)
        if self._current_token.kind not in accepted:
            return []
        dims: list[int] = []
        while True:
            token = self._current_token
            run = _DIMENSIONS.match(self.lexer.input.content, token.span.start) if token.text[:1] in "0123456789?" else None
            if run is None:
                dims.append(self.parse_shape_dimension())
            else:
                at = run.start()
                for d in run.group(0).split("x"):
                    if len(d) > MAX_INT_DIGITS:
                        self.raise_error(too_long(len(d)), at, at + len(d))
                    dims.append(DYNAMIC_INDEX if d == "?" else int(d))
                    if dims[-1] > MAX_DIM:
                        self.raise_error(f"dimension {d} is larger than {MAX_DIM} (2^63 - 1), MLIR's largest", at, at + len(d))
                    at += len(d) + 1
                self._resume_from(run.end())
            if not self._parse_optional_shape_delimiter():
                return dims
            if self._current_token.kind not in accepted:
                # keep a trailing `x` for the element type, as xDSL does
                self._resume_from(self._current_token.span.start - 1)
                return dims

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        self._op_start = start
        try:
            op = super().parse_operation()
        except VerifyException as e:
            raise ParseError(start, str(e)) from None
        except ArithmeticError as e:  # xDSL verifying an attribute such as `array<i0: 0>`
            raise ParseError(start, f"invalid attribute in this op ({type(e).__name__}: {e})") from None
        if isinstance(op.location, UnknownLoc):
            op.location = self._file_loc(start)
        return op


def _offset(text: str, line: int, col: int) -> int:
    """The index in `text` of line:col (1-based)."""
    start = 0
    for _ in range(line - 1):
        start = text.index("\n", start) + 1
    return start + col - 1


def source_context(text: str, loc: Location | None, width: int = 1) -> str:
    """The source line at `loc` and a caret under its column, as parse
    errors show them ('' when `loc` is not in `text`)."""
    if loc is None or loc.line < 1:
        return ""
    lines = text.split("\n", loc.line)
    if len(lines) < loc.line:
        return ""
    line = lines[loc.line - 1]
    if loc.col > len(line) + 1:
        return ""
    return f"{line}\n{' ' * (loc.col - 1)}{'^' * width}"


def too_long(digits: int) -> str:
    """The message for an integer literal of `digits` digits, too long to read."""
    return f"integer literal of {digits} characters: fuserc reads integers of at most {MAX_INT_DIGITS} digits"


def unknown_op_message(name: str) -> str:
    """`unknown op 'fusion.swish'`, the closest known name, and the ops of
    its dialect (fusion: docs/language.md; hir: docs/hir.md)."""
    import difflib

    from fuserc.dialects.fusion import Fusion
    from fuserc.dialects.hir import Hir

    dialect = name.split(".", 1)[0]
    docs = {"fusion": (Fusion, "docs/language.md"), "hir": (Hir, "docs/hir.md")}
    if dialect not in docs:
        return f"unknown op '{name}': fuserc reads the dialects builtin, func, fusion (docs/language.md) and hir (docs/hir.md)"
    known = sorted(op.name.removeprefix(f"{dialect}.") for op in docs[dialect][0].operations)
    close = difflib.get_close_matches(name.removeprefix(f"{dialect}."), known, n=1, cutoff=0.8)
    hint = f" (did you mean '{dialect}.{close[0]}'?)" if close else ""
    listing = ", ".join(known)
    return f"unknown op '{name}'{hint}; the {dialect} ops are {listing} ({docs[dialect][1]})"


def _parse_error(e: ParseError) -> Diagnostic:
    loc = e.span.get_location()
    context = e.span.print_with_context().split("\n", 1)[1].rstrip("\n")
    return Diagnostic(e.msg, Location(loc.file, loc.line, loc.col), context)


def parse(
    text: str, filename: str = "<stdin>", ctx: Context | None = None, meshes: Mapping[str, tuple[int, ...]] | None = None
) -> ModuleOp:
    """Parse and verify a module; every failure is a located Diagnostic.
    `meshes` gives declared meshes new shapes before verification
    (`resize_meshes`)."""
    check_nesting(text, filename)
    parser: _LocatingParser | None = None
    try:
        parser = _LocatingParser(ctx or make_context(), text, filename)
        module = parser.parse_module()
    except ParseError as e:
        raise _parse_error(e) from None
    except RecursionError:  # deep in a way the bracket count does not see
        where = None
        if parser is not None:
            loc = parser._current_token.span.get_location()
            where = Location(filename, loc.line, loc.col)
        raise Diagnostic("input nested too deeply to parse", where) from None
    if meshes:
        resize_meshes(module, meshes)
    try:
        verify(module)
    except Diagnostic as d:
        raise with_context(d, text) from None
    return module


def with_context(d: Diagnostic, text: str) -> Diagnostic:
    """`d` with the source line and caret of its location in `text` (the
    input it was found in), when it has none."""
    if d.context or d.loc is None:
        return d
    context = source_context(text, d.loc)
    return Diagnostic(d.message, d.loc, context) if context else d


def resize_meshes(module: ModuleOp, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Give the named meshes new shapes, with devices 0..n-1 (`--mesh
    tp=2`): one program, written for a mesh of 4, runs on jobs of 1 and 2
    ranks. Shardings that no longer divide are the verifier's diagnostics."""
    from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, i64

    from fuserc.dialects.fusion import MeshOp

    declared = {op.sym_name.data: op for op in module.ops if isinstance(op, MeshOp)}
    for name, shape in shapes.items():
        op = declared.get(name)
        if op is None:
            known = ", ".join(f"@{n}" for n in declared) or "none"
            raise Diagnostic(f"--mesh {name}=...: the program declares no mesh @{name} (it declares {known})")
        op.properties["shape"] = ArrayAttr([IntegerAttr(n, i64) for n in shape])
        op.properties.pop("devices", None)


def mesh_option(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=SHAPE` of `--mesh` (`tp=2`, `grid=2x4`); ValueError if malformed."""
    m = re.fullmatch(r"@?([A-Za-z_][\w$.-]*)=(\d+(?:x\d+){0,2})", text.strip(), re.ASCII)
    if m is None:
        raise ValueError(f"expected NAME=SHAPE (tp=2, grid=2x4), got {text!r}")
    from fuserc.sharding import MAX_MESH_DEVICES

    if any(len(n) > MAX_INT_DIGITS for n in m.group(2).split("x")):
        raise ValueError(f"a mesh has at most {MAX_MESH_DEVICES} devices, got an axis of more than {MAX_INT_DIGITS} digits")
    shape = tuple(int(n) for n in m.group(2).split("x"))
    if 0 in shape:
        raise ValueError(f"a mesh has at least one device per axis, got {text!r}")
    if math.prod(shape) > MAX_MESH_DEVICES:
        raise ValueError(f"a mesh has at most {MAX_MESH_DEVICES} devices, got {text!r} ({math.prod(shape)})")
    return m.group(1), shape


def check_nesting(text: str, filename: str) -> None:
    """A Diagnostic at the first bracket deeper than MAX_NESTING (brackets
    in strings and comments, and the `>` of `->`, do not count)."""
    depth = 0
    for m in _NESTING_TOKENS.finditer(text):
        tok = m.group(0)
        if tok in _OPENERS:
            depth += 1
            if depth > MAX_NESTING:
                start = m.start()
                line = text.count("\n", 0, start) + 1
                col = start - (text.rfind("\n", 0, start) + 1) + 1
                raise Diagnostic(
                    f"input nested more than {MAX_NESTING} levels deep (brackets (), [], {{}}, <>): "
                    "fuserc's limit",
                    Location(filename, line, col),
                )
        elif depth and tok in _CLOSERS:
            depth -= 1


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
    """Verify every op; the first failure becomes a Diagnostic at its op.

    Programs repeat their ops (layer after layer, chunk after chunk): an op
    is verified once per signature (`_Signatures`), the inputs its verifier
    reads, so that verifying is linear in the number of distinct ops, not a
    constant factor over every op. The signatures verified are kept with
    the module object (`_VERIFIED`): verifying it again after a pass
    verifies only the ops the pass made different. What no signature holds
    is checked at every op in one walk: each operand is defined before its
    use, in the use's block or an enclosing one inside the nearest op
    isolated from above (a function)."""
    signature = getattr(module, _VERIFIED, None)
    if signature is None:
        signature = _Signatures()
        setattr(module, _VERIFIED, signature)
    signature.scopes.clear()  # ops may have moved since: their symbol tables are looked up again
    signature.keys.clear()
    _Verification(signature).op(module, {})


class _Verification:
    """One walk of `verify` over a module, in program order (an op before
    the ops in its regions)."""

    def __init__(self, signature: _Signatures):
        from fuserc.dialects.hir import AllocOp, is_host_program, verify_discardable
        from fuserc.passes.plan_memory import check_storage

        self.signature = signature
        self.verified, self.keys = signature.verified, signature.keys
        self.sites: dict = {}
        self.alloc_op, self.is_host_program, self.verify_discardable, self.check_storage = AllocOp, is_host_program, verify_discardable, check_storage
        """What the walk calls, imported once per walk, not per op (the dialects import this module)."""
        self.stored: list[Operation] = []
        """The hir.allocs with a `storage` number met so far in the host program walked."""

    def op(self, op: Operation, visible: dict[int, set[int]]) -> None:
        """Verify `op` and then its regions; `visible`: per enclosing block
        (those inside the nearest op isolated from above), the ops before
        the one that encloses `op`, and its own block's ops before `op`
        (by id: an op's hash is a Python call)."""
        cls = type(op)
        host = False
        try:
            _defined_before_use(op, visible)
            if _is_symbol_table(cls):
                _verify_unique_symbols(op)
            if op.regions or op._successors:
                key = self.signature.of(op)
            else:  # an op without regions: its signature (found already where its parent is a launch's)
                key = self.keys.get(id(op)) or self.signature(op)
            if key is None or key not in self.verified:
                op.verify(verify_nested_ops=False)
                self.verify_discardable(op)
                if key is not None:
                    self.verified.add(key)
            if cls is self.alloc_op:
                op.verify_sites(self.sites)
                if op.storage_attr is not None:  # type: ignore[attr-defined]
                    self.stored.append(op)  # type: ignore[arg-type]
            elif cls is FuncOp:
                _verify_func_signature(op)  # type: ignore[arg-type]
                _verify_one_block(op)  # type: ignore[arg-type]
                host = self.is_host_program(op)  # type: ignore[arg-type]
        except VerifyException as e:
            raise Diagnostic(f"'{op.name}' op {e}", location_of(op)) from None
        if not op.regions:
            return
        outer = {} if _is_isolated(cls) else visible
        if host:
            stored, self.stored = self.stored, []
        for region in op.regions:
            for block in region.blocks:
                here: set[int] = set()
                inner = {**outer, id(block): here}
                child = block._first_op  # `block.ops` without its iterator (this walk changes nothing)
                while child is not None:
                    self.op(child, inner)
                    here.add(id(child))
                    child = child._next_op
        if host:
            # Its `storage` numbers, once its ops are verified, from the
            # allocations this walk met (not a walk of its own).
            try:
                self.check_storage(op, self.stored)  # type: ignore[arg-type]
            except VerifyException as e:
                raise Diagnostic(f"'{op.name}' op {e}", location_of(op)) from None
            self.stored = stored


def _defined_before_use(op: Operation, visible: Mapping[int, set[int]]) -> None:
    """Each operand of `op` is defined before its use: by an op before it
    in its block or before the op enclosing it in an enclosing block, or
    it is an argument of one of those blocks; all inside the nearest op
    isolated from above (xDSL resolves forward references without
    checking)."""
    for i, value in enumerate(op._operands):
        if type(value) is OpResult:
            seen = visible.get(id(value.op.parent))
            if seen is not None and id(value.op) in seen:
                continue
        elif isinstance(value, BlockArgument) and id(value.block) in visible:
            continue
        name = f" (%{value.name_hint})" if value.name_hint else ""
        raise VerifyException(f"operand #{i}{name} is used before its definition")


_SYMBOL_TABLES: dict[type[Operation], bool] = {}

_VERIFIED = "_fuserc_verified"
"""The attribute of a module object holding the signatures of its ops
verified so far (`verify`): it lives and goes with the module."""


def _is_symbol_table(cls: type[Operation]) -> bool:
    """Whether ops of `cls` are symbol tables (xDSL's trait lookup, once
    per class)."""
    known = _SYMBOL_TABLES.get(cls)
    if known is None:
        known = _SYMBOL_TABLES[cls] = cls.has_trait(SymbolTable)
    return known


class ClassTest:
    """`isinstance(x, classes)`, decided once per class of `x`: xDSL's ops
    and attributes are ABCs, whose isinstance check is a Python call each
    time it misses, and hot walks test thousands of ops against the same
    few classes."""

    def __init__(self, classes: type | tuple[type, ...]):
        self.classes = classes
        self.known: dict[type, bool] = {}

    def __call__(self, x: object) -> bool:
        cls = type(x)
        known = self.known.get(cls)
        if known is None:
            known = self.known[cls] = issubclass(cls, self.classes)
        return known


def walk(op: Operation | Region) -> list[Operation]:
    """`op` and the ops nested in it (a region: its ops and theirs), in the
    order of xDSL's `walk()` (an op before the ops of its regions), as a
    list taken now: xDSL's walk nests a generator per level and op, and the
    passes walk every op of a program many times, most often an op without
    regions."""
    out: list[Operation] = []
    if type(op) is Region:
        _walk_region(op, out)
    elif op.regions:
        out.append(op)
        for region in op.regions:
            _walk_region(region, out)
    else:
        out.append(op)
    return out


def _walk_region(region: Region, out: list[Operation]) -> None:
    block = region._first_block
    while block is not None:
        op = block._first_op
        while op is not None:
            out.append(op)
            for inner in op.regions:
                _walk_region(inner, out)
            op = op._next_op
        block = block._next_block


_ISOLATED: dict[type[Operation], bool] = {}


def _is_isolated(cls: type[Operation]) -> bool:
    """Whether ops of `cls` are isolated from above (a function: its ops
    use no value defined outside it), once per class."""
    known = _ISOLATED.get(cls)
    if known is None:
        known = _ISOLATED[cls] = cls.has_trait(IsolatedFromAbove)
    return known


class Numbering:
    """Attributes numbered by value, each object hashed once: an attribute's
    hash walks all of it (a tensor type's shape, element type and sharding)
    and is not kept, so keys of ops' types are built of these numbers.
    `kept` holds each object numbered by its id, so that the id stays its
    own while the numbers are used."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.kept: list[Attribute] = []
        self.numbers: dict[Attribute, int] = {}

    def __call__(self, a: Attribute) -> int:
        n = self.ids.get(id(a))
        if n is None:
            n = self.ids[id(a)] = self.numbers.setdefault(a, len(self.numbers))
            self.kept.append(a)
        return n

    def signature(self, op: Operation) -> tuple:
        """What an op's local compute and reshards depend on: its name,
        operand and result types (shardings included) and properties."""
        ids = self.ids
        key: list = [op.name]
        for v in (*op._operands, None, *op.results):  # `op.operands` views this tuple
            if v is None:
                key.append(None)
                continue
            n = ids.get(id(v.type))
            key.append(self(v.type) if n is None else n)
        key.append(None)
        for name, value in op.properties.items():
            key += (name, self(value))
        return tuple(key)


class _Signatures:
    """The signature of an op without regions: what its verifier reads
    (its class, types, properties and attributes but those its class lists
    in `SIGNATURE_IGNORES`, checked elsewhere; what defines each operand,
    an op or a block argument; its parent's kind; whether it ends its
    block; the symbol table its symbols, meshes, resolve in), with its
    attributes numbered (`Numbering`)."""

    def __init__(self) -> None:
        self.scopes: dict[int, int] = {}
        """By id of a parent op (None's too), the number of its symbol table (`tables`)."""
        self.tables: dict[int, int] = {}
        """By id, each symbol table op met, numbered: a signature holds the
        number, not the op (whose hash is a Python call)."""
        self.kept: list[Operation | None] = []
        """The tables numbered, so that their ids stay theirs while the numbers are used."""
        self.number = Numbering()
        self.ids = self.number.ids
        self.verified: set[tuple] = set()
        self.keys: dict[int, tuple | None] = {}
        """By op id, the signatures of one verification (an op's also serves its parent's)."""

    def of(self, op: Operation) -> tuple | None:
        """The signature of `op`, or None where it has successors, is a
        symbol table, or has regions holding ops with regions (verified
        each time). An op isolated from above (a function) is verified
        once per its own signature and its blocks' argument types: what
        it reads of its body beyond them, that no op in it uses a value
        from outside, `verify`'s walk checks at every op. An op whose
        regions hold only ops without regions (a `hir.launch`, a `hir.for`
        over them) is verified once per its own signature and its blocks':
        their argument types, each op's signature and, per operand, where
        in the block it is defined (an argument, an earlier op's result,
        or outside)."""
        key = self.keys.get(id(op), False)
        if key is not False:
            return key  # type: ignore[return-value]
        cls = type(op)
        if op._successors:  # `op.successors` makes a view of this tuple
            key = None
        elif not op.regions:
            key = self(op)
        elif _is_symbol_table(cls):
            key = None
        elif _is_isolated(cls):
            args = tuple(tuple(self.number(a.type) for a in b.args) for r in op.regions for b in r.blocks)
            key = (self(op), args, "isolated")
        else:
            parts: list = [self(op)]
            for region in op.regions:
                for block in region.blocks:
                    where: dict[int, tuple] = {id(a): ("a", a.index) for a in block.args}  # by id: a value's hash is a Python call
                    parts.append(tuple(self.number(a.type) for a in block.args))
                    for k, child in enumerate(block.ops):
                        if child.regions or child._successors:
                            self.keys[id(op)] = None
                            return None
                        ck = self.keys[id(child)] = self(child)
                        parts.append((ck, tuple(where.get(id(v), "x") for v in child._operands)))
                        for r in child.results:
                            where[id(r)] = (k, r.index)
                    parts.append(None)
            key = tuple(parts)
        self.keys[id(op)] = key
        return key

    def scope(self, parent: Operation | None) -> int:
        """The number of the symbol table that `parent` is or is inside."""
        n = self.scopes.get(id(parent))
        if n is None:
            scope = parent
            while scope is not None and not _is_symbol_table(type(scope)):
                scope = scope.parent_op()
            n = self.tables.get(id(scope))
            if n is None:
                n = self.tables[id(scope)] = len(self.kept)
                self.kept.append(scope)
            self.scopes[id(parent)] = n
        return n

    def __call__(self, op: Operation) -> tuple:
        ids, number = self.ids, self.number
        cls = type(op)
        ignored = _IGNORED.get(cls)
        if ignored is None:
            ignored = _IGNORED[cls] = frozenset(getattr(cls, "SIGNATURE_IGNORES", ()))
        key: list = [cls]
        append = key.append
        # The fields behind xDSL's properties (`op.operands` views `_operands`,
        # `v.type` reads `_type`): the hot path of every verification.
        for v in op._operands:
            t = v._type
            n = ids.get(id(t))
            append(number(t) if n is None else n)
            append(type(v.op) if type(v) is OpResult else Block)
        append(None)
        for r in op.results:
            t = r._type
            n = ids.get(id(t))
            append(number(t) if n is None else n)
        append(None)
        for name, value in op.properties.items():
            if name not in ignored:
                n = ids.get(id(value))
                append(name)
                append(number(value) if n is None else n)
        append(None)
        for name, value in op.attributes.items():
            n = ids.get(id(value))
            append(name)
            append(number(value) if n is None else n)
        block = op.parent
        if block is None:
            append(type(None))
            append(False)
            append(self.scope(None))
        else:
            region = block.parent
            parent = region.parent if region is not None else None
            append(type(parent))
            append(op._next_op is None)
            n = self.scopes.get(id(parent))
            append(self.scope(parent) if n is None else n)
        return tuple(key)


_IGNORED: dict[type[Operation], frozenset[str]] = {}
"""Each op class's `SIGNATURE_IGNORES`, read once per class."""


def _verify_unique_symbols(table: Operation) -> None:
    """A symbol defined twice is reported at the second definition (xDSL's
    own check would report it at the enclosing module)."""
    seen: dict[str, Operation] = {}
    for region in table.regions:
        for block in region.blocks:
            for op in block.ops:
                name = op.get_attr_or_prop("sym_name")
                if not isinstance(name, StringAttr):
                    continue
                if name.data in seen:
                    first = location_of(seen[name.data])
                    where = f" (first defined at {first})" if first else ""
                    raise Diagnostic(
                        f"'{op.name}' op redefinition of symbol named '{name.data}'{where}",
                        location_of(op),
                    )
                seen[name.data] = op


def _verify_func_signature(func: FuncOp) -> None:
    """Shardings in a function's signature (also of a declaration without
    a body) name a known mesh and fit their tensors; a bad one on an
    argument is reported at the argument."""
    from fuserc.dialects.fusion import verify_sharding_types

    ftype = func.function_type
    args = func.body.blocks[0].args if func.body.blocks else ()
    seen: set[Attribute] = set()  # a backward's saved tensors repeat a few types: each is checked once
    for i, t in enumerate(ftype.inputs.data):
        if t in seen:
            continue
        seen.add(t)
        try:
            verify_sharding_types(func, [t])
        except VerifyException as e:
            if i < len(args):
                name = f" %{args[i].name_hint}" if args[i].name_hint else ""
                raise Diagnostic(f"'{func.name}' op argument #{i}{name}: {e}", location_of(args[i])) from None
            raise
    verify_sharding_types(func, list(dict.fromkeys(ftype.outputs.data)))


def _verify_one_block(func: FuncOp) -> None:
    """A function body is one block, not empty: fuserc has no branches, so
    a second block could never run (passes read `func.body.block`).
    Reported where the second block begins."""
    blocks = list(func.body.blocks)
    if len(blocks) == 1 and blocks[0].last_op is None:  # `{ }`: xDSL accepts a block without a terminator
        raise Diagnostic(
            f"'func.func' op @{func.sym_name.data} has an empty body, without func.return (a declaration has no braces)",
            location_of(func),
        )
    if len(blocks) > 1:
        second = blocks[1]
        where = location_of(second.first_op) or location_of(func)
        raise Diagnostic(
            f"'func.func' op @{func.sym_name.data} has {len(blocks)} blocks; a function is one block "
            "(there are no branches), and its second block begins here",
            where,
        )


class _Printer(Printer):
    """xDSL's printer, printing each distinct tensor type once (programs
    repeat a few types on every op) and writing text without newlines
    straight to the stream."""

    def __init__(self, stream: io.StringIO, generic: bool) -> None:
        super().__init__(stream=stream, print_generic_format=generic)
        self._types: dict[TensorType, str] = {}
        self._texts: dict[int, str] = {}
        """By id, each tensor type object's text (an attribute's hash walks all of it)."""
        self._kept: list[TensorType] = []
        """The objects `_texts` holds, so that their ids stay theirs while it prints."""
        self._write = stream.write

    def print_string(self, text: str, *, indent: int | None = None) -> None:
        if "\n" in text:
            super().print_string(text, indent=indent)
            return
        self._current_column += len(text)
        self._write(text)

    def print_bytes_literal(self, bytestring: bytes) -> None:
        """xDSL's (each byte as itself, `\\\\`, or `\\XX` where it is not
        printable ASCII or is a quote), written at once: xDSL writes the
        literal byte by byte, and a host program has a string per
        allocation (its site) and communication (its reshard)."""
        if _PLAIN_BYTES.fullmatch(bytestring):
            text = f'"{bytestring.decode("ascii")}"'
        else:
            text = '"' + "".join(_BYTE_TEXTS[b] for b in bytestring) + '"'
        self._current_column += len(text)
        self._write(text)

    def print_ssa_value(self, value: SSAValue) -> str:
        """xDSL's, looking a named value up once (a value's hash is a Python call)."""
        name = self._ssa_values.get(value)
        if name is None:
            return super().print_ssa_value(value)
        self.print_string(f"%{name}")
        return name

    def print_op(self, op: Operation) -> None:
        """xDSL's, with what it asks of each op's class (a search of its
        traits, an ABC check, whether it prints itself) answered once per
        class: an op that opens no scope prints its results, its name and
        its custom form, as xDSL's does. Anything else is xDSL's."""
        cls = type(op)
        custom = _CUSTOM_FORMAT.get(cls)
        if custom is None:
            custom = _CUSTOM_FORMAT[cls] = (
                not cls.get_traits_of_type(IsolatedFromAbove) and not issubclass(cls, UnregisteredOp) and Operation.print is not cls.print
            )
        if not custom or self.print_generic_format or self.print_debuginfo or self.diagnostic.op_messages:
            super().print_op(op)
            return
        if op.results:
            self._print_results(op)
        self.print_string(op.name)
        op.print(self)

    def print_attribute(self, attribute: Attribute) -> None:
        text = self._texts.get(id(attribute))
        if text is None:
            if not isinstance(attribute, TensorType):
                super().print_attribute(attribute)
                return
            text = self._types.get(attribute)
            if text is None:
                out = io.StringIO()
                Printer(stream=out).print_attribute(attribute)
                text = self._types[attribute] = out.getvalue()
            self._texts[id(attribute)] = text
            self._kept.append(attribute)
        self.print_string(text)


_BYTE_TEXTS = tuple("\\\\" if b == 0x5C else f"\\{b:02X}" if b < 0x20 or b > 0x7E or b == 0x22 else chr(b) for b in range(256))
"""How `_Printer.print_bytes_literal` writes each byte (as xDSL's does)."""
_PLAIN_BYTES = re.compile(rb"[\x20\x21\x23-\x5b\x5d-\x7e]*")
"""Bytes that are themselves there (printable ASCII but the quote and the backslash)."""

_CUSTOM_FORMAT: dict[type[Operation], bool] = {}
"""Per op class, whether `_Printer.print_op` prints it itself: it opens no
scope (is not isolated from above), is registered and has a custom form."""


def to_text(op: Operation, generic: bool = False) -> str:
    out = io.StringIO()
    printer = _Printer(out, generic)
    printer.print_op(op)
    return out.getvalue().rstrip("\n") + "\n"


COMPILE_GC_THRESHOLD = (0, 0, 0)
"""Python's collector thresholds while IR is built (`compiling`): none runs."""


@contextmanager
def compiling() -> Iterator[None]:
    """Python's cyclic garbage collector kept from running while a program
    compiles, then set back. A compile makes some hundred thousand
    long-lived objects (ops, types, attributes), and every collection scans
    those of its generations again: at the default generation-0 threshold
    (700 allocations) some 10% of a compile's CPU time; at rarer
    thresholds the generation-1 and full collections still cost 10-15% of
    the 48-layer GPT model's compile. They free nothing worth it: IR has
    few cycles, and the peak memory of that compile, or of the 10,000-op
    chain's, is the same without them."""
    old = gc.get_threshold()
    gc.set_threshold(*COMPILE_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)

"""Located diagnostics: what a user sees for a bad program or bad input.

Every user-facing failure is a `Diagnostic`; the CLI prints `render()` and
exits 1, the Python API raises it as is. Nothing else reaches a user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # xDSL is imported where a program is read, not by every importer (the `fuserc` command's start)
    from xdsl.ir import Operation, SSAValue


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Diagnostic(Exception):
    """A user-facing error, optionally at a source location."""

    def __init__(self, message: str, loc: Location | None = None, context: str = ""):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.context = context  # source line and caret, when known

    def render(self) -> str:
        head = f"{self.loc}: error: {self.message}" if self.loc else f"error: {self.message}"
        return head + ("\n" + self.context if self.context else "")


def location_of(op: Operation | SSAValue | None) -> Location | None:
    """The source location of `op`, or of the nearest located ancestor; of
    a value, its own (a function argument's name) or its op's."""
    from xdsl.dialects.builtin import FileLineColLoc
    from xdsl.ir import Operation, SSAValue

    if isinstance(op, SSAValue):
        loc = getattr(op, "location", None)
        if isinstance(loc, FileLineColLoc):
            return Location(loc.filename.data, loc.line.data, loc.column.data)
        op = op.owner if isinstance(op.owner, Operation) else op.owner.parent_op()
    while op is not None:
        loc = op.location
        if isinstance(loc, FileLineColLoc):
            return Location(loc.filename.data, loc.line.data, loc.column.data)
        op = op.parent_op()
    return None


def error_at(op: Operation | None, message: str) -> Diagnostic:
    """A diagnostic located at `op` (passes raise these for user errors)."""
    return Diagnostic(message, location_of(op))

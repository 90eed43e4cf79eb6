"""`--verify-diagnostics`: check produced diagnostics against
`// expected-error {{...}}` comments, as mlir-opt does.

    // expected-error {{msg}}          on this line
    // expected-error @+1 {{msg}}      on the next line (@-N, @above, @below)

A diagnostic matches when its line is the expected one and its message
contains the expected text. Every expectation must be met and no other
diagnostic produced."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fuserc.diagnostics import Diagnostic

_EXPECT = re.compile(r"expected-error\s*(@(?:[+-]\d+|above|below))?\s*\{\{(.*?)\}\}")


@dataclass
class Expectation:
    line: int
    text: str
    matched: bool = False


def expectations(text: str, first_line: int = 1) -> list[Expectation]:
    """Expectations in a chunk whose first line is `first_line`."""
    out = []
    for i, line in enumerate(text.split("\n")):
        lineno = first_line + i
        for m in _EXPECT.finditer(line):
            where = m.group(1)
            target = lineno
            if where == "@above":
                target = lineno - 1
            elif where == "@below":
                target = lineno + 1
            elif where:
                target = lineno + int(where[1:])
            out.append(Expectation(target, m.group(2)))
    return out


def check(expected: list[Expectation], produced: list[Diagnostic], filename: str) -> list[str]:
    """Problems: unexpected diagnostics and unmet expectations."""
    problems = []
    for d in produced:
        hit = next(
            (e for e in expected if not e.matched and d.loc and d.loc.line == e.line and e.text in d.message),
            None,
        )
        if hit:
            hit.matched = True
        else:
            problems.append(f"unexpected {d.render()}")
    for e in expected:
        if not e.matched:
            problems.append(f'{filename}:{e.line}: error: expected error "{e.text}" was not produced')
    return problems

"""docs/language.md cannot rot: every ```mlir block is a complete program
that parses, verifies and lowers with the default pipeline, and every op of
the dialect is documented there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fuserc import ir
from fuserc import pipeline as pl
from fuserc.dialects.fusion_ops import TENSOR_OPS

DOC = Path(__file__).resolve().parents[2] / "docs" / "language.md"
TEXT = DOC.read_text()
BLOCKS = re.findall(r"```mlir\n(.*?)```", TEXT, re.S)


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_compiles(index: int) -> None:
    ctx = ir.make_context()
    module = ir.parse(BLOCKS[index], f"{DOC.name}#{index}", ctx)
    pl.PassRunner(pl.build("default")).run(ctx, module)


@pytest.mark.parametrize("op", sorted(c.name for c in TENSOR_OPS))
def test_every_op_is_documented(op: str) -> None:
    """Its name, as written in the syntax lines or the prose (`fusion.sum`
    or `sum` in backquotes)."""
    short = op.removeprefix("fusion.")
    assert op in TEXT or f"`{short}`" in TEXT, op

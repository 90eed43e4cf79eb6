"""Passes for testing the `fuserc opt` driver itself: what it does around a
pass (options, --print-ir-after-all, --time-passes, verification after each
pass, a pass's diagnostics) does not depend on the compiler's real passes."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from fuserc.diagnostics import error_at
from fuserc.dialects.fusion import FusionOp


@dataclass(frozen=True)
class TestTag(ModulePass):
    """Tags the module with `test.tag = LABEL` (LABEL is a pass option)."""

    name = "test-tag"
    label: str = "none"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        op.attributes["test.tag"] = StringAttr(self.label)


@dataclass(frozen=True)
class TestBreak(ModulePass):
    """Leaves invalid IR: the first fusion op's result loses its last dimension."""

    name = "test-break"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if isinstance(inner, FusionOp):
                t = inner.results[0].type
                assert isinstance(t, TensorType)
                broken = type(inner).create(
                    operands=inner.operands,
                    result_types=[TensorType(t.element_type, t.get_shape()[:-1])],
                    properties=dict(inner.properties),
                    attributes=dict(inner.attributes),
                )
                broken.location = inner.location
                Rewriter.replace_op(inner, broken)
                return


@dataclass(frozen=True)
class TestError(ModulePass):
    """Reports a user error at the first fusion op, as a real pass would."""

    name = "test-error"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if isinstance(inner, FusionOp):
                raise error_at(inner, f"test-error at '{inner.name}'")


@dataclass(frozen=True)
class TestXdslFailure(ModulePass):
    """Fails the way xDSL's own passes do (PassFailedException)."""

    name = "test-xdsl-failure"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise PassFailedException("test-xdsl-failure could not apply")

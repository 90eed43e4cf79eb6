"""Diagnostics point where the mistake is, and say what to write: a
missing op type at the op, an unclosed region at its `{`, a result type
contradicting a use at the op, verifier errors with their source line, a
keyword that is an attribute, a mesh name without @, a function that
autodiff makes, a misspelt pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import fuserc.cli as cli
from fuserc.diagnostics import Diagnostic
from fuserc.ir import parse

ROOT = Path(__file__).resolve().parents[2]
T = "tensor<4x4xf32>"


def _error(text: str) -> str:
    with pytest.raises(Diagnostic) as e:
        parse(text, "p.mlir")
    return e.value.render()


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        (  # the op's `: (types) -> type` is missing: at the op, not at the next line's op
            f"func.func @main(%x: {T}) -> {T} {{\n  %y = fusion.relu %x\n  func.return %y : {T}\n}}\n",
            "p.mlir:2:21: error: expected ': (operand types) -> result type' after fusion.relu's operands\n"
            "  %y = fusion.relu %x\n                    ^",
        ),
        (  # ... also when what follows is not a word
            f"func.func @main(%x: {T}) -> {T} {{\n  %y = fusion.relu %x // the op\n  %z = fusion.relu %y : ({T}) -> {T}\n  func.return %z : {T}\n}}\n",
            "p.mlir:2:21: error: expected ': (operand types) -> result type' after fusion.relu's operands",
        ),
        (  # the closing brace is missing: at the region it leaves open
            f"func.func @main(%x: {T}) -> {T} {{\n  func.return %x : {T}\n",
            f"p.mlir:1:57: error: this region is not closed: '}}' is missing before the end of the input\n"
            f"func.func @main(%x: {T}) -> {T} {{\n" + " " * 56 + "^",
        ),
        (  # a result type that later uses contradict: the op's
            f"func.func @main(%x: {T}) -> {T} {{\n  %y = fusion.relu %x : ({T}) -> tensor<4x8xf32>\n"
            f"  %z = fusion.add %y, %x : ({T}, {T}) -> {T}\n  func.return %z : {T}\n}}\n",
            "p.mlir:2:3: error: fusion.relu gives %y the type tensor<4x8xf32>, but 3:19 uses it as tensor<4x4xf32>: "
            "one of the two types is wrong\n  %y = fusion.relu",
        ),
        (  # the verifier's errors show the line, as the parser's
            f"func.func @main(%x: {T}, %w: tensor<5xf32>) -> {T} {{\n"
            f"  %y = fusion.layer_norm %x, %w dims = [1] : ({T}, tensor<5xf32>) -> {T}\n  func.return %y : {T}\n}}\n",
            "p.mlir:2:3: error: 'fusion.layer_norm' op weight has shape [5], expected [4] (the normalized dimensions' extents)\n"
            "  %y = fusion.layer_norm %x, %w dims = [1]",
        ),
        (
            f"func.func @main(%x: {T}) -> {T} {{\n  %y = fusion.gelu %x approximate = \"tanh\" : ({T}) -> {T}\n  func.return %y : {T}\n}}\n",
            "p.mlir:2:23: error: unknown keyword 'approximate' for fusion.gelu (keywords: none); 'approximate' is an attribute: "
            "write it in the attribute dictionary, fusion.gelu ... {approximate = ...} : ...",
        ),
        (
            f"fusion.mesh @tp shape = [2]\nfunc.func @main(%x: tensor<4x4xf32, #fusion.sharding<tp, [DIDx, -]>>) -> {T} {{\n  func.return %x : {T}\n}}\n",
            "p.mlir:2:54: error: expected the mesh's symbol name: mesh names start with @ (@tp, not tp)",
        ),
    ],
)
def test_located_where_the_mistake_is(text: str, rendered: str) -> None:
    got = _error(text)
    assert got.startswith(rendered), got
    assert got.count("fusion.layer_norm") <= 2, got  # the op named once in the message


def test_the_type_still_follows_on_its_own_line() -> None:
    """An op written over several lines, its keyword on the next: read."""
    parse(f"func.func @main(%x: {T}) -> tensor<4xf32> {{\n  %y = fusion.sum %x\n     dims = [1] : ({T}) -> tensor<4xf32>\n"
          "  func.return %y : tensor<4xf32>\n}\n", "p.mlir")  # fmt: skip


def test_entry_made_by_autodiff_and_misspelt_pass() -> None:
    result = CliRunner().invoke(cli.main, ["run", str(ROOT / "examples" / "sp_mlp.mlir"), "--entry", "main_bwd", "--mesh", "tp=1"])
    assert result.exit_code == 1
    assert "no function @main_bwd to run (functions: @main); @main_bwd is made by the autodiff pass from @main: -p autodiff,default" in result.output
    result = CliRunner().invoke(cli.main, ["opt", "-p", "defualt", str(ROOT / "examples" / "sp_mlp.mlir")])
    assert result.exit_code == 2 and "unknown pass 'defualt' (did you mean 'default'?)" in result.output, result.output

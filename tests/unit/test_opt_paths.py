"""The shortcuts that keep `fuserc opt` fast, each against what it
replaces: the command imports neither the runtime's job machinery nor
torch (`fuserc run` is imported when named), the parser reads each op
signature that ends its line once, the verifier checks a host program's
`storage` numbers from the allocations its own walk met, the printer
prints each tensor type object once, and the collector stays off after a
compile only where the process ends next."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import fuserc.cli as cli
from fuserc.diagnostics import Diagnostic
from fuserc.dialects.fusion import FusionOp
from fuserc.ir import make_context, parse, to_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sp_mlp.mlir"


def test_opt_imports_neither_the_job_machinery_nor_torch() -> None:
    code = (
        "import sys\n"
        "from fuserc.cli import main\n"
        f"try:\n    main(['opt', {str(EXAMPLE)!r}, '-p', 'autodiff,default', '--comm-report', '-o', {os.devnull!r}])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in ('torch', 'numpy', 'fuserc.run_cli', 'fuserc.runtime.job.watchdog', 'fuserc.check', 'fuserc.expected') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_opt_imports_the_lowerings_a_program_needs(tmp_path: Path) -> None:
    """Ring attention's and expert parallelism's lowerings, the pipelines'
    emitter and the pulls' are imported for programs that have such ops or
    sites only (a process compiles their sources where bytecode is not
    cached); a program of them imports them (the lit and e2e tests check
    their output)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from bench_compile import generate
    finally:
        sys.path.pop(0)
    plain = tmp_path / "blocks.mlir"
    plain.write_text(generate(24))
    lowerings = ("fuserc.passes.ring_attention", "fuserc.passes.expert_parallel", "fuserc.passes.stream_emit", "fuserc.passes.host_emit")
    code = (
        "import sys\n"
        "from fuserc.cli import main\n"
        "try:\n    main(['opt', sys.argv[1], '-p', 'default', '-o', sys.argv[2]])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        f"print(sorted(m for m in {lowerings!r} if m in sys.modules))\n"
    )

    def imported(path: Path) -> str:
        out = subprocess.run([sys.executable, "-c", code, str(path), os.devnull], capture_output=True, text=True, cwd=ROOT, check=True)
        return out.stdout.splitlines()[-1]

    assert imported(plain) == "[]"
    for example, needs in (
        ("long_context.mlir", "fuserc.passes.ring_attention"),
        ("moe_layer.mlir", "fuserc.passes.expert_parallel"),
        ("allgather_matmul_large.mlir", "fuserc.passes.stream_emit"),
    ):
        assert needs in imported(ROOT / "examples" / example), example


def test_the_command_imports_xdsl_without_asyncio_and_the_collector_off() -> None:
    """`fuserc` (`entry`) has xDSL in, without asyncio, and the collector
    off when its command starts; asyncio imported after is the whole
    package."""
    code = (
        "import gc, sys\n"
        "import fuserc.cli as cli\n"
        "def command():\n"
        "    import asyncio\n"
        "    async def f():\n        return 3\n"
        "    print(gc.isenabled(), 'xdsl.dialects.builtin' in sys.modules, asyncio.run(f()), asyncio.coroutines.iscoroutinefunction(f))\n"
        "cli.main = command\n"
        "print('asyncio' in sys.modules, flush=True)\n"
        "cli.import_xdsl()\n"
        "print('asyncio' in sys.modules, [m for m in sys.modules if m.startswith('xdsl')] != [], flush=True)\n"
        "cli.entry()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.splitlines() == ["False", "False True", "False True 3 True"]
    imported = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fuserc", "opt", str(EXAMPLE), "-p", "default", "-o", os.devnull],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stderr  # fmt: skip
    names = {line.rsplit("|", 1)[-1].strip() for line in imported.splitlines() if line.startswith("import time:")}
    assert "xdsl.irdl.operations" in names and not {n for n in names if n.split(".")[0] in ("asyncio", "ssl")}


def test_run_turns_the_collector_back_on() -> None:
    gc.disable()
    try:
        got = CliRunner().invoke(cli.main, ["run", str(EXAMPLE), "--warmup", "1"])
        assert got.exit_code == 2 and "--warmup needs --iters" in got.output
        assert gc.isenabled()
    finally:
        gc.enable()


def test_run_is_there_when_named_or_listed() -> None:
    listed = CliRunner().invoke(cli.main, ["--help"])
    assert listed.exit_code == 0 and "  run " in listed.output
    named = CliRunner().invoke(cli.main, ["run", "--help"])
    assert named.exit_code == 0 and "Compile FILE" in named.output


TYPE = "tensor<4x4xf32>"
WIDE = "tensor<4x8xf32>"


def test_each_op_signature_is_read_as_written() -> None:
    """Equal signatures share their type; one with a comment after it, one
    that differs only in its result or in what follows on its line, are
    read as written."""
    text = (
        "fusion.mesh @tp shape = [2]\n"
        f"func.func @f(%a: {TYPE}, %w: tensor<4x8xf32>) -> {WIDE} {{\n"
        f"  %r = fusion.relu %a : ({TYPE}) -> {TYPE}\n"
        f"  %n = fusion.neg %r : ({TYPE}) -> {TYPE}  // a comment\n"
        f"  %t = fusion.tanh %n : ({TYPE}) -> {TYPE}\n"
        f"  %m = fusion.matmul %t, %w : ({TYPE}, tensor<4x8xf32>) -> {WIDE}\n"
        f"  %s = fusion.neg %m : ({WIDE}) -> {WIDE}\n"
        f"  %u = fusion.neg %s : ({WIDE}) -> {WIDE} loc(\"here.py\":7:3)\n"
        f"  func.return %u : {WIDE}\n"
        "}\n"
    )
    module = parse(text, "t.mlir", make_context())
    ops = [op for op in module.walk() if isinstance(op, FusionOp)]
    assert [op.name for op in ops] == ["fusion.relu", "fusion.neg", "fusion.tanh", "fusion.matmul", "fusion.neg", "fusion.neg"]
    assert [str(op.results[0].type) for op in ops] == [TYPE] * 3 + [WIDE] * 3
    assert [len(op.operands) for op in ops] == [1, 1, 1, 2, 1, 1]
    assert str(ops[3].operands[1].type) == "tensor<4x8xf32>"
    assert str(ops[5].location) == 'loc("here.py":7:3)'
    assert to_text(module) == to_text(parse(to_text(module), "again.mlir", make_context()))


def test_a_wrong_signature_is_reported_though_the_same_line_was_read_before() -> None:
    text = (
        "fusion.mesh @tp shape = [2]\n"
        f"func.func @f(%a: {TYPE}) -> {TYPE} {{\n"
        f"  %r = fusion.relu %a : ({TYPE}) -> {TYPE}\n"
        f"  %n = fusion.neg %r, %r : ({TYPE}) -> {TYPE}\n"
        f"  func.return %n : {TYPE}\n"
        "}\n"
    )
    with pytest.raises(Diagnostic, match="fusion.neg has 2 operands but its type lists 1") as e:
        parse(text, "t.mlir", make_context())
    assert e.value.loc is not None and e.value.loc.line == 4


def _host(name: str, second_storage: int) -> str:
    return (
        f"func.func @{name}(%x: tensor<4xf32>) -> tensor<4xf32> attributes {{hir.host}} {{\n"
        f'  %a = hir.alloc "{name}/a" storage 0 : tensor<4xf32>\n'
        f'  %b = hir.alloc "{name}/b" storage {second_storage} : tensor<4xf32>\n'
        "  hir.copy %x, %a : tensor<4xf32>, tensor<4xf32>\n"
        "  hir.copy %a, %b : tensor<4xf32>, tensor<4xf32>\n"
        "  hir.copy %b, %x : tensor<4xf32>, tensor<4xf32>\n"
        "  func.return %x : tensor<4xf32>\n"
        "}\n"
    )


def test_storage_is_checked_per_host_program() -> None:
    """Each host program's storage numbers are checked against its own
    allocations: @f's buffers used together with separate numbers pass,
    @g's with one number fail at @g's second allocation."""
    parse(_host("f", 1) + _host("g", 1), "t.mlir", make_context())
    with pytest.raises(Diagnostic, match='hir.alloc "g/b" storage 0: in use on the device at the same time as "g/a"') as e:
        parse(_host("f", 1) + _host("g", 0), "t.mlir", make_context())
    assert e.value.loc is not None and e.value.loc.line == 11


def test_tensor_types_print_as_each_object_says() -> None:
    """A printer that prints each tensor type object once: two printers, one
    after the other, of modules whose types are other objects (ids may come
    back once the first module is gone), print each as its own text."""
    text = EXAMPLE.read_text()
    once = to_text(parse(text, str(EXAMPLE), make_context()))
    gc.collect()
    half = text.replace("xf32", "xf16")
    assert to_text(parse(half, str(EXAMPLE), make_context())) == once.replace("xf32", "xf16")
    assert to_text(parse(once, "again.mlir", make_context())) == once


def test_the_collector_stays_off_after_opt_only_where_the_process_ends() -> None:
    from fuserc.runtime.job.mpi_env import ENDS_PROCESS

    assert gc.isenabled()
    runner = CliRunner()
    assert runner.invoke(cli.main, ["opt", str(EXAMPLE), "-p", "default", "-o", os.devnull]).exit_code == 0
    assert gc.isenabled()
    ENDS_PROCESS[0] = True
    try:
        assert runner.invoke(cli.main, ["opt", str(EXAMPLE), "-p", "default", "-o", os.devnull]).exit_code == 0
        assert not gc.isenabled()
    finally:
        ENDS_PROCESS[0] = False
        gc.enable()


def test_hir_ops_made_without_irdls_builder_are_the_ones_it_makes() -> None:
    """An op of a flat definition skips IRDL's builder (`HirOp.__init__`):
    it has the operands, result types and properties the builder gives it;
    one with an optional operand still goes through the builder (its
    segment sizes)."""
    from xdsl.dialects.builtin import IndexType, TensorType, f32
    from xdsl.irdl import IRDLOperation

    from fuserc.dialects import hir

    buf = hir.AllocOp("t/x", TensorType(f32, [8, 4]))
    index = hir.ConstantOp(1)
    stream = hir.StreamForOp(index, 2)
    made = [hir.ChunkOp(buf, index, 0, 4), stream, hir.SetCurrentStreamOp(stream), hir.SyncStreamOp(stream), hir.AddModOp(index, index, 3)]
    for op in made:
        cls = type(op)
        built = cls.__new__(cls)
        IRDLOperation.__init__(
            built, operands=list(op.operands), result_types=[r.type for r in op.results], properties=dict(op.properties)
        )
        assert (list(built.operands), [r.type for r in built.results], built.properties, built.attributes) == (
            list(op.operands), [r.type for r in op.results], op.properties, op.attributes
        ), cls.__name__
        op.verify()
    assert isinstance(index.results[0].type, IndexType)
    out = hir.AllocOp("t/o", TensorType(f32, [8, 8]))
    w = hir.AllocOp("t/w", TensorType(f32, [4, 8]))
    acc = hir.AllocOp("t/a", TensorType(f32, [8, 8]))
    assert len(hir.MatmulOp(buf, w, out, acc).operands) == 4 and len(hir.MatmulOp(buf, w, out).operands) == 3


def test_shared_attributes_are_the_ones_made_apart() -> None:
    """`i64_attr`, `int_array` and the hir ops' result types give one
    object per value, equal to the one made anew; a bool, which equals its
    int, keeps its own attribute."""
    from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, TensorType, f32, i64

    from fuserc.dialects import hir
    from fuserc.dialects.fusion_mesh import _int_array, i64_attr

    assert i64_attr(3) is i64_attr(3) and i64_attr(3) == IntegerAttr(3, i64)
    assert i64_attr(True) is not i64_attr(1)
    assert hir.int_array([1, 2]) is hir.int_array((1, 2)) and hir.int_array([1, 2]) == ArrayAttr([IntegerAttr(1, i64), IntegerAttr(2, i64)])
    assert _int_array([True]) == ArrayAttr([IntegerAttr(True, i64)]) and _int_array([True]) is not _int_array([1])
    buf = hir.AllocOp("t/x", TensorType(f32, [8, 4]))
    index = hir.ConstantOp(1)
    chunk = hir.ChunkOp(buf, index, 0, 4)
    assert chunk.results[0].type == TensorType(f32, [2, 4]) and chunk.results[0].type is hir.ChunkOp(buf, index, 0, 4).results[0].type
    assert hir.TransposeOp(buf).results[0].type == TensorType(f32, [4, 8])


def test_class_test_is_isinstance() -> None:
    from abc import ABC

    from fuserc.ir import ClassTest

    class Base(ABC):
        pass

    class Leaf(Base):
        pass

    class Other:
        pass

    Base.register(Other)
    test, leaf = ClassTest(Base), ClassTest((Leaf, int))
    for x in (Base(), Leaf(), Other(), 3, "s", True):
        assert test(x) == isinstance(x, Base) and leaf(x) == isinstance(x, (Leaf, int)), x
        assert test(x) == isinstance(x, Base)  # the second time from the class's answer


def test_string_literals_print_as_xdsl_prints_them() -> None:
    """The printer writes a string literal at once, each byte as xDSL's
    byte-by-byte printer writes it (printable ASCII as itself, `\\\\`,
    `\\XX` for the quote and the rest)."""
    import io

    from xdsl.printer import Printer

    from fuserc.ir import _Printer

    cases = [bytes([b]) for b in range(256)] + [b"main/0/0", b"DIDx->-", b'a"b\\c\n\td', bytes(range(256)), b"", "é→".encode()]
    for c in cases:
        theirs, ours = io.StringIO(), io.StringIO()
        Printer(stream=theirs).print_bytes_literal(c)
        printer = _Printer(ours, False)
        printer.print_bytes_literal(c)
        assert ours.getvalue() == theirs.getvalue()
        assert printer._current_column == len(theirs.getvalue())

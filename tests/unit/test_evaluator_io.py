"""Around the evaluator: cutting global inputs into shards, assembling
global outputs, --check's comparison, backend selection, failure reports."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fuserc.diagnostics import Diagnostic, Location
from fuserc.dialects.fusion import ShardingAttr
from fuserc.check import CHECK_TOLERANCES, ROUNDING_FACTOR, check_outputs, compare, input_notes, output_labels
from fuserc.runtime.job import io
from fuserc.runtime.backends.backend import make_backend
from fuserc.runtime.evaluator.evaluator import ValueSpec
from fuserc.runtime.job.job import describe, prefixed, who
from fuserc.runtime.job.mpi_env import MpiEnv, mpi_env
from fuserc.dialects.interfaces import element_type
from fuserc.sharding import Mesh, Sharding
from xdsl.dialects.builtin import TensorType


def spec(shape: tuple[int, ...], axes: list[str], mesh: Mesh, partial: str | list[str] | None = None, dtype=torch.float32, index: int = 0) -> ValueSpec:
    sharding = Sharding.from_axes(mesh.name, axes, partial)
    gtype = TensorType(element_type(dtype), shape, ShardingAttr.get(sharding))
    local = sharding.local_shape(shape, mesh)
    return ValueSpec(index, f"argument #{index}", local, dtype, TensorType(element_type(dtype), local), gtype, sharding, mesh)


def test_shard_input_blocks_streams_and_partial() -> None:
    mesh = Mesh("tp", (4,))
    x = torch.arange(64 * 2, dtype=torch.float32).reshape(64, 2)
    s = spec((64, 2), ["DIDx", "-"], mesh)
    torch.testing.assert_close(io.shard_input(x, s, 2), x[32:48])
    st = spec((64, 2), ["Stream(2)*DIDx", "-"], mesh)
    torch.testing.assert_close(io.shard_input(x, st, 1), torch.cat([x[8:16], x[40:48]]))
    p = spec((64, 2), ["-", "-"], mesh, partial="DIDx")
    torch.testing.assert_close(io.shard_input(x, p, 0), x)
    assert torch.count_nonzero(io.shard_input(x, p, 3)) == 0
    other = spec((64, 2), ["-", "-"], Mesh("s1", (2,), (2, 3)))
    assert io.shard_input(x, other, 0) is None
    # partial over both axes of a grid: only the device at (0, 0) holds the value
    both = spec((64, 2), ["-", "-"], Mesh("g", (2, 2)), partial=["DIDy", "DIDx"])
    torch.testing.assert_close(io.shard_input(x, both, 0), x)
    assert all(torch.count_nonzero(io.shard_input(x, both, r)) == 0 for r in (1, 2, 3))


def test_contributors_skip_replicas() -> None:
    grid = Mesh("g", (2, 2))
    assert io.contributors(spec((4, 6), ["DIDy", "-"], grid), 4) == [0, 2]
    assert io.contributors(spec((4, 6), ["DIDy", "DIDx"], grid), 4) == [0, 1, 2, 3]
    assert io.contributors(spec((4, 6), ["-", "-"], grid, partial="DIDx"), 4) == [0, 1]
    assert io.contributors(spec((4, 6), ["-", "-"], grid, partial=["DIDy", "DIDx"]), 4) == [0, 1, 2, 3]
    assert io.contributors(spec((4, 6), ["DIDx", "-"], Mesh("c", (2, 2, 2)), partial=["DIDz"]), 8) == [0, 1, 4, 5]
    assert io.contributors(spec((4, 6), ["-", "-"], Mesh("late", (1,), (3,))), 4) == [3]


def test_gather_on_one_rank_assembles_and_sums() -> None:
    env = mpi_env()
    if env.size != 1:
        pytest.skip("runs as a job of one rank")
    one = Mesh("one", (1,))
    x = torch.randn(4, 3)
    out = io.gather_outputs(
        [x, x.bfloat16(), x],
        [spec((4, 3), ["DIDx", "-"], one), spec((4, 3), ["-", "-"], one, dtype=torch.bfloat16),
         spec((4, 3), ["-", "-"], one, partial="DIDx")],
        env,
    )  # fmt: skip
    assert out is not None
    np.testing.assert_array_equal(out[0], x.numpy())
    assert out[1].dtype == np.float32
    np.testing.assert_array_equal(out[1], x.bfloat16().float().numpy())
    np.testing.assert_allclose(out[2], x.numpy())


def test_global_input_checks() -> None:
    mesh = Mesh("tp", (2,))
    s = spec((4, 3), ["DIDx", "-"], mesh)
    with pytest.raises(Diagnostic, match=r"argument #0 \(x.npy\): expected a float32 array of shape \[4, 3\].*got a float64 array of shape \[4, 3\]"):
        io.check_global_input(np.zeros((4, 3)), s, "x.npy")
    with pytest.raises(Diagnostic, match=r"got a float32 array of shape \[3, 4\]"):
        io.check_global_input(np.zeros((3, 4), np.float32), s)
    b = spec((4, 3), ["DIDx", "-"], mesh, dtype=torch.bfloat16)
    t = io.check_global_input(np.full((4, 3), 1.00390625, np.float32), b)
    assert t.dtype == torch.bfloat16 and float(t[0, 0]) == 1.0  # rounded to bf16


def test_load_inputs(tmp_path: Path) -> None:
    mesh = Mesh("tp", (2,))
    params = [spec((4, 3), ["DIDx", "-"], mesh), spec((3,), ["-"], mesh, index=1)]
    np.save(tmp_path / "a.npy", np.ones((4, 3), np.float32))
    np.save(tmp_path / "b.npy", np.ones((3,), np.float32))
    values = io.load_inputs([str(tmp_path / "a.npy"), str(tmp_path / "b.npy")], params)
    assert [tuple(v.shape) for v in values] == [(4, 3), (3,)]
    np.save(tmp_path / "seed.npy", np.array(7, np.int64))  # a rank-0 argument stays rank 0
    (seed,) = io.load_inputs([str(tmp_path / "seed.npy")], [spec((), [], mesh, dtype=torch.int64)])
    assert seed.shape == () and seed.item() == 7
    with pytest.raises(Diagnostic, match="takes 2 inputs, got 1"):
        io.load_inputs([str(tmp_path / "a.npy")], params)
    with pytest.raises(Diagnostic, match=r"argument #1 \(.*missing.npy\): cannot read it: No such file"):
        io.load_inputs([str(tmp_path / "a.npy"), str(tmp_path / "missing.npy")], params)


NPY_CASES = {
    "empty": (lambda good: b"", "not a .npy file (it is empty)"),
    "text": (lambda good: b"1 2 3\n", "not a .npy file (it does not start with NumPy's magic bytes"),
    "header cut": (lambda good: good[:30], "a malformed .npy header: EOF: reading array header"),
    "data cut": (lambda good: good[:-4], "the file is truncated: its header announces 48 bytes of data (float32 [4, 3]), the file holds 44"),
    "data long": (lambda good: good + b"xx", "the file is longer than its header says"),
    "forged shape": (lambda good: good.replace(b"(4, 3), ", b"(999999999999,), "), "got a float32 array of shape [999999999999]"),
    "version": (lambda good: good[:6] + b"\x09\x00" + good[8:], "unknown .npy format version 9.0"),
    "header syntax": (lambda good: good[:10] + b"{'descr': bogus" + good[25:], "a malformed .npy header"),
}


@pytest.mark.parametrize("case", sorted(NPY_CASES))
def test_npy_validated_before_reading(case: str, tmp_path: Path) -> None:
    """A .npy input is checked (magic, header, dtype and shape against the
    argument, data size against the file's length) before any allocation:
    each broken file is one Diagnostic naming the argument and the file."""
    mesh = Mesh("tp", (2,))
    s = spec((4, 3), ["DIDx", "-"], mesh)
    np.save(tmp_path / "good.npy", np.arange(12, dtype=np.float32).reshape(4, 3))
    make, message = NPY_CASES[case]
    path = tmp_path / "bad.npy"
    path.write_bytes(make((tmp_path / "good.npy").read_bytes()))
    with pytest.raises(Diagnostic) as info:
        io.read_npy(str(path), s)
    text = info.value.render()
    assert text.startswith(f"error: argument #0 ({path}): ") and message in text, text
    assert "\n" not in text


@pytest.mark.parametrize("kind", ["a named pipe", "a character device", "a directory"])
def test_only_regular_files_are_read(kind: str, tmp_path: Path) -> None:
    """A named pipe with no writer (opening it would wait forever), a device
    (reading it may never end) or a folder given to -i: refused at once,
    before anything is read."""
    path = {"a named pipe": tmp_path / "fifo.npy", "a character device": Path("/dev/zero"), "a directory": tmp_path}[kind]
    if kind == "a named pipe":
        os.mkfifo(path)
    s = spec((4, 3), ["DIDx", "-"], Mesh("tp", (2,)))
    start = time.monotonic()
    with pytest.raises(Diagnostic) as info:
        io.read_npy(str(path), s)
    assert time.monotonic() - start < 5
    assert info.value.render() == (
        f"error: argument #0 ({path}): it is {kind}, not a regular file; -i takes .npy files written by numpy.save"
    )


def test_npy_layouts_and_refused_dtypes(tmp_path: Path) -> None:
    s = spec((4, 3), ["DIDx", "-"], Mesh("tp", (2,)))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    np.testing.assert_array_equal(io.read_npy(str(tmp_path / "f.npy"), s), x)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(Diagnostic, match=r"holds object values; -i takes arrays of plain numbers"):
        io.read_npy(str(tmp_path / "obj.npy"), s)
    np.save(tmp_path / "rec.npy", np.zeros(3, dtype=[("a", "f4")]))
    with pytest.raises(Diagnostic, match=r"holds \[\('a', '<f4'\)\] values"):
        io.read_npy(str(tmp_path / "rec.npy"), s)


def test_random_inputs_depend_on_seed_and_argument_only() -> None:
    mesh = Mesh("tp", (2,))
    params = [spec((8, 4), ["DIDx", "-"], mesh), spec((8, 4), ["-", "-"], mesh, dtype=torch.bfloat16, index=1)]
    a, b = io.random_inputs(params, 3), io.random_inputs(params, 3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert a[1].dtype == torch.bfloat16 and not torch.equal(a[0], a[1].float())
    assert not torch.equal(io.random_inputs(params, 4)[0], a[0])


DOMAINS = """
func.func @main(%x: tensor<4x8xf32>, %e: tensor<4x8xf32>, %p: tensor<32xf32>, %ids: tensor<2x3xi64>,
                %t: tensor<10x4xf32>, %l: tensor<4x10xf32>, %y: tensor<2x2xi64>, %z: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = fusion.pow %x, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = fusion.reshape %p : (tensor<32xf32>) -> tensor<4x8xf32>
  %g = fusion.log %r : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %s = fusion.add %a, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %v = fusion.embedding %ids, %t : (tensor<2x3xi64>, tensor<10x4xf32>) -> tensor<2x3x4xf32>
  %yy = fusion.reshape %y : (tensor<2x2xi64>) -> tensor<4xi64>
  %c = fusion.cross_entropy %l, %yy : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %q = fusion.sqrt %z : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w = fusion.log %z : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}
"""


def test_random_inputs_lie_where_the_ops_are_defined() -> None:
    """Each argument's domain comes from the ops using it (pow's base, log's
    argument through a reshape, embedding ids, cross_entropy labels), so
    random inputs give finite results."""
    from fuserc.ir import parse
    from fuserc.runtime.evaluator.reference import evaluate

    module = parse(DOMAINS)
    func = next(op for op in module.walk() if op.name == "func.func")
    positive = (0.25, 4.0)
    assert io.input_domains(func) == [positive, None, positive, (0, 10), None, None, (0, 10), positive]
    from fuserc.dialects.interfaces import torch_dtype

    one = Mesh("m", (1,))
    params = [
        spec(tuple(a.type.get_shape()), ["-"] * len(a.type.get_shape()), one, dtype=torch_dtype(a.type.element_type), index=i)
        for i, a in enumerate(func.body.block.args)
    ]
    inputs = io.random_inputs(params, 0, io.input_domains(func))
    assert (inputs[0] >= 0.25).all() and (inputs[3] >= 0).all() and (inputs[3] < 10).all()
    (out,) = evaluate(module, inputs)
    assert torch.isfinite(out).all()


def test_save_outputs(tmp_path: Path) -> None:
    paths = io.save_outputs(str(tmp_path / "d"), [np.zeros(2), np.ones(3, np.float32)])
    assert [Path(p).name for p in paths] == ["out0.npy", "out1.npy"]
    np.testing.assert_array_equal(np.load(paths[1]), np.ones(3, np.float32))


def test_check_tolerances() -> None:
    ref = torch.linspace(-3, 3, 100, dtype=torch.float64)
    exact = compare(0, ref.numpy().astype(np.float32), ref, torch.float32)
    assert exact.ok and exact.rel_err < 1e-7
    off = ref.clone()
    off[5] += 3 * 1e-3
    bad = compare(1, off.numpy().astype(np.float32), ref, torch.float32)
    # the figure compared sits next to its tolerance
    assert bad.line() == "output 1: max rel error 1.000e-03 > 1e-04 (f32 tolerance): FAILED (max abs error 3.000e-03)"
    bf = ref.to(torch.bfloat16).float().numpy()
    good = compare(2, bf, ref, torch.bfloat16)
    assert good.ok and good.line().startswith("output 2: max rel error") and "<= 4e-02 (bf16 tolerance): ok" in good.line()
    assert not compare(2, bf, ref, torch.float32).ok  # but not within f32's
    assert set(CHECK_TOLERANCES) == {"f64", "f32", "f16", "bf16", "i64", "i1"}


def test_check_names_nan_and_inf() -> None:
    """Non-finite values where the reference has finite ones (or other
    non-finite ones) fail the check and are counted by kind, not reported
    as an infinite error; the same non-finite values as the reference pass."""
    ref = torch.tensor([1.0, 2.0, float("inf"), float("nan"), 5.0], dtype=torch.float64)
    got = np.array([np.nan, np.nan, np.inf, np.nan, -np.inf], np.float32)
    r = compare(0, got, ref, torch.float32)
    assert not r.ok
    assert r.line() == "output 0: 2 NaN, 1 -Inf (of 5 values) where the reference differs: FAILED"
    all_nan = compare(1, np.full(4, np.nan, np.float32), torch.ones(4, dtype=torch.float64), torch.float32)
    assert all_nan.line() == "output 1: 4 NaN (of 4 values) where the reference differs: FAILED"
    same = compare(2, ref.numpy().astype(np.float32), ref, torch.float32)
    assert same.ok and same.rel_err == 0.0
    assert same.line() == "output 2: 1 NaN, 1 +Inf (of 5 values) as in the reference; max rel error 0.000e+00 <= 1e-04 (f32 tolerance): ok (max abs error 0.000e+00)"
    nan_ref = torch.full((3,), float("nan"), dtype=torch.float64)
    all_same = compare(6, np.full(3, np.nan, np.float32), nan_ref, torch.float32)  # nothing finite: said, not a silent 0 error
    assert all_same.ok and all_same.line() == "output 6: 3 NaN (all 3 values), as in the reference; no finite value to compare: ok"
    finite_where_inf = compare(3, np.array([1.0, 2.0, 3.0], np.float32), torch.tensor([1.0, 2.0, float("inf")], dtype=torch.float64), torch.float32)
    assert finite_where_inf.line() == "output 3: 1 finite value (of 3) where the reference is NaN or infinite: FAILED"
    both = compare(5, np.array([np.nan, 2.0], np.float32), torch.tensor([1.0, float("nan")], dtype=torch.float64), torch.float32)
    assert both.line() == "output 5: 1 NaN (of 2 values) where the reference differs; 1 finite value (of 2) where the reference is NaN or infinite: FAILED"
    shape = compare(4, np.zeros((2, 2), np.float32), torch.zeros(4, dtype=torch.float64), torch.float32)
    assert shape.line() == "output 4: shape [2, 2] but the reference's is [4]: FAILED"


def test_check_near_zero_reference_by_the_rounding_of_the_unsharded_function() -> None:
    """A reference that is zero but for rounding (a bias gradient the
    softmax cancels) fails any relative test; its error is judged against
    the same function's unsharded error in its own element types."""
    ref = torch.full((8,), 2e-15, dtype=torch.float64)
    rounded = ref + 1e-6  # the unsharded f32 computation's own error
    near = compare(6, (ref + 3e-6).numpy(), ref, torch.float32, rounded=rounded, label="gradient of %bk")
    assert near.ok and near.rel_err > 1e8
    assert near.line().startswith(f"output 6 (gradient of %bk): max abs error 3.000e-06 <= 1.000e-05, {ROUNDING_FACTOR:g} x the error")
    assert near.line().endswith(": ok (max rel error 1.500e+09 > 1e-04, f32 tolerance)")
    wrong = compare(6, (ref + 1e-3).numpy(), ref, torch.float32, rounded=rounded)
    assert wrong.line().startswith("output 6: max rel error 5.000e+11 > 1e-04 (f32 tolerance): FAILED (max abs error 1.000e-03 > 1.000e-05, 10 x")
    alone = compare(6, (ref + 3e-6).numpy(), ref, torch.float32)  # without the unsharded error: relative only
    assert not alone.ok


def test_check_outputs_runs_the_second_reference_only_when_needed() -> None:
    """The float64 reference always; the one in the program's own types
    only for an output over its tolerance."""
    from fuserc.ir import parse

    text = """
    func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
      %y = fusion.exp %x : (tensor<4xf32>) -> tensor<4xf32>
      func.return %y, %x : tensor<4xf32>, tensor<4xf32>
    }"""
    module = parse(text)
    func = module.body.block.first_op
    x = torch.linspace(-1, 1, 4)
    asked: list[object] = []

    def reference(accumulate: object) -> list[torch.Tensor]:
        asked.append(accumulate)
        from fuserc.runtime.evaluator.reference import evaluate

        return evaluate(func, [x], accumulate=accumulate)

    exact = [torch.exp(x).numpy(), x.numpy()]
    results = check_outputs(module, func, "main", [x], exact, [torch.float32] * 2, reference)
    assert all(r.ok for r in results) and asked == [torch.float64]
    off = [exact[0] + np.float32(1e-3), exact[1]]
    results = check_outputs(module, func, "main", [x], off, [torch.float32] * 2, reference)
    assert asked[1:] == [torch.float64, None]
    assert not results[0].ok and results[0].rounding is not None and results[1].ok


def test_check_names_gradients_and_notes_nonfinite_inputs() -> None:
    from fuserc.ir import parse
    from fuserc.pipeline import run_pipeline

    text = """
    func.func @main(%x: tensor<4x8xf32>, %ids: tensor<4xi64>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
      %y = fusion.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      func.return %y : tensor<4x8xf32>
    }"""
    module = run_pipeline(parse(text), "autodiff")
    assert output_labels(module, "main_bwd", 2) == ["gradient of %x", "gradient of %w"]
    assert output_labels(module, "main_fwd", 3) == ["result 0 of @main", "saved for @main_bwd", "saved for @main_bwd"]
    assert output_labels(module, "main", 1) == [""]
    func = module.body.block.first_op
    x = torch.zeros(4, 8)
    x[0, :3] = float("nan")
    x[1, 0] = float("-inf")
    assert input_notes(func, [x, torch.zeros(4, dtype=torch.int64), torch.ones(8)]) == [
        "input 0 (%x): 3 NaN, 1 -Inf (of 32 values); the reference computes with them too"
    ]


def test_backend_selection() -> None:
    env = mpi_env()
    assert make_backend("cpu", env).name == "cpu"
    if not torch.cuda.is_available():
        assert make_backend("auto", env).name == "cpu"
        with pytest.raises(Diagnostic, match="cuda backend cannot run here"):
            make_backend("cuda", env)
    with pytest.raises(Diagnostic, match="unknown backend 'tpu'"):
        make_backend("tpu", env)


def test_failure_messages() -> None:
    """A Diagnostic is its text; an internal error one line naming the error
    and where (the evaluator's note, else the innermost frame), its
    traceback only when debugging."""
    d = Diagnostic("bad input", Location("f.mlir", 3, 4))
    assert describe(d) == "f.mlir:3:4: error: bad input"
    try:
        raise ValueError("boom\nsecond line")
    except ValueError as e:
        err = e
    line = describe(err)
    assert "\n" not in line and line.startswith("internal error: ValueError: boom (at ")
    assert line.endswith("; --debug or $FUSERC_DEBUG=1 shows the traceback")
    err.add_note("while running 'hir.matmul' at p.mlir:5:3 on rank 1")
    assert "(while running 'hir.matmul' at p.mlir:5:3 on rank 1)" in describe(err)
    full = describe(err, debug=True)
    assert full.startswith("internal error: Traceback") and "ValueError: boom" in full
    assert prefixed("[rank 2] ", "a\nb") == "[rank 2] a\n[rank 2] b"
    assert who([0, 1, 2, 3], 4) == "" and who([2], 4) == "[rank 2] " and who([1, 3], 4) == "[ranks 1, 3] "
    assert MpiEnv(None, 0, 1).size == 1


CHECK_SOURCE = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x3xbf16, #fusion.sharding<@m, [DIDx, -]>>, %w: tensor<3x2xbf16, #fusion.sharding<@m, [-, -]>>)
    -> tensor<4x2xf32, #fusion.sharding<@m, [-, -]>> {
  %y = fusion.matmul %x, %w : (tensor<4x3xbf16, #fusion.sharding<@m, [DIDx, -]>>, tensor<3x2xbf16, #fusion.sharding<@m, [-, -]>>) -> tensor<4x2xbf16, #fusion.sharding<@m, [-, -]>>
  %z = fusion.cast %y : (tensor<4x2xbf16, #fusion.sharding<@m, [-, -]>>) -> tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>
  func.return %z : tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>
}
"""

CHECK_HOST = """
fusion.mesh @m shape = [1]
func.func @main(%x: tensor<4x3xbf16> {hir.global = tensor<4x3xbf16, #fusion.sharding<@m, [DIDx, -]>>},
                %w: tensor<3x2xbf16> {hir.global = tensor<3x2xbf16, #fusion.sharding<@m, [-, -]>>})
    -> (tensor<4x2xf32> {hir.global = tensor<4x2xf32, #fusion.sharding<@m, [-, -]>>}) attributes {hir.host} {
  %y = hir.alloc "y" : tensor<4x2xbf16>
  hir.matmul %x, %w, %y : tensor<4x3xbf16>, tensor<3x2xbf16>, tensor<4x2xbf16>
  %z = hir.alloc "z" : tensor<4x2xf32>
  hir.launch ins(%y : tensor<4x2xbf16>) outs(%z : tensor<4x2xf32>) {
  ^bb0(%a: tensor<4x2xbf16>):
    %c = fusion.cast %a : (tensor<4x2xbf16>) -> tensor<4x2xf32>
    OP
  }
  func.return %z : tensor<4x2xf32>
}
"""


@pytest.mark.parametrize("op, exit_code", [
    ("hir.yield %c : tensor<4x2xf32>", 0),
    ("%e = fusion.exp %c : (tensor<4x2xf32>) -> tensor<4x2xf32>\n    hir.yield %e : tensor<4x2xf32>", 1),
])  # fmt: skip
def test_check_exit_code(op: str, exit_code: int, capsys: pytest.CaptureFixture[str]) -> None:
    """--check against the fusion function as written: an f32 result of
    bf16 work is held to bf16's tolerance; a wrong program fails with 1."""
    from fuserc.ir import parse
    from fuserc.run_cli import _check
    from fuserc.runtime.backends.cpu import CpuBackend
    from fuserc.runtime.evaluator.program import Compiled, CompiledProgram

    compiled = Compiled(parse(CHECK_SOURCE, "s.mlir"), parse(CHECK_HOST.replace("OP", op), "h.mlir"), "main")
    prog = CompiledProgram(compiled, CpuBackend(mpi_env()))
    inputs = [torch.randn(4, 3).bfloat16(), torch.randn(3, 2).bfloat16()]
    gathered = prog.execute(inputs)
    assert _check(prog, inputs, [g.float().numpy() for g in gathered]) == exit_code
    out = capsys.readouterr()
    assert "4e-02 (bf16 tolerance)" in out.out
    assert ("--check failed: output 0 differs from the reference" in out.err) == bool(exit_code)
    prog.close()


def test_random_inputs_are_refused_before_allocation_when_too_large() -> None:
    """The bytes the global inputs take (every rank of a node holds them
    whole, plus the float32 draw of a 16-bit one) against the memory
    available: a Diagnostic naming both, before anything is allocated."""
    mesh = Mesh("tp", (2,))
    params = [
        spec((10**6, 10**6), ["DIDx", "-"], mesh),
        spec((4, 8), ["-", "-"], mesh, dtype=torch.bfloat16, index=1),
    ]
    need = 4 * 10**12 + 2 * 32 + 4 * 32
    with pytest.raises(Diagnostic) as info:
        io.check_inputs_fit(params, available=10**9, ranks=2)
    text = info.value.message
    assert f"need {need} bytes (3.6 TiB) of host memory on each rank ({2 * need} bytes (7.3 TiB) for the 2 ranks" in text
    assert "1000000000 bytes (953.7 MiB) are available" in text and "argument #0" in text
    io.check_inputs_fit(params[1:], available=2 * 192, ranks=2)  # fits exactly
    with pytest.raises(Diagnostic, match="need 192 bytes"):
        io.check_inputs_fit(params[1:], available=2 * 192 - 1, ranks=2)
    with pytest.raises(Diagnostic, match="the random inputs need"):
        io.random_inputs(params, seed=0)  # this machine has no 4 TB to spare
    assert [t.shape for t in io.random_inputs(params[1:], 0)] == [(4, 8)]


def test_inputs_are_checked_and_read_in_place() -> None:
    """`prepare_inputs`: a tensor of the argument's shard shape and dtype is
    read in place (no copy; detached where it requires grad), a numpy array
    as a tensor; a wrong shape or dtype, an absent shard or another type
    is refused, naming the argument."""
    from fuserc.ir import parse
    from fuserc.runtime.evaluator.evaluator import Program

    text = CHECK_HOST.replace("bf16", "f32").replace("OP", "hir.yield %c : tensor<4x2xf32>")  # (a cast of f32 to f32)
    program = Program.load(parse(text, "host.mlir"), "main", make_backend("cpu", mpi_env()))
    x = torch.ones(4, 3, requires_grad=True)
    w = torch.ones(3, 2)
    got = program.prepare_inputs([x, w])
    assert not got[0].requires_grad and got[0].data_ptr() == x.data_ptr()
    assert got[1] is w
    got = program.prepare_inputs([x, np.full((3, 2), 2.0, dtype=np.float32)])
    assert isinstance(got[1], torch.Tensor) and got[1].tolist() == [[2.0, 2.0]] * 3
    for value, message in (
        (torch.ones(3, 3), "argument #0 (%x): expected a local shard [4, 3] of torch.float32"),
        (torch.ones(4, 3, dtype=torch.float64), "got [4, 3] of torch.float64"),
        (None, "argument #0 (%x) is absent on rank 0, which holds a shard"),
        ([1, 2], "argument #0 (%x) must be a torch tensor or numpy array, got list"),
    ):
        with pytest.raises(Diagnostic, match=re.escape(message)):
            program.prepare_inputs([value, w])
    with pytest.raises(Diagnostic, match=re.escape("@main takes 2 inputs, got 1")):
        program.prepare_inputs([w])

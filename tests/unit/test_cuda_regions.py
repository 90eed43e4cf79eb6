"""The cuda backend's generated region kernels (runtime/kernels/cuda_regions.py),
checked on the CPU: every region of the transformer-ops program and of the
GPT layer, forward and backward, traced into its FX graph and run from it
(in place of the op-by-op launch) against the float64 reference evaluator;
and one region compiled by Inductor's CPU code generator. On a GPU the
same kernels run in the e2e suite (FUSERC_TEST_BACKEND=cuda)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fuserc.runtime.kernels import cuda_regions
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.evaluator.program import compile_text

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from ops_program import program as ops_program  # noqa: E402


def _programs() -> dict[str, str]:
    ops, _ = ops_program("f32")
    gpt = (ROOT / "examples" / "gpt_layer.mlir").read_text()
    one = lambda text: re.sub(r"(fusion\.mesh @tp shape = )\[\d+\]", r"\1[1]", text)  # noqa: E731
    return {"ops": one(ops), "gpt": one(gpt)}


@pytest.mark.parametrize("name", ["ops", "gpt"])
@pytest.mark.parametrize("entry", ["main", "main_bwd"])
def test_traced_regions_match_the_reference(name: str, entry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    traced: list[int] = []

    def launch(self: Any, body: Any, ins: Any, outs: Any, contexts: Any = None) -> None:
        graph = cuda_regions.trace_region(body, ins, outs, contexts)
        graph(*ins, *outs)
        traced.append(len(graph.graph.nodes))

    monkeypatch.setattr(CpuBackend, "launch", launch)
    prog = compile_text(_programs()[name], entry=entry, pipeline="autodiff,default", backend="cpu")
    inputs = prog.random_inputs(3)
    got = prog.execute(inputs)
    want = prog.reference(inputs)
    assert len(traced) >= 4, "the program ran few regions"  # attention's by its own kernel (`launch_made`)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = torch.as_tensor(g).double(), w.double()
        scale = max(1.0, w.abs().max().item())
        assert (g - w).abs().max().item() <= 1e-4 * scale, f"result {i} of @{entry}"
    prog.close()


def test_a_region_compiles_with_inductor() -> None:
    """Inductor's code generation (C++ on the CPU; Triton on a GPU) of a
    softmax region (a reduction, its broadcast back, an elementwise chain)
    writing into a transposed output buffer; saved as a cache entry's
    sections and loaded again."""
    from fuserc.dialects import hir
    from fuserc.ir import make_context, parse
    from fuserc.pipeline import run_pipeline

    text = """
func.func @main(%x: tensor<32x48xf32>) -> tensor<32x48xf32> {
  %s = fusion.softmax %x dim = 1 : (tensor<32x48xf32>) -> tensor<32x48xf32>
  func.return %s : tensor<32x48xf32>
}
"""
    ctx = make_context()
    module = run_pipeline(parse(text, "r.mlir", ctx), "default", ctx)
    (launch,) = [op for op in module.walk() if isinstance(op, hir.LaunchOp)]
    x = torch.randn(32, 48)
    layouts = [cuda_regions.layout_of(x), ((32, 48), (1, 32), torch.float32)]
    sections, kernel = cuda_regions.build_region(launch.body.block, layouts, (0, 1), 1, None, torch.device("cpu"))
    assert sections is not None
    loaded = cuda_regions.load_region(sections, torch.device("cpu"))
    for fn in (kernel, loaded):
        out = torch.empty(48, 32).t()
        fn(x, out)
        torch.testing.assert_close(out, torch.softmax(x, 1))
        assert out.stride() == (1, 32), "the output buffer was replaced, not written"


def _chain(n: int):
    """A launch region of n exps, one after another, over a [64, 64] f32 tensor."""
    from fuserc.dialects import hir
    from fuserc.ir import parse

    t = "tensor<64x64xf32>"
    ops = "\n".join(f"      %e{i + 1} = fusion.exp %e{i} : ({t}) -> {t}" for i in range(n))
    text = f"""
func.func @main(%x: {t}, %y: {t}) -> {t} attributes {{hir.host}} {{
  hir.launch ins(%x : {t}) outs(%y : {t}) {{
    ^bb0(%e0: {t}):
{ops}
      hir.yield %e{n} : {t}
  }}
  func.return %y : {t}
}}"""
    (launch,) = [op for op in parse(text, "chain.mlir").walk() if isinstance(op, hir.LaunchOp)]
    return launch.body.block


def test_a_region_op_by_op_holds_only_its_live_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """launch_with_torch lets each value go after its last use: along a
    chain of exps, when an op runs, no value made two ops before it is
    alive (the run, and the trace of a kernel's build, hold what is live,
    not every value the region made); the result is torch's."""
    import weakref

    from fuserc.runtime.evaluator import reference
    from fuserc.runtime.backends.cpu import launch_with_torch

    made: list[weakref.ref] = []
    alive_at: list[int] = []
    real = reference.reference_results

    def counting(op, args, ctx=None):  # type: ignore[no-untyped-def]
        alive_at.append(sum(r() is not None for r in made[:-1]))
        out = real(op, args, ctx)
        made.extend(weakref.ref(t) for t in out)
        return out

    monkeypatch.setattr(reference, "reference_results", counting)
    x, out = torch.rand(64, 64) / 8, torch.empty(64, 64)
    launch_with_torch(_chain(6), [x], [out])
    want = x
    for _ in range(6):
        want = torch.exp(want)
    torch.testing.assert_close(out, want)
    assert alive_at == [0, 0, 0, 0, 0, 0], alive_at


def test_a_kernel_build_traces_its_own_scratch_buffers() -> None:
    """trace_region runs the region on copies of the caller's buffers (they
    stay as they were), or, for build_region's zero tensors (`scratch`),
    on them: no second copy of every operand while a kernel is built."""
    block = _chain(2)
    x = torch.rand(64, 64)
    out = torch.zeros(64, 64)
    graph = cuda_regions.trace_region(block, [x], [out])
    assert torch.count_nonzero(out) == 0
    graph(x, out)
    torch.testing.assert_close(out, torch.exp(torch.exp(x)))
    out2 = torch.zeros(64, 64)
    cuda_regions.trace_region(block, [x], [out2], scratch=True)
    torch.testing.assert_close(out2, torch.exp(torch.exp(x)))


def _add_layer_norm():
    """A launch region yielding a residual sum and its layer norm (the
    GPT layer's `h = x + att; c = layer_norm(h)`), over [64, 4096] bf16
    (rows too long for one block: Inductor's kernel loops over each row
    twice)."""
    from fuserc.dialects import hir
    from fuserc.ir import parse

    t, v = "tensor<64x4096xbf16>", "tensor<4096xbf16>"
    text = f"""
func.func @main(%x: {t}, %att: {t}, %w: {v}, %b: {v}, %h: {t}, %c: {t}) -> {t} attributes {{hir.host}} {{
  hir.launch ins(%x, %att, %w, %b : {t}, {t}, {v}, {v}) outs(%h, %c : {t}, {t}) {{
    ^bb0(%x0: {t}, %a0: {t}, %w0: {v}, %b0: {v}):
      %s = fusion.add %x0, %a0 : ({t}, {t}) -> {t}
      %n = fusion.layer_norm %s, %w0, %b0 dims = [1] eps = 1.0e-05 : ({t}, {v}, {v}) -> {t}
      hir.yield %s, %n : {t}, {t}
  }}
  func.return %c : {t}
}}"""
    (launch,) = [op for op in parse(text, "add_ln.mlir").walk() if isinstance(op, hir.LaunchOp)]
    return launch.body.block


def test_a_yielded_value_read_again_is_stored_once_into_its_buffer() -> None:
    """The residual sum, yielded and normalized: Inductor's kernel writes it
    into its output buffer where it is made (`early_copies`) and normalizes
    it from there, with no temporary of its own (the forward's add +
    layer_norm read [T, H] 8 times without, 5 with); the results are
    torch's (Triton's kernel on a GPU, C++ on the CPU)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x, att = (torch.randn(64, 4096, dtype=torch.bfloat16, device=device) for _ in range(2))
    w, b = (torch.randn(4096, dtype=torch.bfloat16, device=device) for _ in range(2))
    layouts = [cuda_regions.layout_of(t) for t in (x, att, w, b, x, x)]
    pass_ = cuda_regions.inductor_config()["post_grad_custom_post_pass"]
    before = type(pass_).moved
    from torch._inductor import config

    with config.patch(force_disable_caches=True):  # (the pass runs where Inductor compiles)
        _, kernel = cuda_regions.build_region(_add_layer_norm(), layouts, tuple(range(6)), 4, None, device)
    assert type(pass_).moved == before + 1
    h, c = torch.zeros_like(x), torch.zeros_like(x)
    kernel(x, att, w, b, h, c)
    want = x + att
    torch.testing.assert_close(h, want)
    torch.testing.assert_close(c, torch.nn.functional.layer_norm(want, [4096], w, b), atol=2e-2, rtol=2e-2)


def test_early_copies_move_only_a_copy_nothing_else_sees() -> None:
    """`early_copies` on post-grad graphs: the copy of a value read again
    moves up to the value, its readers read the buffer, and the graph
    computes the same; a copy stays where the buffer's old value is read
    after the value is made, where it converts (another dtype), or where
    the value has no other reader; where the buffer is also an operand
    (written in place), it moves if the buffer is read no later than by
    the value's own op."""
    aten = torch.ops.aten

    def graph_of(dtype: torch.dtype, read_dst: bool, read_late: bool = False) -> torch.fx.GraphModule:
        g = torch.fx.Graph()
        x, dst, out = g.placeholder("x"), g.placeholder("dst"), g.placeholder("out")
        x.meta["val"], dst.meta["val"], out.meta["val"] = torch.empty(4, 8), torch.empty(4, 8, dtype=dtype), torch.empty(4, 8)
        s = g.call_function(aten.add.Tensor, (x, dst if read_dst else x))
        s.meta["val"] = torch.empty(4, 8)
        e = g.call_function(aten.exp.default, (s,))
        if read_late:
            e = g.call_function(aten.add.Tensor, (e, dst))
        g.call_function(aten.copy_.default, (out, e))
        g.call_function(aten.copy_.default, (dst, s))
        g.output(None)
        return torch.fx.GraphModule(torch.nn.Module(), g)

    gm = graph_of(torch.float32, read_dst=False)
    assert cuda_regions.early_copies(gm.graph) == 1
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert ops == [aten.add.Tensor, aten.copy_.default, aten.exp.default, aten.copy_.default]
    gm.recompile()
    x, dst, out = torch.randn(4, 8), torch.zeros(4, 8), torch.zeros(4, 8)
    gm(x, dst, out)
    torch.testing.assert_close(dst, 2 * x)
    torch.testing.assert_close(out, torch.exp(2 * x))
    gm = graph_of(torch.float32, read_dst=True)  # written in place: read by the value's own op, before the write
    assert cuda_regions.early_copies(gm.graph) == 1
    gm.recompile()
    dst = torch.ones(4, 8)
    gm(x, dst, out)
    torch.testing.assert_close(dst, x + 1)
    torch.testing.assert_close(out, torch.exp(x + 1))
    gm = graph_of(torch.float32, read_dst=True, read_late=True)
    assert cuda_regions.early_copies(gm.graph) == 0, "the buffer's old value is read after the value is made"
    assert cuda_regions.early_copies(graph_of(torch.bfloat16, read_dst=False).graph) == 0


def test_regions_of_the_same_ops_shared_otherwise_get_their_own_kernels() -> None:
    """Two regions of the same adds, one writing over its first input
    (the pull ring's sum), one into a buffer of its own (a reduce-scatter's
    pulls): each kernel takes its distinct operands, the second built after
    the first (over all five operands, AOTAutograd's cache, which does not
    tell the sharings apart, handed the first's kernel to the second);
    both also loaded from their saved sections."""
    from xdsl.dialects.builtin import TensorType, f32
    from xdsl.ir import Block

    from fuserc.passes.host_emit import sum_launch

    args = Block(arg_types=[TensorType(f32, [16, 24])] * 5).args
    into_first = sum_launch(args[0], list(args[1:4]))
    own = sum_launch(args[4], list(args[:4]), accumulate=False)
    layouts = [((16, 24), (24, 1), torch.float32)] * 5
    cpu = torch.device("cpu")
    kept, first = cuda_regions.build_region(into_first.body.block, layouts, (0, 1, 2, 3, 0), 4, None, cpu)
    sections, second = cuda_regions.build_region(own.body.block, layouts, (0, 1, 2, 3, 4), 4, None, cpu)
    x = [torch.randn(16, 24) for _ in range(5)]
    want = x[0] + x[1] + x[2] + x[3]
    for fn in (second, cuda_regions.load_region(sections, cpu, (0, 1, 2, 3, 4))):
        out = torch.zeros(16, 24)
        fn(*x[:4], out)
        torch.testing.assert_close(out, want)
    for fn in (first, cuda_regions.load_region(kept, cpu, (0, 1, 2, 3, 0))):
        acc = x[0].clone()
        fn(acc, x[1], x[2], x[3], acc)
        torch.testing.assert_close(acc, want)


# ---- every kind of region at odd shapes: generated kernels on a GPU, traced graphs on the CPU ----

ODD_SHAPES = [(37, 129), (1, 257), (300, 1)]
"""Rows x cols that are not multiples of any block size, and 1-element dims
(on the CPU, where the traced graph does not depend on them, the first)."""
if not torch.cuda.is_available():
    ODD_SHAPES = ODD_SHAPES[:1]


def _region_cases() -> dict[str, Any]:
    """name -> build(fd, x, y, w, b, labels, seed): one launch region each;
    reductions along the innermost and the outer dim."""
    o = lambda fd: fd.ops  # noqa: E731
    return {
        "chain": lambda fd, x, y, w, b, lb, s: o(fd).gelu(x * y + w) * o(fd).sigmoid(y),
        "broadcast": lambda fd, x, y, w, b, lb, s: o(fd).tanh(x - b) * 0.5,
        "sum_outer": lambda fd, x, y, w, b, lb, s: o(fd).sum(x * y, dims=[0]),
        "sum_inner": lambda fd, x, y, w, b, lb, s: o(fd).sum(o(fd).exp(x), dims=[1]),
        "mean_var": lambda fd, x, y, w, b, lb, s: o(fd).var(x, dims=[0], correction=0, keepdim=True) + o(fd).mean(y, dims=[0], keepdim=True),
        "max_outer": lambda fd, x, y, w, b, lb, s: o(fd).max(x + y, [0]),
        "softmax_outer": lambda fd, x, y, w, b, lb, s: o(fd).softmax(x, 0),
        "softmax": lambda fd, x, y, w, b, lb, s: o(fd).softmax(x * 2.0, 1),
        "log_softmax": lambda fd, x, y, w, b, lb, s: o(fd).log_softmax(x, 1),
        "layer_norm": lambda fd, x, y, w, b, lb, s: o(fd).layer_norm(x + y, w, b, dims=1, eps=1e-5),
        "rms_norm": lambda fd, x, y, w, b, lb, s: o(fd).rms_norm(x, w, dims=1, eps=1e-5),
        "cross_entropy": lambda fd, x, y, w, b, lb, s: o(fd).cross_entropy(x, lb),
        "dropout": lambda fd, x, y, w, b, lb, s: o(fd).dropout(x * y, s, 0.25),
    }


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", list(_region_cases()))
def test_region_kernels_at_odd_shapes(case: str, dtype: str, shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU: the region's Inductor kernels (no region run op by op)
    against the float64 reference. On the CPU: its traced graph instead."""
    from fuserc.api import FusionDefinition

    r, c = shape
    fd = FusionDefinition()
    x, y = fd.define_tensor([r, c], dtype), fd.define_tensor([r, c], dtype)
    w, b = fd.define_tensor([c], dtype), fd.define_tensor([c], dtype)
    labels, seed = fd.define_tensor([r], "i64"), fd.define_tensor([], "i64")
    fd.add_output(_region_cases()[case](fd, x, y, w, b, labels, seed))
    cuda = torch.cuda.is_available()
    if cuda:
        monkeypatch.setenv("FUSERC_KERNELS", "inductor")  # small shapes: "auto" would run them without Inductor
    else:
        monkeypatch.setattr(CpuBackend, "launch", lambda self, body, ins, outs, contexts=None:
                            cuda_regions.trace_region(body, ins, outs, contexts)(*ins, *outs))
    prog = fd.compile(backend="cuda" if cuda else "cpu")
    inputs = prog.random_inputs(7)
    inputs[-2] = inputs[-2].abs() % c  # labels in range
    got = prog.execute(inputs)
    want = prog.reference(inputs)
    if cuda:
        be = prog.backend
        assert be.kernels == "inductor" and be.fallback_launches == 0 and be.fused_launches >= 1
    tol = 1e-4 if dtype == "f32" else 2e-2
    for g, w_ in zip(got, want, strict=True):
        g, w_ = torch.as_tensor(g).cpu().double(), w_.double()
        assert g.shape == w_.shape
        scale = max(1.0, w_.abs().max().item())
        assert (g - w_).abs().max().item() <= tol * scale, f"{case} {dtype} {shape}"
    prog.close()

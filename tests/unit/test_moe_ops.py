"""The routing and grouped ops (dialects/fusion_moe.py) against PyTorch:
each op's reference against the torch call of its name (declared dtypes,
bit for bit), the grouped GEMM against a loop of GEMMs (and
torch._grouped_mm where it runs), and every derivative rule, through the
autodiff pass and the float64 reference evaluator, against torch.autograd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fuserc.api import FusionDefinition
from fuserc.diagnostics import Diagnostic
from fuserc.ir import parse
from fuserc.runtime.kernels.grouped_gemm import grouped_matmul
from fuserc.runtime.evaluator.reference import evaluate

OPS = """
func.func @main(%x: tensor<6x5xf32>, %i: tensor<6x2xi64>, %src: tensor<6x2xf32>, %ids: tensor<9xi64>, %rows: tensor<9xi64>, %m: tensor<9x5xf32>)
    -> (tensor<6x3xf32>, tensor<6x3xi64>, tensor<9xi64>, tensor<9xi64>, tensor<4xi64>, tensor<6x5xf32>, tensor<6x2xf32>, tensor<6x5xf32>, tensor<9x5xf32>, tensor<6x5xf32>) {
  %v, %k = fusion.topk %x k = 3 dim = 1 : (tensor<6x5xf32>) -> (tensor<6x3xf32>, tensor<6x3xi64>)
  %a = fusion.argsort %ids dim = 0 : (tensor<9xi64>) -> tensor<9xi64>
  %d = fusion.argsort %ids dim = 0 descending = true : (tensor<9xi64>) -> tensor<9xi64>
  %c = fusion.bincount %ids length = 4 : (tensor<9xi64>) -> tensor<4xi64>
  %s = fusion.cumsum %x dim = 0 : (tensor<6x5xf32>) -> tensor<6x5xf32>
  %g = fusion.gather %x, %i dim = 1 : (tensor<6x5xf32>, tensor<6x2xi64>) -> tensor<6x2xf32>
  %sa = fusion.scatter_add %x, %i, %src dim = 1 : (tensor<6x5xf32>, tensor<6x2xi64>, tensor<6x2xf32>) -> tensor<6x5xf32>
  %is = fusion.index_select %x, %rows dim = 0 : (tensor<6x5xf32>, tensor<9xi64>) -> tensor<9x5xf32>
  %ia = fusion.index_add %x, %rows, %m dim = 0 : (tensor<6x5xf32>, tensor<9xi64>, tensor<9x5xf32>) -> tensor<6x5xf32>
  func.return %v, %k, %a, %d, %c, %s, %g, %sa, %is, %ia : tensor<6x3xf32>, tensor<6x3xi64>, tensor<9xi64>, tensor<9xi64>, tensor<4xi64>, tensor<6x5xf32>, tensor<6x2xf32>, tensor<6x5xf32>, tensor<9x5xf32>, tensor<6x5xf32>
}
"""


def test_ops_against_torch() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=gen)
    i = torch.randint(0, 5, (6, 2), generator=gen)
    src = torch.randn(6, 2, generator=gen)
    ids = torch.tensor([3, 1, 3, 0, 1, 3, 3, 0, 1])  # repeated keys: the sort must be stable; expert 2 gets none
    rows = torch.randint(0, 6, (9,), generator=gen)
    m = torch.randn(9, 5, generator=gen)
    v, k, a, d, c, s, g, sa, is_, ia = evaluate(parse(OPS), [x, i, src, ids, rows, m], accumulate=None)
    want_v, want_k = torch.topk(x, 3, dim=1)
    torch.testing.assert_close(v, want_v, rtol=0, atol=0)
    assert torch.equal(k, want_k)
    assert torch.equal(a, torch.argsort(ids, stable=True)) and torch.equal(d, torch.argsort(ids, descending=True, stable=True))
    assert torch.equal(c, torch.bincount(ids, minlength=4)) and c[2] == 0
    torch.testing.assert_close(s, torch.cumsum(x, 0), rtol=0, atol=0)
    torch.testing.assert_close(g, torch.gather(x, 1, i), rtol=0, atol=0)
    torch.testing.assert_close(sa, x.scatter_add(1, i, src), rtol=0, atol=0)
    torch.testing.assert_close(is_, x[rows], rtol=0, atol=0)
    torch.testing.assert_close(ia, x.index_add(0, rows, m), rtol=0, atol=0)


def test_topk_ties_take_the_lowest_index() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0]])
    fd = FusionDefinition()
    t = fd.define_tensor([1, 5])
    v, k = fd.ops.topk(t, k=2, dim=1)
    fd.add_output(v)
    fd.add_output(k)
    _, idx = evaluate(parse(fd.to_mlir()), [x], accumulate=None)
    assert idx.tolist() == [[1, 2]]


@pytest.mark.parametrize("ends", [[3, 3, 10], [0, 0, 10], [10, 10, 10], [2, 5, 7]], ids=["empty-middle", "empty-first", "one", "rows-left"])
def test_grouped_matmul_against_a_loop(ends: list[int]) -> None:
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(10, 4, generator=gen, dtype=torch.float64), torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    offs = torch.tensor(ends)
    want = torch.zeros(10, 5, dtype=torch.float64)
    start = 0
    for e, end in enumerate(ends):
        want[start:end] = a[start:end] @ b[e]
        start = end
    torch.testing.assert_close(grouped_matmul(a, b, offs), want)
    at, g = torch.randn(4, 10, generator=gen, dtype=torch.float64), torch.randn(10, 5, generator=gen, dtype=torch.float64)
    wgrad = torch.stack([at[:, s:e] @ g[s:e] for s, e in zip([0, *ends[:-1]], ends)])
    torch.testing.assert_close(grouped_matmul(at, g, offs), wgrad)


def test_grouped_matmul_refuses_bad_offsets() -> None:
    a, b = torch.randn(6, 4), torch.randn(2, 4, 3)
    with pytest.raises(Diagnostic, match=r"offsets \[4, 2\] must be non-decreasing within \[0, 6\]"):
        grouped_matmul(a, b, torch.tensor([4, 2]))
    with pytest.raises(Diagnostic, match=r"within \[0, 6\]"):
        grouped_matmul(a, b, torch.tensor([4, 7]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch._grouped_mm's kernel needs a GPU")
def test_grouped_matmul_is_torch_grouped_mm_on_cuda() -> None:
    dev = torch.device("cuda")
    a, b = torch.randn(64, 32, device=dev, dtype=torch.bfloat16), torch.randn(4, 32, 16, device=dev, dtype=torch.bfloat16)
    offs = torch.tensor([16, 16, 40, 64], device=dev)
    want = torch.cat([a[s:e].float() @ b[i].float() for i, (s, e) in enumerate(zip([0, 16, 16, 40], [16, 16, 40, 64]))])
    torch.testing.assert_close(grouped_matmul(a, b, offs).float(), want, rtol=2e-2, atol=2e-2)


def _grads(fd: FusionDefinition, args: list[torch.Tensor], cts: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of fd's float inputs by autodiff, in float64."""
    fwd, bwd = fd.autodiff()
    outs = evaluate(parse(fwd.to_mlir()), args, entry="main_fwd")
    saved = [t.float() if t.is_floating_point() else t for t in outs[len(fd.outputs) :]]  # the declared f32
    return evaluate(parse(bwd.to_mlir()), [*saved, *(c.float() for c in cts)], entry="main_bwd")


def test_derivatives_against_autograd() -> None:
    """One program using every differentiable op, its gradients against
    torch.autograd's (float64)."""
    gen = torch.Generator().manual_seed(2)
    fd = FusionDefinition()
    x = fd.define_tensor([6, 5])
    i = fd.define_tensor([6, 2], "i64")
    src = fd.define_tensor([6, 2])
    rows = fd.define_tensor([9], "i64")
    m = fd.define_tensor([9, 5])
    ends = fd.define_tensor([3], "i64")
    w = fd.define_tensor([3, 5, 4])
    v, _ = fd.ops.topk(x, k=3, dim=1)
    fd.add_output(v)
    fd.add_output(fd.ops.cumsum(x, dim=1))
    fd.add_output(fd.ops.gather(x, i, dim=1))
    fd.add_output(fd.ops.scatter_add(x, i, src, dim=1))
    sel = fd.ops.index_select(x, rows)
    fd.add_output(fd.ops.index_add(x, rows, m * sel))
    h = fd.ops.grouped_matmul(m * sel, w, ends)
    fd.add_output(h)
    fd.add_output(fd.ops.grouped_matmul(fd.ops.permute(m, dims=[1, 0]), h, ends))
    args = [torch.randn(6, 5, generator=gen), torch.randint(0, 5, (6, 2), generator=gen), torch.randn(6, 2, generator=gen),
            torch.randint(0, 6, (9,), generator=gen), torch.randn(9, 5, generator=gen), torch.tensor([2, 2, 8]),
            torch.randn(3, 5, 4, generator=gen)]  # fmt: skip
    tx, _, tsrc, trows, tm, tends, tw = [t.double().requires_grad_(t.is_floating_point()) if t.is_floating_point() else t for t in args]
    tsel = tx[trows]
    th = grouped_matmul(tm * tsel, tw, tends)
    outs = [torch.topk(tx, 3, dim=1).values, torch.cumsum(tx, 1), torch.gather(tx, 1, args[1]), tx.scatter_add(1, args[1], tsrc),
            tx.index_add(0, trows, tm * tsel), th, grouped_matmul(tm.t(), th, tends)]  # fmt: skip
    cts = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs]
    torch.autograd.backward(outs, cts)
    gx, gsrc, gm, gw = _grads(fd, args, cts)
    for name, got, want in (("x", gx, tx.grad), ("src", gsrc, tsrc.grad), ("m", gm, tm.grad), ("w", gw, tw.grad)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda s, n=name: f"grad {n}: {s}")


def test_grouped_gemm_regions_run_with_torch_and_views() -> None:
    """On cuda a launch region holding a grouped GEMM is run op by op with
    PyTorch (no traced kernel, which would bake in the group ends), its
    weight's permute a view: each such region of examples/moe_layer.mlir
    (the experts' slots and row counts), run so on its inputs, gives the
    reference's values."""
    from xdsl.dialects.builtin import i64

    from fuserc.dialects import hir
    from fuserc.dialects.fusion_moe import GroupedMatmulOp
    from fuserc.ir import make_context
    from fuserc.pipeline import run_pipeline
    from fuserc.runtime.kernels import torch_regions
    from fuserc.runtime.backends.cpu import launch_with_torch

    ctx = make_context()
    text = (Path(__file__).parents[2] / "examples" / "moe_layer.mlir").read_text()
    module = run_pipeline(parse(text, "moe_layer.mlir", ctx), "default", ctx)
    regions = [o for o in module.walk() if isinstance(o, hir.LaunchOp) and any(isinstance(x, GroupedMatmulOp) for x in o.body.block.ops)]
    assert len(regions) == 3
    gen = torch.Generator().manual_seed(4)
    for launch in regions:
        body = launch.body.block
        assert torch_regions.runs_region(body)
        ins = [torch.full(v.type.get_shape(), 5) if v.type.element_type == i64 else torch.randn(v.type.get_shape(), generator=gen) for v in launch.ins]  # type: ignore[attr-defined]
        outs = [torch.empty(list(v.type.get_shape())) for v in launch.outs]  # type: ignore[attr-defined]
        want = [torch.empty_like(o) for o in outs]
        assert torch_regions.run_region(body, ins, outs)
        launch_with_torch(body, ins, want)
        torch.testing.assert_close(outs, want, rtol=1e-5, atol=1e-5)  # a strided weight rounds otherwise


def test_grouped_mm_layouts() -> None:
    """torch._grouped_mm's operands: row- or column-major matrices with
    16-byte strides (a transposed weight qualifies, a 4-wide bf16 row not)."""
    from fuserc.runtime.kernels.grouped_gemm import _aligned

    w = torch.zeros(4, 16, 32, dtype=torch.bfloat16)
    assert _aligned(w) and _aligned(w.transpose(1, 2)) and _aligned(torch.zeros(64, 32).t())
    assert not _aligned(torch.zeros(10, 4, dtype=torch.bfloat16)) and not _aligned(w[:, :, 1:])


def test_experts_block_sums_to_the_whole() -> None:
    """Each device's block of experts: the [T, N] rows of its experts (the
    blocks sum to the whole product) and its [E/d, K, N] weight gradients."""
    from fuserc.runtime.kernels.grouped_gemm import experts_block

    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(12, 4, generator=gen, dtype=torch.float64), torch.randn(4, 4, 3, generator=gen, dtype=torch.float64)
    offs = torch.tensor([3, 3, 9, 12])
    whole = grouped_matmul(a, b, offs)
    torch.testing.assert_close(experts_block(a, b[:2], offs, 0, 2) + experts_block(a, b[2:], offs, 2, 2), whole)
    assert not experts_block(a, b[:2], offs, 0, 2)[3:].any()
    at, g = torch.randn(4, 12, generator=gen, dtype=torch.float64), torch.randn(12, 3, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(experts_block(at, g, offs, 2, 2), grouped_matmul(at, g, offs)[2:])


def test_a_block_of_experts_reads_no_offset_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the torch._grouped_mm path (bf16, 16-byte aligned rows; it runs
    on the CPU too), a block of experts after the first finds where its
    rows begin on the device: nothing is read on the host (no wait for the
    GPU), and the blocks still give the whole grouped GEMM, in the
    forward's form and the weight gradient's, with an empty group and with
    the last group ending at the last row."""
    from fuserc.runtime.kernels import grouped_gemm as gg

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch._grouped_mm is not in this torch")
    gen = torch.Generator().manual_seed(5)
    rows, k, n = 24, 16, 8
    a, at = torch.randn(rows, k, generator=gen).bfloat16(), torch.randn(k, rows, generator=gen).bfloat16()
    b, g = torch.randn(4, k, n, generator=gen).bfloat16(), torch.randn(rows, n, generator=gen).bfloat16()
    cases = [torch.tensor([3, 3, 10, 17]), torch.tensor([5, 9, 9, 24])]
    wants = [(gg.grouped_matmul(a.double(), b.double(), o), gg.grouped_matmul(at.double(), g.double(), o)) for o in cases]

    def read(*args: Any) -> Any:
        raise AssertionError("an offset read on the host")

    monkeypatch.setattr(gg, "fast_path", lambda x, y: True)
    for name in ("item", "tolist", "__int__", "__index__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, read)
    got = [(gg.experts_block(a, b[2:], o, 2, 2), gg.experts_block(at, g, o, 1, 3)) for o in cases]
    monkeypatch.undo()
    for (rows_, blocks), (want_rows, want_blocks), offs in zip(got, wants, cases):
        start, end = int(offs[1]), int(offs[3])
        torch.testing.assert_close(rows_[start:end].double(), want_rows[start:end], rtol=2e-2, atol=5e-2)
        assert not rows_[:start].any() and not rows_[end:].any()
        torch.testing.assert_close(blocks.double(), want_blocks[1:], rtol=2e-2, atol=5e-2)


def test_split_experts_stay_where_they_are() -> None:
    """Experts' weights split over 4 devices ([DIDx, -, -]) are never
    gathered, forward or backward: each device multiplies the rows of its
    own experts and computes its own experts' weight gradients."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "python"))
    from moe_layer import definition

    fd = definition(32, 16, 24, 4, 2, False, "softmax", "f32", 4)
    weights = {(4, 24, 16), (4, 16, 24)}
    for name in ("main", "main_bwd"):
        lines = fd.comm_report("autodiff,default").function(name).lines
        moved = [line for line in lines if tuple(line.shape) in weights]
        assert lines and not moved, [(line.kind, line.shape) for line in moved]


def test_dispatch_combine_and_their_expert_parallel_steps() -> None:
    """dispatch fills each expert's slot with its pairs' rows in token
    order (a PyTorch loop over experts), combine reads them back; the
    expert-parallel steps (rows packed per source position, then placed;
    picked back) give the same slots as the whole op; a repeated id within
    a token is a located error, not a wrong result."""
    from fuserc.diagnostics import Diagnostic
    from fuserc.runtime.kernels import dispatch as dk

    g = torch.Generator().manual_seed(3)
    tokens, k, experts, hidden, ranks = 12, 2, 4, 5, 2
    # expert 0 takes every token, 1 and 2 the rest, 3 none
    ids = torch.stack([torch.zeros(tokens, dtype=torch.int64), torch.randint(1, 3, (tokens,), generator=g)], 1)
    x = torch.randn(tokens, hidden, generator=g, dtype=torch.float64)
    xe, counts_e = dk.dispatch(x, ids, experts)
    assert counts_e.tolist() == torch.bincount(ids.flatten(), minlength=experts).tolist()
    for e in range(experts):
        tok = torch.nonzero((ids == e).any(1)).flatten()
        torch.testing.assert_close(xe[e, : len(tok)], x[tok])
        assert not xe[e, len(tok):].any()
    back = dk.combine(xe, ids)
    torch.testing.assert_close(back, x.unsqueeze(1).expand(tokens, k, hidden))
    # the steps: each source position's pairs sorted by expert, counted per (source, expert)
    e_l, t_l = experts // ranks, tokens // ranks
    rows, counts = [], []
    for p in range(ranks):
        blk = ids[p * t_l : (p + 1) * t_l].flatten()
        order = torch.argsort(blk, stable=True)
        rows.append(x[p * t_l + order // k])
        counts.append(torch.bincount(blk, minlength=experts))
    for q in range(ranks):  # the rows position q receives, source by source, expert by expert
        got = torch.cat([r[(c.cumsum(0) - c)[q * e_l] : c.cumsum(0)[(q + 1) * e_l - 1]] for r, c in zip(rows, counts)])
        cnt = torch.stack([c[q * e_l : (q + 1) * e_l] for c in counts])
        slots = dk.place_rows(torch.cat([got, torch.zeros(3, hidden, dtype=x.dtype)]), cnt, tokens)
        torch.testing.assert_close(slots, xe[q * e_l : (q + 1) * e_l])
        torch.testing.assert_close(dk.pick_rows(slots, cnt, len(got) + 3)[: len(got)], got)
    twice = ids.clone()
    twice[:, 1] = 0
    with pytest.raises(Diagnostic, match="a token's ids must be distinct"):
        dk.dispatch(torch.cat([x, x]), torch.cat([twice, twice]), experts)


def test_slotted_grouped_matmul_multiplies_the_counted_rows() -> None:
    """[E, S, K] x [E, K, N] with row counts: each expert's first rows
    only (zero after, an expert of none allowed); counts past S refused."""
    from fuserc.diagnostics import Diagnostic
    from fuserc.runtime.kernels.grouped_gemm import slotted

    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(3, 6, 4, generator=g), torch.randn(3, 4, 5, generator=g)
    counts = torch.tensor([6, 0, 2])
    y = slotted(a, b, counts)
    for e, c in enumerate(counts.tolist()):
        torch.testing.assert_close(y[e, :c], a[e, :c] @ b[e])
        assert not y[e, c:].any()
    with pytest.raises(Diagnostic, match="row counts"):
        slotted(a, b, torch.tensor([7, 0, 0]))


def test_expert_parallel_regions_run_op_by_op_with_torch() -> None:
    """The launches of the data-dependent steps of dispatch and combine
    (place_rows, pick_rows) and of the slotted grouped GEMMs are run by
    PyTorch op by op on cuda too (a traced kernel would bake in the rows
    of one run); the routing launches (sort, counts, packing) trace."""
    from fuserc.dialects import hir
    from fuserc.dialects.fusion_dispatch import PickRowsOp, PlaceRowsOp
    from fuserc.dialects.fusion_moe import GroupedMatmulOp
    from fuserc.ir import make_context
    from fuserc.pipeline import run_pipeline
    from fuserc.runtime.kernels import torch_regions

    ctx = make_context()
    text = (Path(__file__).parents[2] / "examples" / "moe_layer.mlir").read_text()
    module = run_pipeline(parse(text, "moe_layer.mlir", ctx), "autodiff,default", ctx)
    kinds = (PlaceRowsOp, PickRowsOp, GroupedMatmulOp)
    launches = [o for o in module.walk() if isinstance(o, hir.LaunchOp)]
    eager = [o for o in launches if any(isinstance(x, kinds) for x in o.body.block.ops)]
    assert len([o for o in eager if any(isinstance(x, PlaceRowsOp) for x in o.body.block.ops)]) == 3  # @main, @main_fwd, @main_bwd (combine's transpose)
    assert all(torch_regions.runs_region(o.body.block) and torch_regions.eager_region(o.body.block) for o in eager)


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9 and hasattr(torch, "_grouped_mm")


def test_full_rows_from_the_dropless_sort_only() -> None:
    """A grouped GEMM whose offsets are cumsum(bincount(ids)) over as many
    ids as it has rows is marked FULL_ROWS on its local copy (no tail to
    zero), and so is its backward's grouped GEMM on the same offsets, in
    the lowered layer's forward and backward; offsets given as an input,
    or counted over fewer ids than rows, are not."""
    import sys

    from fuserc.dialects.fusion_moe import FULL_ROWS, GroupedMatmulOp
    from fuserc.ir import make_context
    from fuserc.pipeline import run_pipeline

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "python"))
    from moe_layer import definition

    ctx = make_context()
    module = run_pipeline(parse(definition(16, 8, 12, 4, 2, True, "softmax", "f32").to_mlir(), "moe", ctx), "autodiff{entry=main},default", ctx)
    marked: dict[str, list[bool]] = {}
    for op in module.walk():
        if isinstance(op, GroupedMatmulOp) and op.stacked():
            func = op.parent_op()
            while func is not None and func.name != "func.func":
                func = func.parent_op()
            marked.setdefault(func.sym_name.data, []).append(FULL_ROWS in op.attributes)  # type: ignore[union-attr]
    assert marked == {"main": [True] * 3, "main_fwd": [True] * 3, "main_bwd": [True] * 3}, marked

    fd = FusionDefinition()
    a, w = fd.define_tensor([10, 4]), fd.define_tensor([3, 4, 5])
    ends = fd.define_tensor([3], "i64")
    fewer = fd.ops.cumsum(fd.ops.bincount(fd.define_tensor([8], "i64"), length=3), dim=0)
    fd.add_output(fd.ops.grouped_matmul(a, w, ends))
    fd.add_output(fd.ops.grouped_matmul(a, w, fewer))
    module = parse(fd.to_mlir())
    assert [op.full_rows() for op in module.walk() if isinstance(op, GroupedMatmulOp)] == [False, False]


def test_placed_context_starts_on_the_host() -> None:
    """The first global index of a split value is read from the host's
    indices, also by a context placed on a device (a grouped GEMM's block
    of experts asks at every run: a read of the device's copy would wait
    for the device, and a CUDA graph capture cannot)."""
    from fuserc.dialects.interfaces import EvalContext

    ctx = EvalContext(indices={(1, 0): torch.tensor([4, 5, 6])})
    placed = ctx.on(torch.device("meta"))  # its indices cannot be read back at all
    assert placed.indices[(1, 0)].is_meta
    assert placed.global_start(1, 0) == 4 and placed.global_start(-1, 0) == 0 and ctx.global_start(1, 0) == 4


@pytest.mark.skipif(not _sm90(), reason="torch._grouped_mm's kernel needs a GPU of compute capability 9.0")
def test_grouped_matmul_zeroes_rows_past_the_groups_on_cuda() -> None:
    """torch._grouped_mm leaves rows past the last group unwritten: they
    are zeroed unless the offsets are known to end at the last row."""
    dev = torch.device("cuda")
    a, b = torch.randn(64, 32, device=dev, dtype=torch.bfloat16), torch.randn(4, 32, 16, device=dev, dtype=torch.bfloat16)
    for _ in range(3):  # leave garbage in the allocator's blocks
        torch.full((64, 16), float("nan"), device=dev, dtype=torch.bfloat16)
    offs = torch.tensor([16, 16, 40, 50], device=dev)
    y = grouped_matmul(a, b, offs)
    want = torch.cat([a[s:e].float() @ b[i].float() for i, (s, e) in enumerate(zip([0, 16, 16, 40], [16, 16, 40, 50]))])
    torch.testing.assert_close(y[:50].float(), want, rtol=2e-2, atol=2e-2)
    assert not y[50:].any()
    full = torch.tensor([16, 16, 40, 64], device=dev)
    torch.testing.assert_close(grouped_matmul(a, b, full, full_rows=True), grouped_matmul(a, b, full), rtol=0, atol=0)


@pytest.mark.skipif(not _sm90(), reason="torch._grouped_mm's kernel needs a GPU of compute capability 9.0")
def test_grouped_gemm_program_is_captured_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program of a grouped GEMM waits for nothing on the host, so its
    runs are captured and replayed as a CUDA graph."""
    import fuserc.torch as ft

    monkeypatch.setenv("FUSERC_CUDA_GRAPHS", "always")
    fd = FusionDefinition()
    a, w, ends = fd.define_tensor([64, 32], "bf16"), fd.define_tensor([4, 32, 16], "bf16"), fd.define_tensor([4], "i64")
    fd.add_output(fd.ops.grouped_matmul(a, w, ends))
    f = ft.function(fd)
    dev = torch.device("cuda")
    args = [torch.randn(64, 32, device=dev, dtype=torch.bfloat16), torch.randn(4, 32, 16, device=dev, dtype=torch.bfloat16),
            torch.tensor([16, 16, 40, 64], device=dev)]  # fmt: skip
    try:
        for _ in range(4):
            y = f(*args)
        torch.testing.assert_close(y, grouped_matmul(*args), rtol=0, atol=0)
        assert "replayed as a graph" in f.runs()["main"], f.runs()
    finally:
        f.close()


def test_permuted_weights_gradients_in_their_own_layout() -> None:
    """A weight stacked [E, N, K] and read permuted as [E, K, N] (as the
    layer's are) gets its gradient as g^T a per group, in its own layout:
    no region of the lowered backward permutes a grouped GEMM's result (a
    transposing copy of every expert's gradient); the gradients match
    torch.autograd's."""
    from fuserc.dialects import hir
    from fuserc.dialects.fusion_layout import PermuteOp
    from fuserc.dialects.fusion_moe import GroupedMatmulOp
    from fuserc.ir import make_context
    from fuserc.pipeline import run_pipeline

    fd = FusionDefinition()
    a, w, ends = fd.define_tensor([10, 4]), fd.define_tensor([3, 5, 4]), fd.define_tensor([3], "i64")
    fd.add_output(fd.ops.grouped_matmul(a, fd.ops.permute(w, dims=[0, 2, 1]), ends))
    gen = torch.Generator().manual_seed(6)
    args = [torch.randn(10, 4, generator=gen), torch.randn(3, 5, 4, generator=gen), torch.tensor([3, 3, 8])]
    ta, tw = (t.double().requires_grad_(True) for t in args[:2])
    y = grouped_matmul(ta, tw.transpose(1, 2), args[2])
    ct = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    y.backward(ct)
    ga, gw = _grads(fd, args, [ct])
    torch.testing.assert_close(ga, ta.grad)
    torch.testing.assert_close(gw, tw.grad)

    ctx = make_context()
    module = run_pipeline(parse(fd.to_mlir(), "gmm", ctx), "autodiff{entry=main},default", ctx)
    bwd = next(f for f in module.walk() if getattr(f, "sym_name", None) is not None and f.sym_name.data == "main_bwd")  # type: ignore[attr-defined]
    regions = [o.body.block for o in bwd.walk() if isinstance(o, hir.LaunchOp) and any(isinstance(x, GroupedMatmulOp) for x in o.body.block.ops)]
    assert len(regions) == 2
    for body in regions:
        gmm = next(x for x in body.ops if isinstance(x, GroupedMatmulOp))
        assert not any(isinstance(u.operation, PermuteOp) for u in gmm.results[0].uses)


def test_grouped_gemm_results_stand_for_their_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch._grouped_mm has no output argument: each grouped GEMM region's
    result stands for its output buffer (no copy into it), forward and
    backward (the weight gradients handed to the caller as they are), and
    the layer still matches the PyTorch loop (float64)."""
    import sys

    import fuserc.torch as ft
    from fuserc.runtime.evaluator import evaluator

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "python"))
    from moe_layer import definition, loop, params

    made: list[tuple[int, ...]] = []
    stand = evaluator.Program.made_for
    monkeypatch.setattr(evaluator.Program, "made_for", lambda self, b, m: (made.append(tuple(m.shape)), stand(self, b, m))[1])
    args = params(24, 16, 8, 4, True, seed=1)
    f = ft.function(definition(24, 16, 8, 4, 2, True, "softmax", "f32"))
    ps = [a.clone().requires_grad_(True) for a in args]
    try:
        y, aux = f(*ps)
        assert made == [(48, 8), (48, 8), (48, 16)]
        made.clear()
        (y.square().sum() + aux).backward()
        assert sorted(made) == sorted([(48, 8), (4, 8, 16), (48, 16), (4, 16, 8), (48, 16), (4, 8, 16)])
    finally:
        f.close()
    ts = [a.double().requires_grad_(True) for a in args]
    wy, waux = loop(*ts[:5], shared=ts[5:], k=2)
    (wy.square().sum() + waux).backward()
    torch.testing.assert_close(y.double(), wy, rtol=1e-4, atol=1e-4)
    for p, t in zip(ps, ts):
        torch.testing.assert_close(p.grad.double(), t.grad, rtol=1e-4, atol=1e-4)


def test_the_callers_buffer_goes_before_a_result_stands_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight gradient (a result the caller gets) is a grouped GEMM's
    result: the buffer made for the caller at its allocation is let go
    before the region makes the result, so the two are never held
    together (the Mixtral-like layer's are 940 MB each)."""
    import sys
    import weakref

    import fuserc.torch as ft
    from fuserc.runtime.backends.cpu import CpuBackend

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "python"))
    from moe_layer import definition, params

    made: list[weakref.ref[torch.Tensor]] = []
    held: list[int] = []
    empty, launch_made = CpuBackend.empty_for_caller, CpuBackend.launch_made

    def recorded(self: CpuBackend, shape: Any, dtype: torch.dtype) -> torch.Tensor:
        t = empty(self, shape, dtype)
        made.append(weakref.ref(t))
        return t

    def counted(self: CpuBackend, body: Any, ins: Any, contexts: Any = None, callers: bool = False) -> Any:
        alive = sum(1 for r in made if (t := r()) is not None and t.dim() == 3)  # the experts' gradients' buffers
        values = launch_made(self, body, ins, contexts, callers)
        if values is not None:  # a grouped GEMM's region
            held.append(alive)
        return values

    monkeypatch.setattr(CpuBackend, "empty_for_caller", recorded)
    monkeypatch.setattr(CpuBackend, "launch_made", counted)
    f = ft.function(definition(24, 16, 8, 4, 2, False, "softmax", "f32"))
    ps = [a.requires_grad_(True) for a in params(24, 16, 8, 4, False, seed=2)]
    try:
        y, aux = f(*ps)
        (y.sum() + aux).backward()
    finally:
        f.close()
    assert len(held) == 9 and not any(held), held
    assert all(p.grad is not None and p.grad.shape == p.shape for p in ps)


def test_a_result_stands_for_a_buffer_only_in_its_own_memory() -> None:
    """A region's value in memory of its own, laid out as the buffer, may
    stand for it; a view of an input, a slice of a larger tensor, another
    layout or memory another result took may not (they are copied)."""
    from fuserc.runtime.evaluator.stand_ins import own_memory as _own_memory

    from fuserc.runtime.evaluator.stand_ins import spec_of as _spec

    out = _spec(torch.empty(4, 6))
    fresh, x = torch.randn(4, 6), torch.randn(6, 4)
    assert _own_memory(fresh, out, set())
    assert not _own_memory(fresh, out, {fresh.untyped_storage().data_ptr()})
    assert not _own_memory(x.t(), out, set())  # another layout (and an input's)
    assert not _own_memory(torch.randn(5, 6)[:4], out, set())
    assert not _own_memory(fresh.double(), out, set())


def test_zero_tail_kernel_zeroes_only_the_rows_past_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tail kernel (runtime/kernels/grouped_tail.py) zeroes the rows from
    the last offset on and leaves the others as they were, at odd shapes
    (rows and columns not multiples of its blocks, no tail, all tail, a tail
    of more blocks than the kernel has programs, which each stride over); on
    a machine without a GPU in Triton's interpreter."""
    import importlib

    pytest.importorskip("triton")
    gpu = torch.cuda.is_available()
    if not gpu:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    from fuserc.runtime.kernels import grouped_tail

    if not gpu and type(grouped_tail._zero_tail).__name__ != "InterpretedFunction":
        grouped_tail = importlib.reload(grouped_tail)
    dev = torch.device("cuda" if gpu else "cpu")
    for rows, cols, end in ((70, 130, 45), (70, 130, 70), (33, 7, 0), (1, 300, 1), (40000, 3, 100)):
        y = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        before = y.clone()
        assert grouped_tail.zero_tail(y, torch.tensor([0, end // 2, end], device=dev))
        assert torch.equal(y[:end], before[:end]) and not y[end:].any()
    assert not grouped_tail.zero_tail(torch.zeros(4, 6, device=dev).t(), torch.tensor([2], device=dev))


def test_index_add_accumulates_low_precision_in_f32() -> None:
    """A bf16 index_add adds every source row in f32 and rounds once (the
    combine of a token's k results): its trace, what Inductor compiles for
    a region, adds in f32 (Inductor leaves a bf16 index_add to PyTorch's
    kernel of bf16 atomics, which round after each add); f32 is torch's
    exactly."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fuserc.dialects.fusion_moe import IndexAddOp
    from fuserc.dialects.interfaces import EvalContext

    fd = FusionDefinition()
    x, idx, src = fd.define_tensor([3, 4], "bf16"), fd.define_tensor([64], "i64"), fd.define_tensor([64, 4], "bf16")
    fd.add_output(fd.ops.index_add(x, idx, src))
    op = next(o for o in parse(fd.to_mlir()).walk() if isinstance(o, IndexAddOp))
    gen = torch.Generator().manual_seed(7)
    xs, rows, s = torch.randn(3, 4, generator=gen), torch.randint(0, 3, (64,), generator=gen), torch.randn(64, 4, generator=gen) / 3
    got = op.reference([xs.bfloat16(), rows, s.bfloat16()], EvalContext())
    want = xs.bfloat16().float().index_add(0, rows, s.bfloat16().float()).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    graph = make_fx(lambda a, i, b: op.reference([a, i, b], EvalContext()))(xs.bfloat16(), rows, s.bfloat16())
    adds = [n for n in graph.graph.nodes if n.op == "call_function" and "index_add" in str(n.target)]
    assert adds and all(n.meta["val"].dtype == torch.float32 for n in adds)
    assert torch.equal(op.reference([xs, rows, s], EvalContext()), xs.index_add(0, rows, s))

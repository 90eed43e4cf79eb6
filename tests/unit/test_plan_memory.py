"""plan-memory: which buffers of a host program share a block of memory
(the device's order: streams, events, tokens), which never do, and the
runtime's blocks (one program's sites over one block; the programs of one
compilation over one pool), checked against PyTorch."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import torch
from fuserc.dialects import hir
from fuserc.passes.plan_memory import PlanMemory, memory_plan, plan
from fuserc.runtime.evaluator.evaluator import Program
from xdsl.context import Context

import fuserc.torch
from fuserc.comm_report import report
from fuserc.ir import parse

ROOT = Path(__file__).resolve().parents[2]

T = "tensor<4x4xf32>"


def _program(body: str, results: str = T, returned: str = "%x") -> str:
    return f"""builtin.module {{
  func.func @main(%x: {T}) -> {results} attributes {{hir.host}} {{
{body}
    func.return {returned} : {results}
  }}
}}"""


def _storage(text: str) -> dict[str, int | None]:
    """Each site's storage number after the pass."""
    module = parse(text, "test.mlir")
    PlanMemory().apply(Context(), module)
    return {op.site: op.storage for op in module.walk() if isinstance(op, hir.AllocOp)}


def _shares(text: str, a: str, b: str) -> bool:
    s = _storage(text)
    return s[a] is not None and s[a] == s[b]


def test_buffers_one_after_the_other_share() -> None:
    text = _program(f"""
    %a = hir.alloc "a" : {T}
    hir.copy %x, %a : {T}, {T}
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}
    hir.copy %b, %x : {T}, {T}""")
    assert _shares(text, "a", "b")


def test_buffers_used_together_do_not() -> None:
    text = _program(f"""
    %a = hir.alloc "a" : {T}
    %b = hir.alloc "b" : {T}
    hir.copy %x, %a : {T}, {T}
    hir.copy %a, %b : {T}, {T}
    hir.copy %b, %x : {T}, {T}""")
    assert not _shares(text, "a", "b")


def test_a_small_buffer_that_lives_long_leaves_the_large_block_to_the_next_large_one() -> None:
    """`s` (small) could sit in the block `a` (large) left free, but it is
    in use to the end: there it would hold the block, and `b` (as large as
    `a`) would need one of its own (a backward's every layer so)."""
    big = "tensor<16x16xf32>"
    text = f"""builtin.module {{
  func.func @main(%x: {T}, %y: {big}) -> {T} attributes {{hir.host}} {{
    %a = hir.alloc "a" : {big}
    hir.copy %y, %a : {big}, {big}
    hir.copy %a, %y : {big}, {big}
    %s = hir.alloc "s" : {T}
    hir.copy %x, %s : {T}, {T}
    %b = hir.alloc "b" : {big}
    hir.copy %y, %b : {big}, {big}
    hir.copy %b, %y : {big}, {big}
    hir.copy %s, %x : {T}, {T}
    func.return %x : {T}
  }}
}}"""
    s = _storage(text)
    assert s["a"] == s["b"] != s["s"]
    module = parse(text, "test.mlir")
    PlanMemory().apply(Context(), module)
    assert memory_plan(next(iter(module.ops))).planned == 16 * 16 * 4 + 4 * 4 * 4  # type: ignore[arg-type]


def test_the_layers_of_a_backward_reuse_one_layers_blocks() -> None:
    """The backward of the L-layer GPT model of train_gpt.py: a layer's
    temporaries are dead once its gradients are out, so the blocks of 6
    layers take no more than those of 3 (only the returned gradients grow;
    from 3 layers on, the first and last layers' packings are in)."""
    import argparse

    from fuserc.passes.plan_memory import host_funcs
    from fuserc.runtime.evaluator.program import compile_module

    sys.path.insert(0, str(ROOT / "examples" / "python"))
    try:
        import train_gpt
    finally:
        sys.path.pop(0)
    blocks = {}
    for layers in (3, 6):
        a = argparse.Namespace(layers=layers, hidden=64, tokens=32, heads=4, ffn=256, vocab=128, dropout=0.0, dtype="f32")
        fd, _ = train_gpt.build(a, 1)
        host = compile_module(fd.to_mlir(), "model.mlir", "main_fwd", "autodiff,default", ranks=1).host
        bwd = next(f for f in host_funcs(host) if f.sym_name.data == "main_bwd")
        got, _, why = plan(bwd)
        assert why == ""
        blocks[layers] = sum(k.bytes for k in got)
    assert blocks[6] == blocks[3], blocks


def _worker(join: str, ranks: str = "") -> str:
    """`a` written on a worker stream, `b` on the main stream after `join`
    (all in a region of `ranks` when given)."""
    body = f"""
    %main = hir.get_current_stream : !hir.stream
    %c0 = hir.constant 0 : index
    %s = hir.stream_for %c0 mod 2 : !hir.stream
    %a = hir.alloc "a" : {T}
    hir.set_current_stream %s : !hir.stream
    hir.copy %x, %a : {T}, {T}
    hir.set_current_stream %main : !hir.stream
{join}
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}
    hir.copy %b, %x : {T}, {T}"""
    return _program(f"    hir.if_rank [{ranks}] {{{body}\n    }}" if ranks else body)


def test_a_worker_streams_buffer_waits_for_its_join() -> None:
    """Later in the host's order is not later on the device: until the main
    stream waits for the worker, `a` may still be written there."""
    assert not _shares(_worker(""), "a", "b")
    assert _shares(_worker("    hir.sync_stream %s : !hir.stream"), "a", "b")
    events = """    hir.set_current_stream %s : !hir.stream
    %e = hir.record_event : !hir.event
    hir.set_current_stream %main : !hir.stream
    hir.wait_event %e : !hir.event"""
    assert _shares(_worker(events), "a", "b")


def test_an_order_some_ranks_lack_orders_nothing() -> None:
    """An event recorded in a region of rank 0 alone, in a program of ranks
    0 and 1: rank 1 never waits for the worker stream, so the buffer written
    there keeps its memory; recorded on both ranks, it shares."""

    def text(ranks: str) -> str:
        join = f"""    hir.set_current_stream %s : !hir.stream
    %e = hir.if_rank [{ranks}] -> (!hir.event) {{
      %r = hir.record_event : !hir.event
      hir.yield %r : !hir.event
    }}
    hir.set_current_stream %main : !hir.stream
    hir.wait_event %e : !hir.event"""
        return _worker(join, ranks="0, 1")

    assert not _shares(text("0"), "a", "b")
    assert _shares(text("0, 1"), "a", "b")


def test_worker_streams_by_loop_index() -> None:
    """Streams picked by a loop's index: iteration 0's stream is joined,
    iteration 1's is not, so its buffer keeps its memory."""
    text = _program(f"""
    %main = hir.get_current_stream : !hir.stream
    %a = hir.alloc "a" : {T}
    %a2 = hir.alloc "a2" : {T}
    hir.for %i = 0 to 2 {{
      %s = hir.stream_for %i mod 2 : !hir.stream
      hir.set_current_stream %s : !hir.stream
      hir.copy %x, %a : {T}, {T}
      hir.copy %x, %a2 : {T}, {T}
    }}
    hir.set_current_stream %main : !hir.stream
    %c0 = hir.constant 0 : index
    %s0 = hir.stream_for %c0 mod 2 : !hir.stream
    hir.sync_stream %s0 : !hir.stream
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}
    %c1 = hir.constant 1 : index
    %s1 = hir.stream_for %c1 mod 2 : !hir.stream
    hir.sync_stream %s1 : !hir.stream""")
    assert not _shares(text, "a", "b")  # written on stream 1 too, joined only after b's use
    text2 = text.replace(
        f"""    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}
    %c1 = hir.constant 1 : index
    %s1 = hir.stream_for %c1 mod 2 : !hir.stream
    hir.sync_stream %s1 : !hir.stream""",
        f"""    %c1 = hir.constant 1 : index
    %s1 = hir.stream_for %c1 mod 2 : !hir.stream
    hir.sync_stream %s1 : !hir.stream
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}""",
    )
    assert _shares(text2, "a", "b")


def test_a_communication_holds_its_buffers_until_waited() -> None:
    """An all-reduce's buffer is in flight until its token is waited (the
    cpu backend transfers until then), even on one stream."""

    def text(wait_first: bool) -> str:
        wait = "    hir.wait %t : !hir.token"
        return _program(f"""
    %a = hir.alloc "a" : {T}
    hir.copy %x, %a : {T}, {T}
    %t = hir.allreduce %a, %a op = sum team = [0] backend = mpi : ({T}, {T}) -> !hir.token
{wait if wait_first else ""}
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}
{"" if wait_first else wait}
    hir.copy %b, %x : {T}, {T}""")

    assert not _shares(text(False), "a", "b")
    assert _shares(text(True), "a", "b")


def test_returned_shared_and_looped_buffers_keep_their_own() -> None:
    text = f"""builtin.module {{
  func.func @main(%x: {T}) -> {T} attributes {{hir.host}} {{
    %r = hir.alloc "r" : {T}
    hir.copy %x, %r : {T}, {T}
    %v = hir.alloc "v" : {T}
    %h = hir.share %v team = [0] : {T} -> !hir.handle
    hir.copy %x, %v : {T}, {T}
    hir.for %i = 0 to 2 {{
      %l = hir.alloc "l" : {T}
      hir.copy %x, %l : {T}, {T}
      hir.dealloc %l : {T}
    }}
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}
    %b2 = hir.alloc "b2" : {T}
    hir.copy %x, %b2 : {T}, {T}
    func.return %r : {T}
  }}
}}"""
    module = parse(text, "test.mlir")
    func = next(op for op in module.ops)
    _, left, why = plan(func)  # type: ignore[arg-type]
    assert why == ""
    assert {b.alloc.site: b.pinned for b in left} == {
        "r": "returned",
        "v": "shared with peers",
        "l": "allocated in a loop",
    }
    s = _storage(text)
    assert s["r"] is s["v"] is s["l"] is None and s["b"] == s["b2"] == 0


def test_a_stream_chosen_by_rank_leaves_the_program_alone() -> None:
    text = _program(f"""
    %p = hir.team_index team = [0] : index
    %s = hir.stream_for %p mod 2 : !hir.stream
    hir.set_current_stream %s : !hir.stream
    %a = hir.alloc "a" : {T}
    hir.copy %x, %a : {T}, {T}
    %b = hir.alloc "b" : {T}
    hir.copy %x, %b : {T}, {T}""")
    module = parse(text, "test.mlir")
    _, _, why = plan(next(iter(module.ops)))  # type: ignore[arg-type]
    assert why == "a stream chosen by the rank's position"
    assert set(_storage(text).values()) == {None}


def _gpt(n_tokens: int = 32, hidden: int = 64, heads: int = 4, ffn: int = 128):
    sys.path.insert(0, str(ROOT / "examples" / "python"))
    try:
        import gpt_layer
    finally:
        sys.path.pop(0)
    return gpt_layer, gpt_layer.build(n_tokens, hidden, heads, ffn, 1, "f32")


def test_the_gpt_layer_holds_less_and_computes_the_same() -> None:
    """The layer's forward and backward through fuserc.torch.function on
    one rank: each program's blocks take less than its buffers, the
    forward and the backward take their blocks from one pool (the same
    memory), which holds none between the runs, and the output and every
    gradient are autograd's."""
    gpt_layer, fd = _gpt()
    f = fuserc.torch.function(fd, kernel_builds="before")
    args = [a.to(torch.float32).requires_grad_(True) for a in gpt_layer.inputs(32, 64, 128)]
    ref_args = [a.detach().clone().requires_grad_(True) for a in args]
    dy = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    for _ in range(2):  # the second step runs over the blocks the first left
        for a in args:
            a.grad = None
        y = f(*args)
        y.backward(dy)
    want = gpt_layer.reference(ref_args, heads=4)
    want.backward(dy)
    assert torch.allclose(y.detach(), want.detach(), rtol=1e-4, atol=1e-5)
    for a, r in zip(args, ref_args):
        assert a.grad is not None and torch.allclose(a.grad, r.grad, rtol=1e-4, atol=1e-5)
    (loaded,) = f._loaded.values()
    fwd, bwd = loaded.programs["main_fwd"], loaded.programs["main_bwd"]
    for p in (fwd, bwd):
        m = memory_plan(p.func)
        assert m.planned < m.unplanned and m.shared_blocks > 0, m
        assert p.cache.pool is loaded.pool
    fwd_blocks, bwd_blocks = _block_storages(fwd), _block_storages(bwd)
    assert fwd_blocks and fwd_blocks & bwd_blocks
    assert loaded.pool.pinned is None and loaded.pool.released and loaded.pool.nbytes() == 0
    memory = {g["name"]: g["memory"] for g in report(loaded.compiled.host).as_dict()["functions"]}
    assert memory["main_bwd"] == asdict(memory_plan(bwd.func)) and memory["main_bwd"]["planned"] < memory["main_bwd"]["unplanned"]
    f.close()


def _block_storages(p: Program) -> set[int]:
    """The storages (the memory, wherever it lies now) of the program's
    buffers that lie in blocks."""
    planned = {op.site for op in p.func.walk() if isinstance(op, hir.AllocOp) and op.storage is not None}
    return {e.buffer.untyped_storage()._cdata for e in p.cache if e.key[0] in planned}

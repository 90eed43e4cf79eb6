"""Run under mpiexec or torchrun by test_torch_function.py (and on a GPU):
`fuserc.torch.function` on this rank's shards against torch.autograd on the
global tensors. Each case prints `CASE <name> ok` or `CASE <name> FAILED:
<why>` on rank 0 (every rank checks its own shards; failures are gathered).

    python tests/e2e/torch_function_worker.py [--device cuda] [--no-host-copies]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import fuserc.torch
from fuserc.api import FusionDefinition, Mesh, shard_tensor
from fuserc.runtime.evaluator.graphs import GRAPHS_ENV
from fuserc.runtime.job.mpi_env import mpi_env

ENV = mpi_env()
RANK, SIZE = ENV.rank, ENV.size
TOL = 1e-4
DEVICE = torch.device("cpu")


def shard(t: torch.Tensor, s: list[str] | object, mesh: Mesh) -> torch.Tensor:
    return shard_tensor(t.detach().cpu(), s, mesh, RANK).contiguous().to(DEVICE)


def close(got: torch.Tensor | None, want: torch.Tensor, what: str) -> None:
    if got is None:
        raise AssertionError(f"{what}: missing")
    err = (got.detach().double().cpu() - want.detach().double().cpu()).abs().max().item()
    scale = max(1.0, want.detach().abs().max().item())
    if not err <= TOL * scale:
        raise AssertionError(f"{what}: max abs error {err:.3e} over {TOL * scale:.1e}")


def mlp(d: int) -> tuple[FusionDefinition, Mesh, list]:
    """Sequence-parallel MLP with a layer norm whose replicated weight gets a
    partial gradient (reduced by the program)."""
    fd = FusionDefinition()
    mesh = fd.sched.mesh("tp", [d])
    x = fd.define_tensor([8 * d, 16])
    g = fd.define_tensor([16])
    w1 = fd.define_tensor([16, 8 * d])
    w2 = fd.define_tensor([8 * d, 16])
    y = fd.ops.gelu(fd.ops.layer_norm(x, g, dims=1) @ w1) @ w2
    fd.add_output(y)
    fd.add_output(fd.ops.sum(y * y, dims=[0, 1]))
    for t, s in ((x, ["DIDx", "-"]), (g, ["-"]), (w1, ["-", "DIDx"]), (w2, ["DIDx", "-"]), (y, ["DIDx", "-"])):
        fd.sched.shard(t, "tp", s)
    return fd, mesh, [x, g, w1, w2, y]


def mlp_torch(x: torch.Tensor, g: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.gelu(F.layer_norm(x, (x.shape[1],), g) @ w1) @ w2
    return y, (y * y).sum()


def globals_(d: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(8 * d, 16, generator=gen), 1 + 0.1 * torch.randn(16, generator=gen),
        torch.randn(16, 8 * d, generator=gen) / 4, torch.randn(8 * d, 16, generator=gen) / 4,
    ]  # fmt: skip


_FUNCTIONS: dict[str, fuserc.torch.Function] = {}


def function(fd: FusionDefinition, save: str = "activations", algorithm: str | None = None) -> fuserc.torch.Function:
    """One compiled function per `save` and `algorithm` for every case (the
    cases' programs are the same MLP): compiling once keeps the job short."""
    key = f"{save}/{algorithm}"
    if key not in _FUNCTIONS:
        _FUNCTIONS[key] = fuserc.torch.function(fd, save=save, algorithm=algorithm)
    return _FUNCTIONS[key]


def case_grads(save: str, algorithm: str | None = None, f: fuserc.torch.Function | None = None) -> None:
    """Outputs and every gradient against torch.autograd, two calls (of
    `f`, else of the MLP's function). With `algorithm="ring"` every site is
    a ring, and the backward's pull ring of the first GEMM's input gradient
    has the weight gradients' GEMMs from before it beside it
    (`schedule.beside_ring`)."""
    fd, mesh, ts = mlp(SIZE)
    f = f or function(fd, save, algorithm)
    for seed in (0, 1):
        glob = [t.requires_grad_(True) for t in globals_(SIZE, seed)]
        y, s = mlp_torch(*glob)
        ct = torch.randn(y.shape, generator=torch.Generator().manual_seed(7))
        (y * ct).sum().add(s * 0.5).backward()
        loc = [shard(t, s_, mesh).requires_grad_(True) for t, s_ in zip(glob, ts)]
        ly, ls = f(*loc)
        close(ly, shard(y, ts[4], mesh), "y")
        close(ls, s, "sum")
        (ly * shard(ct, ts[4], mesh)).sum().add(ls * 0.5).backward()
        for name, lt, gt, sh in zip(("x", "g", "w1", "w2"), loc, glob, ts):
            close(lt.grad, shard(gt.grad, sh, mesh), f"grad {name} (call {seed})")


PULLS_LINKS = {
    "nccl_busbw_gbps": 0.01, "nccl_latency_us": 0, "copy_engine_gbps": 100, "copy_engine_latency_us": 0,
    "ipc_fence_us": 0, "launch_us": 0, "chunk_us": 1e6,
}  # fmt: skip
"""A node whose NCCL is slow and copy engines fast, on which no pipeline
pays (each chunk costs a second): the backward's reduce-scatter of the
layer norm's output gradient stays a collective, scheduled beside the
weight gradients' GEMMs, and is made of copy-engine pulls
(`schedule.pull_beside`)."""


def case_grads_pulls() -> None:
    """`case_grads` with the reduce-scatter beside the weight gradients
    done by copy-engine pulls, checked in the plan (gets, no NCCL
    reduce-scatter, in the backward) and against autograd."""
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fuserc-pulls-links-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump(PULLS_LINKS, f)
    before = os.environ.get("FUSERC_LINKS")
    os.environ["FUSERC_LINKS"] = path
    try:
        fd, _, _ = mlp(SIZE)
        bwd = fd.comm_report("autodiff,default").function("main_bwd")
        kinds = [(line.kind, line.reshard) for line in bwd.lines]
        if SIZE > 1:  # (one rank communicates nothing)
            assert ("get", "partial->DIDx") in kinds and not any(k == "reduce_scatter" for k, _ in kinds), kinds
        f = fuserc.torch.function(fd)  # compiled at its first call, on that node
        case_grads("activations", f=f)
        f.close()
    finally:
        if before is None:
            os.environ.pop("FUSERC_LINKS", None)
        else:
            os.environ["FUSERC_LINKS"] = before
        os.remove(path)


def case_partial_requires_grad() -> None:
    """Only the weights require grad; the input gets none and needs none."""
    fd, mesh, ts = mlp(SIZE)
    f = function(fd)
    glob = globals_(SIZE)
    for t in glob[1:]:
        t.requires_grad_(True)
    y, _ = mlp_torch(*glob)
    y.sum().backward()
    loc = [shard(t, s, mesh) for t, s in zip(glob, ts)]
    for t in loc[1:]:
        t.requires_grad_(True)
    ly, _ = f(*loc)
    ly.sum().backward()
    assert loc[0].grad is None, "an input that does not require grad got one"
    for name, lt, gt, sh in zip(("g", "w1", "w2"), loc[1:], glob[1:], ts[1:]):
        close(lt.grad, shard(gt.grad, sh, mesh), f"grad {name}")


def case_model_budget() -> None:
    """The 2-layer GPT model of train_gpt.py with autodiff `budget=0` (each
    block's forward redone in the backward from the residual stream): the
    loss and every gradient against float64 autograd on the global tensors."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
    import train_gpt

    a = argparse.Namespace(layers=2, hidden=32, tokens=8 * SIZE, heads=4, ffn=64, vocab=16 * SIZE, dropout=0.0, dtype="f32", seed=0)
    fd, mesh = train_gpt.build(a, SIZE)
    gen = torch.Generator().manual_seed(5)
    glob = [w + 0.1 * torch.randn(w.shape, generator=gen) for w in train_gpt.initial_weights(a)]
    ids, labels = (torch.randint(0, a.vocab, (a.tokens,), generator=gen) for _ in range(2))
    ref = [w.double().requires_grad_(True) for w in glob]
    want = train_gpt.reference_loss(ids, labels, ref, a)
    want.backward()
    f = fuserc.torch.function(fd, autodiff="budget=0")
    try:
        specs = fd.inputs[2:]
        loc = [shard(w, s, mesh).requires_grad_(True) for w, s in zip(glob, specs)]
        loss = f(ids.to(DEVICE), labels.to(DEVICE), *loc)
        loss.backward()
        close(loss, want, "loss")
        for i, (lt, r, s) in enumerate(zip(loc, ref, specs)):
            close(lt.grad, shard(r.grad, s, mesh), f"grad of parameter {i}")
    finally:
        f.close()


def case_no_grad_and_ownership() -> None:
    """Under torch.no_grad: @main runs, no graph is recorded; results are the
    caller's (the next call does not overwrite them)."""
    fd, mesh, ts = mlp(SIZE)
    f = function(fd)
    first = [shard(t, s, mesh).requires_grad_(True) for t, s in zip(globals_(SIZE, 0), ts)]
    second = [shard(t, s, mesh) for t, s in zip(globals_(SIZE, 1), ts)]
    with torch.no_grad():
        y0, _ = f(*first)
    assert not y0.requires_grad and y0.grad_fn is None, "a result under no_grad carries a graph"
    kept = y0.clone()
    y1, _ = f(*second)
    assert y0.data_ptr() != y1.data_ptr(), "two calls returned the same buffer"
    close(y0, kept, "a result after the next call")
    want, _ = mlp_torch(*globals_(SIZE, 1))
    close(y1, shard(want, ts[4], mesh), "y of the second call")


def case_inplace_change_before_backward() -> None:
    """The forward saves the weights its backward needs as they are (the
    caller's tensors, not copies), as torch.autograd saves them: a weight
    changed in place between the forward and the backward makes the
    backward fail as PyTorch's does on the same change, not compute a
    gradient from the new values."""
    fd, mesh, ts = mlp(SIZE)
    f = function(fd)
    loc = [shard(t, s, mesh).requires_grad_(True) for t, s in zip(globals_(SIZE), ts)]
    glob = [t.requires_grad_(True) for t in globals_(SIZE)]
    ly, _ = f(*loc)
    y, _ = mlp_torch(*glob)
    with torch.no_grad():
        loc[3].mul_(2.0)  # w2
        glob[3].mul_(2.0)
    errors = []
    for out in (y, ly):
        try:
            out.sum().backward()
        except RuntimeError as e:
            errors.append(str(e))
    assert len(errors) == 2, f"PyTorch's backward and fuserc's: {len(errors)} of 2 failed: {errors}"
    assert all("modified by an inplace operation" in e for e in errors), errors
    assert "of @main_fwd" in errors[1], errors[1]


def case_replayed_steps(algorithm: str | None = None) -> None:
    """Training steps on the same buffers, their values changed in place
    between steps (as an optimizer changes them): each step's outputs and
    gradients against torch.autograd, and each step's outputs unchanged
    after the later steps; then two micro-batches whose forwards both run
    before their backwards (gradients accumulated). With
    FUSERC_CUDA_GRAPHS=always the cuda backend replays @main_fwd from the
    second step (its saved tensors lent from the graph's buffers, those of
    the first micro-batch copied out by the second forward); the cpu
    backend runs op by op. With `algorithm` "ring" the saved tensors
    include buffers shared with peers (the gathered activations), which a
    run op by op lends as they are, as a replay does."""
    before = os.environ.get(GRAPHS_ENV)
    os.environ[GRAPHS_ENV] = "always"  # (read when a program loads: at the first call)
    try:
        replayed_steps(algorithm)
    finally:
        if before is None:
            del os.environ[GRAPHS_ENV]
        else:
            os.environ[GRAPHS_ENV] = before


def replayed_steps(algorithm: str | None) -> None:
    fd, mesh, ts = mlp(SIZE)
    f = fuserc.torch.function(fd, algorithm=algorithm)
    glob = globals_(SIZE, 3)
    loc = [shard(t, s_, mesh).requires_grad_(True) for t, s_ in zip(glob, ts)]
    ct = torch.randn(8 * SIZE, 16, generator=torch.Generator().manual_seed(5))
    cts = [shard(ct, ts[4], mesh), torch.tensor(0.5, device=DEVICE)]  # the same buffers every step
    held = []
    for step in range(6):
        for t in loc:
            t.grad = None
        ly, ls = f(*loc)
        torch.autograd.backward([ly, ls], cts)
        gl = [t.detach().clone().requires_grad_(True) for t in glob]
        y, s = mlp_torch(*gl)
        (y * ct).sum().add(s * 0.5).backward()
        close(ly, shard(y, ts[4], mesh), f"y (step {step})")
        close(ls, s, f"sum (step {step})")
        for name, lt, gt, sh in zip(("x", "g", "w1", "w2"), loc, gl, ts):
            close(lt.grad, shard(gt.grad, sh, mesh), f"grad {name} (step {step})")
        held.append((ly, shard(y, ts[4], mesh)))
        with torch.no_grad():  # an optimizer's step, in place (a shard may view its global tensor)
            for t, lt, sh in zip(glob, loc, ts):
                t.mul_(0.9).add_(0.01)
                lt.copy_(shard(t, sh, mesh))
    for step, (ly, want) in enumerate(held):
        close(ly, want, f"y of step {step} after the later steps")
    # Two micro-batches, both forwards before either backward: the second
    # forward's replay must not overwrite what the first saved.
    glob2 = [glob[0].roll(1, dims=1) * 0.5 + 0.1, *glob[1:]]  # (rows that normalize to other rows)
    x2 = shard(glob2[0], ts[0], mesh).requires_grad_(True)
    for t in loc:
        t.grad = None
    (ly1, ls1), (ly2, ls2) = f(*loc), f(x2, *loc[1:])
    torch.autograd.backward([ly1, ls1, ly2, ls2], [*cts, *cts])
    gl, gl2 = ([t.detach().clone().requires_grad_(True) for t in g] for g in (glob, glob2))
    for g in (gl, gl2):
        y, s = mlp_torch(*g)
        (y * ct).sum().add(s * 0.5).backward()
    close(loc[0].grad, shard(gl[0].grad, ts[0], mesh), "grad x of micro-batch 1")
    close(x2.grad, shard(gl2[0].grad, ts[0], mesh), "grad x of micro-batch 2")
    for name, lt, g1, g2, sh in zip(("g", "w1", "w2"), loc[1:], gl[1:], gl2[1:], ts[1:]):
        close(lt.grad, shard(g1.grad + g2.grad, sh, mesh), f"grad {name} of two micro-batches")
    runs = f.runs()
    if RANK == 0:
        print(f"replays: {runs}", flush=True)
    if DEVICE.type == "cuda":
        assert runs["main_fwd"].startswith("replayed"), f"@main_fwd was not replayed: {runs['main_fwd']}"
    f.close()


def case_non_contiguous() -> None:
    """Transposed and strided inputs are made contiguous where they are."""
    fd, mesh, ts = mlp(SIZE)
    f = function(fd)
    glob = [t.requires_grad_(True) for t in globals_(SIZE)]
    y, _ = mlp_torch(*glob)
    y.sum().backward()
    loc = [shard(t, s, mesh) for t, s in zip(glob, ts)]
    w1t = loc[2].t().contiguous().t().detach().requires_grad_(True)  # a transposed view's layout
    x2 = torch.stack([loc[0], 0 * loc[0]], dim=-1)[..., 0].detach().requires_grad_(True)  # a strided view
    assert not w1t.is_contiguous() and not x2.is_contiguous()
    ly, _ = f(x2, loc[1], w1t, loc[3])
    ly.sum().backward()
    close(ly, shard(y, ts[4], mesh), "y")
    close(w1t.grad, shard(glob[2].grad, ts[2], mesh), "grad w1 (transposed input)")


def case_execute_local() -> None:
    """CompiledProgram.execute on local shards, gathered and not."""
    fd, mesh, ts = mlp(SIZE)
    program = fd.compile()
    glob = globals_(SIZE)
    y, s = mlp_torch(*glob)
    loc = [shard(t, sh, mesh) for t, sh in zip(glob, ts)]
    gy, gs = program.execute(loc, local=True)
    close(gy, y, "gathered y")
    close(gs, s, "gathered sum")
    assert gy.device == DEVICE, f"a result came back on {gy.device}"
    ly, _ = program.execute(loc, local=True, gather=False)
    close(ly, shard(y, ts[4], mesh), "local y")
    gy2, _ = program.execute([t.to(DEVICE) for t in glob])
    close(gy2, y, "y from global inputs")
    program.close()


def no_host_copies(body: Callable[[], None], settled: Callable[[], bool] | None = None) -> None:
    """`body` (after the warm-up calls: the first, and the trial that times
    replays against runs op by op, each of its calls started on an idle
    device, until `settled` says every program's way is chosen on every
    rank: ranks decide alone, but all make the same calls) copies nothing
    between host and device and never waits on the host: the profiler
    sees no memcpy to or from the host and no synchronize call."""
    from torch.profiler import ProfilerActivity, profile, record_function

    body()
    for _ in range(40 if settled is not None else 0):
        if all(ENV.allgather(settled())):
            break
        body()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("call_under_test"):
            body()
    torch.cuda.synchronize()
    events = prof.events()
    call = next(e for e in events if e.name == "call_under_test")
    lo, hi = call.time_range.start, call.time_range.end
    copies = {e.name for e in events if "HtoD" in e.name or "DtoH" in e.name}  # device memcpy activity
    waits = {e.name for e in events if "Synchronize" in e.name and lo <= e.time_range.start <= hi}
    bad = sorted(copies | waits)
    if bad:
        def within(e: Any) -> str:  # the host ops around a runtime call, innermost first
            outer = [o for o in events if o.name not in ("call_under_test", e.name) and o.time_range.start <= e.time_range.start and e.time_range.end <= o.time_range.end]
            return " < ".join(o.name for o in sorted(outer, key=lambda o: o.time_range.end - o.time_range.start)[:4])
        calls = {f"{e.name} in {within(e)}" for e in events if lo <= e.time_range.start <= hi and ("Synchronize" in e.name or "Memcpy" in e.name)}
        raise AssertionError(f"host round trips inside a call: {', '.join(bad)} ({'; '.join(sorted(calls))})")


def steady(runs: Callable[[], dict[str, str]], calls: int = 8) -> Callable[[], bool]:
    """Whether how each program's calls go (replayed or op by op, its
    captures and staged inputs, but for the count of replays) has not
    changed for `calls` calls in a row: no trial, capture or retrial to
    come while its inputs stay where they are."""
    seen: list[dict[str, str]] = []

    def check() -> bool:
        seen.append({name: re.sub(r"\d+ replays", "", way) for name, way in runs().items()})
        return len(seen) >= calls and all(s == seen[-1] for s in seen[-calls:])

    return check


def case_gpu_no_host_copies() -> None:
    """Also: torch's current stream is the caller's after every call, the
    first (which makes the backend) included."""
    fd, mesh, ts = mlp(SIZE)
    f = function(fd)
    loc = [shard(t, s, mesh).requires_grad_(True) for t, s in zip(globals_(SIZE), ts)]
    side = torch.cuda.Stream()
    fresh = [t.detach().clone().requires_grad_(True) for t in loc]  # their own autograd nodes, made on `side`
    with torch.cuda.stream(side):
        y, _ = f(*fresh)
        assert torch.cuda.current_stream() == side, "a call left torch on another stream"
        y.sum().backward()
        assert torch.cuda.current_stream() == side, "a backward left torch on another stream"
    torch.cuda.synchronize()

    def step() -> None:
        y, s = f(*loc)
        (y.sum() + s).backward()

    no_host_copies(step, steady(f.runs))
    program = fd.compile()
    plain = [t.detach() for t in loc]
    no_host_copies(lambda: program.execute(plain, local=True, gather=False), steady(lambda: {"main": program.program.replays.mode()}))
    program.close()


CASES: dict[str, Callable[[], None]] = {
    "grads_activations": lambda: case_grads("activations"),
    "grads_inputs": lambda: case_grads("inputs"),
    "grads_rings": lambda: case_grads("activations", "ring"),
    "grads_pulls": case_grads_pulls,
    "partial_requires_grad": case_partial_requires_grad,
    "no_grad_and_ownership": case_no_grad_and_ownership,
    "non_contiguous": case_non_contiguous,
    "replayed_steps": case_replayed_steps,
    "replayed_steps_rings": lambda: case_replayed_steps("ring"),
    "inplace_change_before_backward": case_inplace_change_before_backward,
    "execute_local": case_execute_local,
}


def run_cases(cases: dict[str, Callable[[], None]]) -> int:
    """Run each case on every rank; rank 0 prints `CASE <name> ok` or the
    failures of every rank. Returns how many failed."""
    failed = 0
    for name, run in cases.items():
        try:
            run()
            why = ""
        except Exception as e:  # noqa: BLE001 - reported per case
            why = f"{type(e).__name__}: {e}" + ("" if isinstance(e, AssertionError) else "\n" + traceback.format_exc())
        whys = ENV.allgather(why)
        if RANK == 0:
            bad = [f"rank {r}: {w}" for r, w in enumerate(whys) if w]
            print(f"CASE {name} " + ("ok" if not bad else "FAILED: " + "; ".join(bad)), flush=True)
        failed += any(whys)
    return failed


def main() -> None:
    global DEVICE
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--no-host-copies", action="store_true", help="(cuda) also the profiler check")
    a = p.parse_args()
    if a.device == "cuda":
        DEVICE = fuserc.torch.device("cuda")  # the GPU fuserc's backend takes
        torch.cuda.set_device(DEVICE)
        torch.backends.cuda.matmul.allow_tf32 = False
    cases = dict(CASES)
    if SIZE <= 2:  # a model's compile per job: on the 1- and 2-rank jobs
        cases["model_budget"] = case_model_budget
    if a.no_host_copies:
        cases["gpu_no_host_copies"] = case_gpu_no_host_copies
    failed = run_cases(cases)
    for f in _FUNCTIONS.values():  # collective: every rank closes its programs (and their captured graphs) before exit
        f.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""Generated kernels for `hir.launch` regions on the cuda backend, by
TorchInductor on the region's graph.

A region (the local ops between two communications that the lowering put
in one `hir.launch`) is traced once per input layout into an FX graph of
aten ops (`make_fx` over the region's PyTorch semantics, the ops'
`reference`, writing the yielded values into the output buffers), and that
graph is compiled by TorchInductor into Triton kernels: elementwise chains,
broadcasts, reductions along any dim, softmax, log_softmax, layer_norm,
rms_norm, cross_entropy's local part and dropout become one kernel where
one kernel can do them, with the outputs stored in place (the final copies
into the output buffers are fused into the kernels). Why Inductor rather
than a generator of our own: it is the code generator torch.compile uses,
so a region runs at torch.compile's speed by construction, and what it
learns (autotuning, new fusions) fuserc gets with it. The price is the
compile time of a region's first run (cached on disk across processes by
Inductor).

A region whose trace or compile fails is remembered and runs op by op
(`None`); `FUSERC_KERNELS=cupy` keeps to the CuPy elementwise kernels of
runtime/cuda_fusion.py and op-by-op torch for the rest.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Block

KERNELS_ENV = "FUSERC_KERNELS"
KERNELS = ("inductor", "cupy")

Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
_COMPILED: dict[tuple[Block, tuple[Layout, ...]], Callable[..., Any] | None] = {}


def kernels_mode() -> str:
    """How `hir.launch` regions run on cuda: $FUSERC_KERNELS, "inductor" by
    default, "cupy" where Triton (Inductor's code generator) is missing."""
    mode = os.environ.get(KERNELS_ENV, "inductor")
    if mode not in KERNELS:
        from fuserc.diagnostics import Diagnostic

        raise Diagnostic(f"${KERNELS_ENV} must be one of {', '.join(KERNELS)}, got '{mode}'")
    if mode == "inductor":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "cupy"
    return mode


def _layout(t: torch.Tensor) -> Layout:
    return (tuple(t.shape), tuple(t.stride()), t.dtype)


def _like(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same shape, strides and values (a trace's input)."""
    c = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return c.copy_(t)


def trace_region(body: Block, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], contexts: Any = None) -> Any:
    """The region as an FX graph of aten ops over (ins..., outs...), which
    writes the yielded values into the outs. Traced on copies with the
    same layouts (real tensors: the ops run once), so the buffers of the
    run are untouched."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fuserc.runtime.cpu import launch_with_torch

    n = len(ins)

    def region(*args: torch.Tensor) -> None:
        launch_with_torch(body, args[:n], args[n:], contexts)

    return make_fx(region)(*[_like(t) for t in ins], *[_like(t) for t in outs])


def compile_region(graph: Any) -> Callable[..., Any]:
    """The traced graph compiled by Inductor (static shapes, one graph)."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    return torch.compile(graph, backend="inductor", dynamic=False, fullgraph=True)


def run_region(
    body: Block,
    ins: Sequence[torch.Tensor],
    outs: Sequence[torch.Tensor],
    contexts: Any = None,
    compile_now: bool = True,
) -> bool:
    """Run the region's generated kernels; False (nothing run) when the
    region has none (its compile failed before, or `compile_now` is False
    and it has not been compiled for this layout: a CUDA graph capture
    cannot compile)."""
    key = (body, tuple(_layout(t) for t in (*ins, *outs)))
    fn = _COMPILED.get(key, False)
    if fn is False:
        if not compile_now:
            return False
        try:
            fn = compile_region(trace_region(body, ins, outs, contexts))
            fn(*ins, *outs)  # compiles, and is this run (a failed compile has written nothing)
        except Exception as e:  # noqa: BLE001 - any failure falls back to running op by op
            warnings.warn(f"fuserc: a hir.launch region runs op by op (its kernel did not compile: {e})", stacklevel=2)
            fn = None
        _COMPILED[key] = fn
        return fn is not None
    if fn is None:
        return False
    fn(*ins, *outs)
    return True

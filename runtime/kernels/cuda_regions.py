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
build time of a region's kernels: each is built once per machine and kept
in fuserc's kernel cache (runtime/kernels/kernel_cache.py: the artifact of
`torch._inductor.standalone_compile`, loaded again without tracing or
compiling), and a program's are built in parallel before its first run
(runtime/kernels/kernel_builds.py).

A region whose trace or compile fails is remembered and runs op by op
(`None`). Which programs get generated kernels is `kernels_mode`'s choice
(`$FUSERC_KERNELS`): by default ("auto") those with a region that has an
operand of `SMALL_REGION` elements or more (`program_generates`), and then
every region of them; a program of small regions only runs the CuPy
elementwise kernels of runtime/kernels/cuda_fusion.py and op-by-op torch for the
rest. A small region's kernels are bound by their launches, which
Inductor's kernel saves a few microseconds of, while loading Inductor to
run them costs seconds at each start (its import: 2-2.6 s on an H200
machine): a program of small tensors (an example, a test) starts without
it. The choice is the program's, not each region's: once Inductor is
loaded for a program, its small regions' kernels cost little more, and
one region run op by op with torch would keep its runs from being
replayed as CUDA graphs (the GPT layer's backward has one: the slices of
its replicated parameters' gradients out of their all-reduced buffer).
"inductor" gives every program its kernels; "cupy" none.
"""

from __future__ import annotations

import importlib.util
import io
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from xdsl.ir import Block, SSAValue
from xdsl.printer import Printer

from fuserc.runtime.kernels.kernel_cache import NotKept, Sections

KERNELS_ENV = "FUSERC_KERNELS"
KERNELS = ("auto", "inductor", "cupy")
SMALL_REGION = 1 << 16
"""Under "auto", a region whose operands all have fewer elements runs
without generated kernels (the module's docstring says why)."""

DELAY_ENV = "FUSERC_BUILD_DELAY_S"
"""Testing hook: each region's build first sleeps this many seconds (a
slow build, to test what happens while builds are under way)."""

Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
Aliases = tuple[int, ...]
_COMPILED: dict[tuple[Block, tuple[Layout, ...], Aliases], Callable[..., Any] | None] = {}
"""The region kernels of this process, by region, layouts and aliases
(None: the region runs op by op)."""


def kernels_mode() -> str:
    """How `hir.launch` regions run on cuda: $FUSERC_KERNELS, "auto" by
    default, "cupy" where Triton (Inductor's code generator) is missing."""
    mode = os.environ.get(KERNELS_ENV, "auto")
    if mode not in KERNELS:
        from fuserc.diagnostics import Diagnostic

        raise Diagnostic(f"${KERNELS_ENV} must be one of {', '.join(KERNELS)}, got '{mode}'")
    if mode != "cupy" and importlib.util.find_spec("triton") is None:
        return "cupy"  # (found, not imported: a program of small regions never needs it)
    return mode


def generates(mode: str, numels: Iterable[int | None]) -> bool:
    """Whether a region whose operands have `numels` elements (None: not
    known before the run) needs generated kernels under `mode`."""
    if mode != "auto":
        return mode == "inductor"
    return any(n is None or n >= SMALL_REGION for n in numels)


def program_generates(mode: str, func: Any) -> bool:
    """Whether the regions of `func` (a host program) get generated kernels
    under `mode`: one of them needs them (`generates`; not those that run
    PyTorch's kernels: runtime/kernels/torch_regions.py)."""
    from fuserc.dialects import hir
    from fuserc.runtime.kernels.torch_regions import runs_region

    return mode != "cupy" and any(
        isinstance(op, hir.LaunchOp) and not runs_region(op.body.block) and generates(mode, launch_numels(op)) for op in func.walk()
    )


def launch_numels(op: Any) -> list[int | None]:
    """The elements of each operand of a `hir.launch`, from its types."""
    out: list[int | None] = []
    for v in op.operands:
        shape = v.type.get_shape()
        out.append(None if any(d < 0 for d in shape) else math.prod(shape))
    return out


def layout_of(t: torch.Tensor) -> Layout:
    """What a kernel is built for: shape, strides, dtype."""
    return (tuple(t.shape), tuple(t.stride()), t.dtype)


def aliases_of(tensors: Sequence[torch.Tensor]) -> Aliases | None:
    """For each operand of a launch (ins, then outs), the first operand that
    is the very same view (its own index when none): a kernel is built for
    that sharing (an output that is also an input is read before it is
    written). None when an operand overlaps another without being the same
    view: no kernel is built for it (the region runs op by op). Works on
    meta tensors too (their buffers are told apart by storage)."""
    spans = [_span(t) for t in tensors]
    out = list(range(len(tensors)))
    for i, si in enumerate(spans):
        if si is None:
            continue
        for j in range(i):
            sj = spans[j]
            if sj is None or si[0] != sj[0] or si[1] >= sj[2] or sj[1] >= si[2]:
                continue
            a, b = tensors[i], tensors[j]
            if si != sj or a.shape != b.shape or a.stride() != b.stride() or a.dtype != b.dtype:
                return None
            out[i] = out[j]
            break
    return tuple(out)


def _span(t: torch.Tensor) -> tuple[int, int, int] | None:
    """(buffer, first byte, end byte) a tensor may touch; None when empty."""
    n = t.numel()
    if n == 0:
        return None
    size = t.element_size()
    if t.is_meta:
        buffer, start = t.untyped_storage()._cdata, t.storage_offset() * size
    else:
        buffer, start = 0, t.data_ptr()
    if not t.is_contiguous():
        n = 1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))
    return buffer, start, start + n * size


def _like(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same shape, strides and values (a trace's input)."""
    c = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return c.copy_(t)


def trace_region(
    body: Block,
    ins: Sequence[torch.Tensor],
    outs: Sequence[torch.Tensor],
    contexts: Any = None,
    aliases: Aliases | None = None,
    scratch: bool = False,
) -> Any:
    """The region as an FX graph of aten ops over (ins..., outs...), which
    writes the yielded values into the outs; with `aliases`, over the
    operands that are no other one (`distinct`), each standing for the
    operands that are it. Traced on real tensors (the ops run once): on
    copies with the same layouts, so the caller's buffers are untouched,
    unless they are `scratch` (the caller's to overwrite: no copies)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fuserc.runtime.backends.cpu import launch_with_torch

    n = len(ins)
    operands = [*ins, *outs]
    firsts = list(aliases) if aliases is not None else list(range(len(operands)))
    keep = distinct(firsts)

    def region(*args: torch.Tensor) -> None:
        given = dict(zip(keep, args))
        full = [given[f] for f in firsts]
        launch_with_torch(body, full[:n], full[n:], contexts)

    return make_fx(region)(*[operands[i] if scratch else _like(operands[i]) for i in keep])


def distinct(aliases: Sequence[int]) -> list[int]:
    """The operands that are no other one (`aliases_of`): those a region's
    kernel takes. A kernel over all operands, some of them one tensor,
    would be compiled by AOTAutograd for that sharing, and its cache, keyed
    by the graph and its inputs' layouts but not by which inputs are one
    tensor, would hand it to a region of the same ops shared otherwise (the
    pull ring's add into its first operand, and a reduce-scatter's pulls
    added into a buffer of their own: torch then fails the call, 'compiled
    under the assumption that input 4 would be a duplicate of input 0')."""
    return [i for i, first in enumerate(aliases) if first == i]


def lift_constants(graph: Any) -> list[torch.Tensor]:
    """Make the tensors the trace captured as constants (where the local
    blocks of INDEXED ops lie, scalars made inside an op's semantics)
    trailing inputs of the graph, in order, and return them: a compiled
    artifact saved to disk and loaded again takes every tensor as an
    input (Inductor keeps none of a graph's attributes with it)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    last = placeholders[-1] if placeholders else None
    constants: list[torch.Tensor] = []
    lifted: dict[str, Any] = {}  # target -> its placeholder: a constant read by several nodes is one input
    for node in list(graph.graph.nodes):
        if node.op != "get_attr":
            continue
        if node.target not in lifted:
            value = getattr(graph, node.target, None)
            if not isinstance(value, torch.Tensor):
                continue
            if last is None:
                with graph.graph.inserting_before(next(iter(graph.graph.nodes))):
                    last = graph.graph.placeholder(f"constant{len(constants)}")
            else:
                with graph.graph.inserting_after(last):
                    last = graph.graph.placeholder(f"constant{len(constants)}")
            lifted[node.target] = last
            constants.append(value)
        node.replace_all_uses_with(lifted[node.target])
        graph.graph.erase_node(node)
    for target in lifted:
        delattr(graph, target)
    graph.recompile()
    return constants


class RegionKernel:
    """A region's compiled kernels, called with (ins..., outs...): it takes
    the distinct ones (`distinct`), then the graph's constants as inputs
    of its own."""

    __slots__ = ("fn", "constants", "keep")

    def __init__(self, fn: Callable[..., Any], constants: Sequence[torch.Tensor], keep: Sequence[int] | None = None):
        self.fn, self.constants = fn, tuple(constants)
        self.keep = tuple(keep) if keep is not None else None

    def __call__(self, *args: torch.Tensor) -> None:
        if self.keep is not None:
            args = tuple(args[i] for i in self.keep)
        self.fn(*args, *self.constants)


def _zeros(layout: Layout, device: torch.device) -> torch.Tensor:
    shape, stride, dtype = layout
    return torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()


def _on(contexts: Any, device: torch.device) -> Any:
    """The contexts with their global indices already on `device`
    (`EvalContext.on`), so the trace holds them as device tensors (no copy
    from the host per call)."""
    if not contexts:
        return contexts
    return {op: c.on(device) for op, c in contexts.items()}


def build_region(
    body: Block, layouts: Sequence[Layout], aliases: Aliases, n_ins: int, contexts: Any, device: torch.device
) -> tuple[Sections | NotKept, RegionKernel]:
    """Trace the region on zero tensors of the given layouts and compile
    its graph with Inductor (static shapes), for operands shared as
    `aliases` says: the entry's sections (the artifact of
    `torch._inductor.standalone_compile`, and the graph's constants;
    `NotKept` where this torch cannot save it) and the kernel."""
    if os.environ.get(DELAY_ENV):
        time.sleep(float(os.environ[DELAY_ENV]))
    args: list[torch.Tensor] = []
    for layout, first in zip(layouts, aliases, strict=True):
        args.append(args[first] if first < len(args) else _zeros(layout, device))
    graph = trace_region(body, args[:n_ins], args[n_ins:], _on(contexts, device), aliases, scratch=True)
    constants = lift_constants(graph)
    keep = _keep(aliases)
    args = [args[i] for i in distinct(aliases)]
    import torch._inductor

    standalone = getattr(torch._inductor, "standalone_compile", None)  # torch >= 2.8
    if standalone is None:
        return NotKept("this torch has no torch._inductor.standalone_compile"), RegionKernel(_dynamo_compile(graph), constants, keep)
    import torch._functorch.config

    # The artifact is saved from AOTAutograd's cache entry: a caller that
    # turned that cache off for its own torch.compile (to see every graph
    # compiled) would leave fuserc's kernels unsaved, built again each run.
    with torch._functorch.config.patch(enable_autograd_cache=True):
        artifact = standalone(graph, [*args, *constants], dynamic_shapes="from_example_inputs", options={"config_patches": inductor_config()})
    kernel = RegionKernel(artifact, constants, keep)
    try:
        with tempfile.TemporaryDirectory(prefix="fuserc-") as folder:
            path = os.path.join(folder, "artifact")
            artifact.save(path=path, format="binary")
            with open(path, "rb") as f:
                data = f.read()
    except Exception as e:  # noqa: BLE001 - a graph Inductor cannot serialize still runs; it is not kept
        return NotKept(f"Inductor could not save the compiled region: {type(e).__name__}: {str(e)[:300]}"), kernel
    held = io.BytesIO()
    torch.save([(c.detach().cpu(), c.device.type) for c in constants], held)
    return {"artifact": data, "constants": held.getvalue()}, kernel


def _keep(aliases: Aliases) -> list[int] | None:
    """The operands a kernel takes (`distinct`); None: all of them."""
    keep = distinct(aliases)
    return keep if len(keep) < len(aliases) else None


def load_region(sections: dict[str, bytes], device: torch.device, aliases: Aliases | None = None) -> RegionKernel:
    """The kernel of an entry written by `build_region` (for operands
    shared as `aliases` says: the entry's key has them)."""
    from torch._inductor import CompiledArtifact

    with tempfile.TemporaryDirectory(prefix="fuserc-") as folder:
        path = os.path.join(folder, "artifact")
        with open(path, "wb") as f:
            f.write(sections["artifact"])
        artifact = CompiledArtifact.load(path=path, format="binary")
    held = torch.load(io.BytesIO(sections["constants"]), weights_only=True)
    constants = [t.to(device if kind != "cpu" else "cpu") for t, kind in held]
    return RegionKernel(artifact, constants, _keep(aliases) if aliases is not None else None)


def _dynamo_compile(graph: Any) -> Callable[..., Any]:
    """The graph compiled by torch.compile (static shapes, one graph): where
    this torch has no `standalone_compile`, kept for this process only."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    return torch.compile(graph, backend="inductor", dynamic=False, fullgraph=True, options=inductor_config())


def early_copies(graph: torch.fx.Graph) -> int:
    """Write each yielded value into its output buffer where it is made,
    not after the region's last op, and let its other users read it there;
    the count of copies moved.

    Run on Inductor's post-grad graph, where the writes into the output
    buffers (input mutations) all come at the end. A value that is both
    yielded and read again (the residual sum that a layer norm then
    normalizes) is then realized into a temporary buffer of its own for
    its readers, and copied into the output buffer by the last kernel:
    the forward's add + layer_norm read its two inputs twice, the
    temporary once and wrote it once (8 passes over [T, H] instead of 5,
    46 us against torch.compile's 35 at 4096 x 4096). Moved up, the copy
    is where Inductor stores the value, and the readers read the output
    buffer. Moved only where nothing reads or writes the output buffer
    after the value is made (a buffer that is also an operand, written in
    place, may be read up to there) and the copy changes nothing (same
    dtype, shape and strides)."""
    copy_ = torch.ops.aten.copy_.default
    order = {n: i for i, n in enumerate(graph.nodes)}
    moved = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not copy_ or len(node.args) < 2:
            continue
        dst, src = node.args[0], node.args[1]
        if not isinstance(dst, torch.fx.Node) or dst.op != "placeholder":
            continue
        if not isinstance(src, torch.fx.Node) or src.op == "placeholder":
            continue
        if any(u is not node and order[u] > order[src] for u in dst.users):  # the buffer's old value is read after src
            continue
        readers = [u for u in src.users if u is not node]
        if not readers or node.kwargs:
            continue
        d, v = dst.meta.get("val"), src.meta.get("val")
        if not isinstance(d, torch.Tensor) or not isinstance(v, torch.Tensor) or (d.dtype, d.shape, d.stride()) != (v.dtype, v.shape, v.stride()):
            continue
        src.append(node)
        for u in readers:
            u.replace_input_with(src, node)
        moved += 1
    return moved


_OPTIONS: dict[str, Any] | None = None


def inductor_config() -> dict[str, Any]:
    """Inductor's configuration for a region's graph: `early_copies` as its
    post-grad pass (where this torch takes custom passes)."""
    global _OPTIONS
    if _OPTIONS is None:
        try:
            from torch._inductor.custom_graph_pass import CustomGraphPass
        except ImportError:
            _OPTIONS = {}
        else:

            class EarlyCopies(CustomGraphPass):
                moved = 0
                """Copies moved in this process (a test reads it)."""

                def __call__(self, graph: torch.fx.Graph) -> None:
                    EarlyCopies.moved += early_copies(graph)

                def uuid(self) -> str:  # (in Inductor's cache keys: a change to the pass is a new key)
                    return "fuserc.early_copies.1"

            _OPTIONS = {"post_grad_custom_post_pass": EarlyCopies()}
    return dict(_OPTIONS)


def region_text(body: Block) -> str:
    """The region as IR text with its values numbered in order and no
    names of their own: its part of the kernel's key, and what a build
    worker parses. Where a region sits (the names its values carry from
    the program, which differ from layer to layer) is no part of it, so
    identical layers share their kernels."""
    out = io.StringIO()
    region = body.parent_region()
    assert region is not None
    _Canonical(stream=out).print_region(region)
    return out.getvalue()


class _Canonical(Printer):
    """A printer that numbers every value and block in order, ignoring
    their name hints."""

    def print_ssa_value(self, value: SSAValue) -> str:
        name = self._ssa_values.get(value)
        if name is None:
            name = self._ssa_values[value] = self._get_new_valid_name_id()
        self.print_string(f"%{name}")
        return name

    def _populate_block_name(self, block: Block, block_index: int | None = None) -> None:
        self._blocks[block] = f"bb{block_index if block_index is not None else self._get_new_valid_block_id()}"


@dataclass
class RegionJob:
    """The kernel of one region at one set of layouts, for the kernel
    cache (runtime/kernels/kernel_builds.py)."""

    body: Block
    layouts: tuple[Layout, ...]
    aliases: Aliases
    n_ins: int
    contexts: Any
    device: torch.device

    kind = "region"

    @property
    def key(self) -> Any:
        from fuserc.runtime.kernels.kernel_builds import device_id, layout_fields
        from fuserc.runtime.kernels.kernel_cache import kernel_key

        found = getattr(self, "_key", None)
        if found is None:
            fields = {
                "ir": region_text(self.body),
                "layouts": layout_fields(self.layouts),
                "aliases": list(self.aliases),
                "ins": self.n_ins,
                "contexts": {str(i): _context_fields(c) for i, c in self._contexts().items()},
            }
            found = self._key = kernel_key(self.kind, fields, device_id(self.device, index=True))
        return found

    def describe(self) -> str:
        names = [op.name.removeprefix("fusion.") for op in self.body.ops if op.name != "hir.yield"]
        return f"a hir.launch region ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"

    def _contexts(self) -> dict[int, Any]:
        """The contexts by the position of their op in the region."""
        contexts = self.contexts or {}
        return {i: contexts[op] for i, op in enumerate(self.body.ops) if op in contexts}

    def spec(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ir": region_text(self.body),
            "layouts": self.layouts,
            "aliases": self.aliases,
            "n_ins": self.n_ins,
            "contexts": self._contexts(),
        }

    def build(self) -> tuple[Sections | NotKept, RegionKernel]:
        return build_region(self.body, self.layouts, self.aliases, self.n_ins, self.contexts, self.device)

    def load(self, sections: dict[str, bytes]) -> RegionKernel:
        return load_region(sections, self.device, self.aliases)

    @property
    def ident(self) -> tuple[Block, tuple[Layout, ...], Aliases]:
        return (self.body, self.layouts, self.aliases)

    def install(self, kernel: RegionKernel | None) -> None:
        _COMPILED[self.ident] = kernel

    def installed(self) -> bool:
        return self.ident in _COMPILED


def build_spec(spec: dict[str, Any], device: torch.device) -> tuple[Sections | NotKept, Any]:
    """A worker's build of a `RegionJob.spec()` (runtime/kernels/kernel_worker.py)."""
    from fuserc.ir import make_context
    from xdsl.parser import Parser

    region = Parser(make_context(), spec["ir"]).parse_region()
    body = region.block
    ops = list(body.ops)
    contexts = {ops[i]: c for i, c in spec["contexts"].items()}
    return build_region(body, spec["layouts"], spec["aliases"], spec["n_ins"], contexts, device)


def _context_fields(c: Any) -> dict[str, Any]:
    return {
        "shapes": {str(k): list(v) for k, v in sorted(c.shapes.items())},
        "indices": {f"{k}:{d}": v.tolist() for (k, d), v in sorted(c.indices.items())},
    }


def run_region(
    body: Block,
    ins: Sequence[torch.Tensor],
    outs: Sequence[torch.Tensor],
    contexts: Any = None,
    compile_now: bool = True,
) -> bool | None:
    """Run the region's generated kernels; False (nothing run) when the
    region has none (its build failed before, or `compile_now` is False
    and it has none for this layout yet: a CUDA graph capture cannot
    compile), None when its kernel is being built in the background. A
    region not built yet is fetched from the kernel cache
    (runtime/kernels/kernel_builds.py), or built, at its first run."""
    operands = (*ins, *outs)
    aliases = aliases_of(operands)
    if aliases is None:
        return False
    key = (body, tuple(layout_of(t) for t in operands), aliases)
    fn = _COMPILED.get(key, False)
    if fn is False:
        from fuserc.runtime.kernels.kernel_builds import building, fetch

        if building(key):
            return None
        if not compile_now:
            return False

        fn = fetch(RegionJob(*key, len(ins), contexts, operands[0].device))
        if fn is None:
            return False
        try:
            fn(*operands)  # its first call (a failure has written nothing)
        except Exception as e:  # noqa: BLE001 - any failure falls back to running op by op
            warnings.warn(f"fuserc: a hir.launch region runs op by op (its kernel failed: {e})", stacklevel=2)
            _COMPILED[key] = None
            return False
        return True
    if fn is None:
        return False
    fn(*operands)
    return True

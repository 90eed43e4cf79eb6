"""fuserc in a PyTorch training step: a definition as a differentiable
function of this rank's local shards.

`function(fd)` compiles the definition once with `autodiff` in front of the
pipeline, so that one module holds `@main` (run when no gradient is wanted),
`@main_fwd` and `@main_bwd`; each is loaded on the backend of the inputs'
device when first needed. A call runs on torch's current stream (the run
is ordered after the caller's work and the caller's stream waits for it on
the device), reads its inputs in place, and hands its result buffers to the
caller (they leave the program's allocation cache: the next call cannot
overwrite them). Nothing in a call waits on the host once a program is
loaded. torch autograd's backward runs `@main_bwd` on the saved tensors and
the cotangents and delivers the gradient of each input that requires one;
the saved tensors are donated to that run (the ctx keeps none), which
lets go of each after its last read when it runs op by op.
The saved tensors of a replayed `@main_fwd` are its graph's own buffers,
not copies: the backward reads them where the forward wrote them, and only
a forward that runs again before an earlier one's backward (gradient
accumulation over micro-batches) copies the earlier one's out first. The
gradients of a replayed `@main_bwd` are its graph's buffers too, while the
caller drops them before the next backward (`zero_grad()`, which sets them
to None): torch's AccumulateGrad makes them the parameters' `.grad` as
they are; a gradient still held at the next backward (accumulated over
micro-batches) becomes the caller's alone, and from then on the
backward's gradients are copies (runtime/evaluator/graphs.py, `Loans`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fuserc.diagnostics import Diagnostic

BACKENDS = ("auto", "cpu", "cuda")


def function(
    definition: Any,
    *,
    entry: str = "main",
    pipeline: str = "default",
    backend: str = "auto",
    save: str = "activations",
    algorithm: str | None = None,
    time: bool = False,
    kernel_builds: str | None = None,
    autodiff: str = "",
) -> "Function":
    """A differentiable callable of this rank's local shards of `definition`'s
    inputs (a FusionDefinition, or the text of a module with `@entry`).
    `backend` "auto" follows the inputs: CUDA tensors run on the cuda
    backend, CPU tensors on the cpu backend. `save` is autodiff's option:
    "activations" keeps what the backward reads, "inputs" recomputes it.
    `algorithm` sets stream-pipeline's option, as `-p` does on the CLI.
    `time`: rank 0 prints where the first call's time went (and the first
    backward's), as `fuserc run --time` does; `Function.startup` holds it
    either way. `kernel_builds` "background" (the default, else
    `$FUSERC_KERNEL_BUILDS`) loads the generated kernels the kernel cache
    holds before the first call and builds the others while the calls go
    on, each launch running another way until its kernel is in
    (`Function.wait_for_kernels` waits for them); "before" builds them all
    before the first call. `autodiff`: more options of the autodiff pass,
    as its pipeline text writes them (`"budget=2048"` where it has one)."""
    from fuserc.api import FusionDefinition

    if isinstance(definition, FusionDefinition):
        text, entry, where = definition.to_mlir(), definition.name, f"<FusionDefinition {definition.name}>"
    elif isinstance(definition, str):
        text, where = definition, "<fuserc.torch.function>"
    else:
        raise Diagnostic(f"fuserc.torch.function takes a FusionDefinition or module text, got {type(definition).__name__}")
    if backend not in BACKENDS:
        raise Diagnostic(f"backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if algorithm is not None:
        from fuserc.pipeline import with_option

        pipeline = with_option(pipeline, "stream-pipeline", "algorithm", algorithm)
    from fuserc.runtime.kernels.kernel_builds import BACKGROUND, builds_mode

    background = builds_mode(BACKGROUND, kernel_builds) == BACKGROUND
    return Function(text, where, entry, pipeline, backend, save, time, background, autodiff)


def device(kind: str | None = None) -> torch.device:
    """The torch device this rank computes on: the cpu, or (`"cuda"`) the GPU
    its cuda backend takes (its rank on its node modulo the GPUs it sees),
    known before the first call, so that the parameters and data are made
    there (`torch.device("cuda")` is every rank's first GPU until then).
    By default, as `backend="auto"`: the GPU where torch sees one, else the
    cpu."""
    if kind is None:
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cpu":
        return torch.device("cpu")
    if kind != "cuda":
        raise Diagnostic(f"fuserc.torch.device: kind must be 'cpu' or 'cuda', got {kind!r}")
    if not torch.cuda.is_available():
        raise Diagnostic(f"fuserc.torch.device('cuda'): this torch ({torch.__version__}) sees no CUDA device")
    from fuserc.runtime.job.mpi_env import mpi_env

    return torch.device("cuda", mpi_env().gpu(torch.cuda.device_count()))


@dataclass
class _Loaded:
    """The programs of one compilation, loaded on one backend."""

    backend: Any
    compiled: Any  # runtime.program.Compiled
    no_grad_reason: Diagnostic | None  # why @entry has no backward (autodiff refused it)
    startup: Any  # runtime.startup.Startup: the Function's
    report: bool  # print the startup at each program's first run (rank 0)
    background: bool = False  # generated kernels built in the background of the first runs
    programs: dict[str, Any] = field(default_factory=dict)  # entry -> runtime.evaluator.Program
    pool: Any = None  # runtime.alloc_cache.MemoryPool: the programs run one after another on one stream
    gauges: Any = None  # runtime.evaluator.graphs.Gauges: the forward and backward, judged together
    lent: "weakref.WeakSet[_Saved]" = field(default_factory=weakref.WeakSet)
    """The saved tensors of forwards whose backward has not run yet and
    that hold buffers of the forward's graph."""

    def program(self, name: str) -> Any:
        from fuserc.runtime.evaluator.evaluator import Program, memory_pool

        if self.pool is None:
            self.pool = memory_pool(self.compiled.host, self.backend)
        if name not in self.programs:
            p = self.programs[name] = Program.load(self.compiled.host, name, self.backend, self.pool)
            p.background_kernels = self.background
            if name.endswith(("_fwd", "_bwd")):  # one after the other in a training step: judged together
                from fuserc.runtime.evaluator.graphs import Gauges

                if self.gauges is None:
                    self.gauges = Gauges([f"{name[:-4]}_fwd", f"{name[:-4]}_bwd"])
                self.gauges.join(name, p.replays)
        return self.programs[name]


class Function:
    """A compiled definition callable on torch tensors (see `function`)."""

    def __init__(
        self,
        text: str,
        where: str,
        entry: str,
        pipeline: str,
        backend: str,
        save: str,
        time: bool = False,
        background: bool = False,
        autodiff: str = "",
    ):
        from fuserc.runtime.job.startup import Startup

        self.text, self.where, self.entry = text, where, entry
        self.pipeline, self.backend, self.save = pipeline, backend, save
        self.time = time
        self.background = background
        self.autodiff = autodiff
        self.startup = Startup()
        """Where the first call's time went (passes, backend, and each
        program's first run: communicators, kernels, the rest), in seconds."""
        self._loaded: dict[str, _Loaded] = {}  # by backend kind: compiled once per input signature

    # -- compiling ------------------------------------------------------------
    def _load(self, inputs: Sequence[Any]) -> _Loaded:
        kind = self.backend
        if kind == "auto":
            on_gpu = any(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs)
            kind = "cuda" if on_gpu else "cpu"
        found = self._loaded.get(kind)
        if found is not None:
            return found
        from fuserc.runtime.backends.backend import shared_backend
        from fuserc.runtime.job.mpi_env import mpi_env
        from fuserc.runtime.evaluator.program import compile_module
        from fuserc.runtime.job.startup import Stopwatch

        clock = Stopwatch()
        be = shared_backend(kind, mpi_env())
        self.startup.add("backend", clock.lap())
        reason: Diagnostic | None = None
        try:
            derive = f"autodiff{{entry={self.entry} save={self.save}{' ' + self.autodiff if self.autodiff else ''}}},{self.pipeline}"
            compiled = compile_module(self.text, self.where, f"{self.entry}_fwd", derive, ranks=be.size, nodes=be.env.copy_nodes(be.name))
        except Diagnostic as e:  # no backward (an op without a rule): still callable without grad
            reason = e
            compiled = compile_module(self.text, self.where, self.entry, self.pipeline, ranks=be.size, nodes=be.env.copy_nodes(be.name))
        self.startup.add("passes", clock.lap())
        self._loaded[kind] = found = _Loaded(be, compiled, reason, self.startup, self.time, self.background)
        return found

    # -- calling --------------------------------------------------------------
    def __call__(self, *inputs: Any) -> Any:
        for i, t in enumerate(inputs):
            if t is not None and not isinstance(t, torch.Tensor):
                raise Diagnostic(f"input #{i} of @{self.entry} must be a torch tensor (or None where absent), got {type(t).__name__}")
        loaded = self._load(inputs)
        wants_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
        if not wants_grad:
            outs = _run(loaded, loaded.program(self.entry), list(inputs))
        else:
            if loaded.no_grad_reason is not None:
                raise Diagnostic(f"@{self.entry} has no backward: {loaded.no_grad_reason}")
            outs = list(_Autograd.apply(self, loaded, *inputs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def runs(self) -> dict[str, str]:
        """How each loaded program's calls go now, in words: replayed as a
        captured graph (with the trial's times) or op by op (and why)."""
        return {
            name: p.replays.mode() + (f"; results copied out ({p.loans.refused})" if p.loans.refused else "")
            for loaded in self._loaded.values()
            for name, p in loaded.programs.items()
        }

    def settled(self) -> bool:
        """Whether every program that has run settled how its runs go
        (replayed as a graph or op by op, `runs`): until then, its calls
        are gauged and tried both ways, and its memory blocks stay."""
        return all(p.replays.settled() for loaded in self._loaded.values() for p in loaded.programs.values() if p.runs)

    def wait_for_kernels(self, timeout: float | None = None) -> bool:
        """Wait for the generated kernels built in the background of the
        first calls (at most `timeout` seconds); whether every one is in."""
        return all(loaded.backend.wait_for_kernels(timeout) for loaded in self._loaded.values())

    def close(self) -> None:
        """Release every loaded program (collective: all ranks close)."""
        for loaded in self._loaded.values():
            for p in loaded.programs.values():
                p.close()
        self._loaded.clear()


def _run(
    loaded: _Loaded, program: Any, inputs: list[Any], lent: range = range(0), loan: bool = False, donate: range = range(0)
) -> list[Any]:
    """One run on this rank's shards; its results, owned by the caller
    (those at `lent` positions only until the program's next run, and all
    of them with `loan` while the caller lets go of them by then: see
    `Program.run_prepared`). The inputs at `donate` positions are handed
    over: they leave `inputs`, and the run lets go of each after its last
    read."""
    b = loaded.backend
    first = program.runs == 0
    caller = b.enter_caller()
    outs: list[Any] = []
    try:
        prepared = program.prepare_inputs(inputs)
        for i in donate:
            inputs[i] = None
        outs = program.run_prepared(prepared, synchronize=not b.stream_ordered, owned_results=True, lent=lent, loan=loan, donate=donate)
    finally:
        b.leave_caller(caller, outs)
    if first:
        _first_run(loaded, program)
    return outs


def _prepare_kernels(loaded: _Loaded, *programs: Any) -> None:
    """The programs' generated kernels, built (or loaded) together; the
    time goes to the Function's startup."""
    from fuserc.runtime.job.startup import KERNELS

    before = KERNELS.copy()
    loaded.backend.prepare_kernels(*programs, background=loaded.background)
    got = KERNELS.since(before)
    loaded.startup.kernels = loaded.startup.kernels.plus(got)
    loaded.startup.add("kernels", got.seconds)


def _first_run(loaded: _Loaded, program: Any) -> None:
    """Add a program's first run to the Function's startup; print it (rank 0)."""
    import sys

    startup = loaded.startup
    for phase, seconds in program.startup.seconds.items():
        startup.add(phase, seconds)
    startup.kernels = startup.kernels.plus(program.startup.kernels)
    if loaded.report and loaded.backend.rank == 0:
        name = program.func.sym_name.data
        sys.stderr.write(startup.report(f"fuserc.torch.function: startup to the first run of @{name}"))
        sys.stderr.flush()


class _Autograd(torch.autograd.Function):
    """@entry_fwd forward, @entry_bwd backward."""

    @staticmethod
    def forward(ctx: Any, fn: Function, loaded: _Loaded, *inputs: Any) -> tuple[Any, ...]:
        fwd = loaded.program(f"{fn.entry}_fwd")
        if fwd.runs == 0:  # the backward's kernels are built with the forward's, in one parallel build
            _prepare_kernels(loaded, fwd, loaded.program(f"{fn.entry}_bwd"))
        for earlier in list(loaded.lent):  # forwards whose backward is still to come
            earlier.keep(fwd)
        loaded.lent.clear()
        main_results = len(loaded.program(fn.entry).results)  # (its signature; @entry is not run)
        outs = _run(loaded, fwd, inputs, lent=range(main_results, len(fwd.results)))
        ctx.fn, ctx.loaded = fn, loaded
        ctx.saved = _Saved(outs[main_results:])
        ctx.saved.watch(fwd, main_results)
        if any(v is not None and fwd.lends(v) for v in ctx.saved.values):
            loaded.lent.add(ctx.saved)
        ctx.float_inputs = [i for i, p in enumerate(fwd.params) if p.dtype.is_floating_point]
        results = outs[:main_results]
        ctx.mark_non_differentiable(*[r for r in results if r is not None and not r.dtype.is_floating_point])
        return tuple(results)

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> tuple[Any, ...]:
        fn, loaded = ctx.fn, ctx.loaded
        bwd = loaded.program(f"{fn.entry}_bwd")
        if ctx.saved.values is None:
            raise RuntimeError(
                f"the backward of a call of @{fn.entry} ran twice: fuserc.torch lets its saved tensors go as the "
                "first backward reads them (retain_graph=True is not supported; call the function again)"
            )
        ctx.saved.check()
        saved, ctx.saved.values = ctx.saved.values, None  # the backward's own: each goes after its last read
        loaded.lent.discard(ctx.saved)
        n = len(saved)
        specs = bwd.params[n:]
        cts = []
        for ct, spec in zip(cotangents, specs, strict=True):
            if not spec.present_on(loaded.backend.rank):
                cts.append(None)
            elif ct is None:
                cts.append(_zeros(loaded, spec))
            else:
                cts.append(ct.to(spec.dtype))
        inputs = [*saved, *cts]
        del saved, cts
        grads = _run(loaded, bwd, inputs, loan=True, donate=range(n))
        out: list[Any] = [None] * (len(ctx.needs_input_grad) - 2)
        for i, g in zip(ctx.float_inputs, grads, strict=True):
            if ctx.needs_input_grad[2 + i]:
                out[i] = g
        return (None, None, *out)


class _Saved:
    """What one forward saved for its backward."""

    def __init__(self, values: Sequence[Any]):
        self.values: list[Any] | None = list(values)  # None once the backward has taken them
        self.versions: list[tuple[int, str, int]] = []  # (saved index, what, version): the caller's own tensors

    def watch(self, program: Any, first: int) -> None:
        """Note the version of each saved value that is an argument returned
        as it is (the caller's tensor, not a copy: a weight), as PyTorch's
        `save_for_backward` does, so that an in-place change before the
        backward is an error, not a wrong gradient."""
        for k, j in program.result_args.items():
            v = self.values[k - first] if k >= first else None
            if v is not None:
                self.versions.append((k - first, f"{program.params[j].label} of @{program.func.sym_name.data}", v._version))

    def check(self) -> None:
        """PyTorch's error for a saved caller's tensor changed in place since the forward."""
        for i, what, version in self.versions:
            v = self.values[i]
            if v._version != version:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: {what} [{v.dtype} {list(v.shape)}] is at version {v._version}; expected version "
                    f"{version} instead (fuserc.torch saves it for the backward as it is, not a copy)"
                )

    def keep(self, program: Any) -> None:
        """Copy out the values that are `program`'s replayed buffers, before
        its next run writes them (on the caller's stream, where the last
        run's results are ready)."""
        if self.values is not None:
            self.values = [v.clone() if v is not None and program.lends(v) else v for v in self.values]


def _zeros(loaded: _Loaded, spec: Any) -> Any:
    b = loaded.backend
    return b.empty(spec.shape, spec.dtype).zero_()


__all__ = ["device", "function", "Function"]

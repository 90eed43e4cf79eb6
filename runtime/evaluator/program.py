"""Compiling a program for the runtime, and running it with global tensors.

`compile_text` parses and verifies a module, keeps a copy of the fusion
function as written (the reference for `--check`), runs the pass pipeline
to get the host program, and loads it on this rank's backend. The result,
a `CompiledProgram`, is run many times: `run` on this rank's local shards,
`execute` on global tensors (every rank passes the same ones and gets the
global results back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.traits import SymbolTable

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import fusion, hir
from fuserc.runtime.backends.backend import Backend, shared_backend
from fuserc.runtime.evaluator.evaluator import Program, find_host_program, matmul_flops, mesh_ranks, require_ranks
from fuserc.runtime.job.mpi_env import MpiEnv, mpi_env


@dataclass
class Compiled:
    """A module before and after the pipeline."""

    source: ModuleOp  # as parsed: the fusion function, for the reference
    host: ModuleOp  # after the pipeline: the host program
    entry: str
    timings: list[tuple[str, float]] = field(default_factory=list)

    def source_function(self) -> FuncOp | None:
        """The entry as written, when it is a fusion function (not already
        a host program)."""
        found = SymbolTable.lookup_symbol(self.source, self.entry)
        if isinstance(found, FuncOp) and found.body.blocks and not hir.is_host_program(found):
            return found
        return None

    def global_flops(self) -> int | None:
        """2*M*N*K summed over the matmul/linear ops of the fusion function
        at global shapes (None when the source is already a host program)."""
        func = self.source_function()
        if func is None:
            return None
        total = 0
        for op in func.walk():
            if isinstance(op, (fusion.MatmulOp, fusion.LinearOp)):
                a, r = op.operands[0].type, op.results[0].type
                assert isinstance(a, TensorType) and isinstance(r, TensorType)
                total += matmul_flops(tuple(a.get_shape()), tuple(r.get_shape()))
        return total


def compile_module(
    text: str,
    filename: str,
    entry: str = "main",
    pipeline: str = "default",
    ranks: int | None = None,
    meshes: Mapping[str, tuple[int, ...]] | None = None,
    nodes: Sequence[int] | None = None,
) -> Compiled:
    """Parse, verify and lower `text`; every failure is a Diagnostic. With
    `ranks` (the job's size), a mesh needing more ranks is refused before
    any pass runs: lowering for a mesh takes work in its size. `meshes`
    resizes declared meshes (`fuserc.ir.resize_meshes`). `nodes` (the
    job's `MpiEnv.nodes()`) groups ranks into nodes for stream-pipeline's
    rings, as the runtime does (`cost_model.job_nodes`)."""
    from fuserc import ir
    from fuserc import pipeline as pl
    from fuserc.passes.cost_model import job_nodes

    passes = pl.build(pipeline)
    ctx = ir.make_context()
    with ir.compiling():
        module = ir.parse(text, filename, ctx, meshes)
        if ranks is not None:
            _check_meshes_fit(module, ranks)
        # Passes that derive fusion functions (autodiff) run first: the
        # reference of `--check` is the derived function, as written by them.
        derive = next((i for i, p in enumerate(passes) if p.name not in DERIVING), len(passes))
        runner = pl.PassRunner(passes[:derive])
        runner.run(ctx, module)
        source = module.clone()
        runner.passes = passes[derive:]
        with job_nodes(nodes):
            runner.run(ctx, module)
        find_host_program(module, entry)
    return Compiled(source, module, entry, runner.timings)


DERIVING = ("autodiff",)
"""Passes that add fusion functions to a program (not lowering it)."""


def _check_meshes_fit(module: ModuleOp, ranks: int) -> None:
    meshes = [op for op in module.walk() if isinstance(op, fusion.MeshOp)]
    needed, why = mesh_ranks({m.sym_name.data: m.model for m in meshes})
    anchor = next((m for m in meshes if m.model.max_device + 1 == needed), module)
    require_ranks(anchor, needed, why, ranks, anchor.model if isinstance(anchor, fusion.MeshOp) else None)


class CompiledProgram:
    """A compiled program loaded on this rank, ready to run many times."""

    def __init__(self, compiled: Compiled, backend: Backend):
        self.compiled = compiled
        self.backend = backend
        self.env: MpiEnv = backend.env
        self.program = Program.load(compiled.host, compiled.entry, backend)

    @property
    def params(self):
        return self.program.params

    @property
    def results(self):
        return self.program.results

    def host_ir(self) -> str:
        from fuserc.ir import to_text

        return to_text(self.compiled.host)

    def comm_report(self, unit: Any = None) -> Any:
        """The communication report of the compiled host programs
        (`fuserc.comm_report.CommReport`; `unit`: a `Unit` or its text,
        `8192x4096xbf16`)."""
        from fuserc.comm_report import report

        return report(self.compiled.host, unit)

    def run(self, local_inputs: Sequence[Any]) -> list[torch.Tensor | None]:
        """This rank's shards in, its result shards out (None where absent)."""
        return self.program.run(local_inputs)

    def execute(self, inputs: Sequence[Any], local: bool = False, gather: bool = True) -> list[Any]:
        """Run once. `inputs` are torch tensors, CuPy or NumPy arrays (one
        kind), global (the same on every rank; each rank takes its shard) or,
        with `local=True`, this rank's shards already. With `gather=True`
        every rank gets each result at its global shape (partials summed,
        through the backend's collectives); otherwise its own shard (None
        where it holds none). Results are new arrays of the inputs' kind
        (NumPy holds bf16 as float32); where the runs are replayed as a
        graph, those the caller lets go of before the next run are the
        graph's own buffers, not copies (`Loans`: a caller that keeps one
        makes it its own, and later results are copies). Inputs on the
        rank's GPU are read in place and results stay there (DLPack for
        CuPy): nothing travels through host memory, and the run is ordered
        after the work on torch's current stream, which waits for it in
        turn (no host wait)."""
        from fuserc.runtime.job import io

        if len(inputs) != len(self.params):
            raise Diagnostic(f"@{self.compiled.entry} takes {len(self.params)} inputs, got {len(inputs)}")
        kind = _array_kind(inputs)
        tensors = [_as_tensor(v) for v in inputs]
        b = self.backend
        caller = b.enter_caller()
        outs: list[Any] = []
        try:
            if local:
                shards: list[Any] = tensors
            else:
                values = [io.check_global_input(t, s) for t, s in zip(tensors, self.params)]
                shards = io.shard_inputs(values, self.params, self.env.rank)
            prepared = self.program.prepare_inputs(shards)
            sync = not b.stream_ordered
            if gather:
                results = self.program.run_prepared(prepared, synchronize=sync, graphs=False)
                outs = io.gather_everywhere(results, self.results, b)
            else:
                outs = self.program.run_prepared(prepared, synchronize=sync, owned_results=True, loan=True)
        finally:
            b.leave_caller(caller, outs)
        return [_to_kind(o, kind, tensors) for o in outs]

    def random_inputs(self, seed: int) -> list[torch.Tensor]:
        """Global inputs drawn from `seed` (the same on every rank), each in
        the range the ops using it need (`io.input_domains`)."""
        from fuserc.runtime.job import io

        func = self.compiled.source_function()
        domains = io.input_domains(func) if func is not None else None
        return io.random_inputs(self.params, seed, domains)

    def reference(self, inputs: Sequence[torch.Tensor], accumulate: torch.dtype | None = torch.float64) -> list[torch.Tensor]:
        """The fusion function run unsharded, in float64 by default, in its
        own element types with `accumulate=None` (runtime/evaluator/reference.py)."""
        from fuserc.runtime.evaluator.reference import evaluate

        func = self.compiled.source_function()
        if func is None:
            raise Diagnostic(
                f"@{self.compiled.entry} is already a host program: there is no fusion function to "
                "compare against"
            )
        return evaluate(func, list(inputs), self.compiled.entry, accumulate=accumulate)

    def close(self) -> None:
        self.program.close()


def _array_kind(values: Sequence[Any]) -> str:
    """'torch', 'cupy' or 'numpy': the kind results are returned in."""
    kinds = set()
    for v in values:
        if isinstance(v, torch.Tensor):
            kinds.add("torch")
        elif isinstance(v, np.ndarray):
            kinds.add("numpy")
        elif type(v).__module__.startswith("cupy"):
            kinds.add("cupy")
        else:
            raise Diagnostic(f"inputs must be torch tensors, CuPy or NumPy arrays, got {type(v).__name__}")
    if len(kinds) > 1:
        raise Diagnostic(f"inputs mix array kinds ({', '.join(sorted(kinds))}): pass one kind")
    return kinds.pop() if kinds else "numpy"


def _as_tensor(value: Any) -> torch.Tensor:
    """A torch view of an input: zero copy for torch and, through DLPack,
    for CuPy; NumPy arrays are wrapped without copying too."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    return torch.from_dlpack(value)


def _to_kind(value: Any, kind: str, inputs: Sequence[torch.Tensor]) -> Any:
    """A result as the inputs' kind, on the inputs' device for torch/CuPy."""
    if value is None:
        return None
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if kind == "numpy":
        from fuserc.runtime.job.io import to_numpy

        return to_numpy(t)
    device = inputs[0].device if inputs else torch.device("cpu")
    t = t.to(device)
    if kind == "cupy":
        import cupy

        return cupy.from_dlpack(t)
    return t


def compile_text(
    text: str,
    entry: str = "main",
    pipeline: str = "default",
    backend: str | Backend = "auto",
    filename: str = "<string>",
) -> CompiledProgram:
    """Compile `text` and load it on this rank (collective: every rank of
    the job compiles the same program)."""
    be = backend if isinstance(backend, Backend) else shared_backend(backend, mpi_env())
    compiled = compile_module(text, filename, entry, pipeline, ranks=be.size, nodes=be.env.copy_nodes(be.name))
    return CompiledProgram(compiled, be)


def compile_file(path: str, **options: Any) -> CompiledProgram:
    from fuserc.cli import read_source

    text, name = read_source(path)
    return compile_text(text, filename=name, **options)

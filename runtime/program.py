"""Compiling a program for the runtime, and running it with global tensors.

`compile_text` parses and verifies a module, keeps a copy of the fusion
function as written (the reference for `--check`), runs the pass pipeline
to get the host program, and loads it on this rank's backend. The result,
a `CompiledProgram`, is run many times: `run` on this rank's local shards,
`execute` on global tensors (every rank passes the same ones and gets the
global results back).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.traits import SymbolTable

from fuserc.diagnostics import Diagnostic
from fuserc.dialects import fusion, hir
from fuserc.runtime.backend import Backend, make_backend
from fuserc.runtime.evaluator import Program, find_host_program, matmul_flops
from fuserc.runtime.mpi_env import MpiEnv, mpi_env


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


def compile_module(text: str, filename: str, entry: str = "main", pipeline: str = "default") -> Compiled:
    """Parse, verify and lower `text`; every failure is a Diagnostic."""
    from fuserc import ir
    from fuserc import pipeline as pl

    passes = pl.build(pipeline)
    ctx = ir.make_context()
    module = ir.parse(text, filename, ctx)
    source = module.clone()
    runner = pl.PassRunner(passes)
    runner.run(ctx, module)
    find_host_program(module, entry)
    return Compiled(source, module, entry, runner.timings)


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

    def run(self, local_inputs: Sequence[Any]) -> list[torch.Tensor | None]:
        """This rank's shards in, its result shards out (None where absent)."""
        return self.program.run(local_inputs)

    def execute(self, inputs: Sequence[Any]) -> list[Any]:
        """Global inputs in (the same on every rank: NumPy arrays or torch
        tensors; float32 for bf16), global results out on every rank, as
        torch tensors when any input is one, else NumPy (bf16 as float32)."""
        from fuserc.runtime import io

        if len(inputs) != len(self.params):
            raise Diagnostic(f"@{self.compiled.entry} takes {len(self.params)} inputs, got {len(inputs)}")
        values = [io.check_global_input(_host(v), s) for v, s in zip(inputs, self.params)]
        local = self.run(io.shard_inputs(values, self.params, self.env.rank))
        gathered = io.gather_outputs(local, self.results, self.env)
        arrays = io.broadcast_outputs(gathered, self.results, self.env)
        if any(isinstance(v, torch.Tensor) for v in inputs):
            return [_as_torch(a, s.dtype) for a, s in zip(arrays, self.results)]
        return arrays

    def reference(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The fusion function run unsharded in float64 (runtime/reference.py)."""
        from fuserc.runtime.reference import evaluate

        func = self.compiled.source_function()
        if func is None:
            raise Diagnostic(
                f"@{self.compiled.entry} is already a host program: there is no fusion function to "
                "compare against"
            )
        return evaluate(func, list(inputs), self.compiled.entry, accumulate=torch.float64)

    def close(self) -> None:
        self.program.close()


def _host(value: Any) -> Any:
    """DLPack-capable arrays (CuPy) as torch tensors; others unchanged."""
    if isinstance(value, (np.ndarray, torch.Tensor)) or not hasattr(value, "__dlpack__"):
        return value
    return torch.from_dlpack(value).cpu()


def _as_torch(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(a).to(dtype)


def compile_text(
    text: str,
    entry: str = "main",
    pipeline: str = "default",
    backend: str | Backend = "auto",
    filename: str = "<string>",
) -> CompiledProgram:
    """Compile `text` and load it on this rank (collective: every rank of
    the job compiles the same program)."""
    compiled = compile_module(text, filename, entry, pipeline)
    be = backend if isinstance(backend, Backend) else make_backend(backend, mpi_env())
    return CompiledProgram(compiled, be)


def compile_file(path: str, **options: Any) -> CompiledProgram:
    from fuserc.cli import read_source

    text, name = read_source(path)
    return compile_text(text, filename=name, **options)

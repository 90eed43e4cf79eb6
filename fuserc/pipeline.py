"""The pass registry and pipelines.

Passes register here by name with the module that defines them; a pipeline
string uses xDSL's syntax (`a,b{opt=1}`); `default` names the whole
pipeline of DESIGN.md section 3."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import parse_pipeline

from fuserc.diagnostics import Diagnostic
from fuserc.ir import to_text, verify

PASSES: dict[str, tuple[str, str]] = {
    "propagate-shardings": ("fuserc.passes.propagate_shardings", "PropagateShardings"),
    "make-resharding-contiguous": ("fuserc.passes.make_resharding_contiguous", "MakeReshardingContiguous"),
    "lower-to-host-ir": ("fuserc.passes.lower_to_host_ir", "LowerToHostIR"),
    "stream-pipeline": ("fuserc.passes.stream_pipeline", "StreamPipeline"),
}
"""name -> (module, class). A module that does not exist yet makes the pass
'not available' (a clean error), not an import crash."""

PIPELINES: dict[str, str] = {
    "default": "propagate-shardings,make-resharding-contiguous,lower-to-host-ir,stream-pipeline",
}


class PipelineSpecError(Diagnostic):
    """A malformed pipeline or an unknown pass: a usage error (exit 2)."""


def pass_class(name: str) -> type[ModulePass]:
    if name not in PASSES:
        raise PipelineSpecError(
            f"unknown pass '{name}'; available: {', '.join([*PASSES, *PIPELINES])}"
        )
    module, cls = PASSES[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise Diagnostic(f"pass '{name}' is not available in this version of fuserc") from None
    return getattr(mod, cls)


def expand(spec: str) -> str:
    """Replace pipeline names (`default`) by their passes."""
    parts = [p.strip() for p in _split_top(spec) if p.strip()]
    return ",".join(PIPELINES.get(p, p) for p in parts)


def _split_top(spec: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def with_option(spec: str, pass_name: str, option: str, value: str) -> str:
    """`spec` (pipelines expanded) with `option=value` set on `pass_name`;
    a clean error when the pipeline does not run that pass."""
    parts = [p.strip() for p in _split_top(expand(spec)) if p.strip()]
    out, found = [], False
    for p in parts:
        name, _, opts = p.partition("{")
        if name.strip() == pass_name:
            found = True
            kept = [o for o in opts.rstrip("}").split(",") if o and not o.startswith(f"{option}=")]
            p = f"{pass_name}{{{','.join([*kept, f'{option}={value}'])}}}"
        out.append(p)
    if not found:
        raise PipelineSpecError(f"option {option} needs pass '{pass_name}' in the pipeline '{spec}'")
    return ",".join(out)


def build(spec: str) -> list[ModulePass]:
    """The passes named by `spec`, with their options."""
    spec = expand(spec)
    if not spec:
        return []
    try:
        arg_specs = list(parse_pipeline(spec))
    except (Exception, BaseException) as e:  # xDSL raises a BaseException subclass
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise PipelineSpecError(f"invalid pass pipeline '{spec}': {e}") from None
    passes = []
    for arg_spec in arg_specs:
        cls = pass_class(arg_spec.name)
        try:
            passes.append(cls.from_spec(arg_spec))
        except (Exception, BaseException) as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise PipelineSpecError(f"invalid options for pass '{arg_spec.name}': {e}") from None
    return passes


@dataclass
class PassRunner:
    """Runs passes on a module, verifying after each one."""

    passes: list[ModulePass]
    after_each: Callable[[str, ModuleOp], None] | None = None
    timings: list[tuple[str, float]] = field(default_factory=list)

    def run(self, ctx: Context, module: ModuleOp) -> None:
        for p in self.passes:
            t0 = time.perf_counter()
            p.apply(ctx, module)
            self.timings.append((p.name, time.perf_counter() - t0))
            try:
                verify(module)
            except Diagnostic as d:
                raise Diagnostic(f"IR is invalid after pass '{p.name}': {d.message}", d.loc) from None
            if self.after_each:
                self.after_each(p.name, module)


def run_pipeline(module: ModuleOp, spec: str, ctx: Context | None = None) -> ModuleOp:
    """Apply a pipeline to `module` in place and return it."""
    from fuserc.ir import make_context

    PassRunner(build(spec)).run(ctx or make_context(), module)
    return module


def dump(name: str, module: ModuleOp) -> str:
    return f"// -----// IR Dump After {name} //----- //\n{to_text(module)}"

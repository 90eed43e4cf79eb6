"""The pass registry and pipelines.

Passes register here by name with the module that defines them, a one-line
summary and the meaning of each option (like MLIR's pass definitions: what
`fuserc opt --list-passes` prints). A pipeline is written either as xDSL's
list (`a,b{opt=1 other=x}`) or as MLIR's textual pipeline
(`builtin.module(a,b{opt=1})`); option names are spelled with dashes
(`num-streams`), as the docs write them, and underscores are accepted.
`default` names the whole pipeline, and `default{opt=value}` gives the
option to the pass of the pipeline that has it."""

from __future__ import annotations

import dataclasses
import importlib
import re
import time
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec, parse_pipeline

from fuserc.diagnostics import Diagnostic
from fuserc.ir import to_text, verify


@dataclass(frozen=True)
class PassEntry:
    """A registered pass: where its class lives, what it does, and what
    each of its options means (keyed by the option's dashed name)."""

    module: str
    cls: str
    summary: str = ""
    options: Mapping[str, str] = field(default_factory=dict)


PASSES: dict[str, PassEntry] = {
    "propagate-shardings": PassEntry(
        "fuserc.passes.propagate_shardings",
        "PropagateShardings",
        "gives every tensor without a sharding one, from its operands and its uses",
    ),
    "chunk-experts": PassEntry(
        "fuserc.passes.expert_chunks",
        "ChunkExperts",
        "cuts each expert-parallel dispatch -> experts -> combine chain into token chunks, so that a chunk's "
        "all-to-alls run beside another chunk's grouped GEMMs",
        {"token-chunks": "the chunk count (1: no chunking); none: the cost model chooses"},
    ),
    "make-resharding-contiguous": PassEntry(
        "fuserc.passes.make_resharding_contiguous",
        "MakeReshardingContiguous",
        "makes every op local compute or a single-step reshard of contiguous blocks",
    ),
    "lower-to-host-ir": PassEntry(
        "fuserc.passes.lower_to_host_ir",
        "LowerToHostIR",
        "turns every fusion function into a host program (allocations, communications, launches)",
        {"backend": "the backend named on every communication: nccl, cuda_ipc or mpi"},
    ),
    "stream-pipeline": PassEntry(
        "fuserc.passes.stream_pipeline",
        "StreamPipeline",
        "overlaps communication with compute: Stream splits (and, with auto, sites that pay) "
        "become host loops over chunks on rotating streams",
        {
            "algorithm": "auto (the cost model chooses), collective, ring, or none (the pass does nothing)",
            "num-streams": "the worker stream pool; 0: one stream per chunk, at most 8",
            "chunks": "the chunk count S of sites without a written Stream split; "
            "none: the cost model chooses",
            "links": "a links JSON file for the cost model; empty: $FUSERC_LINKS, else "
            "~/.cache/fuserc/links.json, else the documented defaults",
            "ring-form": "the GEMM+ReduceScatter ring's form: auto (the cost model chooses), sum or pull",
        },
    ),
    "plan-memory": PassEntry(
        "fuserc.passes.plan_memory",
        "PlanMemory",
        "lets buffers whose device work never overlaps (in stream order) share one block of memory",
    ),
    "autodiff": PassEntry(
        "fuserc.passes.autodiff",
        "Autodiff",
        "derives @ENTRY_fwd and @ENTRY_bwd (the vector-Jacobian product) beside a fusion function",
        {
            "entry": "the function to differentiate",
            "save": "what the forward returns for the backward: activations (the values the "
            "derivative rules read) or inputs (the arguments; the backward recomputes the rest)",
            "gathered-mib": "with save=activations, the MiB per device that saved gathered GEMM inputs may take "
            "(-1: no limit); past it, the backward gathers them again",
            "budget": "with save=activations, the MiB per device that the saved tensors may take (-1: no limit); "
            "past it, the backward recomputes what does not fit, each op just before its first reader",
            "token-chunks": "the token chunks of each expert-parallel layer, cut before the derivation "
            "(chunk-experts); none: the cost model chooses",
        },
    ),
}
"""name -> entry. A module that does not exist yet makes the pass 'not
available' (a clean error), not an import crash."""

PIPELINES: dict[str, tuple[str, ...]] = {
    "default": (
        "propagate-shardings",
        "chunk-experts",
        "make-resharding-contiguous",
        "lower-to-host-ir",
        "stream-pipeline",
        "plan-memory",
    ),
}

ANCHOR = "builtin.module"
MODULE_ANCHORS = (ANCHOR, "any")
"""What a pipeline may nest under: the module (fuserc's passes run on it)."""


class PipelineSpecError(Diagnostic):
    """A malformed pipeline, an unknown pass or option: a usage error (exit 2)."""


def _entry(name: str) -> PassEntry:
    if name not in PASSES:
        import difflib

        known = [*PASSES, *PIPELINES]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise PipelineSpecError(f"unknown pass '{name}'{hint}; available: {', '.join(known)} (--list-passes)")
    return PASSES[name]


def pass_class(name: str) -> type[ModulePass]:
    entry = _entry(name)
    try:
        mod = importlib.import_module(entry.module)
    except ModuleNotFoundError as e:
        if e.name != entry.module:
            raise
        raise Diagnostic(f"pass '{name}' is not available in this version of fuserc") from None
    return getattr(mod, entry.cls)


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionInfo:
    name: str  # dashed, as the docs write it
    type: str
    default: str
    meaning: str


def dashed(name: str) -> str:
    return name.replace("_", "-")


def options_of(name: str) -> list[OptionInfo]:
    """The options of a registered pass, in their declaration order."""
    cls = pass_class(name)
    hints = typing.get_type_hints(cls)
    meanings = _entry(name).options
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "name" or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = _show(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _show(f.default_factory())
        else:
            default = "(required)"
        out.append(OptionInfo(dashed(f.name), _type_name(hints.get(f.name)), default, meanings.get(dashed(f.name), "")))
    return out


def _show(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if re.fullmatch(r"[A-Za-z0-9_.-]+", value) else f'"{value}"'
    return str(value)


def _type_name(t: object) -> str:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    if args:
        return " | ".join(_type_name(a) for a in args)
    return getattr(t, "__name__", str(t))


def _check_option_names(name: str, params: Mapping[str, object]) -> None:
    """Every option given to a pass is one of its own (either spelling)."""
    known = [o.name for o in options_of(name)]
    for key in params:
        if dashed(key) not in known:
            have = f"its options: {', '.join(known)}" if known else "it takes no options"
            raise PipelineSpecError(f"pass '{name}' has no option '{key}' ({have}; --list-passes)")


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------


def _unnest(spec: str) -> tuple[str, int]:
    """The pass list inside MLIR's `builtin.module(...)` (or `any(...)`,
    which on the module means the module), with the column offset of that
    list in `spec`; `spec` itself when it is not nested. Nesting under
    another op is refused: every pass of fuserc runs on the whole module."""
    parens = _parens(spec)
    if not parens:
        return spec, 0
    first, depth, close = parens[0], 0, -1
    for i in parens:
        depth += 1 if spec[i] == "(" else -1
        if depth < 0:
            break
        if depth == 0:
            close = i
            break
    if spec[first] != "(" or close < 0:
        raise PipelineSpecError(f"invalid pass pipeline '{spec}': unbalanced parentheses")
    anchor = spec[:first].strip()
    if anchor not in MODULE_ANCHORS:
        raise PipelineSpecError(
            f"invalid pass pipeline '{spec}': a pipeline nests under {ANCHOR}(...) only "
            f"(fuserc's passes run on the whole module), not under '{anchor}'"
        )
    if spec[close + 1 :].strip():
        raise PipelineSpecError(f"invalid pass pipeline '{spec}': {anchor}(...) must enclose the whole pipeline")
    inner = spec[first + 1 : close]
    nested = _parens(inner)
    if nested:
        m = re.search(r"([A-Za-z0-9_.\-]*)\s*$", inner[: nested[0]])
        raise PipelineSpecError(
            f"invalid pass pipeline '{spec}': fuserc's passes run on the whole module, not nested "
            f"under '{m.group(1) if m else ''}': write them directly in {ANCHOR}(...)"
        )
    return inner, first + 1


def _parens(spec: str) -> list[int]:
    """Positions of the parentheses outside option braces and quotes."""
    return [i for i, ch in _top_level(spec) if ch in "()"]


def _top_level(spec: str) -> Iterator[tuple[int, str]]:
    """(position, character) of each character outside option braces and
    quoted strings."""
    depth, quote = 0, False
    for i, ch in enumerate(spec):
        if ch == '"' and (i == 0 or spec[i - 1] != "\\"):
            quote = not quote
        elif quote:
            continue
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth <= 0:
            yield i, ch


_XDSL_ERROR = re.compile(r"pass-pipeline:\d+:(\d+)\n.*\n\s*\^+\n\s*(.*)", re.S)


def _parse_list(spec: str, body: str, offset: int) -> list[ArgSpec]:
    """The passes of a comma-separated list (`body`, at column `offset` + 1
    of `spec`); spaces around the commas are allowed, as MLIR allows them."""
    out = []
    for start, piece in _split_commas(body):
        lead = len(piece) - len(piece.lstrip())
        where = offset + start + lead
        text = piece.strip()
        if not text:
            _spec_error(spec, "expected a pass name", where + 1)
        try:
            out.extend(parse_pipeline(text))
        except (Exception, BaseException) as e:  # xDSL raises a BaseException subclass
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            m = _XDSL_ERROR.search(str(e))
            if not m:
                raise PipelineSpecError(f"invalid pass pipeline '{spec}': {e}") from None
            what = m.group(2).strip().rstrip(".")
            _spec_error(spec, what[:1].lower() + what[1:], where + int(m.group(1)))
    return out


def _spec_error(spec: str, what: str, col: int) -> None:
    raise PipelineSpecError(
        f"invalid pass pipeline '{spec}': {what} (column {col})", context=f"{spec}\n{' ' * (col - 1)}^"
    )


def _split_commas(body: str) -> list[tuple[int, str]]:
    """(start, text) of each piece of `body` between commas outside option
    braces and quotes."""
    cuts = [i for i, ch in _top_level(body) if ch == ","]
    starts = [0, *(c + 1 for c in cuts)]
    ends = [*cuts, len(body)]
    return [(a, body[a:b]) for a, b in zip(starts, ends)]


def parse(spec: str) -> list[ArgSpec]:
    """The passes of a pipeline (either form), with pipeline names
    expanded and option names dashed; a PipelineSpecError otherwise."""
    text = spec.strip()
    if not text:
        return []
    body, offset = _unnest(text)
    if not body.strip():
        return []
    out: list[ArgSpec] = []
    for s in _parse_list(text, body, offset):
        params = {dashed(k): v for k, v in s.parameters.items()}
        if s.name in PIPELINES:
            out.extend(_expand(s.name, params))
        else:
            _entry(s.name)
            out.append(ArgSpec(s.name, params))
    return out


def _expand(pipeline: str, params: Mapping[str, tuple]) -> list[ArgSpec]:
    """A named pipeline's passes, each option given to the one pass of the
    pipeline that has it."""
    passes = {name: dict[str, tuple]() for name in PIPELINES[pipeline]}
    for key, value in params.items():
        owners = [p for p in passes if key in {o.name for o in options_of(p)}]
        if not owners:
            have = sorted({o.name for p in passes for o in options_of(p)})
            raise PipelineSpecError(
                f"no pass of the pipeline '{pipeline}' has an option '{key}' (its options: {', '.join(have)}; --list-passes)"
            )
        if len(owners) > 1:
            raise PipelineSpecError(
                f"option '{key}' of the pipeline '{pipeline}' belongs to several of its passes "
                f"({', '.join(owners)}): write the pipeline out and give it to one"
            )
        passes[owners[0]][key] = value
    return [ArgSpec(name, opts) for name, opts in passes.items()]


def build(spec: str) -> list[ModulePass]:
    """The passes named by `spec`, with their options."""
    passes = []
    for arg_spec in parse(spec):
        cls = pass_class(arg_spec.name)
        _check_option_names(arg_spec.name, arg_spec.parameters)
        try:
            passes.append(cls.from_spec(arg_spec))
        except (Exception, BaseException) as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise PipelineSpecError(f"invalid options for pass '{arg_spec.name}': {e}") from None
    return passes


def with_option(spec: str, pass_name: str, option: str, value: str) -> str:
    """`spec` (pipelines expanded) with `option=value` set on `pass_name`;
    a clean error when the pipeline does not run that pass."""
    specs = parse(spec)
    if not any(s.name == pass_name for s in specs):
        raise PipelineSpecError(f"option {option} needs pass '{pass_name}' in the pipeline '{spec}'")
    out = []
    for s in specs:
        params = dict(s.parameters)
        if s.name == pass_name:
            params[dashed(option)] = (value,)
        out.append(str(ArgSpec(s.name, params)))
    return ",".join(out)


def describe() -> str:
    """Every pass with its options (type, default, meaning), then the named
    pipelines: `fuserc opt --list-passes`."""
    lines = [
        "Passes (-p 'a,b{option=value other=value}' or --pass-pipeline 'builtin.module(a,b{option=value})'):",
    ]
    for name in PASSES:
        entry = _entry(name)
        lines.append(f"  {name}")
        if entry.summary:
            lines.append(f"      {entry.summary}")
        try:
            options = options_of(name)
        except Diagnostic as d:
            lines.append(f"      ({d.message})")
            continue
        for o in options:
            lines.append(f"    {o.name}={o.type} (default: {o.default})")
            if o.meaning:
                lines.append(f"        {o.meaning}")
    lines.append("Pipelines (an option given to a pipeline, default{algorithm=ring}, goes to its pass that has it):")
    for name, passes in PIPELINES.items():
        lines.append(f"  {name}")
        lines.append(f"      {','.join(passes)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


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

#!/usr/bin/env python
"""A seeded mutation fuzzer of `fuserc opt`.

    python tools/fuzz.py [--mutants N] [--seed S] [--pipeline P ...] [--jobs J]
                         [--timeout SECONDS] [--save DIR] [--only I]

Takes the examples, the lit inputs (each `// -----` chunk on its own) and
programs of the property test's generator (tests/property/program_gen.py),
mutates them (numbers, shapes, shardings, types and op names swapped;
lines deleted, duplicated, swapped, truncated; brackets, quotes and odd
bytes inserted; deep nesting; very long lines; pieces of other inputs;
digits that are not ASCII; chunk counts of zero; host IR in functions
that are not host programs; functions of two blocks; integers past every
limit), and runs `fuserc opt
FILE -p P` on each mutant for each pipeline P given (`--pipeline` again
for another: CI runs `default` and `autodiff,default`), in-process, in J
worker processes. Each result is one of:

- ok: exit 0;
- diagnostic: exit 1 or 2 with an `error:` message (counted also as
  located when it names file:line:col);
- traceback: an uncaught exception, any Python traceback on stderr, or a
  worker that died (a crash);
- timeout: over --timeout seconds.

Then `--special-files N` mutants are given as a named pipe (with and
without a writer), a directory, a device, a dangling or looping symlink,
with `-o` to /dev/full, into a missing folder or onto the input: each
must be read, written or refused in one line (and the input survive).

Two classes exercise the runtime rather than the compiler (`--cache-attacks
N`, `--launcher-kills N`; `runtime_classes`): attacks on the kernel cache,
by a second user (uid 65534, through `setpriv`, when run as root) or by
files planted in it (a cache folder, key or entry of the other user, a
folder others can write, an entry signed with another key, a FIFO, a link
to /dev/zero, a dangling link, a folder, an entry over the size bound, a
lock file that is a FIFO or a link), each followed by a fetch whose loader
unpickles and by `fuserc cache info`: a planted command that runs, a
traceback or a hang is a failure; and a job whose launcher (mpiexec or
torchrun, in turn) is killed with SIGKILL at a random moment of its ranks'
start or runs: a rank still running 30 s later is a failure (`orphaned`).

Mutant i depends only on (seed, i), so a run is reproducible and a finding
is replayed with `--only I`. The table at the end counts each class and
groups tracebacks and timeouts by where they come from (the innermost
frame of fuserc, else of xDSL); --save DIR writes each failing mutant.
Exit status 1 when any mutant ends in a traceback or a timeout.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import io
import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS_GLOBS = ("examples/*.mlir", "tests/lit/**/*.mlir")
GENERATED = 100
"""Programs of the property test's generator among the seeds (its seeds 0..GENERATED-1)."""
CLASSES = ("ok", "diagnostic", "traceback", "timeout")
FAILING = ("traceback", "timeout")
LOCATED = re.compile(r"^\S.*:\d+:\d+: error: ", re.M)


# --------------------------------------------------------------------------
# Corpus and mutations
# --------------------------------------------------------------------------


def corpus(root: Path = ROOT) -> list[str]:
    """Every seed input: each example, each `// -----` chunk of a lit
    input, and GENERATED programs of the property test's generator (valid
    programs of every op family, whose backward autodiff derives), in a
    fixed order."""
    out: list[str] = []
    for pattern in CORPUS_GLOBS:
        for path in sorted(root.glob(pattern)):
            if "Output" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            out.extend(_with_main(c) for c in re.split(r"^// -----\s*$", text, flags=re.M) if c.strip())
    sys.path.insert(0, str(root / "tests" / "property"))
    try:
        from program_gen import generate
    finally:
        sys.path.pop(0)
    out.extend(generate(seed, max_devices=8).text for seed in range(GENERATED))
    return out


def _with_main(text: str) -> str:
    """`text` with its first function named @main where none is and its
    name is used nowhere else, so that autodiff (entry main) has one to
    differentiate."""
    m = re.search(r"^func\.func @(\w+)\(", text, re.M)
    code = re.sub(r"//[^\n]*", "", text)
    if m is None or "@main(" in code or code.count(f"@{m.group(1)}") != 1:
        return text
    return text[: m.start(1)] + "main" + text[m.end(1) :]


NUMBERS = ["0", "1", "-1", "2", "3", "7", "64", "4096", "65536", "2147483648", "9223372036854775807",
           "18446744073709551616", "100000000", "1" + "0" * 40, "-9223372036854775808"]  # fmt: skip
WORDS = ["DIDx", "DIDy", "DIDz", "-", "Stream(4)", "Stream(0)", "Stream(3)*DIDx", "DIDx*Stream(2)",
         "partial = DIDx", "f32", "bf16", "f16", "f64", "i64", "i1", "i32", "tensor<4x4xf32>", "@tp", "@nope",
         "%x", "%undefined", "fusion.matmul", "fusion.add", "fusion.relu", "fusion.sum", "fusion.set",
         "fusion.reshape", "fusion.permute", "fusion.slice", "fusion.broadcast_in_dim", "fusion.softmax",
         "fusion.cast", "fusion.linear", "fusion.mesh", "func.return", "hir.alloc", "hir.allgather", "hir.wait",
         "shape = [0]", "shape = [1000000, 1000000]", "shape = [2, 2]", "0x4", "4x0", "?x4", "dims = [1, 0]",
         "#fusion.sharding<@tp, [DIDx, -]>", "loc(unknown)", "{}", "()", "[]", "<>"]  # fmt: skip
NOISE = list("()[]{}<>,:=%@#\"'\\-+*/!?;x0") + ["\x00", "\x7f", "é", "\u2028", "\ud7ff", "\t", "\n", "//", "/*"]


def mutate(seed_text: str, rng: random.Random, others: Sequence[str]) -> str:
    """One to three random mutations of `seed_text`."""
    text = seed_text
    for _ in range(rng.choice((1, 1, 2, 3))):
        text = rng.choice(MUTATIONS)(text, rng, others)
    return text


def _replace_one(text: str, rng: random.Random, pattern: str, choices: Sequence[str]) -> str:
    """One random match of `pattern` in `text` replaced by one of `choices`."""
    spots = list(re.finditer(pattern, text))
    if not spots:
        return text
    m = rng.choice(spots)
    return text[: m.start()] + rng.choice(choices) + text[m.end() :]


def _numbers(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    return _replace_one(text, rng, r"-?\d+", NUMBERS)


def _word(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    # bounded repetitions: a mutant of a line of 100,000 brackets is made in linear time
    pattern = r"DID[xyz]|Stream\(\d+\)|\bf32\b|\bbf16\b|\bi64\b|fusion\.\w+|%\w+|@\w+|\[[^\]\[\n]{0,80}\]|\d+x\d+"
    return _replace_one(text, rng, pattern, WORDS)


def _lines(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    kind = rng.randrange(3)
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _truncate(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    return text[: rng.randrange(len(text) + 1)]


def _delete_span(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + text[i + rng.randint(1, 40) :]


def _insert_noise(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    i = rng.randrange(len(text) + 1)
    return text[:i] + "".join(rng.choice(NOISE) for _ in range(rng.randint(1, 4))) + text[i:]


def _nest(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """Deep nesting: brackets of one kind (or a nested type) thousands deep."""
    depth = rng.choice((50, 500, 5000, 50000))
    i = rng.randrange(len(text) + 1)
    opener, closer = rng.choice((("(", ")"), ("[", "]"), ("{", "}"), ("<", ">"), ("tensor<", "xf32>"), ("[[", "]]")))
    closed = rng.random() < 0.5
    return text[:i] + opener * depth + (closer * depth if closed else "") + text[i:]


def _long_line(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """A fragment repeated on one line (tens of thousands of characters)."""
    fragment = rng.choice(("%x, ", "4x", "4x", "DIDx, ", "-, ", "// comment ", "a", "%y = fusion.relu %x : (tensor<4xf32>) -> tensor<4xf32> ", "\"str\" "))
    i = rng.randrange(len(text) + 1)
    return text[:i] + fragment * rng.choice((1000, 10000, 50000)) + text[i:]


def _splice(text: str, rng: random.Random, others: Sequence[str]) -> str:
    other = rng.choice(others)
    a, b = sorted(rng.randrange(len(other) + 1) for _ in range(2))
    i = rng.randrange(len(text) + 1)
    return text[:i] + other[a:b] + text[i:]


def _byte(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + chr(rng.randrange(1, 0x300)) + text[i + 1 :]


UNICODE_DIGITS = ["²", "٣", "４", "①", "Ⅰ", "০", "𝟘", "¼", "߃"]
"""Characters Python calls numeric (or decimal) that are not ASCII digits."""


def _unicode_digit(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """A digit replaced by a Unicode digit or numeric character."""
    return _replace_one(text, rng, r"\d", UNICODE_DIGITS)


HOST_OPS = re.compile(r"^(\s*(?:%\w+ = )?hir\.(?:matmul|linear|copy|allgather|reduce_scatter|allreduce|alltoall)\b[^\n{]*?) : ", re.M)


def _zero_chunks(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """A chunk count of zero (or less): in `Stream(S)`, `hir.stream = [d,
    S]` (one added to a host op when none is written), `chunks = N`,
    `mod N`, `step N`, `of N`."""
    zero = rng.choice(("0", "0", "-1"))
    spots = list(re.finditer(r"Stream\(\d+\)|hir\.stream = \[[^\]]*\]|chunks = \d+|mod \d+|step \d+|of \d+", text))
    hosts = list(HOST_OPS.finditer(text))
    if hosts and (not spots or rng.random() < 0.4):
        m = rng.choice(hosts)
        return text[: m.end(1)] + f" {{hir.stream = [0, {zero}]}}" + text[m.end(1) :]
    if not spots:
        return text
    m = rng.choice(spots)
    word = m.group(0)
    if word.startswith("Stream"):
        new = f"Stream({zero})"
    elif word.startswith("hir.stream"):
        new = f"hir.stream = [{rng.choice(('0', '1'))}, {zero}]"
    else:
        new = word.split(" ")[0] + (" = " if "=" in word else " ") + zero
    return text[: m.start()] + new + text[m.end() :]


HOST_SNIPPET = """  %fz = hir.alloc "fuzz/fz" : tensor<8xf32>
  hir.launch ins(%fz : tensor<8xf32>) outs(%fz : tensor<8xf32>) {
  ^bb0(%fx: tensor<8xf32>):
    %fg = fusion.relu %fx : (tensor<8xf32>) -> tensor<8xf32>
    hir.yield %fg : tensor<8xf32>
  }"""


def _host_ir_outside_host(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """Host IR where the fusion passes look: a host program's `hir.host`
    mark dropped, or a hir.alloc and hir.launch put into a function body."""
    marks = [m for m in re.finditer(r" attributes \{hir\.host\}", text)]
    if marks and rng.random() < 0.5:
        m = rng.choice(marks)
        return text[: m.start()] + text[m.end() :]
    lines = text.split("\n")
    body = [i for i, line in enumerate(lines) if line.startswith("  ") and i > 0 and "func.func" in "\n".join(lines[:i])]
    if not body:
        return text
    i = rng.choice(body)
    return "\n".join(lines[:i] + HOST_SNIPPET.split("\n") + lines[i:])


def _second_block(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """A function of two blocks: `^bb1:` (with an argument, or not) before
    a line of a function body, its return copied after it, or not."""
    lines = text.split("\n")
    body = [i for i, line in enumerate(lines) if re.match(r"\s+(%\w+ = |func\.return|hir\.|fusion\.)", line)]
    if not body:
        return text
    i = rng.choice(body)
    label = rng.choice(("^bb1:", "^bb1(%z: tensor<4xf32>):", "^bb7:"))
    extra = [lines[j] for j in body if "func.return" in lines[j]][:1] if rng.random() < 0.5 else []
    return "\n".join(lines[:i] + [label] + lines[i:i + 1] + extra + lines[i + 1 :])


MUTATIONS = (_numbers, _numbers, _word, _word, _word, _lines, _lines, _truncate, _delete_span, _insert_noise,
             _insert_noise, _nest, _long_line, _splice, _byte, _unicode_digit, _zero_chunks, _host_ir_outside_host,
             _second_block)  # fmt: skip


HUGE_INTEGERS = ["9" * 5000, "0x" + "f" * 5000, "9223372036854775808", "18446744073709551616", "2147483648",
                 "9223372036854775807", "1" + "0" * 4301]  # fmt: skip


def _huge_integer(text: str, rng: random.Random, _o: Sequence[str]) -> str:
    """An integer past every limit (Python's 4,300 digits, i64, u64, MPI's
    int ranks) where the IR holds one: a dimension, a mesh shape or device,
    an attribute."""
    return _replace_one(text, rng, r"(?<![\w.])\d+(?![\w.])", HUGE_INTEGERS)


MUTATIONS = (*MUTATIONS, _huge_integer, _huge_integer)


def mutant(seeds: Sequence[str], seed: int, index: int) -> str:
    """Mutant `index` of the run seeded `seed` (independent of the others)."""
    rng = random.Random(f"{seed}:{index}")
    return mutate(rng.choice(seeds), rng, seeds)


# --------------------------------------------------------------------------
# Running one mutant (in a worker)
# --------------------------------------------------------------------------


class _Timeout(BaseException):
    """Raised in the worker when a mutant runs past its time."""


@dataclass
class Result:
    index: int
    cls: str  # one of CLASSES
    seconds: float
    where: str = ""  # for traceback/timeout: the innermost fuserc (or xDSL) frame
    detail: str = ""  # the error's first line, or the exception
    located: bool = False
    pipeline: str = ""


@functools.cache
def _roots() -> list[tuple[str, str]]:
    """(folder, short name) of fuserc's own code and xDSL's: the folders the
    modules were imported from, so that a checkout's own path (a clone in a
    folder named fuserc, a test file) never passes for the package's code."""
    import importlib

    roots = []
    for module, short in (("fuserc", "fuserc"), ("fuserc.passes", "passes"), ("fuserc.dialects", "dialects"), ("fuserc.runtime", "runtime"), ("xdsl", "xdsl")):
        folder = os.path.dirname(os.path.realpath(importlib.import_module(module).__file__ or ""))
        roots.append((folder + os.sep, short))
    return sorted(roots, key=lambda r: -len(r[0]))  # installed, fuserc/passes/ lies inside fuserc/


def _own(filename: str) -> str | None:
    """`filename` as `fuserc/...`, `passes/...`, ... or `xdsl/...` when it is
    fuserc's or xDSL's code, else None."""
    real = os.path.realpath(filename)
    for folder, short in _roots():
        if real.startswith(folder):
            return f"{short}/{real[len(folder):]}"
    return None


def _innermost_own(frames: Sequence[tuple[str, object, str]]) -> str | None:
    """`name:line (function)` of the innermost of `frames` (file, line,
    function; innermost last) in fuserc's own code, else in xDSL's; None
    when there is neither."""
    own = [(name, line, func) for file, line, func in frames if (name := _own(file)) is not None]
    if not own:
        return None
    name, line, func = next((f for f in reversed(own) if not f[0].startswith("xdsl/")), own[-1])
    return f"{name}:{line} ({func})"


def _where(tb: traceback.StackSummary) -> str:
    """The innermost frame of fuserc's own code, else of xDSL's, else the
    innermost frame."""
    frames = list(tb)
    found = _innermost_own([(f.filename, f.lineno, f.name) for f in frames])
    return found or (f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?")


def run_one(index: int, text: str, pipeline: str, timeout: float, workdir: Path) -> Result:
    """`fuserc opt FILE -p PIPELINE` in this process, classified."""
    path = workdir / f"mutant{index}.mlir"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    try:
        return run_args(index, ["opt", str(path), "-p", pipeline], pipeline, timeout)
    finally:
        path.unlink(missing_ok=True)


def run_args(index: int, argv: list[str], pipeline: str, timeout: float) -> Result:
    """`fuserc ARGV` in this process, classified (ok, diagnostic, traceback, timeout)."""
    from fuserc.cli import main

    out, err = io.StringIO(), io.StringIO()

    def expire(_sig: int, _frame: object) -> None:
        raise _Timeout()

    signal.signal(signal.SIGALRM, expire)
    start = time.perf_counter()
    cls, where, detail = "ok", "", ""
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main.main(argv, prog_name="fuserc", standalone_mode=False)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except Exception as e:  # click's usage errors, as standalone mode shows them
                import click

                if not isinstance(e, click.ClickException):
                    raise
                e.show()
                code = e.exit_code
        signal.setitimer(signal.ITIMER_REAL, 0)
        stderr = err.getvalue()
        if "Traceback (most recent call last)" in stderr:
            cls, detail = "traceback", stderr.strip().splitlines()[-1]
        elif code == 0:
            cls = "ok"
        elif "error:" in stderr.lower():
            cls, detail = "diagnostic", stderr.strip().splitlines()[0][:200]
        else:
            cls, detail = "traceback", f"exit {code} without a diagnostic: {stderr.strip()[:200]}"
    except _Timeout:
        cls, detail = "timeout", f"over {timeout:g} s"
        where = _where(traceback.extract_tb(sys.exc_info()[2]))
    except BaseException as e:  # noqa: BLE001 - every escape is a finding
        signal.setitimer(signal.ITIMER_REAL, 0)
        cls, detail = "traceback", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        where = _where(traceback.extract_tb(e.__traceback__))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - start
    located = cls == "diagnostic" and bool(LOCATED.search(err.getvalue()))
    return Result(index, cls, seconds, where, detail, located, pipeline)


SPECIAL_FILES = ("fifo without a writer", "fifo with a writer", "directory", "character device", "dangling symlink",
                 "symlink loop", "output to a full device", "output into a missing folder", "output onto the input")  # fmt: skip
"""How `fuserc opt` may be given its input or output other than as a
regular file: each is read, written or refused in one line, never a
traceback or a wait without end."""


def run_special(index: int, text: str, timeout: float, workdir: Path) -> Result:
    """`fuserc opt` on `text` given as SPECIAL_FILES[index % len]: classified
    as `run_one` does (a named pipe nobody writes must end, here in 0.5 s)."""
    import threading

    import fuserc.cli as cli

    kind = SPECIAL_FILES[index % len(SPECIAL_FILES)]
    base = workdir / f"special{index}"
    base.mkdir()
    src = base / "in.mlir"
    src.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    args = [str(src)]
    writer = None
    if kind.startswith("fifo"):
        fifo = base / "fifo"
        os.mkfifo(fifo)
        args = [str(fifo)]
        if kind == "fifo with a writer":
            writer = threading.Thread(target=lambda: fifo.write_bytes(src.read_bytes()), daemon=True)
            writer.start()
    elif kind == "directory":
        args = [str(base)]
    elif kind == "character device":
        args = ["/dev/zero"]
    elif kind == "dangling symlink":
        (base / "link").symlink_to(base / "gone.mlir")
        args = [str(base / "link")]
    elif kind == "symlink loop":
        (base / "a").symlink_to(base / "b")
        (base / "b").symlink_to(base / "a")
        args = [str(base / "a")]
    elif kind == "output to a full device":
        args += ["-o", "/dev/full"]
    elif kind == "output into a missing folder":
        args += ["-o", str(base / "no" / "out.mlir")]
    else:
        args += ["-o", str(src)]
    silence, cli.PIPE_SILENCE_S = cli.PIPE_SILENCE_S, 0.5
    try:
        r = run_args(index, ["opt", *args], "default", timeout)
        if kind == "output onto the input" and not (src.is_file() and src.stat().st_size):
            r.cls, r.detail = "traceback", "the input is gone or empty"
    finally:
        cli.PIPE_SILENCE_S = silence
        if writer is not None and writer.is_alive():  # the reader gave up: let the writer go
            with contextlib.suppress(OSError):
                os.close(os.open(base / "fifo", os.O_RDONLY | os.O_NONBLOCK))
            writer.join(timeout=5)
        subprocess.run(["rm", "-rf", str(base)], check=False)
    r.detail = f"{kind}: {r.detail}" if r.detail else kind
    return r


Job = tuple[int, int]
"""A mutant's index and the index of its pipeline in --pipeline."""


def worker(pipelines: Sequence[str], timeout: float, seed: int) -> None:
    """Reads jobs (`INDEX PIPELINE`, one per line) on stdin, writes one JSON
    result per line on stdout; memory is capped so that a huge allocation is
    a MemoryError (a traceback), not the machine's out-of-memory killer."""
    try:
        import resource

        cap = int(os.environ.get("FUZZ_MEMORY_GB", "6")) << 30
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError):
        pass
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import faulthandler

    from fuserc import ir
    from fuserc import pipeline as pl

    for pipeline in pipelines:
        with contextlib.suppress(Exception):  # a bad pipeline is each mutant's diagnostic
            pl.build(pipeline)  # imports every pass (and the dialects) before the clock runs
    ir.make_context()
    seeds = corpus()
    real_stdout = sys.stdout
    with tempfile.TemporaryDirectory(prefix="fuserc-fuzz-") as d:
        for line in sys.stdin:
            index, k = (int(w) for w in line.split())
            text = mutant(seeds, seed, index)
            # a mutant stuck where the alarm cannot interrupt it (C code):
            # the stack goes to stderr and the worker exits, for the driver
            faulthandler.dump_traceback_later(timeout + 5, exit=True)
            r = run_one(index, text, pipelines[k], timeout, Path(d))
            faulthandler.cancel_dump_traceback_later()
            real_stdout.write(json.dumps(r.__dict__) + "\n")
            real_stdout.flush()


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------


class _Worker:
    """A worker process and the indices it was given but not answered."""

    def __init__(self, args: argparse.Namespace):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *(w for p in args.pipeline for w in ("--pipeline", p)),
               "--timeout", str(args.timeout), "--seed", str(args.seed)]  # fmt: skip
        self.stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, bufsize=1)
        self.pending: collections.deque[Job] = collections.deque()
        self.started = time.monotonic()

    def give(self, job: Job) -> None:
        assert self.proc.stdin is not None
        self.pending.append(job)
        self.proc.stdin.write(f"{job[0]} {job[1]}\n")
        self.proc.stdin.flush()

    def death(self) -> tuple[str, str]:
        """(where, what) of the worker's end, from the stack faulthandler
        wrote (a mutant over its time) or the exit status (a crash)."""
        self.stderr.seek(0)
        text = self.stderr.read()
        self.stderr.seek(0)
        self.stderr.truncate()
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', text)
        where = f"worker process, in {frames[0][0]}:{frames[0][1]} ({frames[0][2]})" if frames else "worker process"
        where = _innermost_own(frames[::-1]) or where  # faulthandler lists the innermost frame first
        if "Timeout" in text:
            return where, "timeout (stuck in C code)"
        return where, f"crash (exit {self.proc.returncode})"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def drive(indices: Sequence[Job], args: argparse.Namespace) -> Iterator[Result]:
    """Results of every job (mutant and pipeline), from `args.jobs` workers;
    a worker that dies or hangs past the timeout (plus a margin) is
    replaced and its job counted as a crash (traceback) or a timeout."""
    import selectors

    todo = collections.deque(indices)
    workers: list[_Worker] = []
    sel = selectors.DefaultSelector()

    def start() -> None:
        w = _Worker(args)
        workers.append(w)
        assert w.proc.stdout is not None
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        if todo:
            w.give(todo.popleft())
            w.started = time.monotonic()

    def retire(w: _Worker) -> None:
        assert w.proc.stdout is not None
        sel.unregister(w.proc.stdout)
        workers.remove(w)
        w.proc.kill()
        w.proc.wait()

    for _ in range(min(args.jobs, len(todo))):
        start()
    while workers:
        events = sel.select(timeout=1.0)
        for key, _ in events:
            w: _Worker = key.data
            line = w.proc.stdout.readline() if w.proc.stdout else ""
            if not line:  # the worker died on its current mutant
                index, k = w.pending.popleft()
                seconds = time.monotonic() - w.started
                retire(w)
                where, what = w.death()
                yield Result(index, "timeout" if what.startswith("timeout") else "traceback", seconds, where, what, pipeline=args.pipeline[k])
                if todo or w.pending:
                    todo.extendleft(reversed(w.pending))
                    start()
                continue
            r = Result(**json.loads(line))
            w.pending.popleft()
            yield r
            if todo:
                w.give(todo.popleft())
                w.started = time.monotonic()
            elif not w.pending:
                sel.unregister(w.proc.stdout)
                workers.remove(w)
                w.close()
        now = time.monotonic()
        for w in list(workers):
            if w.pending and now - w.started > args.timeout * 3 + 10:  # the alarm could not interrupt it
                index, k = w.pending.popleft()
                retire(w)
                yield Result(index, "timeout", now - w.started, "worker process", "not interruptible", pipeline=args.pipeline[k])
                todo.extendleft(reversed(w.pending))
                start()


def report(results: Sequence[Result], pipelines: Sequence[str], seconds: float, out: io.TextIOBase) -> None:
    """The table (mutants by class, one column per pipeline), then the
    failures grouped by cause."""
    mutants = len({r.index for r in results})
    out.write(f"fuzzed {mutants} mutants through {len(pipelines)} pipeline{'s' if len(pipelines) > 1 else ''} in {seconds:.1f} s\n")
    width = max(12, *(len(p) + 2 for p in pipelines))
    out.write(f"{'class':<12}" + "".join(f"{p:>{width}}" for p in pipelines) + "\n")
    counts = {p: collections.Counter(r.cls for r in results if r.pipeline == p) for p in pipelines}
    for c in CLASSES:
        located = [sum(r.located for r in results if r.pipeline == p) for p in pipelines]
        extra = f"  ({', '.join(map(str, located))} located at file:line:col)" if c == "diagnostic" else ""
        out.write(f"{c:<12}" + "".join(f"{counts[p].get(c, 0):>{width}}" for p in pipelines) + f"{extra}\n")
    bad = [r for r in results if r.cls in FAILING]
    if bad:
        groups: dict[tuple[str, str, str, str], list[Result]] = collections.defaultdict(list)
        for r in bad:
            groups[(r.pipeline, r.cls, r.where, r.detail.split(":")[0])].append(r)
        out.write("failures by cause (pipeline, class, where, error: count, mutants):\n")
        for (pipe, cls, where, kind), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            ids = ", ".join(str(r.index) for r in rs[:8]) + (" ..." if len(rs) > 8 else "")
            out.write(f"  -p {pipe}: {cls} at {where}: {kind}: {len(rs)} ({ids})\n    e.g. {rs[0].detail[:160]}\n")
    slow = max(results, key=lambda r: r.seconds, default=None)
    if slow is not None:
        out.write(f"slowest mutant: {slow.index} ({slow.seconds:.2f} s, {slow.cls}, -p {slow.pipeline})\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=300, help="how many mutants (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    parser.add_argument("--only", type=int, action="append", help="run these mutant indices only")
    parser.add_argument("--pipeline", action="append", help="a -p of fuserc opt, each mutant through each (default: default)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per mutant (default 20)")
    parser.add_argument("--save", type=Path, help="write each failing mutant (and its result) here")
    parser.add_argument("--print", dest="print_index", type=int, help="print mutant I and exit")
    parser.add_argument("--special-files", type=int, default=len(SPECIAL_FILES), metavar="N",
                        help=f"also give N mutants as special files, one kind each in turn ({len(SPECIAL_FILES)} kinds; default: each once)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_runtime_options(parser)
    args = parser.parse_args(argv)
    if args.cache_attacks or args.launcher_kills:
        return runtime_classes(args, sys.stdout)
    args.pipeline = args.pipeline or ["default"]
    if args.worker:
        worker(args.pipeline, args.timeout, args.seed)
        return 0
    if args.print_index is not None:
        sys.stdout.write(mutant(corpus(), args.seed, args.print_index))
        return 0
    indices = args.only or list(range(args.mutants))
    jobs = [(i, k) for i in indices for k in range(len(args.pipeline))]
    start = time.perf_counter()
    results = []
    for r in drive(jobs, args):
        results.append(r)
        if r.cls in FAILING and args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            k = args.pipeline.index(r.pipeline)
            (args.save / f"mutant{r.index}.mlir").write_text(mutant(corpus(), args.seed, r.index), errors="surrogatepass")
            (args.save / f"mutant{r.index}-p{k}.json").write_text(json.dumps(r.__dict__, indent=1) + "\n")
    results.sort(key=lambda r: (r.index, args.pipeline.index(r.pipeline)))
    report(results, args.pipeline, time.perf_counter() - start, sys.stdout)
    special = special_files(args.special_files, args.seed, args.timeout)
    report_special(special, sys.stdout)
    return 1 if any(r.cls in FAILING for r in [*results, *special]) else 0


def special_files(count: int, seed: int, timeout: float) -> list[Result]:
    """Mutants 0..count-1 given as special files (`run_special`), in this process."""
    seeds = corpus()
    with tempfile.TemporaryDirectory(prefix="fuserc-fuzz-special-") as d:
        return [run_special(i, mutant(seeds, seed, i), timeout, Path(d)) for i in range(count)]


def report_special(results: Sequence[Result], out: io.TextIOBase) -> None:
    """One line of counts by class, then each failure."""
    if not results:
        return
    counts = collections.Counter(r.cls for r in results)
    out.write(f"special files: {len(results)} runs: " + ", ".join(f"{counts.get(c, 0)} {c}" for c in CLASSES) + "\n")
    for r in results:
        if r.cls in FAILING:
            out.write(f"  {r.cls} at {r.where}: {r.detail[:160]} (mutant {r.index})\n")


# --------------------------------------------------------------------------
# The runtime's classes: attacks on the kernel cache, a killed launcher
# --------------------------------------------------------------------------

OTHER_UID = 65534
RUNTIME_CLASSES = ("refused", "executed", "traceback", "timeout")
"""A cache attack: refused (nothing planted was used; the run went on),
executed (the planted command ran), a traceback, or a hang."""
KILL_CLASSES = ("ended", "orphaned")
ATTACKS = ("other-folder", "open-folder", "other-key", "open-key", "unsigned", "fifo", "dev-zero", "dangling",
           "folder-entry", "huge", "other-entry-link", "fifo-lock", "lock-link")  # fmt: skip
ORPHAN_AFTER_S = 30.0

FETCH = """
import os, pickle, sys
from fuserc.runtime.kernels.kernel_cache import KernelCache, kernel_key
key = kernel_key("region", {"fuzz": 1}, "cpu", {"v": "1"})
got = KernelCache(sys.argv[1]).fetch(key, lambda: ({"artifact": pickle.dumps("built")}, "built"), lambda s: pickle.loads(s["artifact"]))
print(got.how, got.value)
"""
AS_OTHER = """
import json, os, sys
for kind, path, mode, data in json.load(sys.stdin):
    if kind == "dir":
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
    elif kind == "file":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.write(fd, bytes.fromhex(data))
        os.close(fd)
"""


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-attacks", type=int, default=0, help="attacks on the kernel cache to make (a second uid when root)")
    parser.add_argument("--launcher-kills", type=int, default=0, help="jobs whose launcher is killed at a random moment")


class Evil:
    """A pickle that runs a command when it is loaded."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def _as_other(ops: list[tuple[str, str, int, str | None]]) -> bool:
    """Do `ops` as the second user; False when this process cannot."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    cmd = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", sys.executable, "-I", "-c", AS_OTHER]
    subprocess.run(cmd, input=json.dumps(ops), text=True, check=True, timeout=60)
    return True


def cache_attack(index: int, seed: int, base: Path, timeout: float) -> Result:
    """Attack `index` of the run seeded `seed`, in a fresh folder under `base`."""
    from fuserc.runtime.kernels.kernel_cache import KernelCache, _encode, kernel_key

    rng = random.Random(f"cache:{seed}:{index}")
    attack = ATTACKS[index % len(ATTACKS)] if index < len(ATTACKS) else rng.choice(ATTACKS)
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-cache-{index}-", dir=base))
    work.chmod(0o1777)
    root, marker = work / "cache", work / "pwned"
    key = kernel_key("region", {"fuzz": 1}, "cpu", {"v": "1"})
    cache = KernelCache(root)
    entry = cache.entry_path(key)
    evil = {"artifact": pickle.dumps(Evil(str(marker)))}
    start = time.perf_counter()
    try:
        if attack == "other-folder":  # the other user made the cache folder, its key and a signed entry
            secret = os.urandom(32)
            done = _as_other([("dir", str(root), rng.choice([0o700, 0o755, 0o777]), None),
                              ("dir", str(entry.parent), 0o755, None), ("file", str(root / "key"), 0o600, secret.hex()),
                              ("file", str(entry), rng.choice([0o600, 0o644]), _encode(key, evil, 0, secret).hex())])  # fmt: skip
            if not done:
                return Result(index, "refused", 0.0, attack, "skipped: needs root and setpriv")
        else:
            cache.write(key, {"artifact": pickle.dumps("mine")})
            secret = cache.secret()
            planted = _encode(key, evil, 0, secret if attack != "unsigned" else os.urandom(32))
            if attack in ("open-folder", "other-entry-link"):
                for folder in (root, root / "kernels", entry.parent):
                    folder.chmod(rng.choice([0o777, 0o770, 0o757]))
                other = work / "theirs.kernel"
                if not _as_other([("file", str(other), 0o644, planted.hex())]):
                    other.write_bytes(planted)
                entry.unlink()
                if attack == "open-folder":
                    os.replace(other, entry)
                else:
                    os.symlink(other, entry)
            elif attack == "other-key":  # the other user's key in a folder others could write
                root.chmod(0o777)
                (root / "key").unlink()
                _as_other([("file", str(root / "key"), 0o600, secret.hex())]) or (root / "key").write_bytes(secret)
                entry.write_bytes(planted)
            elif attack == "open-key":
                (root / "key").chmod(0o644)
                entry.write_bytes(planted)
            elif attack == "unsigned":
                entry.write_bytes(planted)
            else:
                entry.unlink()
                if attack == "fifo":
                    os.mkfifo(entry)
                elif attack == "dev-zero":
                    os.symlink("/dev/zero", entry)
                elif attack == "dangling":
                    os.symlink(work / "gone", entry)
                elif attack == "folder-entry":
                    entry.mkdir()
                elif attack == "huge":
                    with open(entry, "wb") as f:
                        f.truncate((1 << 30) + 1)
                elif attack in ("fifo-lock", "lock-link"):
                    lock = cache.lock_path(key)
                    lock.unlink(missing_ok=True)
                    os.mkfifo(lock) if attack == "fifo-lock" else os.symlink("/dev/zero", lock)
        env = {**os.environ, "FUSERC_CACHE_DIR": str(root), "PYTHONSAFEPATH": "1"}
        fetched = ""
        for cmd in ([sys.executable, "-c", FETCH, str(root)], [sys.executable, "-m", "fuserc", "cache", "info"]):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
            except subprocess.TimeoutExpired:
                return Result(index, "timeout", time.perf_counter() - start, attack, " ".join(cmd[-3:]))
            if marker.exists():
                return Result(index, "executed", time.perf_counter() - start, attack, "the planted command ran")
            if "Traceback" in out.stderr or out.returncode not in (0, 1):
                last = out.stderr.strip().splitlines()[-1:] or [f"exit {out.returncode}"]
                return Result(index, "traceback", time.perf_counter() - start, attack, last[0])
            fetched = fetched or f"fetch: {out.stdout.strip()}; " + (out.stderr.strip().splitlines() or [""])[-1]
        return Result(index, "refused", time.perf_counter() - start, attack, fetched)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def launcher_kill(index: int, seed: int) -> Result:
    """Job `index`: `fuserc run` on 2 ranks under mpiexec or torchrun (in
    turn), its launcher killed (SIGKILL) a random time after its ranks
    started (0 to 10 s: their imports, the bootstrap, the runs): `ended` when
    every rank is gone within `ORPHAN_AFTER_S`, with the seconds it took."""
    sys.path.insert(0, str(ROOT / "tools"))
    import faults  # noqa: PLC0415 - a sibling tool

    from fuserc.runtime.job.peers import alive

    rng = random.Random(f"launcher:{seed}:{index}")
    launcher = ("torchrun", "mpiexec")[index % 2]
    args = faults.options(["-n", "2", "--watchdog", "600"])
    if launcher == "mpiexec" and args.mpiexec is None:
        launcher = "torchrun"
    marker = f"fuzz-{seed}-{index}-{os.getpid()}"
    env = {**os.environ, **faults.MPI_ENV, "FAULTS_MARK": marker}
    proc = subprocess.Popen(faults.command(launcher, args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    started = time.time()
    ranks: dict[int, int] = {}
    while len(ranks) < 2 and time.time() - started < 120 and proc.poll() is None:
        ranks = faults._ranks_of(marker)
        time.sleep(0.02)
    delay = rng.uniform(0.0, 10.0)  # from the ranks' start: their imports, the bootstrap, the runs
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.time()
    proc.wait()
    ranks.update(faults._ranks_of(marker))
    while any(alive(p) for p in ranks.values()) and time.time() - killed < ORPHAN_AFTER_S:
        time.sleep(0.05)
    seconds = time.time() - killed
    left = [r for r, p in ranks.items() if alive(p)]
    for r in left:
        with contextlib.suppress(OSError):
            os.kill(ranks[r], signal.SIGKILL)
    what = f"{launcher}, killed {delay:.1f} s after its ranks started"
    if left:
        return Result(index, "orphaned", seconds, what, f"ranks {left} still ran {ORPHAN_AFTER_S:g} s later")
    return Result(index, "ended", seconds, what, f"{len(ranks)} ranks seen")


def runtime_classes(args: argparse.Namespace, out: io.TextIOBase) -> int:
    """The cache attacks and launcher kills asked for; their table; 1 when
    any failed (a planted command ran, a traceback, a hang, an orphan)."""
    failed = 0
    if args.cache_attacks:
        results = [cache_attack(i, args.seed, Path(tempfile.gettempdir()), args.timeout) for i in range(args.cache_attacks)]
        counts = collections.Counter(r.cls for r in results)
        second = "a second uid" if os.geteuid() == 0 and shutil.which("setpriv") else "no second uid (not root)"
        out.write(f"cache attacks: {len(results)} ({second}); " + ", ".join(f"{c} {counts.get(c, 0)}" for c in RUNTIME_CLASSES) + "\n")
        for attack in ATTACKS:
            mine = [r for r in results if r.where == attack]
            if mine:
                out.write(f"  {attack:<18}{len(mine):>3}  {collections.Counter(r.cls for r in mine).most_common(1)[0][0]:<10}{mine[0].detail[:100]}\n")
        bad = [r for r in results if r.cls != "refused"]
        for r in bad:
            out.write(f"  FAILED attack {r.index} ({r.where}): {r.cls}: {r.detail[:160]}\n")
        failed += len(bad)
    if args.launcher_kills:
        results = [launcher_kill(i, args.seed) for i in range(args.launcher_kills)]
        counts = collections.Counter(r.cls for r in results)
        ended = [r.seconds for r in results if r.cls == "ended"]
        slowest = f" (ranks gone {min(ended):.1f} to {max(ended):.1f} s after the kill)" if ended else ""
        out.write(f"launcher kills: {len(results)}; " + ", ".join(f"{c} {counts.get(c, 0)}" for c in KILL_CLASSES) + slowest + "\n")
        for r in results:
            out.write(f"  {r.index}: {r.where}: {r.cls} after {r.seconds:.1f} s ({r.detail})\n")
        failed += counts.get("orphaned", 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

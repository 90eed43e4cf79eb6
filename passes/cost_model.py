"""The cost model of stream-pipeline: GEMM and link times, and the time of
each way of running a GEMM next to its collective.

Everything is estimated from a `Machine`: GEMM throughput per element type,
and the latency and bandwidth of two links, copy-engine peer copies (CUDA IPC
`hir.get`) and NCCL collectives. The numbers are documented defaults for one
node of H200s (NVLink); a JSON file overrides any of them, so a measured node
(`python -m fuserc.runtime.backends.links`, run on the GPUs) is described exactly:

    $FUSERC_LINKS, else ~/.cache/fuserc/links.json
    {"copy_engine_gbps": 350, "nccl_latency_us": 20, "gemm_tflops": {"bf16": 750}, ...}

A pipeline's time is simulated chunk by chunk: GEMMs run one after the other
(one GPU), each once its input chunk is there, each chunk paying a fixed
host cost (`chunk_us`); NCCL kernels share the SMs with the GEMMs
(`nccl_sm_slowdown`), copy engines and their fences do not. The simulation is
deliberately small: it ranks the candidates, it does not predict to the
microsecond.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from fuserc.diagnostics import Diagnostic, Location

LINKS_ENV = "FUSERC_LINKS"
"""Environment variable naming a links JSON file (overrides the default path)."""
GPUS_PER_NODE_ENV = "FUSERC_GPUS_PER_NODE"
"""Environment variable giving the ranks per node, for the cost model (over
the links file) and for the runtime's grouping of ranks into nodes (over
the ranks sharing memory): `FUSERC_GPUS_PER_NODE=2 mpiexec -n 4 ...` runs
as 2 nodes of 2 ranks."""


def gpus_per_node_override() -> int | None:
    """$FUSERC_GPUS_PER_NODE as a positive int (None when unset)."""
    text = os.environ.get(GPUS_PER_NODE_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{GPUS_PER_NODE_ENV}={text!r}: expected a positive number of ranks per node")
    return value


_JOB_NODES: ContextVar[tuple[int, ...] | None] = ContextVar("fuserc_job_nodes", default=None)


@contextmanager
def job_nodes(nodes: Sequence[int] | None) -> Iterator[None]:
    """Within it, `load_machine` groups ranks into nodes as the running job
    does (`nodes`: world rank -> node, `MpiEnv.nodes`), unless
    $FUSERC_GPUS_PER_NODE is set: a program compiled inside a job then
    moves ring chunks by CUDA IPC exactly where the runtime allows it,
    whatever the links file says of node sizes (it describes links, not
    where this job's ranks run)."""
    token = _JOB_NODES.set(tuple(nodes) if nodes is not None else None)
    try:
        yield
    finally:
        _JOB_NODES.reset(token)


DEFAULT_LINKS_PATH = Path("~/.cache/fuserc/links.json")

NONE, COLLECTIVE, RING = "none", "collective", "ring"
ALLGATHER, REDUCE_SCATTER, ALLREDUCE, ALLTOALL = "allgather", "reduce_scatter", "allreduce", "alltoall"
CHUNKS = "chunks"
"""A site whose collective runs chunk by chunk along a dimension it does not
communicate along (`Site.comm` names the collective)."""
BEFORE, AFTER = "before", "after"
"""Where a CHUNKS site's compute is: making the collective's input in the
same chunks, or reading its output in them."""
ALGORITHMS: tuple[str, ...] = (NONE, COLLECTIVE, RING)
SUM, PULL = "sum", "pull"
RING_FORMS: tuple[str, ...] = (SUM, PULL)
"""The two forms of the GEMM+ReduceScatter ring: `sum` passes a running sum
along the ring (each GEMM adds the sum that landed, so it waits for a
transfer issued k GEMMs earlier); `pull` lets every device compute all its
partial blocks without waiting, each destination pulling its block's
partials as they are done and adding them after its own GEMM (a tail of
one add over d blocks)."""

MAX_STREAMS = 8
"""Default stream pool: one stream per chunk, at most this many."""


def pulls_beside_fences(k: int, streams: int) -> bool:
    """Whether the pull form runs its fences on a stream of their own
    (worker 2), each beside the previous step's get, instead of between
    the gets on the transfer stream: with one sub-chunk (k = 1) and three
    worker streams or more. The gets of a ring bound by its transfers (the
    GPT layer's out-projection: 48 us gets beside 26 us GEMMs on 4 H200s)
    then follow one another without the fences' 10-14 us between them."""
    return k == 1 and streams >= 3


FENCE_PEERS = 3
"""The peers a fence's measured cost (`Machine.ipc_fence_us`) waits for:
it was measured over 4 ranks."""


@dataclass(frozen=True)
class Machine:
    """What the cost model knows of one node. Bandwidths in GB/s (1e9 B/s),
    latencies in microseconds, GEMM peaks in TFLOP/s."""

    gemm_tflops: dict[str, float] = field(
        default_factory=lambda: {"bf16": 780.0, "f16": 780.0, "f32": 50.0, "f64": 50.0},
        metadata={"rule": "per_type"},
    )
    """Dense GEMM throughput of large shapes per element type (bf16 on 4
    H200s, replayed: 763-809 TFLOP/s for 34-275 GFLOP GEMMs)."""
    gemm_half_gflop: float = field(default=1.0, metadata={"rule": "non_negative"})
    """GEMM work (GFLOP) at which a GEMM reaches half of its peak: small
    GEMMs do not fill the GPU."""
    launch_us: float = field(default=5.0, metadata={"rule": "non_negative"})
    """Fixed cost of one kernel launch."""
    chunk_us: float = field(default=3.0, metadata={"rule": "non_negative"})
    """Fixed cost of one pipelined chunk: the host issuing its ops (views,
    stream switches, events, the transfer) ahead of the GPU, which small
    shapes cannot hide. Replayed as a CUDA graph (every steady run of the
    GPT layer and of tools/bench.py on 4 H200s), a ring's chunk GEMMs run
    1-3 us apart; 3 us keeps a margin for runs op by op. It was 30 while a
    ring's pulls ran in any order (stream_emit.allgather_ring), then 10."""
    copy_engine_gbps: float = field(default=375.0, metadata={"rule": "positive"})
    """Copy-engine peer copy (CUDA IPC get), per direction per peer. Gets
    inside replayed rings on 4 H200s took 25.5, 48.7 and 93.5 us for 8, 16
    and 32 MiB: 375 GB/s after a 4 us latency."""
    copy_engine_latency_us: float = field(default=4.0, metadata={"rule": "non_negative"})
    """Latency of one peer copy."""
    ipc_fence_us: float = field(default=12.0, metadata={"rule": "non_negative"})
    """A copy-engine fence mid-program over 4 ranks or more, the ranks'
    skew at it included: every rank waits for the last to arrive. As
    stream memory operations it was 30 (replayed rings on 4 H200s waited
    27-35 us from the shard's copy to the first get, the pull ring 23 us
    before each step's get; 19.4 us a fence timed back to back on 4
    H100s). The runtime's fence kernel takes 6.9 us timed so, and 12
    scales the old figure by it (30 x 6.9 / 19.4, with a margin). With it
    the GPT layer's forward at hidden 4096 x 8192 tokens pulls its
    out-projection's reduce-scatter in a ring (estimated 40 us faster than
    GEMM then NCCL, measured 38: 1.884 -> 1.846 ms on 4 H100s). A team of
    t < 4 ranks waits for t - 1 peers, not 3: (t - 1) / 3 of it
    (`ipc_fence`; on 2 H200s the layer's forward at hidden 4096 x 8192
    tokens then rang 3 of its 4 sites and ran 8% faster than with the
    cost whole, which rang one)."""
    nccl_busbw_gbps: float = field(default=300.0, metadata={"rule": "positive"})
    """NCCL bus bandwidth (allgather, broadcast, reduce, reduce-scatter)."""
    nccl_latency_us: float = field(default=20.0, metadata={"rule": "non_negative"})
    """Latency of one NCCL collective (also of a `hir.barrier`)."""
    nccl_sm_slowdown: float = field(default=0.5, metadata={"rule": "non_negative"})
    """A GEMM overlapping an NCCL kernel runs this much slower (shared SMs).
    On 4 H200s the GPT layer's weight-gradient GEMMs beside its backward's
    reduce-scatter (NCCL, 64 and 128 MiB) took 1.5-2x their time alone
    (traces of 2026-11-27: 91 -> 179 and 92 -> 144 us at hidden 4096, 374
    -> 559 us at hidden 8192); it was 0.1, a guess."""
    hbm_gbps: float = field(default=3000.0, metadata={"rule": "positive"})
    """Device memory bandwidth (local copies and adds)."""
    net_gbps: float = field(default=50.0, metadata={"rule": "positive"})
    """Between nodes, per rank (a 400 Gb/s NIC): NCCL send/recv of the rings,
    and the bus bandwidth of a collective whose team spans nodes."""
    net_latency_us: float = field(default=15.0, metadata={"rule": "non_negative"})
    """Latency of one transfer between nodes."""
    gpus_per_node: int = field(default=8, metadata={"rule": "count"})
    """Ranks r and q are on one node when r // gpus_per_node == q //
    gpus_per_node ($FUSERC_GPUS_PER_NODE overrides it)."""
    nodes: tuple[int, ...] = ()
    """The running job's node of each world rank (`job_nodes`), when it
    groups ranks otherwise than `gpus_per_node` does; not in links files."""
    source: str = "defaults"
    """Where the numbers come from (a path, or `defaults`)."""

    def __post_init__(self) -> None:
        problems = field_problems(machine_json(self))
        if problems:
            raise ValueError("invalid machine: " + "; ".join(f"{'.'.join(k)}: {m}" for k, m in problems))

    # ---- primitive times (seconds) ------------------------------------------
    def gemm(self, flops: float, elem: str) -> float:
        """One GEMM of `flops` in element type `elem`."""
        peak = self.gemm_tflops.get(elem, self.gemm_tflops.get("f32", 50.0)) * 1e12
        half = self.gemm_half_gflop * 1e9
        rate = peak * flops / (flops + half) if flops > 0 else peak
        return self.launch_us * 1e-6 + (flops / rate if flops > 0 else 0.0)

    def copy_engine(self, nbytes: float) -> float:
        """One peer copy of `nbytes` over a copy engine."""
        return self.copy_engine_latency_us * 1e-6 + nbytes / (self.copy_engine_gbps * 1e9)

    def ipc_fence(self, team: int) -> float:
        """A `hir.barrier` over cuda_ipc among `team` ranks: flags written
        and waited for, the wait for the last of team - 1 peers included."""
        return self.ipc_fence_us * 1e-6 * min(max(team - 1, 0), FENCE_PEERS) / FENCE_PEERS

    def nccl(self, bus_bytes: float, spans_nodes: bool = False) -> float:
        """One NCCL collective moving `bus_bytes` per rank over the bus
        (allgather/reduce-scatter: (n-1)/n of the large buffer; broadcast
        and reduce: the buffer); over a team spanning nodes the network
        bounds it."""
        gbps = min(self.nccl_busbw_gbps, self.net_gbps) if spans_nodes else self.nccl_busbw_gbps
        latency = max(self.nccl_latency_us, self.net_latency_us) if spans_nodes else self.nccl_latency_us
        return latency * 1e-6 + bus_bytes / (gbps * 1e9)

    def beside_nccl(self, gemm: float, nccl: float) -> float:
        """A GEMM of `gemm` seconds with an NCCL kernel of `nccl` seconds
        beside it: slowed while they overlap."""
        return gemm + self.nccl_sm_slowdown * min(gemm, nccl)

    def net(self, nbytes: float) -> float:
        """One NCCL send/recv of `nbytes` between nodes."""
        return self.net_latency_us * 1e-6 + nbytes / (self.net_gbps * 1e9)

    def link(self, nbytes: float, remote: bool) -> float:
        """One ring transfer: a copy-engine copy within a node, a send/recv
        between nodes."""
        return self.net(nbytes) if remote else self.copy_engine(nbytes)

    def local(self, nbytes: float) -> float:
        """A kernel moving `nbytes` through device memory (copy, add)."""
        return self.launch_us * 1e-6 + nbytes / (self.hbm_gbps * 1e9)

    def node_of(self, rank: int) -> int:
        if rank < len(self.nodes):
            return self.nodes[rank]
        return rank // max(1, self.gpus_per_node)

    def _node_patterns(self, team: Sequence[int]) -> list[Sequence[int]]:
        """Teams whose ranks lie on nodes as those of every team of `team`'s
        family do (a team with translates: `hir.Team`). With nodes of
        `gpus_per_node` ranks, a translate lies as the base shifted by its
        offset modulo that: at most that many shifts, whatever the family's
        size; with the job's own nodes, each team."""
        translates = getattr(team, "translates", ())
        if not translates:
            return [team]
        if self.nodes:
            return list(team.teams())  # type: ignore[attr-defined]
        g = max(1, self.gpus_per_node)
        shifts = {0}
        for n, s in translates:
            shifts = {(r + i * s) % g for r in shifts for i in range(min(n, g))}
        return [tuple(r + k for r in team) for k in sorted(shifts)]

    def one_node(self, team: Sequence[int]) -> bool:
        """Whether the team (each team of its family) is on one node."""
        return all(len({self.node_of(r) for r in t}) == 1 for t in self._node_patterns(team))

    def ring_links(self, team: Sequence[int]) -> tuple[bool, ...]:
        """Per ring offset o = 1 .. d - 1: whether some rank's transfer from
        position p + o crosses nodes (every rank waits for that step), in
        any team of the family."""
        d = len(team)
        patterns = [[self.node_of(r) for r in t] for t in self._node_patterns(team)]
        return tuple(any(nodes[p] != nodes[(p + o) % d] for nodes in patterns for p in range(d)) for o in range(1, d))


def load_machine(path: str | os.PathLike[str] | None = None) -> Machine:
    """The machine described by `path`, else by $FUSERC_LINKS, else by the
    default cache file when it exists; documented defaults for what the file
    does not give. A named file that cannot be read, or holds unknown keys
    or bad values, is a `LinksFileError` (a stale description must not be
    trusted silently). Ranks are grouped into nodes by
    $FUSERC_GPUS_PER_NODE, else as the job of `job_nodes` runs them, else
    by the file's `gpus_per_node`."""
    named = path or os.environ.get(LINKS_ENV)
    if named:
        machine = _read(Path(named).expanduser())
    else:
        default = DEFAULT_LINKS_PATH.expanduser()
        machine = _read(default) if default.is_file() else Machine()
    node = gpus_per_node_override()
    if node is not None:
        return replace(machine, gpus_per_node=node, source=f"{machine.source}, {GPUS_PER_NODE_ENV}={node}")
    job = _JOB_NODES.get()
    if job is None or _grouping(job) == _grouping([machine.node_of(r) for r in range(len(job))]):
        return machine
    return with_nodes(machine, job)


def _grouping(nodes: Sequence[int]) -> list[int]:
    """Node ids renumbered by first appearance: equal for equal groupings."""
    ids: dict[int, int] = {}
    return [ids.setdefault(n, len(ids)) for n in nodes]


def with_nodes(machine: Machine, nodes: Sequence[int]) -> Machine:
    """`machine` with ranks grouped as `nodes` (world rank -> node): by
    `gpus_per_node` when the nodes are runs of one size in rank order,
    else rank by rank; the source says so."""
    grouping = _grouping(nodes)
    g = grouping.count(0)
    if all(n == r // g for r, n in enumerate(grouping)):
        return replace(machine, gpus_per_node=g, nodes=(), source=f"{machine.source}, the job's nodes of {g} rank{'s' if g > 1 else ''}")
    return replace(machine, nodes=tuple(grouping), source=f"{machine.source}, the job's nodes {grouping}")


# --------------------------------------------------------------------------
# The links file: a JSON object checked field by field
# --------------------------------------------------------------------------

NOT_IN_FILE = ("nodes", "source")
"""`Machine` fields of the job and of where the numbers came from, not of
the links."""


GEMM_TYPES: tuple[str, ...] = ("bf16", "f16", "f32", "f64")
"""The element types `gemm_tflops` may name."""

_RULES: dict[str, str] = {
    "positive": "a positive number",
    "non_negative": "a number >= 0",
    "count": "a positive integer",
    "per_type": f"an object of element types ({', '.join(GEMM_TYPES)}) to positive numbers",
}
"""What each kind of field (a `Machine` field's metadata `rule`) holds."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _value_problem(rule: str, v: Any) -> str | None:
    ok = {
        "positive": lambda: _number(v) and v > 0,
        "non_negative": lambda: _number(v) and v >= 0,
        "count": lambda: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "per_type": lambda: isinstance(v, dict),
    }[rule]()
    return None if ok else f"must be {_RULES[rule]}, got {json.dumps(v)}"


def field_problems(values: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """Every bad field of a links description, as (key path, problem)."""
    rules = {f.name: f.metadata.get("rule") for f in fields(Machine) if f.name not in NOT_IN_FILE}
    out: list[tuple[tuple[str, ...], str]] = []
    for key, v in values.items():
        rule = rules.get(key)
        if rule is None:
            out.append(((key,), f"unknown key (known: {', '.join(rules)})"))
            continue
        problem = _value_problem(rule, v)
        if problem:
            out.append(((key,), problem))
        elif rule == "per_type":
            for elem, peak in v.items():
                if elem not in GEMM_TYPES:
                    out.append(((key, elem), f"unknown element type (known: {', '.join(GEMM_TYPES)})"))
                elif (problem := _value_problem("positive", peak)) is not None:
                    out.append(((key, elem), problem))
    return out


class LinksFileError(ValueError):
    """A links file that cannot be used: one located message per problem."""

    def __init__(self, file: Path, problems: list[tuple[Location | None, str]]):
        self.file = file
        self.problems = problems
        super().__init__("\n".join(f"{loc or file}: {msg}" for loc, msg in problems))

    def diagnostic(self, reader: str = "stream-pipeline") -> Diagnostic:
        """The first problem located, the others as lines below it; `reader`:
        the pass that read the file."""
        (loc, msg), rest = self.problems[0], self.problems[1:]
        lines = [f"{loc or self.file}: error: {reader}: links file: {m}" for loc, m in rest]
        return Diagnostic(f"{reader}: links file: {msg}", loc or Location(str(self.file), 1, 1), "\n".join(lines))


def _read(file: Path) -> Machine:
    if file.exists() and not file.is_file():  # a named pipe would wait for a writer, a device never end
        raise LinksFileError(file, [(None, "cannot read it: it is not a regular file")])
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LinksFileError(file, [(None, f"cannot read it: {getattr(e, 'strerror', None) or e}")]) from None
    try:
        data = json.loads(text)
    except ValueError as e:
        at = Location(str(file), e.lineno, e.colno) if isinstance(e, json.JSONDecodeError) else None
        raise LinksFileError(file, [(at, f"not JSON: {getattr(e, 'msg', e)}")]) from None
    if not isinstance(data, dict):
        raise LinksFileError(file, [(Location(str(file), 1, 1), "must hold a JSON object of the fields of the cost model")])
    problems = field_problems(data)
    if problems:
        where = _value_locations(text, str(file))
        raise LinksFileError(file, [(where.get(path), f"{'.'.join(path)}: {msg}") for path, msg in problems])
    base = Machine()
    values: dict[str, Any] = dict(data)
    if "gemm_tflops" in values:
        values["gemm_tflops"] = {**base.gemm_tflops, **{k: float(v) for k, v in values["gemm_tflops"].items()}}
    return replace(base, **values, source=str(file))


def _value_locations(text: str, name: str) -> dict[tuple[str, ...], Location]:
    """Where each value of a JSON object (and of the objects in it) starts,
    by key path. `text` is valid JSON (json.loads read it)."""
    decoder = json.JSONDecoder()
    space = re.compile(r"\s*")
    offsets: dict[tuple[str, ...], int] = {}

    def skip(i: int) -> int:
        return space.match(text, i).end()  # type: ignore[union-attr]

    def walk(i: int, path: tuple[str, ...]) -> int:  # text[i] == "{"
        i = skip(i + 1)
        while text[i] != "}":
            key, i = json.decoder.scanstring(text, i + 1)
            i = skip(skip(i) + 1)  # past the ':'
            offsets[(*path, key)] = i
            i = walk(i, (*path, key)) if text[i] == "{" else decoder.raw_decode(text, i)[1]
            i = skip(i)
            if text[i] == ",":
                i = skip(i + 1)
        return i + 1

    start = skip(0)
    if text.startswith("{", start):
        walk(start, ())

    def located(offset: int) -> Location:
        line = text.count("\n", 0, offset) + 1
        return Location(name, line, offset - text.rfind("\n", 0, offset))

    return {path: located(o) for path, o in offsets.items()}


def machine_json(m: Machine) -> dict[str, Any]:
    """What a links file holds for `m` (every field but `NOT_IN_FILE`)."""
    return {f.name: getattr(m, f.name) for f in fields(Machine) if f.name not in NOT_IN_FILE}


# --------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """One way to run a site and its simulated time (seconds)."""

    algorithm: str
    chunks: int
    seconds: float
    form: str = ""
    """The ring's form for GEMM+ReduceScatter (SUM or PULL); empty otherwise."""

    def label(self) -> str:
        if self.algorithm == NONE:
            return f"none {self.seconds * 1e3:.3g} ms"
        form = f", {self.form}" if self.form else ""
        return f"{self.algorithm}(S={self.chunks}{form}) {self.seconds * 1e3:.3g} ms"


@dataclass(frozen=True)
class Site:
    """What the model needs of a GEMM next to its collective: the GEMM's
    total FLOPs on this rank, the bytes of the gathered input (AllGather) or
    of the partial product (ReduceScatter) on this rank, the element type
    and the team size."""

    kind: str  # ALLGATHER | REDUCE_SCATTER | CHUNKS
    flops: float
    nbytes: float
    elem: str
    team: int
    comm: str = ""
    """CHUNKS: the collective (ALLGATHER, REDUCE_SCATTER, ALLREDUCE, ALLTOALL);
    nbytes is then its larger buffer (the gathered output, the partial
    input)."""
    compute: str = ""  # CHUNKS: BEFORE, AFTER, or "" (the collective alone)
    links: tuple[bool, ...] = ()
    """Per ring offset 1 .. d - 1, whether that step crosses nodes
    (`Machine.ring_links`); empty: the team is on one node."""

    @property
    def spans_nodes(self) -> bool:
        return any(self.links)

    def remote(self, offset: int) -> bool:
        """Whether the ring's transfers at `offset` (mod d) cross nodes."""
        o = offset % self.team
        return bool(self.links) and o > 0 and self.links[o - 1]

    def bus(self, nbytes: float) -> float:
        """The bytes one rank moves over the bus for a collective of a
        buffer of `nbytes` (the larger one): its hir op's wire factor."""
        from fuserc.dialects import hir

        op = hir.AllreduceOp if self.comm == ALLREDUCE else hir.AllgatherOp  # (reduce-scatter, alltoall: the same factor)
        return nbytes * float(op.wire_factor(self.team))


def _serial(ready: Sequence[float], each: float, start: float = 0.0) -> float:
    """End of GEMMs run one after the other, chunk c not before ready[c]."""
    t = start
    for r in ready:
        t = max(t, r) + each
    return t


def estimate(m: Machine, site: Site, algorithm: str, chunks: int, form: str = "") -> Estimate:
    """The time of `site` run by `algorithm` in `chunks` chunks (S = k * d);
    `form`: the GEMM+ReduceScatter ring's (SUM when not given)."""
    d, s = site.team, chunks
    if algorithm == NONE:
        whole = site.bus(site.nbytes) if site.kind == CHUNKS else site.nbytes * (d - 1) / d
        return Estimate(NONE, 1, m.gemm(site.flops, site.elem) + m.nccl(whole, site.spans_nodes))
    g = m.gemm(site.flops / s, site.elem) + m.chunk_us * 1e-6
    piece = site.nbytes / s
    k = max(1, s // d)
    if site.kind == CHUNKS:
        return _chunks(m, site, algorithm, s, g, piece)
    if site.kind == ALLGATHER:
        own = m.local(2 * site.nbytes / d)  # the local block copied (collective) or shared (ring)
        if algorithm == COLLECTIVE:
            b = m.nccl(piece, site.spans_nodes)
            ready = [own + (c + 1) * b for c in range(s)]
            return Estimate(algorithm, s, _serial(ready, m.beside_nccl(g, b)))
        fence = own + m.ipc_fence(d)  # the copy overlaps the local GEMMs
        ready, t = [0.0] * k, fence
        for c in range(k, s):  # chunk c from the device c // k positions on
            t += m.link(piece, site.remote(c // k))
            ready.append(t)
        return Estimate(algorithm, s, _serial(ready, g) + m.ipc_fence(d))
    # reduce_scatter
    if algorithm == COLLECTIVE:
        t_comm, t_gemm = 0.0, 0.0
        r = m.nccl(piece, site.spans_nodes)
        for _ in range(s):
            t_gemm += m.beside_nccl(g, r)
            t_comm = max(t_comm, t_gemm) + r
        return Estimate(algorithm, s, t_comm)
    if (form or SUM) == PULL:
        # GEMMs back to back, never waiting; sub-chunk j of this device's
        # block is pulled from the device that computed it at step t, on
        # transfer stream j, after that step's fence (which every device's
        # GEMM of step t has passed, and which costs its own time: the
        # steps' pulls are a fence apart even when the GEMMs are long done),
        # and added once the own GEMM of j is done: one pass reading d
        # blocks, writing one
        landed = [0.0] * k
        beside = pulls_beside_fences(k, min(s, MAX_STREAMS))
        for t in range(d - 1):
            for j in range(k):
                done = (t * k + j + 1) * g
                link = m.link(piece, site.remote(d - 1 - t))
                if beside:  # the fence ran beside the previous get
                    landed[j] = max(landed[j], done + m.ipc_fence(d)) + link
                else:
                    landed[j] = max(landed[j], done) + m.ipc_fence(d) + link
        end = 0.0
        for j in range(k):
            own = ((d - 1) * k + j + 1) * g
            end = max(end, max(own, landed[j]) + m.local((d + 1) * piece))
        return Estimate(algorithm, s, end + m.ipc_fence(d), PULL)
    # sum: a running sum per destination block passed along the ring, k
    # sub-rings in turn; GEMM (t, j) adds the sum put by the next device at
    # step t - 1 of sub-ring j, so it waits for that put and its fence. The
    # sub-rings' puts and fences take turns (copy-engine copies run one at
    # a time, and the fences' flags are passed in order): one channel, so
    # more sub-rings add transfers, not parallel links
    transfer = m.link(piece, site.remote(1)) + m.ipc_fence(d)
    end, channel, landed = 0.0, 0.0, [0.0] * k
    for step in range(d):
        for j in range(k):
            end = max(end, landed[j]) + g if step else end + g
            if step < d - 1:
                channel = landed[j] = max(channel, end) + transfer
    return Estimate(algorithm, s, end + m.ipc_fence(d), SUM)


def _chunks(m: Machine, site: Site, algorithm: str, s: int, g: float, piece: float) -> Estimate:
    """A collective per chunk (CHUNKS), with its compute before or after it
    in the same chunks, or alone (then each chunk only adds its latency)."""
    d = site.team
    if algorithm == COLLECTIVE:
        comm = m.nccl(site.bus(piece), site.spans_nodes)
        if site.compute == BEFORE:  # chunk c's collective once its compute is done
            t_gemm = t_comm = 0.0
            for _ in range(s):
                t_gemm += m.beside_nccl(g, comm)
                t_comm = max(t_comm, t_gemm) + comm
            return Estimate(algorithm, s, t_comm)
        ready = [(c + 1) * comm for c in range(s)]
        if site.compute == AFTER:
            return Estimate(algorithm, s, _serial(ready, m.beside_nccl(g, comm)))
        return Estimate(algorithm, s, ready[-1] + s * m.chunk_us * 1e-6)
    # ring (an allgather per chunk): the shard shared once, a fence, then per
    # chunk the own block copied and d - 1 blocks pulled
    fence = m.local(2 * site.nbytes / d) + m.ipc_fence(d)
    per_chunk = sum(m.link(piece / d, site.remote(t)) for t in range(1, d)) + m.local(2 * piece / d)
    ready = [fence + (c + 1) * per_chunk for c in range(s)]
    return Estimate(algorithm, s, _serial(ready, g) + m.ipc_fence(d))


def candidates(
    site: Site, algorithms: Sequence[str], chunk_options: Sequence[int], forms: Sequence[str] = RING_FORMS
) -> list[tuple[str, int, str]]:
    """(algorithm, S, form) to compare: `none` once, each pipeline at each
    S, the GEMM+ReduceScatter ring in each of `forms`."""
    out: list[tuple[str, int, str]] = []
    for a in algorithms:
        if a == NONE:
            out.append((NONE, 1, ""))
        elif a == RING and site.kind == REDUCE_SCATTER:
            # the pull form with k > 1 measured far slower than its model
            # (its sub-rings' fences serialize), so it is tried at S = d only
            out.extend((a, s, f) for s in chunk_options for f in forms if f != PULL or s == site.team)
            if forms == (PULL,) and site.team not in chunk_options:  # a requested S
                out.extend((a, s, PULL) for s in chunk_options)
        else:
            out.extend((a, s, "") for s in chunk_options)
    return out


PAYS = 0.97
"""A pipeline the user did not ask for must beat the unpipelined program by
3% (the model's error margin) to be chosen."""


def choose(
    m: Machine,
    site: Site,
    algorithms: Sequence[str],
    chunk_options: Sequence[int],
    requested: bool,
    forms: Sequence[str] = RING_FORMS,
) -> tuple[Estimate, str]:
    """The fastest candidate and why. `requested`: the user wrote the Stream
    split (a pipeline is chosen unless `none`, when a candidate, is faster);
    otherwise a pipeline is chosen only when it beats `none` by the PAYS
    margin. `forms`: the ring forms GEMM+ReduceScatter may take."""
    pairs = candidates(site, algorithms, chunk_options, forms)
    if not pairs:
        raise ValueError("no candidate algorithm")
    ests = sorted((estimate(m, site, a, s, f) for a, s, f in pairs), key=lambda e: e.seconds)
    best = ests[0]
    if not requested and best.algorithm != NONE:
        base = estimate(m, site, NONE, 1)
        if best.seconds > PAYS * base.seconds:
            best = base
            if base not in ests:
                ests.append(base)
            ests.sort(key=lambda e: (e is not base, e.seconds))
    others = [e for e in ests if e != best]
    cmp = " < ".join(e.label() for e in [best, *others[:3]])
    return best, f"cost model ({m.source}): {cmp}"


def moe_chunks(
    m: Machine, tokens: int, k: int, row_bytes: int, gemms: Sequence[float], ranks: int, elem: str,
    options: Sequence[int] = (1, 2, 4, 8),
) -> tuple[int, dict[int, float]]:
    """The number of token chunks an expert-parallel layer's dispatch,
    experts and combine run in (`tokens` per rank, each sent to k experts
    as a row of `row_bytes`; `gemms`: the flops per row of each of the
    experts' grouped GEMMs), and the estimated seconds of each option: each chunk's dispatch
    (an all-to-all of its tokens x k rows, (d-1)/d of them leaving the
    rank) runs beside the previous chunk's grouped GEMMs (slowed while
    NCCL shares the SMs), its combine beside the next chunk's GEMMs; every
    chunk pays its collectives' latency and `chunk_us`. A chunking must
    beat one chunk by the PAYS margin. Options that do not divide `tokens`
    are skipped."""
    times: dict[int, float] = {}
    for s in options:
        if tokens % s or (s > 1 and ranks == 1):
            continue
        rows = tokens // s * k
        comm = 2 * m.nccl(0.0) + m.nccl(rows * row_bytes * (ranks - 1) / ranks)  # counts, then rows
        gemm = sum(m.gemm(rows * f, elem) for f in gemms)
        if s == 1:
            times[s] = 2 * comm + gemm
            continue
        step = max(comm, m.beside_nccl(gemm, comm))  # a chunk's GEMMs beside the next chunk's dispatch
        times[s] = comm + (s - 1) * step + gemm + comm + s * m.chunk_us * 1e-6
    best = min(times, key=lambda s: times[s])
    if best != 1 and times[best] > PAYS * times[1]:
        best = 1
    return best, times

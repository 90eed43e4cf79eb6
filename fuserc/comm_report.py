"""The communication report: what each host program of a module moves
between ranks, and whether it can run beside compute (docs/performance.md,
"The communication report").

It reads lowered host programs (`hir.host` functions) and nothing else, so
it describes whatever plan the passes chose. Each rank's run of a program
is walked without data (`_Walk`): host loops unrolled, `hir.if_rank`
regions and teams decide what the rank runs, and every op issued on a
stream gets a vector clock of the work known to be complete before it
(stream order, `hir.wait` of a token, `hir.sync_stream`,
`hir.wait_event`). A communication *overlaps* compute when some GEMM,
copy or launch may run at the same time as it: on another stream, neither
ordered before the other. Ranks that take part in the same ops are walked
once, and the copies of an op made for each team of a 2-D mesh's axis
are one line (`_Classes`).

Bytes are each op's `wire_bytes()` (dialects/hir_comm.py): per team
member and execution, a ring collective's share of its buffer (nccl-tests'
bus bytes), a peer copy's block at the rank that issues it.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation

from fuserc.dialects import hir
from fuserc.dialects.fusion_nn import AttentionOp
from fuserc.passes.plan_memory import MemoryPlan, memory_plan
from fuserc.passes.stream_order import Issued, RankWalk, Stream
from fuserc.passes.stream_sites import RESHARD_ATTR

MIB = 1 << 20
GEMM, KERNEL = "gemm", "kernel"
"""What a communication runs beside: a GEMM, or only other local work
(launches, copies)."""


# --------------------------------------------------------------------------
# The unit of the totals
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """A tensor's bytes, the unit totals are also given in (`8192x4096xbf16`)."""

    text: str
    nbytes: int

    @staticmethod
    def parse(text: str) -> Unit:
        """`SHAPExDTYPE` (dims joined by `x`, an element type of the
        fusion dialect); ValueError with the reason otherwise."""
        from xdsl.context import Context
        from xdsl.parser import Parser
        from xdsl.utils.exceptions import ParseError

        m = re.fullmatch(r"((?:\d+x)+)(\w+)", text.strip())
        try:
            t = Parser(Context(), f"tensor<{text.strip()}>").parse_type() if m else None
        except ParseError:
            t = None
        if not isinstance(t, TensorType) or not hasattr(t.element_type, "size"):
            raise ValueError(f"a unit is a tensor type such as 8192x4096xbf16, got '{text}'")
        nbytes = math.prod(t.get_shape()) * t.element_type.size
        if nbytes <= 0:
            raise ValueError(f"the unit '{text}' has no bytes")
        return Unit(text.strip(), nbytes)

    def of(self, nbytes: Fraction | int) -> float:
        return float(nbytes) / self.nbytes


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------


@dataclass
class Line:
    """One communication or peer copy of a host program, as one rank that
    runs it sees it."""

    index: int
    op: Operation
    kind: str  # allgather, reduce_scatter, ..., send, recv, put, get
    dtype: str
    shape: tuple[int, ...]
    team: tuple[int, ...] | None  # None: a peer copy whose hir.share is out of sight
    runs: int  # executions per run of the program (loops' trip counts)
    each: Fraction  # bytes per rank, one execution
    reshard: str  # the hir.reshard marker ("" where none)
    beside: dict[str, int] = field(default_factory=dict)  # executions overlapping a GEMM / only kernels / none
    ranks: list[int] = field(default_factory=list)  # the ranks that run it
    teams: int = 1  # the ops of the line: one per team of a 2-D mesh's axis (`op` is the first)
    covered: list[int] | None = None  # the ranks of their teams (None: a peer copy's share out of sight)

    @property
    def nbytes(self) -> Fraction:
        """Bytes per run, as the totals count them (a send's at its receive)."""
        return _counted(self.op) * self.runs

    @property
    def bytes_text(self) -> str:
        if isinstance(self.op, hir.SendOp):
            return f"({_int(self.each * self.runs)})"
        if isinstance(self.op, hir.AlltoallvOp):  # sized by counts known at run time: the bound, ~ the mean
            mean = self.op.mean_bytes()
            return f"<={_int(self.nbytes)}" + (f" ~{_int(mean * self.runs)}" if mean is not None else "")
        return _int(self.nbytes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "dtype": self.dtype, "shape": list(self.shape), "team": list(self.team) if self.team else None,
            "ranks": self.ranks, "teams": self.teams, "runs": self.runs, "bytes": round(self.nbytes), "reshard": self.reshard,
            "overlap": self.overlap, "overlapped_runs": self.beside.get(GEMM, 0) + self.beside.get(KERNEL, 0),
        }  # fmt: skip

    @property
    def overlap(self) -> str:
        """`gemm`, `kernel` or `no`, with `(K of N)` when only K of the N
        executions overlap."""
        g, k, n = self.beside.get(GEMM, 0), self.beside.get(KERNEL, 0), self.beside.get("", 0)
        if g + k == 0:
            return "no"
        word = GEMM if g else KERNEL
        return word if n == 0 else f"{word} ({g + k} of {g + k + n})"


@dataclass
class Totals:
    """What one rank moves in one run: bytes, communications (executions),
    bytes that overlap compute, and fences (`hir.barrier`, no bytes counted)."""

    nbytes: Fraction = Fraction(0)
    count: int = 0
    overlapped: Fraction = Fraction(0)
    fences: int = 0
    attention_flops: int = 0  # of the attention kernels this rank runs (ring attention's share shows here)

    def __add__(self, o: Totals) -> Totals:
        return Totals(
            self.nbytes + o.nbytes, self.count + o.count, self.overlapped + o.overlapped, self.fences + o.fences,
            self.attention_flops + o.attention_flops,
        )

    def as_dict(self, unit: Unit | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bytes": round(self.nbytes), "count": self.count, "overlapped_bytes": round(self.overlapped), "fences": self.fences,
            "attention_flops": self.attention_flops,
        }  # fmt: skip
        if unit is not None:
            out["units"] = unit.of(self.nbytes)
        return out


@dataclass
class FunctionReport:
    """One host program: its communications in program order and each
    rank's totals."""

    name: str
    lines: list[Line]
    per_rank: dict[int, Totals]
    memory: MemoryPlan | None = None  # its buffers' bytes, without and with plan-memory's blocks


@dataclass
class CommReport:
    """The communication report of a module (`report(module)`)."""

    functions: list[FunctionReport]
    unit: Unit | None = None

    def function(self, name: str) -> FunctionReport:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no host program @{name} in the report")

    def totals(self, names: Iterable[str] | None = None) -> dict[int, Totals]:
        """Per rank, the totals over the named functions (all by default)."""
        out: dict[int, Totals] = defaultdict(Totals)
        for f in self.functions if names is None else [self.function(n) for n in names]:
            for r, t in f.per_rank.items():
                out[r] = out[r] + t
        return dict(out)

    def groups(self) -> list[tuple[str, list[str]]]:
        """The totals printed after the functions: the module, and each
        forward and backward pair of autodiff (`@F_fwd + @F_bwd`)."""
        names = [f.name for f in self.functions]
        out = []
        if len(names) > 1:
            out.append(("module", names))
        for n in names:
            if n.endswith("_fwd") and n[:-4] + "_bwd" in names:
                pair = [n, n[:-4] + "_bwd"]
                if pair != names:
                    out.append((f"@{pair[0]} + @{pair[1]}", pair))
        return out

    def text(self) -> str:
        return render(self)

    def __str__(self) -> str:
        return self.text()

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (JSON)."""
        u = self.unit

        def per_rank(t: dict[int, Totals]) -> dict[str, Any]:
            return {str(r): v.as_dict(u) for r, v in sorted(t.items())}

        funcs = []
        for f in self.functions:
            lines = [ln.as_dict() for ln in f.lines]
            memory = asdict(f.memory) if f.memory is not None else None
            funcs.append({"name": f.name, "lines": lines, "per_rank": per_rank(f.per_rank), "memory": memory})
        groups = [{"name": n, "functions": names, "per_rank": per_rank(self.totals(names))} for n, names in self.groups()]
        return {"unit": {"text": u.text, "bytes": u.nbytes} if u else None, "functions": funcs, "totals": groups}


def report(module: ModuleOp, unit: Unit | str | None = None) -> CommReport:
    """The communication report of every host program of `module`, in the
    module's order (`unit`: totals also in units of a tensor's bytes, a
    `Unit` or its text such as `8192x4096xbf16`)."""
    funcs = [op for op in module.ops if isinstance(op, FuncOp) and hir.is_host_program(op) and op.body.blocks]
    return CommReport([function_report(f) for f in funcs], Unit.parse(unit) if isinstance(unit, str) else unit)


# --------------------------------------------------------------------------
# Walking one rank's run
# --------------------------------------------------------------------------


@dataclass
class _Comm:
    op: Operation
    at: Issued


class _Walk(RankWalk):
    """One rank's run of a host program, without data (module docstring):
    its communications and compute, each with its place in stream order."""

    def __init__(self, rank: int, ranks: dict[Operation, frozenset[int]]):
        super().__init__(rank, ranks)
        self.comms: list[_Comm] = []
        self.fences = 0
        self.attention_flops = 0
        self.computes: dict[Stream, list[tuple[Issued, bool]]] = defaultdict(list)  # (issued, is a GEMM)

    def device(self, op: Operation) -> None:
        env = self.env
        if isinstance(op, hir.ShareOp):
            env[op.handle] = op
        elif isinstance(op, hir.CommunicationOp):
            if self.rank in self.ranks[op]:
                at = self.issue()
                env[op.token] = at.clock
                if isinstance(op, hir.BarrierOp):
                    self.fences += 1
                else:
                    self.comms.append(_Comm(op, at))
        elif isinstance(op, hir.PEER_COPY_OPS):
            share = op.handle.owner
            if not isinstance(share, hir.ShareOp) or self.rank in self.ranks[share]:
                at = self.issue()
                env[op.token] = at.clock
                self.comms.append(_Comm(op, at))
        elif isinstance(op, hir.COMPUTE_OPS):
            self.computes[self.current].append((self.issue(), isinstance(op, (hir.MatmulOp, hir.LinearOp))))
            if isinstance(op, hir.LaunchOp):
                self.attention_flops += sum(o.flops() for o in op.body.walk() if isinstance(o, AttentionOp))

    # ---- overlap ------------------------------------------------------------
    def beside(self, c: _Comm) -> str:
        """GEMM, KERNEL or "": what compute may run while `c` does."""
        found = ""
        for s, issued in self.computes.items():
            if s == c.at.stream:
                continue
            for k, gemm in _concurrent(issued, c.at):
                if gemm:
                    return GEMM
                found = KERNEL
        return found


def _concurrent(issued: list[tuple[Issued, bool]], c: Issued) -> Iterable[tuple[Issued, bool]]:
    """The compute ops of one stream (in order) that neither wait for `c`
    nor are waited for by it: those before it that it does not know
    (a suffix of the earlier ones), those after it that do not know it (a
    prefix of the later ones)."""
    lo, hi = 0, len(issued)
    while lo < hi:  # the first one issued after c
        mid = (lo + hi) // 2
        if issued[mid][0].seq < c.seq:
            lo = mid + 1
        else:
            hi = mid
    for i in range(lo - 1, -1, -1):
        k = issued[i]
        if k[0].tick <= c.clock.get(k[0].stream, 0):
            break
        yield k
    for i in range(lo, len(issued)):
        k = issued[i]
        if k[0].clock.get(c.stream, 0) >= c.tick:
            break
        yield k


# --------------------------------------------------------------------------
# One host program
# --------------------------------------------------------------------------


def _structure(op: Operation) -> tuple[Any, ...]:
    """What an op and its regions do, whatever ranks they run on: names,
    types and team sizes (two `hir.if_rank` regions of one collective over
    the teams of a 2-D mesh have the same)."""
    return tuple(
        (o.name, tuple(v.type for v in (*o.operands, *o.results)), len(o.team) if isinstance(o, hir.TeamOp) else None)
        for o in op.walk()
    )


class _Classes:
    """The ops of a host program, each in a class with the ops doing the
    same work for other ranks: the copies of one `hir.if_rank` region per
    team (consecutive sibling regions of one structure) and the ops at the
    same place in them. Ranks in the same classes run the same work, so
    one of them is walked; a report line is a class."""

    def __init__(self, func: FuncOp):
        self.key: dict[Operation, int] = {}
        self.members: dict[int, list[Operation]] = defaultdict(list)
        self.ranks: dict[Operation, frozenset[int]] = {}
        self._ids: dict[tuple[Any, ...], int] = {}
        """A class's number by its place: (the parent's class, the index in
        the block[, the structure's number]): keys of a few ints, hashed in
        constant time however deep the regions nest."""
        self._visit(func.body.block, -1)

    def _id(self, key: tuple[Any, ...]) -> int:
        return self._ids.setdefault(key, len(self._ids))

    def _visit(self, block: Block, parent: int) -> None:
        run: int | None = None
        start = 0
        for i, op in enumerate(block.ops):
            if isinstance(op, hir.IfRankOp):
                shape = self._id(("structure", _structure(op)))
                if shape != run:
                    run, start = shape, i
                key = self._id((parent, start, shape))
            else:
                run = None
                key = self._id((parent, i))
            self.key[op] = key
            self.members[key].append(op)
            if isinstance(op, (hir.TeamOp, hir.IfRankOp)):
                self.ranks[op] = frozenset(op.team.members() if isinstance(op, hir.TeamOp) else op.ranks)
            for region in op.regions:
                for b in region.blocks:
                    self._visit(b, key)

    def groups(self) -> list[list[int]]:
        """The program's ranks, grouped by the classes of the teams and rank
        regions they belong to."""
        member: dict[int, set[int]] = defaultdict(set)
        for op, ranks in self.ranks.items():
            for r in ranks:
                member[r].add(self.key[op])
        groups: dict[frozenset[int], list[int]] = defaultdict(list)
        for r in sorted(member):
            groups[frozenset(member[r])].append(r)
        return list(groups.values())


def _kind(op: Operation) -> str:
    return op.name.removeprefix("hir.")


def _static(op: Operation) -> tuple[str, tuple[int, ...], tuple[int, ...] | None, Fraction]:
    """(dtype, shape, team, bytes of one execution) of a communication or copy."""
    if isinstance(op, hir.CommunicationOp):
        buf = op.communicated()
        team: tuple[int, ...] | None = op.team
    else:
        assert isinstance(op, hir.PEER_COPY_OPS)
        buf = op.local_buffer()
        team = op.shared_team()
    assert buf is not None and isinstance(buf.type, TensorType)
    return str(buf.type.element_type), tuple(buf.type.get_shape()), team, op.wire_bytes()


def _counted(op: Operation) -> Fraction:
    """The bytes of one execution that the totals count: a transfer is
    counted once, a send/recv pair at its receive."""
    return Fraction(0) if isinstance(op, hir.SendOp) else op.wire_bytes()  # type: ignore[attr-defined]


def _teams(op: Operation) -> int:
    """How many teams run `op` (a team with translates: one per translate)."""
    team = op.team if isinstance(op, hir.CommunicationOp) else op.shared_team()  # type: ignore[attr-defined]
    return team.count if team is not None else 1


def _covered(ops: Sequence[Operation]) -> list[int] | None:
    """The ranks of the teams of `ops` (a peer copy's: its hir.share's)."""
    out: set[int] = set()
    for op in ops:
        team = op.team if isinstance(op, hir.CommunicationOp) else op.shared_team()  # type: ignore[attr-defined]
        if team is None:
            return None
        out.update(team.members())  # a family's: every team of it
    return sorted(out)


def function_report(func: FuncOp) -> FunctionReport:
    """The report of one host program: one rank of each group walked."""
    classes = _Classes(func)
    lines: dict[int, Line] = {}
    per_rank: dict[int, Totals] = {}
    order = {op: i for i, op in enumerate(func.walk())}
    for group in classes.groups():
        walk = _Walk(group[0], classes.ranks)
        walk.block(func.body.block)
        totals = Totals(fences=walk.fences, attention_flops=walk.attention_flops)
        runs: dict[int, int] = defaultdict(int)
        beside: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for c in walk.comms:
            key = classes.key[c.op]
            runs[key] += 1
            how = walk.beside(c)
            beside[key][how] += 1
            each = _counted(c.op)
            totals.nbytes += each
            totals.count += 1
            if how:
                totals.overlapped += each
        for key, n in runs.items():
            line = lines.get(key)
            if line is None:
                ops = classes.members[key]
                op = ops[0]
                dtype, shape, team, each = _static(op)
                mark = op.attributes.get(RESHARD_ATTR)
                reshard = mark.data if isinstance(mark, StringAttr) else ""
                line = lines[key] = Line(0, op, _kind(op), dtype, shape, team, n, each, reshard, teams=sum(_teams(o) for o in ops), covered=_covered(ops))
            line.runs = max(line.runs, n)
            line.ranks += group
            for how, k in beside[key].items():
                line.beside[how] = line.beside.get(how, 0) + k
        for r in group:
            per_rank[r] = totals
    ordered = sorted(lines.values(), key=lambda ln: order[ln.op])
    for i, ln in enumerate(ordered, 1):
        ln.index = i
        ln.ranks.sort()
    return FunctionReport(func.sym_name.data, ordered, per_rank, memory_plan(func))


# --------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------


def _int(x: Fraction | int) -> str:
    return str(round(x))


def _team_text(team: tuple[int, ...] | None) -> str:
    if team is None:
        return "?"
    if len(team) > 1 and list(team) == list(range(team[0], team[0] + len(team))):
        return f"[{team[0]}-{team[-1]}]"
    if len(team) <= 6:
        return "[" + ",".join(map(str, team)) + "]"
    return f"[{team[0]},{team[1]},...,{team[-1]}]"


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def _mib(x: Fraction) -> str:
    return f"{float(x) / MIB:.2f} MiB"


def _totals_text(t: Totals, unit: Unit | None) -> str:
    share = f" ({100 * float(t.overlapped / t.nbytes):.1f}%)" if t.nbytes else ""
    units = f" = {unit.of(t.nbytes):.2f} x {unit.text}" if unit else ""
    fences = f", {t.fences} fence{'s' if t.fences != 1 else ''}" if t.fences else ""
    return (
        f"{t.count} communication{'s' if t.count != 1 else ''}{fences}, {_int(t.nbytes)} bytes ({_mib(t.nbytes)}){units}, "
        f"overlapped {_int(t.overlapped)} bytes{share}"
    )


def _flops_text(per_rank: dict[int, Totals]) -> list[str]:
    """Each rank's attention FLOPs, where the program has attention: how
    evenly ring attention spreads the work."""
    flops = {r: t.attention_flops for r, t in sorted(per_rank.items())}
    if not any(flops.values()):
        return []
    most = max(flops.values())
    spread = f", the least {min(flops.values()) / most:.1%} of the most" if len(set(flops.values())) > 1 else " (equal)"
    return ["  attention FLOPs per rank: " + ", ".join(f"{r}: {f:.4g}" for r, f in flops.items()) + spread]


def _per_rank_text(per_rank: dict[int, Totals], unit: Unit | None) -> list[str]:
    """`per rank: ...` when every rank moves the same, else the busiest
    and the least busy rank."""
    if not per_rank:
        return []
    keyed = sorted(per_rank.items(), key=lambda kv: (-kv[1].nbytes, kv[0]))
    (top, most), (low, least) = keyed[0], keyed[-1]
    if (most.nbytes, most.count, most.overlapped, most.fences) == (least.nbytes, least.count, least.overlapped, least.fences):
        return [f"  total per rank ({len(per_rank)} rank{'s' if len(per_rank) != 1 else ''}): {_totals_text(most, unit)}"]
    return [
        f"  total on rank {top} (the most of {len(per_rank)} ranks): {_totals_text(most, unit)}",
        f"  total on rank {low} (the least): {_totals_text(least, unit)}",
    ]


def _memory_text(m: MemoryPlan) -> str:
    """What the program's buffers take without plan-memory's blocks and with them."""
    shared = f", {m.shared_blocks} shared by several" if m.shared_blocks else ""
    return (
        f"  buffers per rank: {m.buffers}, {_int(m.unplanned)} bytes ({_mib(Fraction(m.unplanned))}); "
        f"in plan-memory's blocks {_int(m.planned)} bytes ({_mib(Fraction(m.planned))}){shared}"
    )


def render(rep: CommReport) -> str:
    unit = rep.unit
    out = ["// communication report: bytes per rank and run (docs/performance.md)"]
    if not rep.functions:
        out.append("no host program in the module: lower it first (-p default)")
    for f in rep.functions:
        out.append(f"@{f.name}:")
        if f.lines:
            head = ["#", "kind", "dtype", "shape", "n", "team", "times", "bytes", *(["units"] if unit else []), "reshard", "overlap"]
            rows = [head]
            for ln in f.lines:
                shape = "x".join(map(str, ln.shape)) or "scalar"
                n = str(len(ln.team)) if ln.team is not None else "?"
                units = [f"{unit.of(ln.nbytes):.3f}"] if unit else []
                team = _team_text(ln.team) if ln.teams == 1 else f"{ln.teams} teams"
                team += "" if ln.covered == ln.ranks else f" on {_team_text(tuple(ln.ranks))}"
                rows.append([str(ln.index), ln.kind, ln.dtype, shape, n, team, str(ln.runs), ln.bytes_text, *units, ln.reshard or "-", ln.overlap])
            right = {0, 4, 6, 7} | ({8} if unit else set())
            out += _table(rows, right)
        else:
            out.append("  no communication")
        out += _per_rank_text(f.per_rank, unit)
        ratios = [ln.nbytes / (m * ln.runs) for ln in f.lines if isinstance(ln.op, hir.AlltoallvOp) and (m := ln.op.mean_bytes())]
        if any(isinstance(ln.op, hir.AlltoallvOp) for ln in f.lines):
            most = f" (at most {float(max(ratios)):.2f}: bound over mean)" if ratios else ""
            out.append(
                "  alltoallv: <= the bound (its buffers; the totals count it), ~ the mean over the ranks; the imbalance "
                f"(largest over mean rows per rank){most} depends on the routing: `fuserc run --trace` prints it"
            )
        if f.memory is not None and f.memory.buffers:
            out.append(_memory_text(f.memory))
        out += _flops_text(f.per_rank)
    for name, names in rep.groups():
        out.append(f"{name}:")
        out += _per_rank_text(rep.totals(names), unit)
    return "\n".join(out) + "\n"

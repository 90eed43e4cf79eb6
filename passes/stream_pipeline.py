"""stream-pipeline: ops with a Stream(S) split become host loops over S
chunks on rotating streams (docs/passes.md).

Input: host programs from lower-to-host-ir, whose ops carry the markers of
docs/passes.md (`hir.stream = [dim, S]`, `hir.reshard = "FROM->TO"`). The
sites it pipelines are read by `stream_sites` (AllGather + GEMM, GEMM +
ReduceScatter, a collective per chunk with the compute around it, local
ops) and written by `stream_emit`. Each site runs by one algorithm (option
`algorithm`): `collective` (per chunk a Broadcast with root = the chunk's
device, a Reduce to it, or the chunk's collective, next to the chunk's
GEMM), `ring` (peer-to-peer: copy-engine gets and puts through shared
buffers within a node, NCCL send/recv across nodes; for GEMM +
ReduceScatter, form `sum`, a running sum passed along the ring, or form
`pull`, each destination pulling its partial blocks), or `none`; `auto`
asks the cost model (`cost_model.py`), which may also pipeline a site the
user did not split. Each pipeline's first loop carries `hir.pipeline =
{algorithm, chunks, streams, reason}` (and `form`).

Every op still carrying a Stream split afterwards, in a pipeline declined
or in none at all, carries `hir.pipeline = {algorithm = "none", ...,
reason = ...}` saying why it runs unpipelined.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from fuserc.diagnostics import error_at
from fuserc.dialects import hir
from fuserc.dialects.fusion import shape_of
from fuserc.ir import ClassTest, walk
from fuserc.passes import cost_model
from fuserc.passes.cost_model import (
    ALGORITHMS,
    ALLGATHER,
    CHUNKS,
    COLLECTIVE,
    MAX_STREAMS,
    NONE,
    REDUCE_SCATTER,
    RING,
    RING_FORMS,
    Machine,
)
from fuserc.passes.schedule import (
    beside_ring,
    fold_sums,
    gemm_time,
    is_scheduled,
    merge_fences,
    overlap_collectives,
    pull_beside,
    share_compute,
)
from fuserc.passes.stream_sites import (
    COMPUTE,
    GEMM_OPS,
    LOCAL,
    PIPELINE_ATTR,
    Plan,
    Site,
    alloc_in,
    find_sites,
    host_blocks,
    launch_reason,
    out_operand,
    root,
    stream_mark,
)

AUTO = "auto"
AUTO_CHUNKS_PER_DEVICE = (1, 2, 4)
"""k of the S = k * d the cost model tries where S is its to choose."""


# --------------------------------------------------------------------------
# Deciding
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamPipeline(ModulePass):
    """Pipelines every Stream split (and, with `auto`, sites that pay) into
    host loops over chunks on rotating streams (docs/passes.md).

    Options: `algorithm` (auto|collective|ring|none), `num_streams` (the
    worker stream pool; 0: one per chunk, at most 8), `chunks` (S for sites
    without a written Stream split; None: the cost model's choice), `links`
    (a links JSON file for the cost model; empty: $FUSERC_LINKS or
    ~/.cache/fuserc/links.json, else documented defaults), `ring_form`
    (auto|sum|pull: the GEMM+ReduceScatter ring's form; auto: the cost
    model's choice)."""

    name = "stream-pipeline"

    algorithm: str = AUTO
    num_streams: int = 0
    chunks: int | None = None
    links: str = ""
    ring_form: str = AUTO

    def __post_init__(self) -> None:
        if self.ring_form not in (AUTO, *RING_FORMS):
            raise ValueError(f"ring-form must be one of auto, {', '.join(RING_FORMS)}, got '{self.ring_form}'")
        if self.algorithm not in (AUTO, *ALGORITHMS):
            raise ValueError(f"algorithm must be one of auto, {', '.join(ALGORITHMS)}, got '{self.algorithm}'")
        if self.num_streams < 0:
            raise ValueError(f"num-streams must be >= 0 (0: one per chunk), got {self.num_streams}")
        if self.chunks is not None and self.chunks < 1:
            raise ValueError(f"chunks must be positive, got {self.chunks}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        machines: list[Machine] = []

        def machine_at(anchor: Operation) -> Machine:
            if not machines:
                try:
                    machines.append(cost_model.load_machine(self.links or None))
                except cost_model.LinksFileError as e:  # located in the file, not the program
                    raise e.diagnostic() from None
                except ValueError as e:
                    raise error_at(anchor, f"stream-pipeline: {e}") from None
            return machines[0]

        for func in [f for f in op.body.block.ops if isinstance(f, FuncOp) and hir.is_host_program(f)]:
            placed: set[Operation] = set()  # GEMMs put beside a ring pipeline
            if self.algorithm != NONE:
                for site in find_sites(func):
                    machine = machine_at(site.anchor) if site.kind != LOCAL else machines[0] if machines else None
                    plan = self.plan(site, machine)
                    if plan.algorithm == NONE:  # a written split says why; an unsplit site stays as it is
                        for o in site.marked if site.written is not None else []:
                            o.attributes[PIPELINE_ATTR] = plan.attr()
                        continue
                    plan, beside = _beside(site, plan, machine, placed)
                    from fuserc.passes.stream_emit import SiteLowering  # here: a program with no site to pipeline needs none of it

                    SiteLowering(site, plan, machine.node_of if machine is not None else _one_node, beside).run()
            explain_the_rest(func, self.algorithm)
            if self.algorithm != NONE:
                for block in host_blocks(func):
                    if _shareable(block):
                        share_compute(block, machine_at(func))
                    overlap_collectives(block)
                    pull_beside(block, machine_at(func))
                    merge_fences(block)
                    fold_sums(block)

    def streams(self, chunks: int) -> int:
        return self.num_streams or min(chunks, MAX_STREAMS)

    def plan(self, site: Site, machine: Machine | None) -> Plan:
        """The plan of a site (algorithm `none`: left as it is, and why)."""
        if site.kind == LOCAL:
            assert site.written is not None
            return Plan("local", site.written, self.streams(site.written), "Stream split of a local op")
        assert machine is not None
        options = self.chunk_options(site)
        if not options:
            return Plan(NONE, 1, 0, "no number of chunks splits the rows evenly")
        offered = site_algorithms(site)
        note = ""
        if self.algorithm == AUTO:  # a written split too: pipelining must not lose
            algorithms = [NONE, *offered]
        elif self.algorithm in offered:
            algorithms = [self.algorithm]
        else:
            algorithms = [COLLECTIVE]
            note = f"{describe(site)} has no ring form; "
        requested = site.written is not None or self.algorithm != AUTO
        forms = RING_FORMS if self.ring_form == AUTO else (self.ring_form,)
        cost = replace(site.cost_site(), links=machine.ring_links(site.team))
        best, reason = cost_model.choose(machine, cost, algorithms, options, requested, forms)
        if self.algorithm != AUTO:
            reason = f"algorithm = {self.algorithm} requested; {note}{reason}"
        if best.algorithm == NONE:
            return Plan(NONE, 1, 0, reason)
        idle = best.seconds - machine.gemm(cost.flops, cost.elem)
        return Plan(best.algorithm, best.chunks, self.streams(best.chunks), reason, best.form, idle)

    def chunk_options(self, site: Site) -> list[int]:
        """The S values a site may use: the written split, the `chunks`
        option, or those the cost model tries; each a multiple of the team
        size that cuts the rows evenly (a diagnostic otherwise)."""
        d = site.d
        if site.kind == CHUNKS:  # the chunks of the written split, whatever the team
            assert site.written is not None
            return [site.written]
        rows = shape_of(site.buffer)[0]
        if site.written is not None:
            s, what = site.written, f"Stream({site.written})"
        elif self.chunks is not None:
            s, what = self.chunks, f"chunks = {self.chunks}"
        else:
            return [k * d for k in AUTO_CHUNKS_PER_DEVICE if rows % (k * d) == 0]
        role = "rows gathered from" if site.kind == ALLGATHER else "partial sum scattered over"
        if s % d:
            raise error_at(
                site.anchor,
                f"stream-pipeline: {what} does not fit the {role} the {d} devices of team {list(site.team)}{getattr(site.team, 'translates_text', str)()}: "
                f"S must be a multiple of {d} (chunk c belongs to device c * {d} / S)",
            )
        if rows % s:
            raise error_at(
                site.anchor,
                f"stream-pipeline: {what} does not split the {rows} rows of {site.buffer.type} evenly",
            )
        return [s]


def _one_node(rank: int) -> int:
    return 0


def _beside(site: Site, plan: Plan, machine: Machine | None, placed: set[Operation]) -> tuple[Plan, list[Operation]]:
    """The GEMMs from before a ring site that run beside it
    (`schedule.beside_ring`), detached, with their deallocations; the plan's
    reason then says so."""
    if plan.algorithm != RING or site.gemm is None or machine is None:
        return plan, []
    mine = list(dict.fromkeys(o for o in (site.comm, *site.gemms, *site.erase) if o is not None))
    beside = beside_ring(site.anchor, mine, plan.idle, machine, placed)
    gemms = [o for o in beside if isinstance(o, GEMM_OPS)]
    if not gemms:
        return plan, beside
    t = sum(gemm_time(o, machine) for o in gemms)
    return replace(plan, reason=f"{plan.reason}; beside it {len(gemms)} GEMM(s) from before it ({t * 1e3:.3g} ms)"), beside


def site_algorithms(site: Site) -> list[str]:
    """The pipelines a site has: the collective one always; the ring for
    an AllGather (with or without its GEMM), a GEMM + ReduceScatter, and an
    allgather per chunk read from the peers' whole shards (no compute
    before it, its chunks blocks of the shard)."""
    if site.kind == ALLGATHER:
        return [COLLECTIVE, RING]
    if site.kind == REDUCE_SCATTER:
        return [COLLECTIVE, RING] if site.gemm is not None else [COLLECTIVE]
    pc = site.chunked
    assert pc is not None
    ring = isinstance(pc.comm, hir.AllgatherOp) and not site.producers and pc.outermost
    return [COLLECTIVE, RING] if ring else [COLLECTIVE]


def describe(site: Site) -> str:
    """The site in words, for reasons."""
    comm = site.comm.name if site.comm is not None else ""
    if site.kind == CHUNKS:
        return f"a {comm} per chunk" + (" after its compute" if site.producers else "")
    return f"a {comm} without a GEMM" if site.gemm is None else f"a {comm} with its GEMM"


def _shareable(block: Block) -> bool:
    """Two collectives or more that `share_compute` might balance (the cost
    model is only loaded then)."""
    return sum(is_scheduled(o) for o in block.ops) > 1


# --------------------------------------------------------------------------
# Why a Stream split runs unpipelined
# --------------------------------------------------------------------------


def explain_the_rest(func: FuncOp, algorithm: str) -> None:
    """Every op (or loop of per-chunk collectives) still marked with a
    Stream split and without a plan gets `hir.pipeline` = none and why."""
    for op in _marked_ops(func):
        if PIPELINE_ATTR in op.attributes:
            continue
        mark = stream_mark(op) or _loop_mark(op)
        assert mark is not None
        reason = "algorithm = none requested" if algorithm == NONE else _why(op, *mark)
        op.attributes[PIPELINE_ATTR] = Plan(NONE, 1, 0, reason).attr()


_is_for = ClassTest(hir.ForOp)


def _marked_ops(func: FuncOp) -> list[Operation]:
    """Marked ops outside loops, and the loops holding marked ops, in
    program order (a loop's body is not entered)."""
    out: list[Operation] = []

    def visit(op: Operation) -> None:
        for region in op.regions:
            for block in region.blocks:
                for o in block.ops:
                    loop = _is_for(o)
                    if stream_mark(o) is not None or (loop and _loop_mark(o) is not None):
                        out.append(o)
                    if not loop:
                        visit(o)

    visit(func)
    return out


def _loop_mark(loop: Operation) -> tuple[int, int] | None:
    if not isinstance(loop, hir.ForOp):
        return None
    return next((m for o in walk(loop) if o is not loop and (m := stream_mark(o)) is not None), None)


def _why(op: Operation, dim: int, chunks: int) -> str:
    if isinstance(op, hir.LaunchOp):
        return launch_reason(op, dim, chunks)
    if isinstance(op, hir.ForOp):
        return f"not pipelined: the collective per chunk of Stream({chunks}) runs chunk after chunk on the main stream"
    if isinstance(op, GEMM_OPS) and op.acc is not None:
        return "not pipelined: a GEMM that accumulates into its output runs whole"
    if isinstance(op, COMPUTE):
        shape = list(shape_of(out_operand(op)))
        return f"not pipelined: Stream({chunks}) on dim {dim} of {shape} does not cut its operands into chunks, so it runs whole"
    if isinstance(op, (hir.AllgatherOp, hir.ReduceScatterOp, hir.AlltoallOp)) and dim == 0:
        return f"not pipelined: Stream({chunks}) cuts the dimension the {op.name} communicates along, so it runs whole"
    if isinstance(op, hir.CommunicationOp) and not isinstance(op, (hir.AllgatherOp, hir.ReduceScatterOp, hir.AllreduceOp, hir.AlltoallOp)):
        return f"not pipelined: only allgather, reduce-scatter, allreduce and alltoall run per chunk; {op.name} runs whole"
    if isinstance(op, hir.CommunicationOp) and len(op.team) < 2:  # type: ignore[attr-defined]
        return "not pipelined: a team of one device moves nothing"
    if isinstance(op, hir.CommunicationOp) and isinstance(op.parent_op(), hir.IfRankOp) and not all(
        alloc_in(root(v), op.parent_block()) for v in op.operands if isinstance(v.type, TensorType)  # type: ignore[arg-type]
    ):
        return (
            f"not pipelined: the {op.name} of one team of the mesh (in its own hir.if_rank, its buffers made "
            "outside) runs whole"
        )
    return f"not pipelined: Stream({chunks}) on dim {dim} does not cut {op.name}'s operands alike, so it runs whole"

"""The hir dialect: host programs that every rank runs, SPMD (docs/hir.md).

Values are local buffers (builtin tensors without encoding), indices, and the
handles of the runtime: tokens of communications, streams, events and shared
memory handles. Keyword attributes are properties; each op class exposes them
as plain Python values (`team` as a tuple of ranks, `backend` as a string, ...)
for the evaluator and the passes, and has a builder taking those values.
"""

from __future__ import annotations

from fuserc.dialects.hir_comm import (  # noqa: F401
    AllgatherOp,
    AllreduceOp,
    AlltoallOp,
    AlltoallvOp,
    MEAN_ROWS_ATTR,
    BarrierOp,
    BroadcastOp,
    CommunicationOp,
    GatherOp,
    GetOp,
    PutOp,
    RecvOp,
    ReduceOp,
    ReduceScatterOp,
    ReducingOp,
    ScatterOp,
    SendOp,
    ShareOp,
    WaitOp,
    buffer_bytes,
)
from fuserc.dialects.hir_compute import (  # noqa: F401
    ChunkOp,
    CopyOp,
    LaunchOp,
    LinearOp,
    MatmulOp,
    SelectOp,
    TransposeOp,
    ViewOp,
)
from fuserc.dialects.hir_control import (  # noqa: F401
    AddModOp,
    ConstantOp,
    DivOp,
    ForOp,
    GetCurrentStreamOp,
    IfRankOp,
    RecordEventOp,
    SetCurrentStreamOp,
    StreamForOp,
    SyncStreamOp,
    TeamIndexOp,
    TeamOp,
    TeamRankOp,
    WaitEventOp,
    YieldOp,
)
from fuserc.dialects.hir_core import (  # noqa: F401
    BACKENDS,
    GLOBAL_ATTR,
    HOST_ATTR,
    RANGE_MIN,
    REDUCTION_OPS,
    STREAM_ATTR,
    AllocOp,
    DeallocOp,
    EventType,
    HandleType,
    HirOp,
    Ranks,
    TeamList,
    team_of,
    team_props,
    RankSetAttr,
    StreamType,
    TokenType,
    Word,
    check_buffer_type,
    check_ranks,
    chunk_shape,
    int_array,
    rank_array,
    select_shape,
    verify_discardable,
)
from fuserc.dialects.hir_team import Team, Translate  # noqa: F401
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, TensorType, UnitAttr

from fuserc.diagnostics import error_at
from fuserc.ir import walk
from xdsl.dialects.func import FuncOp
from xdsl.ir import Dialect, Operation

# --------------------------------------------------------------------------
# Host programs
# --------------------------------------------------------------------------


def is_host_program(func_op: Operation) -> bool:
    """Whether `func_op` is a `func.func` carrying the `hir.host` unit attribute."""
    return isinstance(func_op, FuncOp) and HOST_ATTR in func_op.attributes


def check_fusion_function(func_op: FuncOp) -> None:
    """Fusion passes transform functions of fusion ops: one that holds
    host-IR ops without being marked a host program is refused at its
    first such op (its tensors are local buffers, not global values)."""
    for op in walk(func_op):
        if op.name.startswith("hir."):
            raise error_at(
                op,
                f"'{op.name}' op is host IR in @{func_op.sym_name.data}, which is not a host program "
                f"(a function marked `attributes {{{HOST_ATTR}}}`): the fusion passes transform "
                "functions of fusion ops only",
            )


def mark_host_program(func_op: FuncOp) -> None:
    """Set the `hir.host` unit attribute."""
    func_op.attributes[HOST_ATTR] = UnitAttr()


def global_type(func_op: FuncOp, i: int, result: bool = False) -> TensorType | None:
    """The `hir.global` type of argument (or result) `i`: the global tensor
    type with its sharding; None when absent."""
    attrs = func_op.res_attrs if result else func_op.arg_attrs
    if attrs is None or i >= len(attrs.data):
        return None
    value = attrs.data[i].data.get(GLOBAL_ATTR)
    return value if isinstance(value, TensorType) else None


def set_global_type(func_op: FuncOp, i: int, t: TensorType, result: bool = False) -> None:
    """Set the `hir.global` type of argument (or result) `i`, keeping the
    other attributes of that argument."""
    n = len(func_op.function_type.outputs.data if result else func_op.function_type.inputs.data)
    old = func_op.res_attrs if result else func_op.arg_attrs
    dicts = list(old.data) if old is not None else [DictionaryAttr({}) for _ in range(n)]
    dicts[i] = DictionaryAttr({**dicts[i].data, GLOBAL_ATTR: t})
    if result:
        func_op.res_attrs = ArrayAttr(dicts)
    else:
        func_op.arg_attrs = ArrayAttr(dicts)


COMMUNICATION_OPS: tuple[type[CommunicationOp], ...] = (
    AllgatherOp, BroadcastOp, ScatterOp, GatherOp, ReduceOp,
    AllreduceOp, ReduceScatterOp, AlltoallOp, AlltoallvOp, SendOp, RecvOp, BarrierOp,
)  # fmt: skip
"""Team communications: each has `team`, `backend` and returns a token."""

PEER_COPY_OPS: tuple[type[HirOp], ...] = (PutOp, GetOp)
"""One-sided copies through shared handles; they also return a token."""

VIEW_OPS: tuple[type[HirOp], ...] = (SelectOp, ChunkOp, ViewOp, TransposeOp)
"""Ops whose result aliases their source buffer."""

COMPUTE_OPS: tuple[type[HirOp], ...] = (MatmulOp, LinearOp, CopyOp, LaunchOp)
"""Local compute writing into destination buffers."""

Hir = Dialect(
    "hir",
    [
        AllocOp, DeallocOp, ForOp, IfRankOp, YieldOp, ConstantOp, TeamIndexOp, AddModOp, TeamRankOp,
        GetCurrentStreamOp, SetCurrentStreamOp, StreamForOp, SyncStreamOp, RecordEventOp, WaitEventOp,
        DivOp, *COMMUNICATION_OPS, WaitOp,
        SelectOp, ChunkOp, ViewOp, TransposeOp,
        MatmulOp, LinearOp, CopyOp, LaunchOp,
        ShareOp, PutOp, GetOp,
    ],
    [TokenType, StreamType, EventType, HandleType, RankSetAttr],
)  # fmt: skip


def storage_blocks(func_op: FuncOp) -> dict[int, int]:
    """The memory blocks of a host program's allocation sites that have a
    `storage` number (plan-memory): number -> bytes of its largest site."""
    blocks: dict[int, int] = {}
    for op in walk(func_op):
        if isinstance(op, AllocOp) and op.storage is not None:
            blocks[op.storage] = max(blocks.get(op.storage, 0), buffer_bytes(op.result))
    return blocks

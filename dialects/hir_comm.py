"""The hir dialect's communications (team collectives, waits) and peer-to-peer copies through shared handles.

Part of the hir dialect (`fuserc.dialects.hir` gathers the ops and defines the dialect; docs/hir.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from xdsl.dialects.builtin import (
    I64,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import (
    Attribute,
    Operation,
    SSAValue,
)
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from fuserc.dialects.fusion import shape_of
from fuserc.dialects.hir_control import TeamOp
from fuserc.dialects.hir_core import (
    _INDEX,
    _TENSOR,
    BACKENDS,
    REDUCTION_OPS,
    HandleType,
    HirOp,
    TOKEN,
    TokenType,
    _check_choice,
    _check_position,
    _check_positive,
    _constant_value,
    _same_elements,
    chunk_shape,
    i64_attr,
    rank_array,
    team_props,
)

# --------------------------------------------------------------------------
# Communications
# --------------------------------------------------------------------------


def buffer_bytes(v: SSAValue) -> int:
    """The bytes of a local buffer (its elements times the element's size)."""
    t = v.type
    assert isinstance(t, TensorType)
    return math.prod(t.get_shape()) * t.element_type.size


def _check_rank_ge1(v: SSAValue, what: str) -> tuple[int, ...]:
    shape = shape_of(v)
    if not shape:
        raise VerifyException(f"{what} must have rank >= 1 (it is split along dim 0)")
    return shape


def _check_stacked(small: SSAValue, big: SSAValue, n: int, small_name: str, big_name: str) -> None:
    """`big` is n blocks of `small` stacked along dim 0."""
    s = _check_rank_ge1(small, small_name)
    b = _check_rank_ge1(big, big_name)
    if b[0] != s[0] * n or b[1:] != s[1:]:
        want = [s[0] * n, *s[1:]]
        raise VerifyException(
            f"{big_name} shape {list(b)} must be {want}: {small_name} shape {list(s)} "
            f"with dim 0 times the team size {n}"
        )


def _check_same_shape(a: SSAValue, b: SSAValue, a_name: str, b_name: str) -> None:
    if shape_of(a) != shape_of(b):
        raise VerifyException(
            f"{a_name} shape {list(shape_of(a))} and {b_name} shape {list(shape_of(b))} must be equal"
        )


class CommunicationOp(TeamOp):
    """A communication over `team` with `backend`, writing a destination
    buffer and returning a `!hir.token`; ranks outside the team skip it."""

    backend_attr = prop_def(StringAttr, prop_name="backend")
    token = result_def(TokenType)

    @property
    def backend(self) -> str:
        return self.backend_attr.data

    def verify_team_op(self) -> None:
        _check_choice(self.backend, BACKENDS, "backend")
        tensors = [v for v in self.operands if isinstance(v.type, TensorType)]
        _same_elements(tensors)
        for what in ("root", "peer"):
            position = getattr(self, what, None)  # the index operand, where the op has one
            if isinstance(position, SSAValue):
                _check_position(position, len(self.team), f"{what} position")
        self.verify_shapes()

    def verify_shapes(self) -> None:
        """Shape rules of the communication."""

    def communicated(self) -> SSAValue | None:
        """The buffer the op's traffic is counted on (the gathered or the
        reduced one: the larger of its operands); None for a fence."""
        tensors = [v for v in self.operands if isinstance(v.type, TensorType)]
        return max(tensors, key=lambda v: math.prod(shape_of(v))) if tensors else None

    @classmethod
    def wire_factor(cls, n: int) -> Fraction:
        """The bytes one member moves, as a fraction of the communicated
        buffer's, in a team of n (nccl-tests' bus bytes: a ring allgather
        receives (n - 1)/n of the gathered buffer)."""
        return Fraction(n - 1, n)

    def wire_bytes(self) -> Fraction:
        """Bytes per team member on the wire, one execution (`wire_factor`
        of the communicated buffer; docs/hir.md, "Traffic")."""
        buf = self.communicated()
        return self.wire_factor(len(self.team)) * buffer_bytes(buf) if buf is not None else Fraction(0)

    @staticmethod
    def _props(team: Sequence[int], backend: str, op: str | None = None) -> dict[str, Attribute]:
        props: dict[str, Attribute] = {**team_props(team), "backend": StringAttr(backend)}
        if op is not None:
            props["op"] = StringAttr(op)
        return props


class ReducingOp(CommunicationOp):
    """Communications that combine values with `op` (sum, max, min, prod)."""

    op_attr = prop_def(StringAttr, prop_name="op")

    @property
    def reduction_op(self) -> str:
        return self.op_attr.data

    def verify_team_op(self) -> None:
        _check_choice(self.reduction_op, REDUCTION_OPS, "op")
        super().verify_team_op()


_TEAM_BACKEND = "`team` `=` custom<TeamList>($team, $translates) `backend` `=` custom<Word>($backend) attr-dict `:` functional-type(operands, results)"


@irdl_op_definition
class AllgatherOp(CommunicationOp):
    """`%out` is the team's inputs concatenated along dim 0 in team order."""

    name = "hir.allgather"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output " + _TEAM_BACKEND

    def __init__(self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[input, output], properties=self._props(team, backend), result_types=[TOKEN])

    def verify_shapes(self) -> None:
        _check_stacked(self.input, self.output, len(self.team), "input", "output")


@irdl_op_definition
class BroadcastOp(CommunicationOp):
    """In place: the root's `%buf` is copied into every member's `%buf`."""

    name = "hir.broadcast"
    buffer = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$buffer `root` $root " + _TEAM_BACKEND

    def __init__(self, buffer: SSAValue | Operation, root: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[buffer, root], properties=self._props(team, backend), result_types=[TOKEN])

    @classmethod
    def wire_factor(cls, n: int) -> Fraction:
        return Fraction(int(n > 1))  # the whole buffer through every link of the chain


@irdl_op_definition
class ScatterOp(CommunicationOp):
    """The root's `%in` split along dim 0; block i to team position i."""

    name = "hir.scatter"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$input `,` $output `root` $root " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        output: SSAValue | Operation,
        root: SSAValue | Operation,
        team: Sequence[int],
        backend: str,
    ):
        super().__init__(operands=[input, output, root], properties=self._props(team, backend), result_types=[TOKEN])

    def verify_shapes(self) -> None:
        _check_stacked(self.output, self.input, len(self.team), "output", "input")


@irdl_op_definition
class GatherOp(CommunicationOp):
    """The team's `%in` concatenated along dim 0 into the root's `%out`."""

    name = "hir.gather"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$input `,` $output `root` $root " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        output: SSAValue | Operation,
        root: SSAValue | Operation,
        team: Sequence[int],
        backend: str,
    ):
        super().__init__(operands=[input, output, root], properties=self._props(team, backend), result_types=[TOKEN])

    def verify_shapes(self) -> None:
        _check_stacked(self.input, self.output, len(self.team), "input", "output")


@irdl_op_definition
class ReduceOp(ReducingOp):
    """The team's `%in` combined with `op` into the root's `%out`."""

    name = "hir.reduce"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    root = operand_def(_INDEX)

    assembly_format = "$input `,` $output `root` $root `op` `=` custom<Word>($op) " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        output: SSAValue | Operation,
        root: SSAValue | Operation,
        team: Sequence[int],
        op: str,
        backend: str,
    ):
        super().__init__(
            operands=[input, output, root], properties=self._props(team, backend, op), result_types=[TOKEN]
        )

    def verify_shapes(self) -> None:
        _check_same_shape(self.input, self.output, "input", "output")

    @classmethod
    def wire_factor(cls, n: int) -> Fraction:
        return Fraction(int(n > 1))  # the whole buffer through every link of the chain


@irdl_op_definition
class AllreduceOp(ReducingOp):
    """The team's `%in` combined with `op` into every `%out` (`%in` may be `%out`)."""

    name = "hir.allreduce"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output `op` `=` custom<Word>($op) " + _TEAM_BACKEND

    def __init__(
        self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], op: str, backend: str
    ):
        super().__init__(operands=[input, output], properties=self._props(team, backend, op), result_types=[TOKEN])

    def verify_shapes(self) -> None:
        _check_same_shape(self.input, self.output, "input", "output")

    @classmethod
    def wire_factor(cls, n: int) -> Fraction:
        return Fraction(2 * (n - 1), n)  # a reduce-scatter, then an allgather


@irdl_op_definition
class ReduceScatterOp(ReducingOp):
    """Reduce the team's `%in`, then block i of dim 0 to team position i."""

    name = "hir.reduce_scatter"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output `op` `=` custom<Word>($op) " + _TEAM_BACKEND

    def __init__(
        self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], op: str, backend: str
    ):
        super().__init__(operands=[input, output], properties=self._props(team, backend, op), result_types=[TOKEN])

    def verify_shapes(self) -> None:
        _check_stacked(self.output, self.input, len(self.team), "output", "input")


@irdl_op_definition
class AlltoallOp(CommunicationOp):
    """Block j of dim 0 of `%in` goes to position j; `%out` holds the blocks
    received, in team order, along dim 0."""

    name = "hir.alltoall"
    input = operand_def(_TENSOR)
    output = operand_def(_TENSOR)

    assembly_format = "$input `,` $output " + _TEAM_BACKEND

    def __init__(self, input: SSAValue | Operation, output: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[input, output], properties=self._props(team, backend), result_types=[TOKEN])

    def verify_shapes(self) -> None:
        _check_same_shape(self.input, self.output, "input", "output")
        shape = _check_rank_ge1(self.input, "input")
        if shape[0] % len(self.team):
            raise VerifyException(
                f"dim 0 of input shape {list(shape)} must be divisible by the team size {len(self.team)}"
            )


MEAN_ROWS_ATTR = "hir.mean_rows"
"""On a `hir.alltoallv`: the rows each rank sends and receives on average
over the team (dispatch and combine: every rank sends its tokens x k rows),
which the communication report gives beside the bound."""


@irdl_op_definition
class AlltoallvOp(CommunicationOp):
    """An all-to-all with uneven splits known only at run time (expert
    parallelism's dispatch and combine). `%in`'s rows (dim 0) are sorted by
    destination: the first `%send_counts[0]` go to position 0, the next
    `%send_counts[1]` to position 1, ... (their sum at most `%in`'s rows; the
    rest is not sent). The counts are exchanged first; `%recv_counts[j]` is
    then the rows position j sent here, and `%out` holds them packed in team
    order from row 0 (rows past their sum keep their values). `%out`'s rows
    are an upper bound: more rows received is a run-time error."""

    name = "hir.alltoallv"
    input = operand_def(_TENSOR)
    send_counts = operand_def(_TENSOR)
    output = operand_def(_TENSOR)
    recv_counts = operand_def(_TENSOR)

    assembly_format = "$input `,` $send_counts `,` $output `,` $recv_counts " + _TEAM_BACKEND

    def __init__(
        self,
        input: SSAValue | Operation,
        send_counts: SSAValue | Operation,
        output: SSAValue | Operation,
        recv_counts: SSAValue | Operation,
        team: Sequence[int],
        backend: str,
    ):
        super().__init__(
            operands=[input, send_counts, output, recv_counts],
            properties=self._props(team, backend),
            result_types=[TOKEN],
        )

    def verify_team_op(self) -> None:
        _check_choice(self.backend, BACKENDS, "backend")
        _same_elements([self.input, self.output])
        n = len(self.team)
        for what, counts in (("send_counts", self.send_counts), ("recv_counts", self.recv_counts)):
            t = counts.type
            assert isinstance(t, TensorType)
            if t.element_type != i64 or shape_of(counts) != (n,):
                raise VerifyException(f"{what} must be tensor<{n}xi64> (rows per team position), got {t}")
        a, b = _check_rank_ge1(self.input, "input"), _check_rank_ge1(self.output, "output")
        if a[1:] != b[1:]:
            raise VerifyException(
                f"input shape {list(a)} and output shape {list(b)} must agree past dim 0 (rows of one shape)"
            )

    def communicated(self) -> SSAValue | None:
        """The larger of the data buffers: the rows sent or the bound on
        those received (counts are data-dependent, so traffic is bounded)."""
        return max((self.input, self.output), key=lambda v: math.prod(shape_of(v)))

    def mean_bytes(self) -> Fraction | None:
        """Wire bytes per rank of the mean rows (`MEAN_ROWS_ATTR`), if known."""
        rows = self.attributes.get(MEAN_ROWS_ATTR)
        if not isinstance(rows, IntegerAttr):
            return None
        shape = shape_of(self.input)
        row = buffer_bytes(self.input) // max(1, shape[0]) if shape[0] else 0
        return self.wire_factor(len(self.team)) * rows.value.data * row


@irdl_op_definition
class SendOp(CommunicationOp):
    """`%buf` to the member at team position `%peer`."""

    name = "hir.send"
    buffer = operand_def(_TENSOR)
    peer = operand_def(_INDEX)

    assembly_format = "$buffer `to` $peer " + _TEAM_BACKEND

    def __init__(self, buffer: SSAValue | Operation, peer: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[buffer, peer], properties=self._props(team, backend), result_types=[TOKEN])

    @classmethod
    def wire_factor(cls, n: int) -> Fraction:
        return Fraction(1)


@irdl_op_definition
class RecvOp(CommunicationOp):
    """`%buf` from the member at team position `%peer`."""

    name = "hir.recv"
    buffer = operand_def(_TENSOR)
    peer = operand_def(_INDEX)

    assembly_format = "$buffer `from` $peer " + _TEAM_BACKEND

    def __init__(self, buffer: SSAValue | Operation, peer: SSAValue | Operation, team: Sequence[int], backend: str):
        super().__init__(operands=[buffer, peer], properties=self._props(team, backend), result_types=[TOKEN])

    @classmethod
    def wire_factor(cls, n: int) -> Fraction:
        return Fraction(1)


@irdl_op_definition
class BarrierOp(CommunicationOp):
    """`%t = hir.barrier team = [..] backend = B : !hir.token`: a
    stream-ordered fence across the team: work every member enqueued on its
    current stream before the barrier is complete before work any member
    enqueues after it (once the token is waited for) starts. Used where a
    member reads a peer's shared buffer (`hir.get`) that the peer wrote."""

    name = "hir.barrier"

    assembly_format = "`team` `=` custom<TeamList>($team, $translates) `backend` `=` custom<Word>($backend) attr-dict `:` type($token)"

    def __init__(self, team: Sequence[int], backend: str):
        super().__init__(properties=self._props(team, backend), result_types=[TOKEN])


@irdl_op_definition
class WaitOp(HirOp):
    """`hir.wait %t : !hir.token`: the current stream (and, on cpu, the host)
    waits for the communication or copy of %t."""

    name = "hir.wait"
    token = operand_def(TokenType)

    assembly_format = "$token attr-dict `:` type($token)"

    def __init__(self, token: SSAValue | Operation):
        self._init(operands=[token])



# --------------------------------------------------------------------------
# Peer-to-peer
# --------------------------------------------------------------------------


@irdl_op_definition
class ShareOp(TeamOp):
    """`%h = hir.share %buf team = [..] : T -> !hir.handle`: exchange the memory
    handles of `%buf` (one buffer of this type per member) across the team;
    done once per cached allocation, then reused."""

    name = "hir.share"
    buffer = operand_def(_TENSOR)
    handle = result_def(HandleType)

    assembly_format = "$buffer `team` `=` custom<TeamList>($team, $translates) attr-dict `:` type($buffer) `->` type($handle)"

    def __init__(self, buffer: SSAValue | Operation, team: Sequence[int]):
        super().__init__(operands=[buffer], properties=team_props(team), result_types=[HandleType()])


class _PeerCopyOp(HirOp):
    """hir.put / hir.get: a one-sided copy through a shared handle, of the
    whole shared buffer or, with `block %i of N`, of its i-th of N equal
    blocks along dim 0."""

    backend_attr = prop_def(StringAttr, prop_name="backend")
    chunks_attr = opt_prop_def(IntegerAttr[I64], prop_name="chunks")
    token = result_def(TokenType)

    @property
    def backend(self) -> str:
        return self.backend_attr.data

    @property
    def chunks(self) -> int | None:
        """N of `block %i of N` (None: the whole shared buffer)."""
        return self.chunks_attr.value.data if self.chunks_attr is not None else None

    @staticmethod
    def _props(backend: str, chunks: int | None) -> dict[str, Attribute]:
        props: dict[str, Attribute] = {"backend": StringAttr(backend)}
        if chunks is not None:
            props["chunks"] = i64_attr(chunks)
        return props

    def local_buffer(self) -> SSAValue:
        raise NotImplementedError

    def wire_bytes(self) -> Fraction:
        """The block (or whole buffer) copied, counted at the rank that issues the copy."""
        return Fraction(buffer_bytes(self.local_buffer()))

    def shared_team(self) -> tuple[int, ...] | None:
        """The team of the handle's `hir.share`, where it is in sight."""
        share = self.handle.owner
        return share.team if isinstance(share, ShareOp) else None

    def verify_op(self) -> None:
        _check_choice(self.backend, BACKENDS, "backend")
        if (self.block is None) != (self.chunks is None):
            raise VerifyException("`block %i` and `of N` go together")
        if self.chunks is not None:
            _check_positive(self.chunks, "block count N")
            value = _constant_value(self.block) if self.block is not None else None
            if value is not None and not 0 <= value < self.chunks:
                raise VerifyException(f"block index {value} is out of range for {self.chunks} blocks")
        _verify_peer_copy(self.local_buffer(), self.handle, self.peer, self.chunks)


_PEER_COPY_TAIL = (
    "(`block` $block^ `of` $chunks)? `backend` `=` custom<Word>($backend) attr-dict "
    "`:` functional-type(operands, results)"
)


@irdl_op_definition
class PutOp(_PeerCopyOp):
    """`%t = hir.put %src, %h, %peer (block %i of N)? backend = B : (T, !hir.handle, index(, index)?) -> !hir.token`:
    copy `%src` into the shared buffer of team position `%peer` (or into its
    i-th of N blocks along dim 0)."""

    name = "hir.put"
    source = operand_def(_TENSOR)
    handle = operand_def(HandleType)
    peer = operand_def(_INDEX)
    block = opt_operand_def(_INDEX)

    assembly_format = "$source `,` $handle `,` $peer " + _PEER_COPY_TAIL

    def __init__(
        self,
        source: SSAValue | Operation,
        handle: SSAValue | Operation,
        peer: SSAValue | Operation,
        backend: str,
        block: SSAValue | Operation | None = None,
        chunks: int | None = None,
    ):
        super().__init__(
            operands=[source, handle, peer, [block] if block is not None else []],
            properties=self._props(backend, chunks),
            result_types=[TOKEN],
        )

    def local_buffer(self) -> SSAValue:
        return self.source


@irdl_op_definition
class GetOp(_PeerCopyOp):
    """`%t = hir.get %h, %peer, %dst (block %i of N)? backend = B : (!hir.handle, index, T(, index)?) -> !hir.token`:
    copy the shared buffer of team position `%peer` (or its i-th of N blocks
    along dim 0) into `%dst`."""

    name = "hir.get"
    handle = operand_def(HandleType)
    peer = operand_def(_INDEX)
    dest = operand_def(_TENSOR)
    block = opt_operand_def(_INDEX)

    assembly_format = "$handle `,` $peer `,` $dest " + _PEER_COPY_TAIL

    def __init__(
        self,
        handle: SSAValue | Operation,
        peer: SSAValue | Operation,
        dest: SSAValue | Operation,
        backend: str,
        block: SSAValue | Operation | None = None,
        chunks: int | None = None,
    ):
        super().__init__(
            operands=[handle, peer, dest, [block] if block is not None else []],
            properties=self._props(backend, chunks),
            result_types=[TOKEN],
        )

    def local_buffer(self) -> SSAValue:
        return self.dest


def _verify_peer_copy(local: SSAValue, handle: SSAValue, peer: SSAValue, chunks: int | None = None) -> None:
    """When the handle's hir.share is in sight: the local buffer has the
    shared buffer's shape (or that of one of its `chunks` blocks along dim 0)
    and element type, and a static peer position lies inside its team."""
    share = handle.owner
    if not isinstance(share, ShareOp):
        return
    shared = shape_of(share.buffer)
    if chunks is not None:
        if not shared or shared[0] % chunks:
            raise VerifyException(
                f"the shared buffer {list(shared)} cannot be cut into {chunks} blocks along dim 0"
            )
        want = chunk_shape(shared, 0, chunks)
        if shape_of(local) != want:
            raise VerifyException(
                f"local buffer shape {list(shape_of(local))} must be {list(want)}: one of {chunks} blocks of "
                f"the shared buffer {list(shared)} along dim 0"
            )
    else:
        _check_same_shape(local, share.buffer, "local buffer", "shared buffer")
    _same_elements([local, share.buffer])
    _check_position(peer, len(share.team), "peer position")

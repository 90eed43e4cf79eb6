"""What each hir op does when the evaluator runs it: one handler per op class,
registered with `prepares` (runtime/evaluator/interpreter.py runs them).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from fuserc.diagnostics import Diagnostic, error_at
from fuserc.dialects import hir
from fuserc.dialects.interfaces import torch_dtype
from fuserc.runtime.backends.backend import reduce_op_name
from fuserc.runtime.evaluator.interpreter import (
    Interpreter,
    Planner,
    Run,
    absent_results,
    buffer_shape,
    module_meshes,
    prepares,
    team_position,
)
from fuserc.runtime.evaluator import stand_ins
from fuserc.runtime.evaluator.reference import block_context

def matmul_flops(a_shape: Sequence[int], out_shape: Sequence[int]) -> int:
    """2*M*N*K of a matmul/linear: K is the contracted extent."""
    k = a_shape[-1] if a_shape else 1
    return 2 * math.prod(out_shape) * k


# ---- allocation -----------------------------------------------------------


@prepares(hir.AllocOp)
def _alloc(pl: Planner, op: hir.AllocOp) -> Run:
    t = op.result.type
    assert isinstance(t, TensorType)
    site, shape, dtype, storage = op.site, tuple(t.get_shape()), torch_dtype(t.element_type), op.storage
    result, acquire = pl.slot(op.result), pl.program.acquire
    if stand_ins.taken_at_launch(op, pl.backend.makes_results):
        later = stand_ins.Later(site, shape, dtype, storage)

        def run_later(it: Interpreter) -> None:
            it.env[result] = later

        return run_later

    def run(it: Interpreter) -> None:
        it.env[result] = acquire(site, shape, dtype, storage).buffer

    return run


@prepares(hir.DeallocOp)
def _dealloc(pl: Planner, op: hir.DeallocOp) -> Run:
    """The buffer's cache entry is free again; a region's result that stood
    for it (`_launch`), and every view of it, are let go (their memory
    goes back to the allocator here, not at the end of the run)."""
    buffer, program = pl.slot(op.buffer), pl.program
    held = (buffer, *pl.slots(stand_ins.views_of(op.buffer)))

    def run(it: Interpreter) -> None:
        env = it.env
        entry = program.entry_of(env[buffer])
        if entry is not None:
            program.cache.release(entry)
        else:
            for s in held:
                env[s] = None

    return run


# ---- control ----------------------------------------------------------------


@prepares(hir.ForOp)
def _for(pl: Planner, op: hir.ForOp) -> Run:
    body = pl.block(op.body.block, hir.YieldOp).run
    index, indices = pl.slot(op.induction_var), op.indices

    def run(it: Interpreter) -> None:
        env = it.env
        for i in indices:
            env[index] = i
            body(it)

    return run


@prepares(hir.IfRankOp)
def _if_rank(pl: Planner, op: hir.IfRankOp) -> Run:
    results = pl.slots(op.results)
    if pl.rank not in op.ranks:
        return absent_results(results)
    body = pl.block(op.body.block, hir.YieldOp)
    block, yields = body.run, body.ends or ()
    if len(yields) != len(results):
        raise error_at(op, f"'{op.name}' yields {len(yields)} values for {len(results)} results")
    moves = tuple(zip(results, yields))

    def run(it: Interpreter) -> None:
        block(it)
        env = it.env
        for r, v in moves:
            env[r] = env[v]

    return run


@prepares(hir.ConstantOp)
def _constant(pl: Planner, op: hir.ConstantOp) -> Run:
    result, value = pl.slot(op.result), op.value

    def run(it: Interpreter) -> None:
        it.env[result] = value

    return run


@prepares(hir.TeamIndexOp)
def _team_index(pl: Planner, op: hir.TeamIndexOp) -> Run:
    result, value = pl.slot(op.result), pl.team(op).index(pl.rank)  # planned on members only

    def run(it: Interpreter) -> None:
        it.env[result] = value

    return run


@prepares(hir.TeamRankOp)
def _team_rank(pl: Planner, op: hir.TeamRankOp) -> Run:
    result, position, team = pl.slot(op.result), pl.slot(op.position), pl.team(op)
    size = len(team)

    def run(it: Interpreter) -> None:
        env = it.env
        env[result] = team[team_position(op, env[position], size, "team")]

    return run


@prepares(hir.DivOp)
def _div(pl: Planner, op: hir.DivOp) -> Run:
    result, lhs, divisor = pl.slot(op.result), pl.slot(op.lhs), op.divisor

    def run(it: Interpreter) -> None:
        env = it.env
        env[result] = int(env[lhs]) // divisor

    return run


@prepares(hir.AddModOp)
def _add_mod(pl: Planner, op: hir.AddModOp) -> Run:
    result, lhs, rhs, modulus = pl.slot(op.result), pl.slot(op.lhs), pl.slot(op.rhs), op.modulus

    def run(it: Interpreter) -> None:
        env = it.env
        env[result] = (int(env[lhs]) + int(env[rhs])) % modulus

    return run


# ---- streams and events -----------------------------------------------------


@prepares(hir.GetCurrentStreamOp)
def _get_stream(pl: Planner, op: hir.GetCurrentStreamOp) -> Run:
    stream, b = pl.slot(op.stream), pl.backend

    def run(it: Interpreter) -> None:
        it.env[stream] = b.get_current_stream()

    return run


@prepares(hir.SetCurrentStreamOp)
def _set_stream(pl: Planner, op: hir.SetCurrentStreamOp) -> Run:
    stream, b = pl.slot(op.stream), pl.backend

    def run(it: Interpreter) -> None:
        b.set_current_stream(it.env[stream])

    return run


@prepares(hir.StreamForOp)
def _stream_for(pl: Planner, op: hir.StreamForOp) -> Run:
    stream, index, count, b = pl.slot(op.stream), pl.slot(op.index), op.count, pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        env[stream] = b.stream_for(int(env[index]), count)

    return run


@prepares(hir.SyncStreamOp)
def _sync_stream(pl: Planner, op: hir.SyncStreamOp) -> Run:
    """Record an event on %s, then the current stream waits for it."""
    stream, b = pl.slot(op.stream), pl.backend

    def run(it: Interpreter) -> None:
        current = b.get_current_stream()
        b.set_current_stream(it.env[stream])
        event = b.record_event()
        b.set_current_stream(current)
        b.wait_event(event)

    return run


@prepares(hir.RecordEventOp)
def _record_event(pl: Planner, op: hir.RecordEventOp) -> Run:
    event, b = pl.slot(op.event), pl.backend

    def run(it: Interpreter) -> None:
        it.env[event] = b.record_event()

    return run


@prepares(hir.WaitEventOp)
def _wait_event(pl: Planner, op: hir.WaitEventOp) -> Run:
    event, b = pl.slot(op.event), pl.backend

    def run(it: Interpreter) -> None:
        b.wait_event(it.env[event])

    return run


# ---- communication -----------------------------------------------------------


@prepares(hir.AllgatherOp)
def _allgather(pl: Planner, op: hir.AllgatherOp) -> Run:
    token, inp, out, team, b = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        env[token] = b.allgather(env[inp], env[out], team)

    return run


@prepares(hir.BroadcastOp)
def _broadcast(pl: Planner, op: hir.BroadcastOp) -> Run:
    token, buf, root, team, b = pl.slot(op.token), pl.slot(op.buffer), pl.slot(op.root), pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        r = team_position(op, env[root], len(team), "root")
        env[token] = b.broadcast(env[buf], r, team)

    return run


@prepares(hir.ScatterOp)
def _scatter(pl: Planner, op: hir.ScatterOp) -> Run:
    token, inp, out, root = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.slot(op.root)
    team, b = pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        r = team_position(op, env[root], len(team), "root")
        env[token] = b.scatter(env[inp], env[out], r, team)

    return run


@prepares(hir.GatherOp)
def _gather(pl: Planner, op: hir.GatherOp) -> Run:
    token, inp, out, root = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.slot(op.root)
    team, b = pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        r = team_position(op, env[root], len(team), "root")
        env[token] = b.gather(env[inp], env[out], r, team)

    return run


@prepares(hir.ReduceOp)
def _reduce(pl: Planner, op: hir.ReduceOp) -> Run:
    token, inp, out, root = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.slot(op.root)
    team, b, red = pl.team(op), pl.backend, reduce_op_name(op.reduction_op)

    def run(it: Interpreter) -> None:
        env = it.env
        r = team_position(op, env[root], len(team), "root")
        env[token] = b.reduce(env[inp], env[out], r, red, team)

    return run


@prepares(hir.AllreduceOp)
def _allreduce(pl: Planner, op: hir.AllreduceOp) -> Run:
    token, inp, out = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output)
    team, b, red = pl.team(op), pl.backend, reduce_op_name(op.reduction_op)

    def run(it: Interpreter) -> None:
        env = it.env
        env[token] = b.allreduce(env[inp], env[out], red, team)

    return run


@prepares(hir.ReduceScatterOp)
def _reduce_scatter(pl: Planner, op: hir.ReduceScatterOp) -> Run:
    token, inp, out = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output)
    team, b, red = pl.team(op), pl.backend, reduce_op_name(op.reduction_op)

    def run(it: Interpreter) -> None:
        env = it.env
        env[token] = b.reduce_scatter(env[inp], env[out], red, team)

    return run


@prepares(hir.AlltoallOp)
def _alltoall(pl: Planner, op: hir.AlltoallOp) -> Run:
    token, inp, out, team, b = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        env[token] = b.alltoall(env[inp], env[out], team)

    return run


@prepares(hir.AlltoallvOp)
def _alltoallv(pl: Planner, op: hir.AlltoallvOp) -> Run:
    token, inp, out, team, b = pl.slot(op.token), pl.slot(op.input), pl.slot(op.output), pl.team(op), pl.backend
    send, recv = pl.slot(op.send_counts), pl.slot(op.recv_counts)

    def run(it: Interpreter) -> None:
        env = it.env
        try:
            env[token] = b.alltoallv(env[inp], env[send], env[out], env[recv], team)
        except Diagnostic as e:  # counts that do not fit: said at the op
            raise (error_at(op, e.message) if e.loc is None else e) from None
        if it.tracer is not None:  # the rows it received: `fuserc run --trace` gives the imbalance
            it.tracer.received(op, env[recv])

    return run


@prepares(hir.SendOp)
def _send(pl: Planner, op: hir.SendOp) -> Run:
    token, buf, peer, team, b = pl.slot(op.token), pl.slot(op.buffer), pl.slot(op.peer), pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        p = team_position(op, env[peer], len(team), "peer")
        env[token] = b.send(env[buf], p, team)

    return run


@prepares(hir.RecvOp)
def _recv(pl: Planner, op: hir.RecvOp) -> Run:
    token, buf, peer, team, b = pl.slot(op.token), pl.slot(op.buffer), pl.slot(op.peer), pl.team(op), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        p = team_position(op, env[peer], len(team), "peer")
        env[token] = b.recv(env[buf], p, team)

    return run


@prepares(hir.BarrierOp)
def _barrier(pl: Planner, op: hir.BarrierOp) -> Run:
    token, team, word = pl.slot(op.token), pl.team(op), op.backend

    def run(it: Interpreter) -> None:
        it.env[token] = it.backend.team_barrier(team, word)

    return run


@prepares(hir.WaitOp)
def _wait(pl: Planner, op: hir.WaitOp) -> Run:
    token, b = pl.slot(op.token), pl.backend

    def run(it: Interpreter) -> None:
        work = it.env[token]
        if work is not None:
            b.wait(work)

    return run


# ---- views -----------------------------------------------------------------------


@prepares(hir.SelectOp)
def _select(pl: Planner, op: hir.SelectOp) -> Run:
    result, source, index, dim, b = pl.slot(op.result), pl.slot(op.source), pl.slot(op.index), op.dim, pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        env[result] = b.select(env[source], dim, int(env[index]))

    return run


@prepares(hir.ChunkOp)
def _chunk(pl: Planner, op: hir.ChunkOp) -> Run:
    result, source, index = pl.slot(op.result), pl.slot(op.source), pl.slot(op.index)
    dim, chunks, b = op.dim, op.chunks, pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        i = int(env[index])
        if not 0 <= i < chunks:
            raise error_at(op, f"chunk index {i} is out of range for chunks = {chunks}")
        env[result] = b.chunk(env[source], dim, i, chunks)

    return run


@prepares(hir.ViewOp)
def _view(pl: Planner, op: hir.ViewOp) -> Run:
    result, source, shape, b = pl.slot(op.result), pl.slot(op.source), buffer_shape(op.result), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        env[result] = b.reshape_view(env[source], shape)

    return run


@prepares(hir.TransposeOp)
def _transpose(pl: Planner, op: hir.TransposeOp) -> Run:
    result, source, b = pl.slot(op.result), pl.slot(op.source), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        env[result] = b.transpose(env[source])

    return run


# ---- compute -----------------------------------------------------------------------


@prepares(hir.MatmulOp)
def _matmul(pl: Planner, op: hir.MatmulOp) -> Run:
    lhs, rhs, out, b = pl.slot(op.lhs), pl.slot(op.rhs), pl.slot(op.out), pl.backend
    flops = matmul_flops(buffer_shape(op.lhs), buffer_shape(op.out))  # buffers have their types' shapes
    if op.acc is not None:
        acc = pl.slot(op.acc)

        def run_acc(it: Interpreter) -> None:
            env = it.env
            b.matmul(env[lhs], env[rhs], env[out], env[acc])
            it.flops += flops

        return run_acc

    def run(it: Interpreter) -> None:
        env = it.env
        b.matmul(env[lhs], env[rhs], env[out])
        it.flops += flops

    return run


@prepares(hir.LinearOp)
def _linear(pl: Planner, op: hir.LinearOp) -> Run:
    x, weight, out, b = pl.slot(op.input), pl.slot(op.weight), pl.slot(op.out), pl.backend
    bias = pl.slot(op.bias) if op.bias is not None else None
    flops = matmul_flops(buffer_shape(op.input), buffer_shape(op.out))
    if op.acc is not None:
        acc = pl.slot(op.acc)

        def run_acc(it: Interpreter) -> None:
            env = it.env
            b.linear(env[x], env[weight], env[bias] if bias is not None else None, env[out], env[acc])
            it.flops += flops

        return run_acc

    activation = op.activation_name

    def run(it: Interpreter) -> None:
        env = it.env
        b.linear(env[x], env[weight], env[bias] if bias is not None else None, env[out], activation=activation)
        it.flops += flops

    return run


@prepares(hir.CopyOp)
def _copy(pl: Planner, op: hir.CopyOp) -> Run:
    source, dest, b = pl.slot(op.source), pl.slot(op.dest), pl.backend

    def run(it: Interpreter) -> None:
        env = it.env
        b.copy(env[source], env[dest])

    return run


@prepares(hir.LaunchOp)
def _launch(pl: Planner, op: hir.LaunchOp) -> Run:
    """The backend runs the region into its output buffers; where it makes
    the results itself (`Backend.launch_made`), each result in memory of
    its own stands for its buffer where the buffer may be replaced (not
    taken yet: `stand_ins.Later`), and is copied into it elsewhere."""
    body, ins, outs, b, program = op.body.block, pl.slots(op.ins), pl.slots(op.outs), pl.backend, pl.program
    meshes = module_meshes(program.module)
    contexts = {o: c for o in body.ops if (c := block_context(o, pl.rank, meshes.get)) is not None}
    replaceable = stand_ins.replaceable(op) if b.makes_results(body) else ()

    def run(it: Interpreter) -> None:
        env = it.env
        b.launch(body, [env[s] for s in ins], [env[s] for s in outs], contexts)

    if not any(replaceable):
        return run

    def run_made(it: Interpreter) -> None:
        env = it.env
        ins_now = [env[s] for s in ins]
        given = [env[s] for s in outs]
        later = [t for t in given if isinstance(t, stand_ins.Later)]
        callers = bool(later) and all(program.for_caller(t.site) for t in later)
        made = b.launch_made(body, ins_now, contexts, callers)
        if made is None:
            given = [program.take(t) for t in given]
            for s, t in zip(outs, given, strict=True):
                env[s] = t
            b.launch(body, ins_now, given, contexts)
            return
        taken = {t.untyped_storage().data_ptr() for t in ins_now if t is not None}
        for s, value, out in zip(outs, made, given, strict=True):
            if isinstance(out, stand_ins.Later) and stand_ins.own_memory(value, out.spec(value.device), taken):
                taken.add(value.untyped_storage().data_ptr())
                program.made_for(out, value)
                env[s] = value
            else:
                env[s] = out = program.take(out)
                b.copy(value, out)

    return run_made


# ---- peer-to-peer ------------------------------------------------------------------


@prepares(hir.ShareOp)
def _share(pl: Planner, op: hir.ShareOp) -> Run:
    """Once per cached allocation (and view of it): the handle is kept with
    the cache entry. A buffer from outside the cache is shared for this run
    only."""
    handle_slot, buffer, team, b, program = pl.slot(op.handle), pl.slot(op.buffer), pl.team(op), pl.backend, pl.program

    def run(it: Interpreter) -> None:
        buf = it.env[buffer]
        entry = program.entry_of(buf)
        if entry is None:
            handle = b.share(buf, team)
            it.temp_handles.append(handle)
        else:
            key: Hashable = ("share", team, b.view_key(buf))
            handle = entry.registrations.get(key)
            if handle is None:
                handle = entry.registrations[key] = b.share(buf, team)
        it.env[handle_slot] = handle

    return run


def _block_index(op: Operation, value: Any, chunks: int) -> int:
    """The block index of `block %i of N`, checked against N."""
    index = int(value)
    if not 0 <= index < chunks:
        raise error_at(op, f"'{op.name}': block index {index} is out of range for {chunks} blocks")
    return index


@prepares(hir.PutOp)
def _put(pl: Planner, op: hir.PutOp) -> Run:
    token, source, handle, peer = pl.slot(op.token), pl.slot(op.source), pl.slot(op.handle), pl.slot(op.peer)
    chunks, b = op.chunks, pl.backend
    if op.block is None or chunks is None:

        def run(it: Interpreter) -> None:
            env = it.env
            h = env[handle]
            p = team_position(op, env[peer], len(h.team), "peer")
            env[token] = b.put(env[source], h, p)

        return run
    block = pl.slot(op.block)

    def run_block(it: Interpreter) -> None:
        env = it.env
        h = env[handle]
        p = team_position(op, env[peer], len(h.team), "peer")
        i = _block_index(op, env[block], chunks)
        env[token] = b.put_block(env[source], h, p, i, chunks)

    return run_block


@prepares(hir.GetOp)
def _get(pl: Planner, op: hir.GetOp) -> Run:
    token, handle, peer, dest = pl.slot(op.token), pl.slot(op.handle), pl.slot(op.peer), pl.slot(op.dest)
    chunks, b = op.chunks, pl.backend
    if op.block is None or chunks is None:

        def run(it: Interpreter) -> None:
            env = it.env
            h = env[handle]
            p = team_position(op, env[peer], len(h.team), "peer")
            env[token] = b.get(h, p, env[dest])

        return run
    block = pl.slot(op.block)

    def run_block(it: Interpreter) -> None:
        env = it.env
        h = env[handle]
        p = team_position(op, env[peer], len(h.team), "peer")
        i = _block_index(op, env[block], chunks)
        env[token] = b.get_block(h, p, env[dest], i, chunks)

    return run_block

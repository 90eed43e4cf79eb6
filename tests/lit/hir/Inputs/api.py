"""Exercise the hir dialect's Python API (builders, properties, host-program
helpers) as the evaluator and the lowering use it; prints what it finds."""

import sys

from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

from fuserc import ir
from fuserc.dialects import fusion, hir
from fuserc.sharding import Sharding


def inspect(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        module = ir.parse(f.read(), path)
    for func in module.ops:
        if not isinstance(func, FuncOp):
            continue
        print(f"func {func.sym_name.data} host={hir.is_host_program(func)}")
        for i in range(len(func.args)):
            print(f"  arg {i} global {hir.global_type(func, i)}")
        print(f"  result 0 global {hir.global_type(func, 0, result=True)}")
        print(f"  arg 9 global {hir.global_type(func, 9)}")
        for op in func.walk():
            if isinstance(op, hir.COMMUNICATION_OPS):
                extra = f" op={op.reduction_op}" if isinstance(op, (hir.AllreduceOp, hir.ReduceOp, hir.ReduceScatterOp)) else ""
                print(f"  {op.name} team={op.team} backend={op.backend}{extra}")
            elif isinstance(op, hir.ForOp):
                print(f"  {op.name} lb={op.lb} ub={op.ub} step={op.step} indices={list(op.indices)}")
            elif isinstance(op, hir.IfRankOp):
                print(f"  {op.name} ranks={op.ranks} runs={op.ranks.runs} results={len(op.results)}")
            elif isinstance(op, hir.ChunkOp):
                print(f"  {op.name} dim={op.dim} chunks={op.chunks}")
            elif isinstance(op, hir.AllocOp):
                print(f"  {op.name} site={op.site}")
            elif isinstance(op, (hir.AddModOp, hir.StreamForOp)):
                n = op.modulus if isinstance(op, hir.AddModOp) else op.count
                print(f"  {op.name} n={n}")
            elif isinstance(op, (hir.PutOp, hir.ShareOp)):
                print(f"  {op.name} " + (f"backend={op.backend}" if isinstance(op, hir.PutOp) else f"team={op.team}"))


def build() -> None:
    local = TensorType(f32, [16, 16])
    full = TensorType(f32, [64, 16])
    func = FuncOp("built", ([local], [full]))
    hir.mark_host_program(func)
    hir.set_global_type(func, 0, fusion.with_sharding(full, Sharding.from_axes("tp", ["DIDx", "-"])))
    hir.set_global_type(func, 0, fusion.with_sharding(full, Sharding.from_axes("tp", ["-", "-"])), result=True)
    x = func.body.block.args[0]
    ops = []
    g = hir.AllocOp("built/0/g", full)
    t = hir.AllgatherOp(x, g, [0, 1, 2, 3], "nccl")
    ops += [g, t, hir.WaitOp(t)]
    loop = hir.ForOp(0, 4)
    body = loop.body.block
    s = hir.StreamForOp(loop.induction_var, 2)
    c = hir.ChunkOp(g, loop.induction_var, 0, 4)
    r = hir.AllreduceOp(c, c, [0, 1, 2, 3], "sum", "mpi")
    body.insert_ops_before([s, hir.SetCurrentStreamOp(s), c, r, hir.WaitOp(r)], body.last_op)
    ops.append(loop)
    arg_block = Block(arg_types=[full])
    relu = fusion.ReluOp.build(operands=[arg_block.args[0]], result_types=[full])
    arg_block.add_ops([relu, hir.YieldOp(relu)])
    ops.append(hir.LaunchOp([g], [g], Region(arg_block)))
    cond = hir.IfRankOp([0], [full])
    y = hir.AllocOp("built/1/y", full)
    cond.body.block.add_ops([y, hir.YieldOp(y)])
    ops += [cond, hir.IfRankOp([1, 2]), hir.DeallocOp(cond.results[0])]
    v = hir.ViewOp(g, [4, 16, 16])
    three = hir.ConstantOp(3)
    sel = hir.SelectOp(v, three, 0)
    ops += [v, three, sel, ReturnOp(g)]
    func.body.block.add_ops(ops)
    mesh = fusion.MeshOp.build(properties={"sym_name": StringAttr("tp"), "shape": hir.int_array([4])})
    module = ModuleOp([mesh, func])
    ir.verify(module)
    print(ir.to_text(module), end="")
    print(f"select shape {sel.result.type} view shape {v.result.type}")
    print(f"host={hir.is_host_program(func)} global arg 0 {hir.global_type(func, 0)}")


if __name__ == "__main__":
    inspect(sys.argv[1])
    build()

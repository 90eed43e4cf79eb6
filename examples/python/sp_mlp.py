"""A sequence-parallel MLP built, sharded and run from Python, on as many
devices as the job has ranks (1, 2, 4, 8 or 16).

    mpiexec -n 4 python examples/python/sp_mlp.py
    torchrun --nproc-per-node 2 examples/python/sp_mlp.py
"""

import torch
import torch.nn.functional as F

from fuserc.api import FusionDefinition, job_size

fd = FusionDefinition()
x = fd.define_tensor([64, 16], "f32")
w1 = fd.define_tensor([16, 32], "f32")
w2 = fd.define_tensor([32, 16], "f32")
h = fd.ops.gelu(fd.ops.matmul(x, w1))
y = fd.ops.matmul(h, w2)
fd.add_output(y)

# Schedule: the job's devices; sequence split on x and y, tensor parallel weights.
fd.sched.mesh("tp", [job_size()])
fd.sched.shard(x, "tp", ["DIDx", "-"])
fd.sched.shard(w1, "tp", ["-", "DIDx"])
fd.sched.shard(w2, "tp", ["DIDx", "-"])
fd.sched.shard(y, "tp", ["DIDx", "-"])

program = fd.compile(backend="auto")  # compile once
torch.manual_seed(0)  # the same global inputs on every rank
xs, w1s, w2s = torch.randn(64, 16), torch.randn(16, 32), torch.randn(32, 16)
for _ in range(3):  # run many times; buffers come from the allocation cache
    (out,) = program.execute([xs, w1s, w2s])
want = F.gelu(xs @ w1s) @ w2s
err = (out - want).abs().max().item()
if program.env.rank == 0:
    print(fd.to_mlir())
    print(f"max abs error {err:.2e}")
assert err < 1e-4

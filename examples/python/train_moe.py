"""Train a small mixture-of-experts GPT, one fuserc program, with torch.optim.AdamW.

    torchrun --nproc-per-node 4 examples/python/train_moe.py
    mpiexec -n 2 python examples/python/train_moe.py
    python examples/python/train_moe.py --device cuda --plot loss.png

The model: a token and a learned position embedding, `--layers` blocks of
causal attention and a dropless MoE layer (examples/python/moe_layer.py:
a softmax router, top `--top` of `--experts` SwiGLU experts, a shared
expert), pre-norm (rms_norm) with residuals, a final rms_norm, an LM head
and cross_entropy plus `--aux` times the routers' load-balancing losses.
The tokens are split over the ranks between the blocks and in the MoE
layers, whose experts' weights are split over them too (`[DIDx, -, -]`).
The same model is trained in plain PyTorch (one process, a loop over
experts, the same initial weights and data); each step prints both losses
and the run fails if the curves differ by more than `--tolerance`
(relative). The data: sequences of examples/python/train_gpt.py's Markov
chain.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuserc.torch  # noqa: E402
from fuserc.api import FusionDefinition, Mesh, shard_tensor  # noqa: E402
from moe_layer import layer, loop  # noqa: E402
from train_gpt import Data, train_against_pytorch, usage_error  # noqa: E402

EPS = 1e-6


def shapes(a: argparse.Namespace) -> list[tuple[list[int], list[str]]]:
    """(global shape, sharding) of every parameter, in argument order."""
    h, f, e, v, t = a.hidden, a.ffn, a.experts, a.vocab, a.tokens
    block = [
        ([h], ["-"]), *[([h, h], ["-", "-"])] * 4,  # norm, q, k, v, output projection
        ([h], ["-"]), ([e, h], ["-", "-"]),  # norm, router
        ([e, f, h], ["DIDx", "-", "-"]), ([e, f, h], ["DIDx", "-", "-"]), ([e, h, f], ["DIDx", "-", "-"]),  # experts
        ([f, h], ["-", "-"]), ([f, h], ["-", "-"]), ([h, f], ["-", "-"]),  # shared expert
    ]  # fmt: skip
    return [([v, h], ["-", "-"]), ([t, h], ["DIDx", "-"]), *block * a.layers, ([h], ["-"]), ([v, h], ["-", "-"])]


PER_BLOCK = 13


def build(a: argparse.Namespace, devices: int) -> tuple[FusionDefinition, Mesh]:
    """ids, labels, then the parameters -> the loss."""
    fd = FusionDefinition()
    mesh = fd.sched.mesh("ep", [devices])
    ops, t, hd = fd.ops, a.tokens, a.hidden // a.heads
    ids = fd.define_tensor([t], "i64")
    labels = fd.define_tensor([t], "i64")
    params = []
    for shape, sharding in shapes(a):
        p = fd.define_tensor(shape)
        fd.sched.shard(p, "ep", sharding)
        params.append(p)
    emb, pos, *rest = params
    x = ops.embedding(ids, emb) + pos
    fd.sched.shard(x, "ep", ["DIDx", "-"])

    def heads_of(u):  # [T, H] -> [1, heads, T, hd]
        return ops.permute(ops.reshape(u, shape=[1, t, a.heads, hd]), dims=[0, 2, 1, 3])

    aux = None
    for i in range(a.layers):
        n1, wq, wk, wv, wo, n2, wr, w1, w3, w2, s1, s3, s2 = rest[PER_BLOCK * i : PER_BLOCK * (i + 1)]
        n = ops.rms_norm(x, n1, dims=1, eps=EPS)
        q, k, v = (heads_of(ops.linear(n, w)) for w in (wq, wk, wv))
        o = ops.reshape(ops.permute(ops.sdpa(q, k, v, causal=True), dims=[0, 2, 1, 3]), shape=[t, a.hidden])
        x = x + ops.linear(o, wo)
        y, lb = layer(fd, ops.rms_norm(x, n2, dims=1, eps=EPS), wr, w1, w3, w2, (s1, s3, s2), a.top)
        fd.sched.shard(y, "ep", ["DIDx", "-"])
        x = x + y
        fd.sched.shard(x, "ep", ["DIDx", "-"])
        aux = lb if aux is None else aux + lb
    nf, head = rest[PER_BLOCK * a.layers :]
    logits = ops.linear(ops.rms_norm(x, nf, dims=1, eps=EPS), head)
    fd.add_output(ops.cross_entropy(logits, labels) + aux * a.aux)
    return fd, mesh


def reference_loss(ids: torch.Tensor, labels: torch.Tensor, params: list[torch.Tensor], a: argparse.Namespace) -> torch.Tensor:
    """The same model in plain PyTorch, on the global tensors."""
    emb, pos, *rest = params
    t, hd = a.tokens, a.hidden // a.heads
    x = F.embedding(ids, emb) + pos
    aux = torch.zeros((), device=x.device)
    for i in range(a.layers):
        n1, wq, wk, wv, wo, n2, wr, w1, w3, w2, s1, s3, s2 = rest[PER_BLOCK * i : PER_BLOCK * (i + 1)]
        n = F.rms_norm(x, (a.hidden,), n1, EPS)
        q, k, v = ((n @ w.t()).reshape(1, t, a.heads, hd).transpose(1, 2) for w in (wq, wk, wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(t, a.hidden)
        x = x + o @ wo.t()
        y, lb = loop(F.rms_norm(x, (a.hidden,), n2, EPS), wr, w1, w3, w2, (s1, s3, s2), a.top)
        x = x + y
        aux = aux + lb
    nf, head = rest[PER_BLOCK * a.layers :]
    return F.cross_entropy(F.rms_norm(x, (a.hidden,), nf, EPS) @ head.t(), labels) + aux * a.aux


def initial_weights(a: argparse.Namespace) -> list[torch.Tensor]:
    """Normal weights (std 0.02), norm scales at one, from a seed."""
    g = torch.Generator().manual_seed(a.seed)
    return [torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) * 0.02 for s, _ in shapes(a)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=64)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top", type=int, default=2)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--aux", type=float, default=0.01, help="weight of the load-balancing losses")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--tolerance", type=float, default=1e-3, help="largest relative difference of the loss curves")
    p.add_argument("--plot", metavar="FILE.png", help="save both loss curves as a PNG (rank 0)")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        usage_error(p, f"--device cuda: this torch ({torch.__version__}) has no CUDA device to use")
    if a.plot and importlib.util.find_spec("matplotlib") is None:
        usage_error(p, "--plot needs matplotlib (pip install matplotlib)")

    from fuserc.runtime.job.mpi_env import mpi_env

    env = mpi_env()
    rank, devices = env.rank, env.size
    if a.tokens % devices or a.experts % devices:
        usage_error(p, f"--tokens {a.tokens} and --experts {a.experts} must divide by the {devices} ranks")
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 GEMMs as the reference does them
    fd, mesh = build(a, devices)
    loss_fn = fuserc.torch.function(fd)
    init = initial_weights(a)
    device = fuserc.torch.device(a.device)
    local = [torch.nn.Parameter(shard_tensor(w, s, mesh, rank).to(device).contiguous()) for w, (_, s) in zip(init, shapes(a))]
    glob = [torch.nn.Parameter(w.clone().to(device)) for w in init]
    train_against_pytorch(a, loss_fn, local, glob, reference_loss, Data(a), env, device)


if __name__ == "__main__":
    main()

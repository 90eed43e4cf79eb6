"""A GPT layer (sequence + tensor parallel) built from Python, checked against PyTorch.

    mpiexec -n 4 python examples/python/gpt_layer.py            # any number of ranks dividing the heads
    python examples/python/gpt_layer.py --tokens 128 --hidden 128 --heads 8

The same layer as examples/gpt_layer.mlir: h = x + attn(layer_norm(x)),
y = h + mlp(layer_norm(h)). Only the shardings that matter are written
(tokens of x and y, the weights); the rest is propagated.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from fuserc.api import FusionDefinition, Tensor


def build(tokens: int, hidden: int, heads: int, ffn: int, devices: int, dtype: str = "f32") -> FusionDefinition:
    fd = FusionDefinition()
    hd = hidden // heads
    sched = fd.sched
    sched.mesh("tp", [devices])

    def arg(shape: list[int], sharding: list[str]) -> Tensor:
        t = fd.define_tensor(shape, dtype)
        sched.shard(t, "tp", sharding)
        return t

    x = arg([tokens, hidden], ["DIDx", "-"])
    ln1_w, ln1_b = arg([hidden], ["-"]), arg([hidden], ["-"])
    wq, bq = arg([hidden, hidden], ["DIDx", "-"]), arg([hidden], ["DIDx"])
    wk, bk = arg([hidden, hidden], ["DIDx", "-"]), arg([hidden], ["DIDx"])
    wv, bv = arg([hidden, hidden], ["DIDx", "-"]), arg([hidden], ["DIDx"])
    wo, bo = arg([hidden, hidden], ["-", "DIDx"]), arg([hidden], ["-"])
    ln2_w, ln2_b = arg([hidden], ["-"]), arg([hidden], ["-"])
    w1, b1 = arg([ffn, hidden], ["DIDx", "-"]), arg([ffn], ["DIDx"])
    w2, b2 = arg([hidden, ffn], ["-", "DIDx"]), arg([hidden], ["-"])

    ops = fd.ops
    a = ops.layer_norm(x, ln1_w, ln1_b, dims=1, eps=1e-5)

    def heads_of(t: Tensor) -> Tensor:  # [T, H] -> [1, heads, T, hd]
        return ops.permute(ops.reshape(t, shape=[1, tokens, heads, hd]), dims=[0, 2, 1, 3])

    q, k, v = (heads_of(ops.linear(a, w, b)) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    o = ops.sdpa(q, k, v, causal=True)
    o = ops.reshape(ops.permute(o, dims=[0, 2, 1, 3]), shape=[tokens, hidden])
    h = x + ops.linear(o, wo, bo)
    c = ops.layer_norm(h, ln2_w, ln2_b, dims=1, eps=1e-5)
    y = h + ops.linear(ops.gelu(ops.linear(c, w1, b1)), w2, b2)
    sched.shard(h, "tp", ["DIDx", "-"])
    sched.shard(y, "tp", ["DIDx", "-"])
    fd.add_output(y)
    return fd


def reference(args: list[torch.Tensor], heads: int) -> torch.Tensor:
    """The layer in PyTorch, on the global tensors."""
    x, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2 = args
    t, hidden = x.shape

    def heads_of(u: torch.Tensor) -> torch.Tensor:
        return u.reshape(1, t, heads, hidden // heads).permute(0, 2, 1, 3)

    a = F.layer_norm(x, (hidden,), ln1_w, ln1_b, 1e-5)
    q, k, v = (heads_of(F.linear(a, w, b)) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(t, hidden)
    h = x + F.linear(o, wo, bo)
    c = F.layer_norm(h, (hidden,), ln2_w, ln2_b, 1e-5)
    return h + F.linear(F.gelu(F.linear(c, w1, b1)), w2, b2)


def inputs(tokens: int, hidden: int, ffn: int, seed: int = 0) -> list[torch.Tensor]:
    """Global inputs, the same on every rank: weights initialized as nn.Linear does."""
    g = torch.Generator().manual_seed(seed)

    def u(*shape: int, fan_in: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) / fan_in**0.5

    ones = lambda: 1 + 0.1 * torch.randn(hidden, generator=g, dtype=torch.float64)  # noqa: E731
    zeros = lambda: 0.1 * torch.randn(hidden, generator=g, dtype=torch.float64)  # noqa: E731
    x = torch.randn(tokens, hidden, generator=g, dtype=torch.float64)
    proj = [u(hidden, hidden, fan_in=hidden), u(hidden, fan_in=hidden)]
    return [
        x, ones(), zeros(), *proj, u(hidden, hidden, fan_in=hidden), u(hidden, fan_in=hidden),
        u(hidden, hidden, fan_in=hidden), u(hidden, fan_in=hidden), u(hidden, hidden, fan_in=hidden),
        u(hidden, fan_in=hidden), ones(), zeros(), u(ffn, hidden, fan_in=hidden), u(ffn, fan_in=hidden),
        u(hidden, ffn, fan_in=ffn), u(hidden, fan_in=ffn),
    ]  # fmt: skip


# -- the same layer as a torch nn.Module -----------------------------------------
WEIGHTS = (
    "ln1.weight", "ln1.bias", "attn.wq.weight", "attn.wq.bias", "attn.wk.weight", "attn.wk.bias",
    "attn.wv.weight", "attn.wv.bias", "attn.wo.weight", "attn.wo.bias", "ln2.weight", "ln2.bias",
    "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
)  # fmt: skip
"""Block's parameters in the order of build's inputs after x."""


class Attention(nn.Module):
    """q, k, v with `hidden // parts` columns (one rank's heads), causal sdpa, projection."""

    def __init__(self, hidden: int, head_dim: int, parts: int, **kw: Any):
        super().__init__()
        local = hidden // parts
        self.head_dim = head_dim
        self.wq, self.wk, self.wv = (nn.Linear(hidden, local, **kw) for _ in range(3))
        self.wo = nn.Linear(local, hidden, **kw)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        t = a.shape[0]

        def heads(u: torch.Tensor) -> torch.Tensor:  # [T, heads*hd] -> [1, heads, T, hd]
            return u.reshape(1, t, -1, self.head_dim).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(self.wq(a)), heads(self.wk(a)), heads(self.wv(a)), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(t, -1))


class Mlp(nn.Module):
    def __init__(self, hidden: int, ffn: int, parts: int, **kw: Any):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, ffn // parts, **kw), nn.Linear(ffn // parts, hidden, **kw)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(c)))


class Block(nn.Module):
    """The layer on x [tokens, hidden] as `reference` computes it, for
    PyTorch's own parallelisms (DTensor); `parts` > 1 gives the shapes of
    one of `parts` ranks' shards (heads and MLP columns split)."""

    def __init__(self, hidden: int, head_dim: int, ffn: int, parts: int = 1, **kw: Any):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden, eps=1e-5, **kw)
        self.attn = Attention(hidden, head_dim, parts, **kw)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-5, **kw)
        self.mlp = Mlp(hidden, ffn, parts, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.ln1(x))
        return h + self.mlp(self.ln2(h))


def block(weights: Sequence[torch.Tensor], head_dim: int, parts: int = 1, device: torch.device | str = "cpu") -> Block:
    """A Block whose parameters are copies of `weights` (WEIGHTS order: build's inputs after x)."""
    hidden, ffn = weights[0].shape[0], weights[12].shape[0] * parts
    with torch.device("meta"):
        m = Block(hidden, head_dim, ffn, parts, dtype=weights[0].dtype)
    m = m.to_empty(device=device)
    params = dict(m.named_parameters())
    with torch.no_grad():
        for name, w in zip(WEIGHTS, weights, strict=True):
            params[name].copy_(w)
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--print-ir", action="store_true")
    args = parser.parse_args()

    from fuserc.runtime.job.mpi_env import mpi_env

    devices = mpi_env().size
    fd = build(args.tokens, args.hidden, args.heads, args.ffn, devices, args.dtype)
    program = fd.compile(backend=args.backend)
    glob = inputs(args.tokens, args.hidden, args.ffn)
    torch_dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    (y,) = program.execute([t.to(torch_dtype) for t in glob])
    want = reference([t.to(torch_dtype).double() for t in glob], args.heads)
    err = ((torch.as_tensor(y).double() - want).abs().max() / want.abs().max()).item()
    tol = 1e-5 if args.dtype == "f32" else 3e-2
    if program.env.rank == 0:
        if args.print_ir:
            print(fd.to_mlir())
        status = "ok" if err <= tol else "FAILED"
        print(f"GPT layer on {devices} rank(s), {args.dtype}: max rel error vs PyTorch {err:.2e} (tolerance {tol:g}): {status}")
    if err > tol:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""The model of train_gpt.py as a fuserc program, without torch.

    python examples/python/gpt_model.py --layers 12 --devices 4 > model.mlir
    fuserc opt model.mlir -p autodiff,default --comm-report --comm-report-unit 8192x4096xbf16

A vocabulary-parallel embedding (the table split over its rows), a learned
position embedding, `layers` GPT layers (sequence parallel between them,
tensor parallel inside: the layers of examples/gpt_layer.py), a final
layer_norm, a vocabulary-parallel LM head and cross_entropy (the logits stay
split over the vocabulary). Run as a script, it prints the program's MLIR
(defaults: the shapes of a GPT at hidden 4096, bf16).
"""

from __future__ import annotations

import argparse

from fuserc.api import FusionDefinition, Mesh, Tensor

LAYER_SHARDINGS = [
    ["-"], ["-"],  # ln1 weight, bias
    ["DIDx", "-"], ["DIDx"], ["DIDx", "-"], ["DIDx"], ["DIDx", "-"], ["DIDx"],  # q, k, v: heads split
    ["-", "DIDx"], ["-"],  # output projection: row parallel
    ["-"], ["-"],  # ln2
    ["DIDx", "-"], ["DIDx"], ["-", "DIDx"], ["-"],  # MLP: column then row parallel
]  # fmt: skip


def shapes(a: argparse.Namespace) -> list[tuple[list[int], list[str]]]:
    """(global shape, sharding) of every parameter, in argument order."""
    h, f, v, t = a.hidden, a.ffn, a.vocab, a.tokens
    layer = [[h], [h], [h, h], [h], [h, h], [h], [h, h], [h], [h, h], [h], [h], [h], [f, h], [f], [h, f], [h]]
    out = [([v, h], ["DIDx", "-"]), ([t, h], ["DIDx", "-"])]  # token and position embeddings
    for _ in range(a.layers):
        out += list(zip(layer, LAYER_SHARDINGS))
    out += [([h], ["-"]), ([h], ["-"]), ([v, h], ["DIDx", "-"])]  # final layer_norm, LM head
    return out


def build(a: argparse.Namespace, devices: int) -> tuple[FusionDefinition, Mesh]:
    """ids, labels, (dropout seed,) then the parameters -> the mean loss."""
    fd = FusionDefinition()
    mesh = fd.sched.mesh("tp", [devices])
    ops, t, hd = fd.ops, a.tokens, a.hidden // a.heads
    ids = fd.define_tensor([t], "i64")
    labels = fd.define_tensor([t], "i64")
    seed = fd.define_tensor([], "i64") if a.dropout > 0 else None
    params = []
    for shape, sharding in shapes(a):
        p = fd.define_tensor(shape, a.dtype)
        fd.sched.shard(p, "tp", sharding)
        params.append(p)
    emb, pos, *rest = params
    x = ops.embedding(ids, emb) + pos
    fd.sched.shard(x, "tp", ["DIDx", "-"])  # sequence parallel between the layers

    def drop(u: Tensor) -> Tensor:
        return ops.dropout(u, seed, p=a.dropout) if seed is not None else u

    def heads_of(u: Tensor) -> Tensor:  # [T, H] -> [1, heads, T, hd]
        return ops.permute(ops.reshape(u, shape=[1, t, a.heads, hd]), dims=[0, 2, 1, 3])

    for i in range(a.layers):
        ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2 = rest[16 * i : 16 * i + 16]
        n = ops.layer_norm(x, ln1_w, ln1_b, dims=1, eps=1e-5)
        q, k, v = (heads_of(ops.linear(n, w, b)) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
        o = ops.reshape(ops.permute(ops.sdpa(q, k, v, causal=True), dims=[0, 2, 1, 3]), shape=[t, a.hidden])
        x = x + drop(ops.linear(o, wo, bo))
        fd.sched.shard(x, "tp", ["DIDx", "-"])
        c = ops.layer_norm(x, ln2_w, ln2_b, dims=1, eps=1e-5)
        x = x + drop(ops.linear(ops.gelu(ops.linear(c, w1, b1)), w2, b2))
        fd.sched.shard(x, "tp", ["DIDx", "-"])
    lnf_w, lnf_b, head = rest[16 * a.layers :]
    logits = ops.linear(ops.layer_norm(x, lnf_w, lnf_b, dims=1, eps=1e-5), head)
    fd.sched.shard(logits, "tp", ["-", "DIDx"])  # vocabulary parallel: never gathered
    fd.add_output(ops.cross_entropy(logits, labels))
    return fd, mesh


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--ffn", type=int, help="default: 4 x hidden")
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--dtype", default="bf16")
    a = p.parse_args(argv)
    a.ffn = a.ffn or 4 * a.hidden
    a.dropout = 0.0
    print(build(a, a.devices)[0].to_mlir())


if __name__ == "__main__":
    main()

"""A dropless mixture-of-experts layer built with the Python API, run with
`fuserc.torch.function` forward and backward, against the same layer in
plain PyTorch (a loop over experts, float64).

    python examples/python/moe_layer.py [--experts 8 --top 2 --shared]

`layer` writes the layer into a FusionDefinition at global shapes (the
router, top-k with normalized weights, dispatch by a stable sort of the
experts chosen, SwiGLU experts as grouped GEMMs over weights stacked
[E, F, H], the combine weighted by the routing weights, an optional shared
expert, the load-balancing loss); `loop` is the same layer in PyTorch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fuserc.api import FusionDefinition, Tensor


def layer(
    fd: FusionDefinition, x: Tensor, wr: Tensor, w1: Tensor, w3: Tensor, w2: Tensor,
    shared: Sequence[Tensor] = (), k: int = 2, router: str = "softmax", slots: bool = False, groups: int = 1,
) -> tuple[Tensor, Tensor]:
    """(output [T, H], load-balancing loss) of tokens `x` [T, H]: router
    weight `wr` [E, H], experts' `w1`, `w3` [E, F, H] and `w2` [E, H, F]
    (out = w2 (silu(w1 x) * w3 x)), `shared` (s1, s3, s2) a shared expert
    of the same form. `router`: "softmax" (Mixtral) or "sigmoid"
    (DeepSeek-V3) scores; the top k are normalized to sum to one. The
    router runs in f32 whatever x's type. The loss is E * sum_e f_e P_e,
    f_e the fraction of choices routed to e, P_e the mean score of e
    (scores normalized per token). `slots`: the tokens go to their
    experts by `dispatch` into [E, T, H] slots and come back by `combine`,
    the form expert parallelism takes (experts split over devices, the
    tokens over the same devices: all-to-alls); else by a sort of the
    pairs (rows [T k, H] grouped by expert, the leaner form on one device);
    the compiler cuts the slots' form into token chunks where the cost
    model says it pays (the pass chunk-experts), so that a chunk's
    all-to-all runs beside another chunk's grouped GEMMs. `groups` > 1 (with `slots`): the
    tokens in that many contiguous groups, each dispatched on its own
    (slots [E, G, T/G, H]): with the groups split over a data-parallel
    axis, each group's all-to-alls stay within its expert-parallel team."""
    if slots and groups > 1:
        return _grouped(fd, x, wr, w1, w3, w2, shared, k, router, groups)
    ops = fd.ops
    tokens, _ = x.shape
    experts = wr.shape[0]
    pairs = tokens * k
    f32 = lambda t: t if t.dtype == "f32" else ops.cast(t, "f32")  # noqa: E731
    logits = ops.linear(f32(x), f32(wr))
    scores = ops.softmax(logits, dim=1) if router == "softmax" else ops.sigmoid(logits)
    top, ids = ops.topk(scores, k=k, dim=1)
    weights = top / ops.sum(top, dims=[1], keepdim=True)
    flat = ops.reshape(ids, shape=[pairs])
    counts = ops.bincount(flat, length=experts)
    if shared:
        s1, s3, s2 = shared
        base = ops.linear(ops.silu(ops.linear(x, s1)) * ops.linear(x, s3), s2)
    else:
        base = ops.broadcast_in_dim(ops.constant(0.0, x.dtype), shape=list(x.shape), dims=[])
    if slots:
        y = base + _weighted(ops, _experts(ops, ids, _dispatch(ops, x, ids, experts), w1, w3, w2), weights)
    else:
        y = _sorted(ops, x, flat, weights, counts, w1, w3, w2, base)
    # load-balancing loss
    probs = scores if router == "softmax" else scores / ops.sum(scores, dims=[1], keepdim=True)
    frac = ops.cast(counts, "f32") / float(pairs)
    aux = ops.sum(frac * ops.mean(probs, dims=[0]), dims=[0]) * float(experts)
    return y, aux


def _experts(ops, ids: Tensor, dispatched: tuple[Tensor, Tensor], w1: Tensor, w3: Tensor, w2: Tensor) -> Tensor:
    """Each pair's expert output [T, k, H]: SwiGLU on the slots and row
    counts `dispatched` (by dispatch), read back by combine."""
    xe, counts = dispatched
    h1 = ops.grouped_matmul(xe, ops.permute(w1, dims=[0, 2, 1]), counts)
    h3 = ops.grouped_matmul(xe, ops.permute(w3, dims=[0, 2, 1]), counts)
    ye = ops.grouped_matmul(ops.silu(h1) * h3, ops.permute(w2, dims=[0, 2, 1]), counts)
    return ops.combine(ye, ids)


def _weighted(ops, yp: Tensor, weights: Tensor) -> Tensor:
    """The pairs' outputs [T, k, H] summed per token, by their routing weights."""
    tokens, k, _ = yp.shape
    w = ops.reshape(weights, shape=[tokens, k, 1])
    return ops.sum(yp * (w if yp.dtype == "f32" else ops.cast(w, yp.dtype)), dims=[1])


def _dispatch(ops, x: Tensor, ids: Tensor, experts: int) -> tuple[Tensor, Tensor]:
    """The experts' slots and each expert's row count."""
    xe, counts = ops.dispatch(x, ids, experts=experts, counts=True)
    return xe, counts


def _grouped(
    fd: FusionDefinition, x: Tensor, wr: Tensor, w1: Tensor, w3: Tensor, w2: Tensor,
    shared: Sequence[Tensor], k: int, router: str, groups: int,
) -> tuple[Tensor, Tensor]:
    """`layer` with the tokens in `groups` contiguous groups: the router,
    dispatch and combine on [G, T/G, ...] (each group's slots and counts of
    their own), the loss's counts summed from dispatch's."""
    ops = fd.ops
    (tokens, hidden), experts = x.shape, wr.shape[0]
    per = tokens // groups
    f32 = lambda t: t if t.dtype == "f32" else ops.cast(t, "f32")  # noqa: E731
    xg = ops.reshape(x, shape=[groups, per, hidden])
    logits = ops.linear(f32(xg), f32(wr))
    scores = ops.softmax(logits, dim=2) if router == "softmax" else ops.sigmoid(logits)
    top, ids = ops.topk(scores, k=k, dim=2)
    weights = top / ops.sum(top, dims=[2], keepdim=True)
    xe, counts = _dispatch(ops, xg, ids, experts)
    yp = _experts(ops, ids, (xe, counts), w1, w3, w2)
    w = ops.reshape(weights, shape=[groups, per, k, 1])
    routed = ops.reshape(ops.sum(yp * (w if yp.dtype == "f32" else ops.cast(w, yp.dtype)), dims=[2]), shape=[tokens, hidden])
    if shared:
        s1, s3, s2 = shared
        routed = ops.linear(ops.silu(ops.linear(x, s1)) * ops.linear(x, s3), s2) + routed
    probs = scores if router == "softmax" else scores / ops.sum(scores, dims=[2], keepdim=True)
    frac = ops.cast(ops.sum(counts, dims=[1]), "f32") / float(tokens * k)
    pmean = ops.mean(ops.mean(probs, dims=[1]), dims=[0])
    return routed, ops.sum(frac * pmean, dims=[0]) * float(experts)


def _sorted(ops, x: Tensor, flat: Tensor, weights: Tensor, counts: Tensor, w1: Tensor, w3: Tensor, w2: Tensor, base: Tensor) -> Tensor:
    """base plus the routed experts' weighted outputs, the pairs sorted by expert."""
    tokens, _ = x.shape
    pairs = flat.shape[0]
    k = pairs // tokens
    order = ops.argsort(flat, dim=0)
    rows = ops.index_select(ops.reshape(ops.iota([tokens, k], dim=0), shape=[pairs]), order)
    ends = ops.cumsum(counts, dim=0)
    xs = ops.index_select(x, rows)
    h1 = ops.grouped_matmul(xs, ops.permute(w1, dims=[0, 2, 1]), ends)
    h3 = ops.grouped_matmul(xs, ops.permute(w3, dims=[0, 2, 1]), ends)
    ys = ops.grouped_matmul(ops.silu(h1) * h3, ops.permute(w2, dims=[0, 2, 1]), ends)
    # combine: each result weighted by its routing weight, added to its token
    wsorted = ops.index_select(ops.reshape(weights, shape=[pairs]), order)
    wcol = ops.reshape(wsorted, shape=[pairs, 1])
    yw = ys * (wcol if x.dtype == "f32" else ops.cast(wcol, x.dtype))
    return ops.index_add(base, rows, yw)


def loop(
    x: torch.Tensor, wr: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    shared: Sequence[torch.Tensor] = (), k: int = 2, router: str = "softmax",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer of `layer` in PyTorch, a loop over experts, in x's dtype."""
    logits = x @ wr.t()
    scores = torch.softmax(logits, dim=1) if router == "softmax" else torch.sigmoid(logits)
    top, ids = torch.topk(scores, k, dim=1)
    weights = top / top.sum(dim=1, keepdim=True)
    y = torch.zeros_like(x)
    if shared:
        s1, s3, s2 = shared
        y = (F.silu(x @ s1.t()) * (x @ s3.t())) @ s2.t()
    for e in range(wr.shape[0]):
        tok, choice = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel():
            xe = x[tok]
            out = (F.silu(xe @ w1[e].t()) * (xe @ w3[e].t())) @ w2[e].t()
            y = y.index_add(0, tok, out * weights[tok, choice].unsqueeze(1))
    probs = scores if router == "softmax" else scores / scores.sum(dim=1, keepdim=True)
    frac = torch.bincount(ids.flatten(), minlength=wr.shape[0]).to(x.dtype) / ids.numel()
    return y, (frac * probs.mean(dim=0)).sum() * wr.shape[0]


def params(tokens: int, hidden: int, ffn: int, experts: int, shared: bool, skew: float = 0.0, seed: int = 0) -> list[torch.Tensor]:
    """Random x, wr, w1, w3, w2 (and s1, s3, s2), f32; `skew` > 0 gives the
    tokens and expert 0's router row a common direction, so that expert 0
    takes most tokens and others none."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g)
    wr = torch.randn(experts, hidden, generator=g) / hidden**0.5
    if skew:
        u = torch.randn(hidden, generator=g)
        u = u / u.norm()
        x = x + skew * u
        wr[0] += skew * u
    ws = [torch.randn(experts, ffn, hidden, generator=g) / hidden**0.5, torch.randn(experts, ffn, hidden, generator=g) / hidden**0.5,
          torch.randn(experts, hidden, ffn, generator=g) / ffn**0.5]  # fmt: skip
    sh = [torch.randn(ffn, hidden, generator=g) / hidden**0.5, torch.randn(ffn, hidden, generator=g) / hidden**0.5,
          torch.randn(hidden, ffn, generator=g) / ffn**0.5] if shared else []  # fmt: skip
    return [x, wr, *ws, *sh]


def definition(
    tokens: int, hidden: int, ffn: int, experts: int, k: int, shared: bool, router: str = "softmax", dtype: str = "f32",
    devices: int = 1, slots: bool | None = None, dp: int = 1,
) -> FusionDefinition:
    """The layer as a program of x, wr, w1, w3, w2 (s1, s3, s2) -> (y, aux);
    on `devices` > 1 the tokens of x and y are split over them (data
    parallel) and so are the experts' weights (`[DIDx, -, -]`): expert
    parallel, by dispatch and combine (`slots`, default: devices > 1; the
    pass chunk-experts cuts them into token chunks where it pays, or into
    as many as its option `token-chunks` says). `dp` > 1: a mesh [dp,
    devices / dp], the tokens split over both axes (`[DIDy*DIDx, -]`), the experts over the
    second only (replicated over dp): the tokens dispatched in dp groups,
    one per expert-parallel team."""
    fd = FusionDefinition()
    x = fd.define_tensor([tokens, hidden], dtype)
    wr = fd.define_tensor([experts, hidden], dtype)
    w1, w3 = fd.define_tensor([experts, ffn, hidden], dtype), fd.define_tensor([experts, ffn, hidden], dtype)
    w2 = fd.define_tensor([experts, hidden, ffn], dtype)
    sh = [fd.define_tensor(s, dtype) for s in ([ffn, hidden], [ffn, hidden], [hidden, ffn])] if shared else []
    slots = devices > 1 or dp > 1 if slots is None else slots
    y, aux = layer(fd, x, wr, w1, w3, w2, sh, k, router, slots, dp)
    fd.add_output(y)
    fd.add_output(aux)
    if devices > 1:
        fd.sched.mesh("ep", [dp, devices // dp] if dp > 1 else [devices])
        for t in (x, y):
            fd.sched.shard(t, "ep", shardings(dp)[0])
        for t in (w1, w3, w2):
            fd.sched.shard(t, "ep", ["DIDx", "-", "-"])
        for t in (wr, *sh):
            fd.sched.shard(t, "ep", ["-", "-"])
        fd.sched.shard(aux, "ep", [])
    return fd


def shardings(dp: int = 1) -> list[list[str]]:
    """The sharding of each argument of `definition` on devices > 1."""
    return [["DIDy*DIDx" if dp > 1 else "DIDx", "-"], ["-", "-"], *[["DIDx", "-", "-"]] * 3, *[["-", "-"]] * 3]


SHARDINGS = shardings()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn", type=int, default=48)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top", type=int, default=2)
    p.add_argument("--shared", action="store_true")
    p.add_argument("--router", choices=("softmax", "sigmoid"), default="softmax")
    p.add_argument("--devices", type=int, default=1, help="with --print: the experts and tokens split over this many")
    p.add_argument("--dp", type=int, default=1, help="with --print: a mesh [dp, devices / dp], the tokens dispatched in dp groups")
    p.add_argument("--print", action="store_true", help="print the program (fusion IR) and exit")
    a = p.parse_args()
    if a.print:
        print(definition(a.tokens, a.hidden, a.ffn, a.experts, a.top, a.shared, a.router, devices=a.devices, dp=a.dp).to_mlir())
        return
    import fuserc.torch

    fd = definition(a.tokens, a.hidden, a.ffn, a.experts, a.top, a.shared, a.router)
    f = fuserc.torch.function(fd)
    ts = [t.requires_grad_(True) for t in params(a.tokens, a.hidden, a.ffn, a.experts, a.shared)]
    y, aux = f(*ts)
    (y.square().sum() + aux).backward()
    ref = [t.detach().double().requires_grad_(True) for t in ts]
    ry, raux = loop(*ref[:5], ref[5:], a.top, a.router)
    (ry.square().sum() + raux).backward()
    err = max((a_ - b_).abs().max().item() for a_, b_ in [(y, ry), (aux, raux), *((t.grad, r.grad) for t, r in zip(ts, ref))])
    print(f"outputs and {len(ts)} gradients: max abs error {err:.2e} against the PyTorch loop (float64)")
    assert err < 1e-3


if __name__ == "__main__":
    main()

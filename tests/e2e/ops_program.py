"""One fusion program holding every transformer op (rsqrt ... concat,
broadcasting, dropout) with sharded operands, its global inputs, and each
result's computation in PyTorch: the differentiated program of
test_autodiff.py (whose gradients are checked against torch.autograd)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

N_MAX = 4
P_DROP = 0.25
SEED = 1234

# name, shape, dtype kind ("f": the program's float type), sharding on @tp
ARGS: list[tuple[str, tuple[int, ...], str, str]] = [
    ("x", (8, 16), "f", "[-, DIDx]"),
    ("y", (8, 16), "f", "[DIDx, -]"),
    ("pos", (8, 16), "f", "[DIDx, -]"),
    ("w", (16,), "f", "[DIDx]"),
    ("b", (16,), "f", "[DIDx]"),
    ("q", (2, 8, 16, 8), "f", "[-, DIDx, -, -]"),
    ("k", (2, 4, 16, 8), "f", "[-, DIDx, -, -]"),
    ("v", (2, 4, 16, 8), "f", "[-, DIDx, -, -]"),
    ("qs", (1, 2, 16, 8), "f", "[-, -, DIDx, -]"),
    ("ids", (2, 8), "i64", "[-, -]"),
    ("table", (32, 16), "f", "[DIDx, -]"),
    ("logits", (16, 32), "f", "[-, DIDx]"),
    ("labels", (16,), "i64", "[DIDx]"),
    ("seed", (), "i64", "[]"),
]

# (result name, MLIR body lines producing %name, its shape, the torch reference)
Ref = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def _cases(t: str) -> list[tuple[str, str, tuple[int, ...], Ref]]:
    x2 = f"tensor<8x16x{t}>"
    c: list[tuple[str, str, tuple[int, ...], Ref]] = []

    def unary(op: str, arg: str, fn: Ref) -> None:
        c.append((op, f"%{op} = fusion.{op} %{arg} : ({x2}) -> {x2}", (8, 16), fn))

    unary("rsqrt", "pos", lambda a: torch.rsqrt(a["pos"]))
    unary("sqrt", "pos", lambda a: torch.sqrt(a["pos"]))
    unary("log", "pos", lambda a: torch.log(a["pos"]))
    unary("reciprocal", "pos", lambda a: torch.reciprocal(a["pos"]))
    unary("abs", "x", lambda a: torch.abs(a["x"]))
    unary("erf", "x", lambda a: torch.erf(a["x"]))
    unary("sin", "x", lambda a: torch.sin(a["x"]))
    unary("cos", "x", lambda a: torch.cos(a["x"]))
    c.append(("pow", f"%pow = fusion.pow %pos, %y : ({x2}, {x2}) -> {x2}", (8, 16), lambda a: torch.pow(a["pos"], a["y"])))
    c.append(("minimum", f"%minimum = fusion.minimum %x, %y : ({x2}, {x2}) -> {x2}", (8, 16), lambda a: torch.minimum(a["x"], a["y"])))
    # every comparison, weighted into one float result; where on a comparison
    cmp = ["lt", "le", "gt", "ge", "eq", "ne"]
    lines = [f"%half = fusion.constant 0.5 : () -> tensor<{t}>"]
    lines += [f"%m_{o} = fusion.{o} %x, %y : ({x2}, {x2}) -> tensor<8x16xi1>" for o in cmp[:4]]
    lines += [f"%m_{o} = fusion.{o} %x, %x : ({x2}, {x2}) -> tensor<8x16xi1>" for o in cmp[4:]]
    lines += [f"%f_{o} = fusion.cast %m_{o} : (tensor<8x16xi1>) -> {x2}" for o in cmp]
    lines += [f"%s_{o} = fusion.mul %f_{o}, %half : ({x2}, tensor<{t}>) -> {x2}" for o in cmp]
    acc = "s_lt"
    for o in cmp[1:]:
        lines.append(f"%acc_{o} = fusion.add %{acc}, %s_{o} : ({x2}, {x2}) -> {x2}")
        acc = f"acc_{o}"
    lines.append(f"%compare = fusion.where %m_lt, %{acc}, %x : (tensor<8x16xi1>, {x2}, {x2}) -> {x2}")

    def compare_ref(a: dict[str, torch.Tensor]) -> torch.Tensor:
        x, y = a["x"], a["y"]
        s = sum(0.5 * m.double() for m in (x < y, x <= y, x > y, x >= y, x == x, x != x))
        return torch.where(x < y, s, x)

    c.append(("compare", "\n  ".join(lines), (8, 16), compare_ref))
    # broadcasting: a rank-0 constant, a [16] vector, a [8, 1] column
    c.append((
        "bcast",
        f"%eighth = fusion.constant 0.125 : () -> tensor<{t}>\n"
        f"  %bc0 = fusion.mul %x, %eighth : ({x2}, tensor<{t}>) -> {x2}\n"
        f"  %bc1 = fusion.add %bc0, %w : ({x2}, tensor<16x{t}>) -> {x2}\n"
        f"  %col = fusion.sum %y dims = [1] keepdim = true : ({x2}) -> tensor<8x1x{t}>\n"
        f"  %bcast = fusion.sub %bc1, %col : ({x2}, tensor<8x1x{t}>) -> {x2}",
        (8, 16),
        lambda a: a["x"] * 0.125 + a["w"] - a["y"].sum(1, keepdim=True),
    ))
    c.append(("iota", f"%iota = fusion.iota dim = 1 : () -> tensor<8x16x{t}>", (8, 16), lambda a: torch.arange(16.0).expand(8, 16)))
    c.append(("mean", f"%mean = fusion.mean %x dims = [1] : ({x2}) -> tensor<8x{t}>", (8,), lambda a: a["x"].mean(1)))
    c.append(("min", f"%min = fusion.min %x dims = [1] : ({x2}) -> tensor<8x{t}>", (8,), lambda a: a["x"].amin(1)))
    c.append(("var", f"%var = fusion.var %x dims = [1] : ({x2}) -> tensor<8x{t}>", (8,), lambda a: a["x"].var(1)))
    c.append(("var0", f"%var0 = fusion.var %y dims = [0] correction = 0 keepdim = true : ({x2}) -> tensor<1x16x{t}>", (1, 16), lambda a: a["y"].var(0, correction=0, keepdim=True)))
    c.append((
        "layer_norm",
        f"%layer_norm = fusion.layer_norm %x, %w, %b dims = [1] eps = 1.0e-05 : ({x2}, tensor<16x{t}>, tensor<16x{t}>) -> {x2}",
        (8, 16),
        lambda a: F.layer_norm(a["x"], (16,), a["w"], a["b"], 1e-5),
    ))
    c.append((
        "rms_norm",
        f"%rms_norm = fusion.rms_norm %x, %w dims = [1] eps = 1.0e-06 : ({x2}, tensor<16x{t}>) -> {x2}",
        (8, 16),
        lambda a: F.rms_norm(a["x"], (16,), a["w"], 1e-6),
    ))
    c.append(("log_softmax", f"%log_softmax = fusion.log_softmax %x dim = 1 : ({x2}) -> {x2}", (8, 16), lambda a: F.log_softmax(a["x"], 1)))
    c.append((
        "sdpa_gqa",
        f"%sdpa_gqa = fusion.sdpa %q, %k, %v causal = true : (tensor<2x8x16x8x{t}>, tensor<2x4x16x8x{t}>, tensor<2x4x16x8x{t}>) -> tensor<2x8x16x8x{t}>",
        (2, 8, 16, 8),
        lambda a: F.scaled_dot_product_attention(a["q"], a["k"].repeat_interleave(2, 1), a["v"].repeat_interleave(2, 1), is_causal=True),
    ))
    c.append((
        "sdpa_seq",
        f"%sdpa_seq = fusion.sdpa %qs, %qs, %qs scale = 0.25 : (tensor<1x2x16x8x{t}>, tensor<1x2x16x8x{t}>, tensor<1x2x16x8x{t}>) -> tensor<1x2x16x8x{t}>",
        (1, 2, 16, 8),
        lambda a: F.scaled_dot_product_attention(a["qs"], a["qs"], a["qs"], scale=0.25),
    ))
    c.append((
        "embedding",
        f"%embedding = fusion.embedding %ids, %table : (tensor<2x8xi64>, tensor<32x16x{t}>) -> tensor<2x8x16x{t}>",
        (2, 8, 16),
        lambda a: F.embedding(a["ids"], a["table"]),
    ))
    c.append((
        "cross_entropy",
        f"%cross_entropy = fusion.cross_entropy %logits, %labels : (tensor<16x32x{t}>, tensor<16xi64>) -> tensor<{t}>",
        (),
        lambda a: F.cross_entropy(a["logits"], a["labels"]),
    ))
    c.append(("concat", f"%concat = fusion.concat %x, %y, %pos dim = 0 : ({x2}, {x2}, {x2}) -> tensor<24x16x{t}>", (24, 16), lambda a: torch.cat([a["x"], a["y"], a["pos"]], 0)))
    c.append(("dropout", f"%dropout = fusion.dropout %y, %seed p = {P_DROP} : ({x2}, tensor<i64>) -> {x2}", (8, 16), _dropout_ref))
    return c


def _dropout_ref(a: dict[str, torch.Tensor]) -> torch.Tensor:
    """The documented mask: element i of the global tensor is kept when its
    counter-based uniform bits are at or above the threshold of p."""
    from fuserc.dialects.interfaces import keep_threshold, uniform_bits

    y = a["y"]
    index = torch.arange(y.numel(), dtype=torch.int64).reshape(y.shape)
    keep = uniform_bits(a["seed"], index) >= keep_threshold(P_DROP)
    return torch.where(keep, y / (1 - P_DROP), torch.zeros_like(y))


def program(t: str) -> tuple[str, list[tuple[str, tuple[int, ...], Ref]]]:
    def ty(shape: tuple[int, ...], kind: str, sharding: str) -> str:
        elem = t if kind == "f" else kind
        dims = "x".join(map(str, shape))
        return f"tensor<{dims + 'x' if dims else ''}{elem}, #fusion.sharding<@tp, {sharding}>>"

    args = ", ".join(f"%{n}: {ty(s, k, sh)}" for n, s, k, sh in ARGS)
    cases = _cases(t)
    # op lines write their operands' types unsharded; `_typed` gives
    # arguments their sharded types
    body = "\n  ".join(line for _, line, _, _ in cases)
    results = [(n, s) for n, _, s, _ in cases]

    def plain(shape: tuple[int, ...]) -> str:
        dims = "x".join(map(str, shape))
        return f"tensor<{dims + 'x' if dims else ''}{t}>"

    ret_types = ", ".join(plain(s) for _, s in results)
    text = f"fusion.mesh @tp shape = [{N_MAX}]\nfunc.func @main({args}) -> ({ret_types}) {{\n  {body}\n"
    text += f"  func.return {', '.join('%' + n for n, _ in results)} : {ret_types}\n}}\n"
    return _typed(text, t), [(n, s, fn) for n, _, s, fn in cases]


def _typed(text: str, t: str) -> str:
    """Each op's operand types written as the sharded argument types where
    the operand is an argument (the verifier wants the value's own type)."""
    import re

    arg_types = {}
    for n, s, k, sh in ARGS:
        elem = t if k == "f" else k
        dims = "x".join(map(str, s))
        arg_types[n] = (f"tensor<{dims + 'x' if dims else ''}{elem}>", f"tensor<{dims + 'x' if dims else ''}{elem}, #fusion.sharding<@tp, {sh}>>")
    out = []
    for line in text.split("\n"):
        m = re.match(r"\s*%\S+ = fusion\.\S+ ((?:%\w+(?:, )?)*)(.*?): \((.*)\) -> (.*)$", line)
        if m is None:
            out.append(line)
            continue
        operands = [o.strip()[1:] for o in m.group(1).split(",") if o.strip()]
        types = _split_types(m.group(3))
        types = [arg_types[o][1] if o in arg_types else ty for o, ty in zip(operands, types)]
        head = line[: line.rindex(": (")]
        out.append(f"{head}: ({', '.join(types)}) -> {m.group(4)}")
    return "\n".join(out)


def _split_types(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur.strip()] if p]


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED)
    out: dict[str, torch.Tensor] = {}
    for n, s, k, _ in ARGS:
        if n == "ids":
            out[n] = torch.randint(0, 32, s, generator=g)
        elif n == "labels":
            out[n] = torch.randint(0, 32, s, generator=g)
        elif n == "seed":
            out[n] = torch.tensor(987654321, dtype=torch.int64)
        elif n == "pos":
            out[n] = torch.rand(s, generator=g, dtype=torch.float64) + 0.25
        elif n == "w":
            out[n] = 1 + 0.2 * torch.randn(s, generator=g, dtype=torch.float64)
        else:
            out[n] = torch.randn(s, generator=g, dtype=torch.float64)
    return out

"""Train a small GPT whose layers are one fuserc program, with torch.optim.AdamW.

    torchrun --nproc-per-node 4 examples/python/train_gpt.py
    mpiexec -n 4 python examples/python/train_gpt.py
    python examples/python/train_gpt.py --device cuda --plot loss.png

The model: a vocabulary-parallel embedding (the table split over its rows),
a learned position embedding, `--layers` GPT layers (sequence parallel
between them, tensor parallel inside: the layers of examples/gpt_layer.py),
a final layer_norm, a vocabulary-parallel LM head and cross_entropy (the
logits stay split over the vocabulary). `fuserc.torch.function` makes the
program a differentiable function of this rank's shards; the parameters are
those shards, updated by AdamW. The same model is trained in plain PyTorch
(one process, the global tensors, the same initial weights and data) and
each step prints both losses; the run fails if the curves differ by more
than `--tolerance` (relative). Synthetic data: token sequences of a fixed
random Markov chain, so the loss falls towards the chain's entropy.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuserc.torch  # noqa: E402
from fuserc.api import shard_tensor  # noqa: E402
from gpt_layer import reference as layer_reference  # noqa: E402
from gpt_model import build, shapes  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOLERANCE = {"f32": 1e-3, "bf16": 5e-2}
"""The largest relative difference of the loss curves by default: bf16's
against the reference in f32 (a bf16 step rounds to 8 bits of mantissa)."""


def reference_loss(ids: torch.Tensor, labels: torch.Tensor, params: list[torch.Tensor], a: argparse.Namespace) -> torch.Tensor:
    """The same model in plain PyTorch, on the global tensors."""
    emb, pos, *rest = params
    x = F.embedding(ids, emb) + pos
    for i in range(a.layers):
        x = layer_reference([x, *rest[16 * i : 16 * i + 16]], a.heads)
    lnf_w, lnf_b, head = rest[16 * a.layers :]
    logits = F.linear(F.layer_norm(x, (a.hidden,), lnf_w, lnf_b, 1e-5), head)
    return F.cross_entropy(logits, labels)


def initial_weights(a: argparse.Namespace, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """GPT-2's initialization (normal, std 0.02; norms at 1 and 0), from a
    seed, made on `device` (a large model's weights are drawn on its GPU)
    in `dtype` (drawn in f32: the same values, rounded)."""
    g = torch.Generator(device).manual_seed(a.seed)
    out = []
    for shape, _ in shapes(a):
        if len(shape) == 1:  # biases and norm shifts 0, norm scales 1 (told apart by position below)
            out.append(torch.zeros(shape, device=device, dtype=dtype))
        else:
            out.append((torch.randn(shape, generator=g, device=device) * 0.02).to(dtype))
    per_layer = (0, 10)  # ln1 and ln2 weights in each layer's 16
    for i in range(a.layers):
        for j in per_layer:
            out[2 + 16 * i + j] = torch.ones(a.hidden, device=device, dtype=dtype)
    out[2 + 16 * a.layers] = torch.ones(a.hidden, device=device, dtype=dtype)  # final layer_norm weight
    return out


class Data:
    """Sequences of a fixed random Markov chain over the vocabulary (each
    token has a few likely successors): the same batches on every rank."""

    def __init__(self, a: argparse.Namespace):
        g = torch.Generator().manual_seed(a.seed + 1)
        logits = torch.randn(a.vocab, a.vocab, generator=g) * 3
        self.probs = torch.softmax(logits, dim=1)
        self.tokens, self.seed = a.tokens, a.seed

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 100003 + step)
        seq = [int(torch.randint(0, self.probs.shape[0], (1,), generator=g))]
        for _ in range(self.tokens):
            seq.append(int(torch.multinomial(self.probs[seq[-1]], 1, generator=g)))
        s = torch.tensor(seq)
        return s[:-1].contiguous(), s[1:].contiguous()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.0, help="dropout after attention and MLP (0: compared with PyTorch)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default="f32",
                   help="of the parameters and activations (f32: the curves compare exactly; bf16: against PyTorch in f32, within a looser tolerance)")
    p.add_argument("--tolerance", type=float, default=None, help="largest relative difference of the loss curves (default f32 1e-3, bf16 5e-2)")
    p.add_argument("--plot", metavar="FILE.png", help="save both loss curves as a PNG (rank 0)")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    a = p.parse_args()
    if a.tolerance is None:
        a.tolerance = TOLERANCE[a.dtype]
    if a.device == "cuda" and not torch.cuda.is_available():
        usage_error(p, f"--device cuda: this torch ({torch.__version__}) has no CUDA device to use")
    if a.plot and importlib.util.find_spec("matplotlib") is None:
        usage_error(p, "--plot needs matplotlib (pip install matplotlib)")

    from fuserc.runtime.job.mpi_env import mpi_env

    env = mpi_env()
    rank, devices = env.rank, env.size
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 GEMMs as the reference does them
        torch.backends.cudnn.allow_tf32 = False
    fd, mesh = build(a, devices)
    loss_fn = fuserc.torch.function(fd)
    specs = fd.inputs[3 if a.dropout > 0 else 2 :]
    init = initial_weights(a)
    device = fuserc.torch.device(a.device)  # this rank's GPU under a launcher
    local = [torch.nn.Parameter(shard_tensor(w, s, mesh, rank).to(device, DTYPES[a.dtype]).contiguous()) for w, s in zip(init, specs)]
    glob = [torch.nn.Parameter(w.clone().to(device)) for w in init]  # the reference: f32
    extra = (lambda step: [torch.tensor(step, device=device)]) if a.dropout > 0 else (lambda step: [])
    train_against_pytorch(a, loss_fn, local, glob, reference_loss, Data(a), env, device, extra, compared=a.dropout == 0)


def train_against_pytorch(
    a: argparse.Namespace, loss_fn: Any, local: list[torch.nn.Parameter], glob: list[torch.nn.Parameter],
    reference: Callable[..., torch.Tensor], data: "Data", env: Any, device: torch.device,
    extra: Callable[[int], list[torch.Tensor]] = lambda step: [], compared: bool = True,
) -> None:
    """`a.steps` AdamW steps of the fuserc loss on this rank's shards
    (`local`) beside the same steps of `reference` in plain PyTorch on the
    global tensors (`glob`); each step's losses printed, the curves compared
    (`--tolerance`), plotted with `--plot`; exit 1 when they differ."""
    rank, devices = env.rank, env.size
    opt = torch.optim.AdamW(local, lr=a.lr, weight_decay=0.01)
    ref_opt = torch.optim.AdamW(glob, lr=a.lr, weight_decay=0.01)
    curve, ref_curve, worst = [], [], 0.0
    start = time.perf_counter()
    for step in range(a.steps):
        ids, labels = (t.to(device) for t in data.batch(step))
        loss = loss_fn(ids, labels, *extra(step), *local)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        ref = reference(ids, labels, glob, a)
        ref_opt.zero_grad(set_to_none=True)
        ref.backward()
        ref_opt.step()
        value, want = float(loss.detach()), float(ref.detach())
        curve.append(value)
        ref_curve.append(want)
        diff = abs(value - want) / max(abs(want), 1e-12)
        worst = max(worst, diff)
        if rank == 0 and not a.quiet:
            print(f"step {step + 1:3d}/{a.steps}  loss {value:.6f}  (PyTorch {want:.6f}, rel diff {diff:.1e})", flush=True)
    seconds = time.perf_counter() - start
    ok = not compared or worst <= a.tolerance
    if rank == 0:
        verdict = "ok" if ok else "FAILED"
        what = f"max rel diff {worst:.2e} (tolerance {a.tolerance:g}): {verdict}" if compared else "dropout on: not compared"
        print(
            f"trained {a.steps} steps on {devices} rank(s) ({env.launched_by or 'one process'}, {a.device}) in {seconds:.1f} s: "
            f"loss {curve[0]:.4f} -> {curve[-1]:.4f} (PyTorch {ref_curve[0]:.4f} -> {ref_curve[-1]:.4f}; "
            f"chain entropy floor {entropy(data):.4f}); {what}",
            flush=True,
        )
        if a.plot:
            plot(a.plot, curve, ref_curve, devices)
    loss_fn.close()
    if not ok:
        raise SystemExit(1)


def usage_error(p: argparse.ArgumentParser, message: str) -> None:
    """Bad usage, before any work: said once per job (every rank finds it),
    exit 2 on every rank."""
    from fuserc.runtime.job.job import launcher_rank

    if launcher_rank() in (None, 0):
        p.print_usage(sys.stderr)
        print(f"{p.prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def entropy(data: Data) -> float:
    """The Markov chain's entropy rate under its stationary distribution
    (the loss a perfect model approaches)."""
    pr = data.probs.double()
    pi = torch.full((pr.shape[0],), 1.0 / pr.shape[0], dtype=torch.float64)
    for _ in range(200):
        pi = pi @ pr
    return float(-(pi[:, None] * pr * torch.log(pr)).sum())


def plot(path: str, curve: list[float], ref: list[float], devices: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    steps = range(1, len(curve) + 1)
    ax.plot(steps, ref, label="plain PyTorch (1 process)", linewidth=3, alpha=0.5)
    ax.plot(steps, curve, label=f"fuserc ({devices} rank(s))", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("cross entropy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""How fast a GEMM runs in chunks, on one GPU: the whole M x K x N GEMM
beside S chunks of it (rows or columns), plain, accumulating in place
(`out += a @ b`, cuBLAS beta = 1 with C = D) and accumulating from another
buffer (torch copies the accumulator into the output first). The rings of
stream-pipeline run such chunks back to back, so their efficiency bounds
the rings' speed.

    python3 tools/gemm_chunks.py --shape 32768x4096x8192 --chunks 4,8,16
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch


def timed(fn: Callable[[], None], warmup: int, iters: int) -> float:
    """Median seconds of one call of `fn` (a sequence of kernels)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def variants(m: int, k: int, n: int, s: int, dtype: torch.dtype) -> dict[str, Callable[[], None]]:
    """The whole GEMM and its chunked forms (S chunks run one after the other)."""
    dev = torch.device("cuda")
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    out = torch.empty(m, n, device=dev, dtype=dtype)
    acc = torch.randn(m, n, device=dev, dtype=dtype)
    rows = [(a[i * m // s : (i + 1) * m // s], out[i * m // s : (i + 1) * m // s], acc[i * m // s : (i + 1) * m // s]) for i in range(s)]
    cols = [(b[:, i * n // s : (i + 1) * n // s], out[:, i * n // s : (i + 1) * n // s]) for i in range(s)]

    def whole() -> None:
        torch.matmul(a, b, out=out)

    def row_plain() -> None:
        for ai, oi, _ in rows:
            torch.matmul(ai, b, out=oi)

    def row_acc_in_place() -> None:
        for ai, oi, _ in rows:
            torch.addmm(oi, ai, b, out=oi)

    def row_acc_copy() -> None:
        for ai, oi, ci in rows:
            torch.addmm(ci, ai, b, out=oi)

    def col_acc_in_place() -> None:
        for bi, oi in cols:
            torch.addmm(oi, a, bi, out=oi)

    return {
        "whole": whole,
        "rows": row_plain,
        "rows acc in place": row_acc_in_place,
        "rows acc other buffer": row_acc_copy,
        "cols acc in place": col_acc_in_place,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="32768x4096x8192", help="M x K x N of the whole GEMM")
    p.add_argument("--chunks", default="4,8,16", help="comma-separated S")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gemm_chunks: no CUDA device")
        return 1
    m, k, n = (int(v) for v in args.shape.lower().split("x"))
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    flops = 2.0 * m * k * n
    print(f"{torch.cuda.get_device_name()}  {m}x{k}x{n} {args.dtype}  (time, TFLOP/s, ratio to the whole GEMM)")
    base = None
    for s in (int(v) for v in args.chunks.split(",")):
        for name, fn in variants(m, k, n, s, dtype).items():
            if name == "whole" and base is not None:
                continue
            t = timed(fn, args.warmup, args.iters)
            if name == "whole":
                base = t
                print(f"  whole GEMM            {t * 1e3:8.3f} ms  {flops / t / 1e12:6.1f}")
                continue
            assert base is not None
            print(f"  S={s:<3d} {name:22s} {t * 1e3:8.3f} ms  {flops / t / 1e12:6.1f}  {base / t:.3f}")
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

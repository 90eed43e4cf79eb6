"""Forward then backward of many programs under ONE mpiexec launch.

    mpiexec -n N python tests/e2e/autodiff_batch.py CASES.json [--backend cpu]

CASES.json is a list of `{"id", "file", "save", "inputs": [.npy], "cts":
[.npy], "out"}`. For each case every rank compiles the file with
`autodiff{save=...},default` as @main_fwd and @main_bwd (one backend for
the whole launch), runs the forward on the global inputs, then the backward
on its saved tensors and the cotangents; rank 0 writes the gradients,
gathered, as OUT/grad<i>.npy and prints `AD-DONE <id>`. A failure ends the
job (the test reports the case that did not print)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def _load(path: str, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(np.load(path))
    return t.to(dtype) if t.is_floating_point() else t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases")
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args()

    from fuserc.runtime.backends.backend import make_backend
    from fuserc.runtime.job.mpi_env import mpi_env
    from fuserc.runtime.evaluator.program import compile_text

    env = mpi_env()
    backend = make_backend(args.backend, env)
    for case in json.loads(Path(args.cases).read_text()):
        text = Path(case["file"]).read_text()
        pipe = f"autodiff{{save={case['save']}}},default"
        fwd = compile_text(text, "main_fwd", pipe, backend, case["file"])
        bwd = compile_text(text, "main_bwd", pipe, backend, case["file"])
        inputs = [_load(p, s.dtype) for p, s in zip(case["inputs"], fwd.params)]
        outs = fwd.execute(inputs)
        saved = outs[len(case["cts"]) :]
        cts = [_load(p, s.dtype) for p, s in zip(case["cts"], bwd.params[len(saved) :])]
        grads = bwd.execute([*saved, *cts])
        if env.rank == 0:
            out = Path(case["out"])
            out.mkdir(parents=True, exist_ok=True)
            for i, g in enumerate(grads):
                np.save(out / f"grad{i}.npy", g.float().numpy())
            print(f"AD-DONE {case['id']}", flush=True)
    backend.close()


if __name__ == "__main__":
    main()

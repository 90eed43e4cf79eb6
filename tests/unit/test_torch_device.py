"""fuserc.torch.device: the device a rank computes on, known before its first call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import fuserc.torch
from fuserc.diagnostics import Diagnostic
from fuserc.runtime.job.mpi_env import MpiEnv


def test_the_gpu_is_the_node_rank_modulo_the_gpus_seen() -> None:
    """The cuda backend's rule (runtime/backends/cuda.py takes `env.gpu`): ranks 0-7
    of a node over 4 visible GPUs share them two by two."""
    assert [MpiEnv.gpu(SimpleNamespace(node_rank=r), 4) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]  # type: ignore[arg-type]


def test_cpu_and_usage_errors() -> None:
    assert fuserc.torch.device("cpu") == torch.device("cpu")
    with pytest.raises(Diagnostic, match="kind must be 'cpu' or 'cuda', got 'tpu'"):
        fuserc.torch.device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the diagnostic where no GPU is seen")
def test_cuda_without_a_gpu_is_a_diagnostic() -> None:
    with pytest.raises(Diagnostic, match="sees no CUDA device"):
        fuserc.torch.device("cuda")
    assert fuserc.torch.device() == torch.device("cpu")  # the default follows what is here, as backend="auto"

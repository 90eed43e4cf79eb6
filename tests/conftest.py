"""Session-wide set-up that must come before any test module is imported."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    # Triton's interpreter (the cuda backend's hand-written kernels checked on
    # the CPU, tests/unit/test_cuda_rows.py) is chosen when triton.language is
    # first imported; torch._inductor imports it too, so whichever test
    # module comes first, the choice is made here.
    os.environ.setdefault("TRITON_INTERPRET", "1")

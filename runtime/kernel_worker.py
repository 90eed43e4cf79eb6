"""A build worker: a process that builds generated kernels into the kernel
cache for runtime/kernel_builds.py, which starts it as

    python -m fuserc.runtime.kernel_worker DEVICE CACHE_DIR

and holds each key's lock while its worker builds. Messages are pickles,
each after its length (8 bytes, little-endian): the worker says
`{"ready": True}` once its imports are done, then, for each request
`{"key": KernelKey, "spec": job.spec()}` on standard input, builds the
kernel (`cuda_regions.build_spec`, `cuda_rows.build_spec`), writes its
entry and answers `{"error": None}` (or the error's text). It ends at the
end of its input. Its standard output carries only these messages: what
Python or a compiler prints there goes to standard error.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import torch

    from fuserc.runtime.kernel_builds import _receive, _send
    from fuserc.runtime.kernel_cache import KernelCache

    device = torch.device(sys.argv[1])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    cache = KernelCache(sys.argv[2])
    from fuserc.runtime import cuda_regions  # noqa: F401  (imported before saying ready)

    _send(out, {"ready": True})
    while (request := _receive(0)) is not None:
        _send(out, {"error": _build(request, cache, device)})


def _build(request: dict[str, Any], cache: Any, device: Any) -> str | None:
    """Build one kernel and write its entry; the error's text, or None."""
    import time

    from fuserc.runtime.kernel_cache import NotKept

    start = time.perf_counter()
    spec = request["spec"]
    try:
        if spec["kind"] == "rows":
            from fuserc.runtime.cuda_rows import build_spec
        else:
            from fuserc.runtime.cuda_regions import build_spec
        with cache.working_dirs():
            sections, _ = build_spec(spec, device)
        if isinstance(sections, NotKept):
            return sections.reason
        cache.write(request["key"], sections, time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - reported to the process that asked (it builds the kernel itself)
        traceback.print_exc()
        return f"{type(e).__name__}: {e}"
    return None


if __name__ == "__main__":
    main()

"""How a copy-engine fence is enqueued (runtime/backends/cuda_comm.py FenceOps), on
fakes of the driver calls: the order of writes, waits and resets, and the
choice between the fence kernel and stream memory operations."""

from __future__ import annotations

from typing import Any

import pytest

from fuserc.diagnostics import Diagnostic
from fuserc.runtime.backends import cuda_comm
from fuserc.runtime.backends.cuda_comm import FENCE_ENV, FENCE_FORMS, KERNEL_FENCE_MEMBERS, FenceOps, fence_form


def _ops(calls: list[tuple[Any, ...]]) -> FenceOps:
    ops = object.__new__(FenceOps)
    ops.write_fn = lambda stream, addr, value, flags: calls.append(("write", stream, addr, value)) or 0
    ops.wait_fn = lambda stream, addr, value, flags: calls.append(("wait", stream, addr, value)) or 0
    ops._fence_kernel = lambda stream, writes, waits, value, reset: calls.append(("kernel", list(writes), list(waits), value, reset))  # type: ignore[method-assign]
    return ops


class _Stream:
    ptr = 7


def test_memops_write_every_peer_then_wait_then_reset() -> None:
    calls: list[tuple[Any, ...]] = []
    _ops(calls).fence(_Stream(), [100, 200, 300], [10, 20, 30], 1, True, "memops")
    assert calls == [
        ("write", 7, 100, 1), ("write", 7, 200, 1), ("write", 7, 300, 1),
        ("wait", 7, 10, 1), ("wait", 7, 20, 1), ("wait", 7, 30, 1),
        ("write", 7, 10, 0), ("write", 7, 20, 0), ("write", 7, 30, 0),
    ]  # fmt: skip
    calls.clear()
    _ops(calls).fence(_Stream(), [100], [10], 5, False, "memops")  # epoch flags: never reset
    assert calls == [("write", 7, 100, 5), ("wait", 7, 10, 5)]


def test_the_kernel_gets_the_same_flags_and_falls_back_past_its_members() -> None:
    calls: list[tuple[Any, ...]] = []
    _ops(calls).fence(_Stream(), [100, 200], [10, 20], 1, True, "kernel")
    assert calls == [("kernel", [100, 200], [10, 20], 1, True)]
    calls.clear()
    many = list(range(1, KERNEL_FENCE_MEMBERS + 2))  # more peers than its arguments hold
    _ops(calls).fence(_Stream(), many, many, 3, False, "kernel")
    assert [c[0] for c in calls] == ["write"] * len(many) + ["wait"] * len(many)


def test_the_kernel_source_reads_and_writes_at_system_scope() -> None:
    src = cuda_comm._FENCE_KERNEL_SOURCE
    assert "st.release.sys.global.u32" in src and "ld.acquire.sys.global.u32" in src
    assert src.count("unsigned long long w") == KERNEL_FENCE_MEMBERS + 1  # w0..w7 and the array


def test_fence_form_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FENCE_ENV, raising=False)
    assert fence_form() == FENCE_FORMS[0] == "kernel"
    monkeypatch.setenv(FENCE_ENV, "memops")
    assert fence_form() == "memops"
    monkeypatch.setenv(FENCE_ENV, "nccl")
    with pytest.raises(Diagnostic, match="FUSERC_FENCE=nccl: expected one of kernel, memops"):
        fence_form()

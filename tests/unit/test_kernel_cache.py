"""The kernel cache's store (runtime/kernel_cache.py): keys that are stable
and change with each thing a kernel depends on, entries written whole and
checked when read, one builder per key among racing processes, and
`fuserc cache info|clear`. The kernels themselves (Inductor's, on the CPU)
are in test_kernel_builds.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fuserc.cli import main
from fuserc.runtime.kernel_cache import THREADS_ENV, KernelCache, NotKept, Unusable, kernel_key

VERSIONS = {"fuserc": "0.1.0+abc", "torch": "2.13.0+def", "triton": "3.6.0", "python": "3.11"}
FIELDS = {"ir": "{ ^bb0(%0: tensor<4xf32>): ... }", "layouts": [[[4], [1], "float32"]], "contexts": {}}
DEVICE = "cuda:0 sm_90 cuda 12.8"


def test_key_is_stable_across_processes() -> None:
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    assert key == kernel_key("region", dict(reversed(FIELDS.items())), DEVICE, dict(VERSIONS))
    code = (
        "import json, sys; from fuserc.runtime.kernel_cache import kernel_key; "
        "a = json.loads(sys.argv[1]); print(kernel_key('region', a[0], a[1], a[2]).digest)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps([FIELDS, DEVICE, VERSIONS])], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == key.digest  # no hash randomization, no object identities


def test_each_field_changes_the_key() -> None:
    base = kernel_key("region", FIELDS, DEVICE, VERSIONS).digest
    variants = {
        "kind": kernel_key("rows", FIELDS, DEVICE, VERSIONS),
        "ir": kernel_key("region", {**FIELDS, "ir": FIELDS["ir"].replace("f32", "bf16")}, DEVICE, VERSIONS),
        "shape": kernel_key("region", {**FIELDS, "layouts": [[[8], [1], "float32"]]}, DEVICE, VERSIONS),
        "strides": kernel_key("region", {**FIELDS, "layouts": [[[4], [2], "float32"]]}, DEVICE, VERSIONS),
        "dtype": kernel_key("region", {**FIELDS, "layouts": [[[4], [1], "bfloat16"]]}, DEVICE, VERSIONS),
        "contexts": kernel_key("region", {**FIELDS, "contexts": {"0": {"indices": {"-1:0": [4, 5, 6, 7]}}}}, DEVICE, VERSIONS),
        "capability": kernel_key("region", FIELDS, DEVICE.replace("sm_90", "sm_80"), VERSIONS),
        "device index": kernel_key("region", FIELDS, DEVICE.replace("cuda:0", "cuda:1"), VERSIONS),
    }
    for name in VERSIONS:
        variants[f"{name} version"] = kernel_key("region", FIELDS, DEVICE, {**VERSIONS, name: VERSIONS[name] + ".1"})
    digests = {name: k.digest for name, k in variants.items()}
    assert all(d != base for d in digests.values()), [n for n, d in digests.items() if d == base]
    assert len(set(digests.values())) == len(digests)


def test_versions_of_this_process() -> None:
    from fuserc.runtime.kernel_cache import versions

    v = versions()
    assert set(v) == {"fuserc", "torch", "triton", "python"}
    import torch

    assert v["torch"].startswith(torch.__version__)
    assert "+" in v["fuserc"] and len(v["fuserc"].split("+")[-1]) == 16  # the source digest


def test_entries_are_written_whole_and_checked(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    assert cache.read(key) is None
    cache.write(key, {"artifact": b"\x00kernel" * 100, "constants": b""})
    assert cache.read(key) == {"artifact": b"\x00kernel" * 100, "constants": b""}
    path = cache.entry_path(key)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    data = path.read_bytes()

    def damaged(new: bytes, why: str) -> None:
        path.write_bytes(new)
        with pytest.raises(Unusable, match=why):
            cache.read(key)

    damaged(data[:-5], "truncated")
    damaged(data[:-5] + b"XXXXX", "checksum")
    damaged(data + b"!", "trailing")
    damaged(b"garbage", "not a fuserc kernel")
    damaged(data.replace(b'"sections"', b'"sectionz"'), "damaged header")
    other = kernel_key("rows", FIELDS, DEVICE, VERSIONS)
    cache.write(other, {"built": b""})
    damaged(cache.entry_path(other).read_bytes(), "another kernel")


def test_an_unusable_entry_is_rebuilt_with_a_note(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    cache.write(key, {"value": b"1"})
    got = cache.fetch(key, lambda: ({"value": b"2"}, 2), lambda s: int(s["value"]))
    assert (got.value, got.how, got.note) == (1, "loaded", "")

    def refuse(sections: dict[str, bytes]) -> int:  # a loader that refuses what it finds (a stale artifact)
        if sections["value"] == b"1":
            raise ValueError("built by another torch")
        return int(sections["value"])

    got = cache.fetch(key, lambda: ({"value": b"2"}, 2), refuse)
    assert (got.value, got.how) == (2, "rebuilt")
    assert "could not be loaded (ValueError: built by another torch); building it again" in got.note
    assert cache.read(key) == {"value": b"2"}


def test_a_kernel_that_cannot_be_saved_is_used_and_says_why(tmp_path: Path) -> None:
    """A build that cannot be saved (Inductor refusing to serialize a graph)
    hands back its kernel, writes no entry, and the note names the reason:
    every later run builds it again, so the user is told why."""
    cache = KernelCache(tmp_path)
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    got = cache.fetch(key, lambda: (NotKept("RuntimeError: no aot_autograd artifacts"), 7), lambda s: 0)
    assert (got.value, got.how) == (7, "built")
    assert got.note == "region kernels are not kept in the cache (RuntimeError: no aot_autograd artifacts): each run builds them again"
    assert cache.read(key) is None and not cache.entries()


RACER = """
import json, os, sys, time
from fuserc.runtime.kernel_cache import KernelCache, kernel_key

root, log, go = sys.argv[1:4]
key = kernel_key("region", {"ir": "race"}, "cpu", {"v": "1"})

def build():
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(0.5)
    return {"value": str(os.getpid()).encode()}, os.getpid()

while not os.path.exists(go):
    time.sleep(0.01)
got = KernelCache(root).fetch(key, build, lambda s: int(s["value"]))
print(json.dumps({"value": got.value, "how": got.how}))
"""


def test_racing_processes_build_a_key_once(tmp_path: Path) -> None:
    """Processes that ask for one missing kernel at the same moment: one
    builds it, the others wait for it and load what it wrote."""
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    log, go = tmp_path / "builds.log", tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache"), str(log), str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    time.sleep(0.3)
    go.touch()
    results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    builders = log.read_text().split()
    assert len(builders) == 1, builders
    assert {r["value"] for r in results} == {int(builders[0])}
    assert sorted(r["how"] for r in results) in (["built", "loaded", "waited", "waited"], ["built", "waited", "waited", "waited"])


def test_cache_info_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSERC_CACHE_DIR", str(tmp_path / "c"))
    runner = CliRunner()
    out = runner.invoke(main, ["cache", "info"])
    assert out.exit_code == 0 and f"cache: {tmp_path / 'c'} (empty: not created yet)" in out.output
    cache = KernelCache()
    assert cache.root == tmp_path / "c"
    for i in range(3):
        cache.write(kernel_key("region", {"i": i}, "cpu", VERSIONS), {"a": b"x" * 1000})
    cache.write(kernel_key("rows", {}, "cpu", VERSIONS), {"built": b""})
    (tmp_path / "c" / "triton" / "k").mkdir(parents=True)
    (tmp_path / "c" / "triton" / "k" / "k.cubin").write_bytes(b"y" * 2048)
    out = runner.invoke(main, ["cache", "info"])
    assert out.exit_code == 0
    assert "kernels: 4 (3 region, 1 rows)" in out.output and "Triton 2.0 KiB" in out.output
    out = runner.invoke(main, ["cache", "clear"])
    assert out.exit_code == 0 and "4 kernels" in out.output
    assert cache.entries() == [] and not (tmp_path / "c" / "triton").exists()


def test_the_default_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fuserc.runtime.kernel_cache import cache_dir

    monkeypatch.delenv("FUSERC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "fuserc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "fuserc"
    monkeypatch.setenv("FUSERC_CACHE_DIR", "~/k")
    assert cache_dir() == tmp_path / "home" / "k"
    assert os.path.isabs(cache_dir())


def test_inductor_compiles_in_process_while_fuserc_builds_and_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside `working_dirs` Inductor uses no subprocess pool (compile_threads
    1, by its config and by the variable read where the body first imports
    it); after it, the caller's setting and environment are back."""
    import torch._inductor.config as config

    monkeypatch.setattr(config, "compile_threads", 7)
    monkeypatch.setenv(THREADS_ENV, "5")
    with KernelCache(tmp_path).working_dirs():
        assert config.compile_threads == 1 and os.environ[THREADS_ENV] == "1"
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert config.compile_threads == 7 and os.environ[THREADS_ENV] == "5"
    monkeypatch.delenv(THREADS_ENV)
    with KernelCache(tmp_path).working_dirs():
        pass
    assert THREADS_ENV not in os.environ

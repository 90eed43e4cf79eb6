"""The kernel cache's store (runtime/kernels/kernel_cache.py): keys that are stable
and change with each thing a kernel depends on, entries written whole and
checked when read, one builder per key among racing processes, and
`fuserc cache info|clear`. The kernels themselves (Inductor's, on the CPU)
are in test_kernel_builds.py."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fuserc.cli import main
from fuserc.runtime.kernels.kernel_cache import THREADS_ENV, KernelCache, NotKept, Unusable, kernel_key

VERSIONS = {"fuserc": "0.1.0+abc", "torch": "2.13.0+def", "triton": "3.6.0", "python": "3.11"}
FIELDS = {"ir": "{ ^bb0(%0: tensor<4xf32>): ... }", "layouts": [[[4], [1], "float32"]], "contexts": {}}
DEVICE = "cuda:0 sm_90 cuda 12.8"


def test_key_is_stable_across_processes() -> None:
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    assert key == kernel_key("region", dict(reversed(FIELDS.items())), DEVICE, dict(VERSIONS))
    code = (
        "import json, sys; from fuserc.runtime.kernels.kernel_cache import kernel_key; "
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
    from fuserc.runtime.kernels.kernel_cache import versions

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
from fuserc.runtime.kernels.kernel_cache import KernelCache, kernel_key

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
    from fuserc.runtime.kernels.kernel_cache import cache_dir

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


# ---- a cache private to its user -------------------------------------------------------

OTHER_UID = 65534
"""The second user of the tests that need one (nobody)."""
ATTACKER = """
import json, os, sys
for path, mode, data in json.load(sys.stdin):
    if data is None:
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.write(fd, bytes.fromhex(data))
        os.close(fd)
"""
"""What the other user does: make folders and write files (path, mode, hex
bytes or None for a folder), in a process of its own uid."""


def as_other_user(ops: list[tuple[str, int, bytes | None]]) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as a second user")
    payload = json.dumps([(p, m, None if d is None else d.hex()) for p, m, d in ops])
    cmd = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", sys.executable, "-I", "-c", ATTACKER]
    subprocess.run(cmd, input=payload, text=True, check=True, timeout=60)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder both users can write in (as /tmp is)."""
    folder = Path(tempfile.mkdtemp(prefix="fuserc-test-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Evil:
    """A pickle that runs a command when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def planted_entry(key: Any, marker: Path, secret: bytes) -> bytes:
    """An entry whose artifact runs a command when unpickled, well formed
    and signed with `secret`."""
    from fuserc.runtime.kernels.kernel_cache import _encode

    return _encode(key, {"artifact": pickle.dumps(Evil(marker))}, 0.0, secret)


def fetch_unpickling(cache: KernelCache, key: Any) -> Any:
    """Fetch as a region's kernel is (its loader unpickles the artifact)."""
    return cache.fetch(key, lambda: ({"artifact": pickle.dumps("built here")}, "built here"), lambda s: pickle.loads(s["artifact"]))


def test_a_cache_folder_planted_by_another_user_is_never_used(shared_tmp: Path, tmp_path: Path) -> None:
    """Another user makes the cache folder, its key file and an entry whose
    pickle runs a command: the entry is never unpickled (the command never
    runs), the folder is not used (nothing written there), and the note says
    why, once per process."""
    root = shared_tmp / "cache"
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    marker = shared_tmp / "pwned"
    secret = b"s" * 32
    cache = KernelCache(root)
    entry = cache.entry_path(key)
    as_other_user([
        (str(root), 0o755, None), (str(root / "kernels"), 0o755, None), (str(entry.parent), 0o755, None),
        (str(root / "key"), 0o600, secret), (str(entry), 0o644, planted_entry(key, marker, secret)),
    ])  # fmt: skip
    for _ in range(2):
        got = fetch_unpickling(cache, key)
        assert (got.value, got.how) == ("built here", "built")
        assert "is not used" in got.note and f"owned by uid {OTHER_UID}" in got.note and "FUSERC_CACHE_DIR" in got.note
    assert not marker.exists()
    assert sorted(p.name for p in root.iterdir()) == ["kernels", "key"]  # nothing of this user's
    with KernelCache(root).working_dirs():  # the compilers' caches (pickles too) go elsewhere
        assert not os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(str(root))
    out = CliRunner().invoke(main, ["cache", "info"], env={"FUSERC_CACHE_DIR": str(root)})
    assert out.exit_code == 0 and f"not used: the cache folder {root} is owned by uid {OTHER_UID}" in out.output, out.output
    out = CliRunner().invoke(main, ["cache", "clear"], env={"FUSERC_CACHE_DIR": str(root)})
    assert out.exit_code == 1 and "cannot clear" in out.output and entry.exists()


def test_a_folder_others_can_write_is_not_used_until_cleared(shared_tmp: Path) -> None:
    """The user's own cache, made writable by all (a umask of 0): another
    user plants an entry (it cannot sign it: the key is 0600). The folder is
    not used; `fuserc cache clear` empties it and makes it private."""
    root = shared_tmp / "mine"
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    cache = KernelCache(root)
    cache.write(key, {"artifact": pickle.dumps("mine")})
    for folder in (root, root / "kernels", cache.entry_path(key).parent):
        folder.chmod(0o777)
    marker = shared_tmp / "pwned"
    from fuserc.runtime.kernels import kernel_cache

    kernel_cache._TRUST.clear()
    as_other_user([(str(cache.entry_path(key)) + ".new", 0o644, planted_entry(key, marker, b"x" * 32))])
    os.replace(str(cache.entry_path(key)) + ".new", cache.entry_path(key))
    got = fetch_unpickling(cache, key)
    assert got.how == "built" and "writable by its group or others (mode 0777)" in got.note and "fuserc cache clear" in got.note
    assert not marker.exists()
    out = CliRunner().invoke(main, ["cache", "clear"], env={"FUSERC_CACHE_DIR": str(root)})
    assert out.exit_code == 0, out.output
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and cache.untrusted() is None
    got = fetch_unpickling(cache, key)
    assert (got.how, got.note) == ("built", "")
    assert fetch_unpickling(cache, key).how == "loaded"


def test_an_entry_signed_with_another_key_is_not_loaded(tmp_path: Path) -> None:
    """An entry in the user's own private folder that its key did not sign
    (copied from another cache, or written by a process that knew another
    key) is rebuilt, never unpickled."""
    mine, theirs = KernelCache(tmp_path / "mine"), KernelCache(tmp_path / "theirs")
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    marker = tmp_path / "pwned"
    theirs.write(key, {"artifact": pickle.dumps(Evil(marker))})
    assert theirs.secret() != mine.secret()
    mine.entry_path(key).parent.mkdir(parents=True, mode=0o700)
    shutil.copy(theirs.entry_path(key), mine.entry_path(key))
    with pytest.raises(Unusable, match="not signed with this cache's key"):
        mine.read(key)
    got = fetch_unpickling(mine, key)
    assert (got.value, got.how) == ("built here", "rebuilt") and "not signed" in got.note
    assert not marker.exists()


def test_folders_and_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path / "a" / "cache")
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    old = os.umask(0)
    try:
        cache.write(key, {"a": b"1"})
        lock = cache.key_lock(key)
        assert lock.acquire(wait=False)
        lock.release()
    finally:
        os.umask(old)
    root = tmp_path / "a" / "cache"
    for folder in (tmp_path / "a", root, root / "kernels", cache.entry_path(key).parent, root / "locks"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for file in (root / "key", cache.entry_path(key), cache.lock_path(key)):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    assert cache.read(key) == {"a": b"1"}
    cache.entry_path(key).chmod(0o666)
    with pytest.raises(Unusable, match="writable by its group or others"):
        cache.read(key)


def test_special_files_planted_as_entries_are_refused_at_once(tmp_path: Path) -> None:
    """A FIFO (opening it to read would wait for a writer forever), a link
    to /dev/zero (endless) and a dangling link, each as an entry: reading
    refuses them without blocking, a fetch rebuilds them, and `fuserc cache
    info` counts them as unusable."""
    root = tmp_path / "c"
    cache = KernelCache(root)
    keys = [kernel_key("region", {"i": i}, DEVICE, VERSIONS) for i in range(3)]
    cache.write(keys[0], {"a": b"1"})
    for key in keys:
        cache.entry_path(key).parent.mkdir(parents=True, exist_ok=True)
        cache.entry_path(key).unlink(missing_ok=True)
    os.mkfifo(cache.entry_path(keys[0]))
    os.symlink("/dev/zero", cache.entry_path(keys[1]))
    os.symlink(tmp_path / "gone", cache.entry_path(keys[2]))
    signal.alarm(30)  # a read that blocks fails the test instead of hanging it
    try:
        for key, why in zip(keys, ("not a regular file (a named pipe)", "symbolic link", "symbolic link")):
            with pytest.raises(Unusable, match=re.escape(why)):
                cache.read(key)
            got = cache.fetch(key, lambda: ({"a": b"2"}, 2), lambda s: int(s["a"]))
            assert got.how == "rebuilt" and why in got.note
    finally:
        signal.alarm(0)
    for key in keys:  # planted again: `fuserc cache info` must not hang
        cache.entry_path(key).unlink()
    os.mkfifo(cache.entry_path(keys[0]))
    os.symlink("/dev/zero", cache.entry_path(keys[1]))
    os.symlink(tmp_path / "gone", cache.entry_path(keys[2]))
    out = subprocess.run([sys.executable, "-m", "fuserc", "cache", "info"], env={**os.environ, "FUSERC_CACHE_DIR": str(root)},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "kernels: 0" in out.stdout and "unreadable entries: 3" in out.stdout, out.stdout


def test_an_entry_over_the_size_bound_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fuserc.runtime.kernels import kernel_cache

    cache = KernelCache(tmp_path)
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    cache.write(key, {"a": b"x" * 4096})
    monkeypatch.setattr(kernel_cache, "MAX_ENTRY_BYTES", 1024)
    monkeypatch.setattr(kernel_cache.read_private, "__defaults__", (1024, None))
    with pytest.raises(Unusable, match="too large"):
        cache.read(key)


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, f"{os.getpid()} builder-host region abc123\\n".encode(), 0)
print("held", flush=True)
time.sleep(60)
"""


def test_a_wait_for_a_lock_is_bounded_and_says_what_it_waits_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Another process of the user holds a key's lock and never lets go: the
    waiter names it (pid, host, kernel, lock file) and builds the kernel
    itself once the bound has passed."""
    from fuserc.runtime.kernels import kernel_cache

    cache = KernelCache(tmp_path)
    key = kernel_key("region", FIELDS, DEVICE, VERSIONS)
    cache.key_lock(key).release()  # the lock file exists
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache.lock_path(key))], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(kernel_cache, "LOCK_NOTE_S", 0.1)
        monkeypatch.setattr(kernel_cache, "LOCK_WAIT_S", 0.5)
        got = cache.fetch(key, lambda: ({"a": b"7"}, 7), lambda s: int(s["a"]))
    finally:
        holder.kill()
        holder.wait()
    assert (got.value, got.how) == (7, "built")
    err = capsys.readouterr().err
    lock = cache.lock_path(key)
    assert f"fuserc: waiting for the build of region abc123 by process {holder.pid} on builder-host (lock {lock})" in err, err
    assert "gave up waiting" in err and "building the kernel here" in err

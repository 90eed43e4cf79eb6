"""The persistent cache of generated kernels, on disk, shared by every
process of a machine (the ranks of a job, and later jobs).

Where: `$FUSERC_CACHE_DIR`, else `$XDG_CACHE_HOME/fuserc`, else
`~/.cache/fuserc`. What: one entry per kernel, named by its key, the
SHA-256 of everything the kernel depends on (`kernel_key`: its kind, what
describes it (a launch region's IR, its layouts), the device, and the
versions of fuserc, torch, triton and Python).

Sharing: an entry is written to a temporary file in its folder and renamed
into place (`os.replace`, atomic), so a reader sees a whole entry or none;
it carries the SHA-256 of its contents, so a damaged one is found before it
is used. A kernel is built by one process per key: the builder holds the
key's lock file (`flock`, released by the system if the process dies), and
a process that finds it held waits, then reads what the builder wrote
(`KernelCache.fetch`). An unusable entry (damaged, or one this torch cannot
load) is built again under the lock, with a note.

Layout of the folder:

    kernels/ab/ab12...ef.kernel   entries (a header line, then the sections)
    locks/ab12...ef.lock          one lock file per key
    inductor/, triton/            TorchInductor's and Triton's own caches while
                                  fuserc builds and loads kernels (`working_dirs`)

Nothing here imports torch: `fuserc cache info` is quick.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

CACHE_ENV = "FUSERC_CACHE_DIR"
THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"
FORMAT = 1
"""The entry format and key layout; a change makes every older entry a miss."""

MAGIC = b"fuserc-kernel 1\n"
SUFFIX = ".kernel"

T = TypeVar("T")
Sections = dict[str, bytes]


@dataclass(frozen=True)
class NotKept:
    """What a build returns in place of an entry's sections when the kernel
    cannot be saved (it is used by the process that built it, not cached),
    and why: shown to the user, since every later run builds it again."""

    reason: str


def cache_dir() -> Path:
    """The cache's folder (not created here)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fuserc"


# ---- keys ---------------------------------------------------------------------


_VERSIONS: dict[str, str] | None = None


def versions() -> dict[str, str]:
    """The versions a kernel depends on: fuserc's release and a digest of
    its source (an edited checkout never reads kernels of another), torch
    (with its git revision), triton ("none" when absent) and Python."""
    global _VERSIONS
    if _VERSIONS is None:
        import importlib.metadata as md

        def release(*names: str) -> str:
            for name in names:
                try:
                    return md.version(name)
                except md.PackageNotFoundError:
                    continue
            return "none"

        import torch

        _VERSIONS = {
            "fuserc": f"{release('fuserc')}+{source_digest()[:16]}",
            "torch": f"{torch.__version__}+{getattr(torch.version, 'git_version', '')[:12]}",
            "triton": release("triton", "pytorch-triton", "pytorch-triton-rocm"),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        }
    return dict(_VERSIONS)


def source_digest() -> str:
    """SHA-256 of fuserc's Python source that kernels come from: the
    package itself, its dialects (each op's PyTorch semantics) and its
    runtime (the tracing of regions and the kernels)."""
    import importlib.util

    h = hashlib.sha256()
    for name in ("fuserc", "fuserc.dialects", "fuserc.runtime"):
        spec = importlib.util.find_spec(name)
        for folder in sorted(spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(folder).glob("*.py")):
                h.update(f"{name}/{path.name}\0".encode())
                h.update(path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class KernelKey:
    """A kernel's identity: `digest` names its entry; `doc` is what was hashed."""

    kind: str
    digest: str
    doc: Mapping[str, Any]

    def short(self) -> str:
        return f"{self.kind} {self.digest[:12]}"


def kernel_key(kind: str, fields: Mapping[str, Any], device: str, versions_: Mapping[str, str] | None = None) -> KernelKey:
    """The key of a kernel of `kind` described by `fields` (JSON values),
    for `device` (its kind and capability, e.g. "cuda sm_90 cuda 12.8"),
    built with `versions_` (default: this process's `versions()`)."""
    doc = {
        "format": FORMAT,
        "kind": kind,
        "fields": fields,
        "device": device,
        "versions": dict(versions() if versions_ is None else versions_),
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return KernelKey(kind, hashlib.sha256(text.encode()).hexdigest(), json.loads(text))


# ---- entries --------------------------------------------------------------------


class Unusable(Exception):
    """An entry that is there but cannot be used (damaged, or refused by
    whatever loads it): it is built again."""


@dataclass
class Fetched:
    """What `KernelCache.fetch` got: the kernel and how.

    `how`: "loaded" (the entry was there), "waited" (another process was
    building it; this one waited and loaded it), "built" (built here),
    "rebuilt" (built here in place of an unusable entry)."""

    value: Any
    how: str
    seconds: float
    note: str = ""


_DIRS_LOCK = threading.Lock()
_DIRS_DEPTH = 0
_DIRS_SAVED: tuple[dict[str, str | None], Any] | None = None
"""`KernelCache.working_dirs` across threads: how many are inside, and the
settings the first one found."""


class KernelCache:
    """The cache in folder `root` (default `cache_dir()`)."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    # -- places -------------------------------------------------------------
    def entry_path(self, key: KernelKey) -> Path:
        return self.root / "kernels" / key.digest[:2] / (key.digest + SUFFIX)

    def lock_path(self, key: KernelKey) -> Path:
        return self.root / "locks" / (key.digest + ".lock")

    @contextlib.contextmanager
    def working_dirs(self) -> Iterator[None]:
        """While the body runs (a build, a load, a row kernel's first
        launch): TorchInductor's and Triton's caches inside this one, so
        that everything fuserc generates lives, and is cleared, in one
        place; and Inductor compiling in this process (compile_threads 1).
        Inductor's default is a pool of min(32, cores) subprocesses per
        process, each importing torch: for one rank's few region kernels
        (loaded, or built in parallel by fuserc's own workers) starting it
        cost more than it saved, and stopping it at exit about 9 s per run
        on a 64-core machine of 4 GPUs. The caller's own torch.compile
        keeps its caches and its pool. Threads share it (a build in the
        background beside a row kernel's first launch): the first to enter
        sets the process's settings, the last to leave restores them."""
        global _DIRS_DEPTH, _DIRS_SAVED
        with _DIRS_LOCK:
            if _DIRS_DEPTH == 0:
                config = sys.modules.get("torch._inductor.config")
                saved = {v: os.environ.get(v) for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", THREADS_ENV)}
                _DIRS_SAVED = (saved, getattr(config, "compile_threads", None))
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.root / "inductor")
                os.environ["TRITON_CACHE_DIR"] = str(self.root / "triton")
                os.environ[THREADS_ENV] = "1"  # read where the body first imports Inductor's config
                if config is not None:
                    config.compile_threads = 1
            _DIRS_DEPTH += 1
        try:
            yield
        finally:
            with _DIRS_LOCK:
                _DIRS_DEPTH -= 1
                if _DIRS_DEPTH == 0 and _DIRS_SAVED is not None:
                    saved, threads = _DIRS_SAVED
                    for var, value in saved.items():
                        if value is None:
                            os.environ.pop(var, None)
                        else:
                            os.environ[var] = value
                    config = sys.modules.get("torch._inductor.config")
                    if config is not None:  # as it was, or as the caller's environment decides when the body imported it
                        config.compile_threads = threads if threads is not None else config.decide_compile_threads()

    # -- reading and writing ------------------------------------------------
    def read(self, key: KernelKey) -> Sections | None:
        """The entry's sections; None when there is none; `Unusable` when
        it is damaged or is another key's."""
        try:
            data = self.entry_path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Unusable(f"cannot be read ({e.strerror or e})") from None
        return _decode(data, key)

    def write(self, key: KernelKey, sections: Mapping[str, bytes], seconds: float = 0.0) -> None:
        """Write the entry atomically (a temporary file renamed into place)."""
        path = self.entry_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _encode(key, sections, seconds)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def key_lock(self, key: KernelKey) -> KeyLock:
        """The lock of `key` (not taken yet)."""
        return KeyLock(self.lock_path(key))

    def load(self, key: KernelKey, load: Callable[[Sections], T]) -> T | None:
        """The entry loaded by `load`; None when there is none. `Unusable`
        when it is damaged or `load` fails on it."""
        sections = self.read(key)
        if sections is None:
            return None
        try:
            return load(sections)
        except Exception as e:  # noqa: BLE001 - whatever the loader refuses is an unusable entry
            raise Unusable(f"could not be loaded ({type(e).__name__}: {e})") from e

    def fetch(
        self,
        key: KernelKey,
        build: Callable[[], tuple[Sections | NotKept, T]],
        load: Callable[[Sections], T],
    ) -> Fetched:
        """The kernel of `key`: loaded from its entry, or built (by this
        process, holding the key's lock, or by another that holds it: this
        one then waits and loads what it wrote). `build` returns the
        entry's sections (`NotKept`: the kernel cannot be saved; it is used,
        not cached) and the kernel itself."""
        start = time.perf_counter()
        try:
            value = self.load(key, load)
            if value is not None:
                return Fetched(value, "loaded", time.perf_counter() - start)
        except Unusable:
            pass  # looked at again under the lock: another process may be replacing it
        lock = self.key_lock(key)
        try:
            waited = not lock.acquire(wait=False)
            if waited:
                lock.acquire()
            return self.fetch_locked(key, build, load, start, waited)
        finally:
            lock.release()

    def fetch_locked(
        self,
        key: KernelKey,
        build: Callable[[], tuple[Sections | NotKept, T]],
        load: Callable[[Sections], T],
        start: float,
        waited: bool = False,
    ) -> Fetched:
        """`fetch` for a caller that holds the key's lock."""
        note = ""
        try:
            value = self.load(key, load)
            if value is not None:
                return Fetched(value, "waited" if waited else "loaded", time.perf_counter() - start)
        except Unusable as e:
            note = f"the cached kernel {self.entry_path(key)} {e}; building it again"
        how = "rebuilt" if note else "built"
        sections, value = build()
        if isinstance(sections, NotKept):
            note = f"{key.kind} kernels are not kept in the cache ({sections.reason}): each run builds them again"
        else:
            self.write(key, sections, time.perf_counter() - start)
        return Fetched(value, how, time.perf_counter() - start, note)

    # -- the whole cache ----------------------------------------------------
    def entries(self) -> list[Path]:
        folder = self.root / "kernels"
        return sorted(folder.glob("*/*" + SUFFIX)) if folder.is_dir() else []

    def info(self) -> dict[str, Any]:
        """What the cache holds: entries by kind, their bytes, and the bytes
        of TorchInductor's and Triton's working folders."""
        kinds: dict[str, int] = {}
        damaged = 0
        size = 0
        for path in self.entries():
            size += path.stat().st_size
            try:
                with path.open("rb") as f:
                    header = _header(f.read(1 << 16))
                kinds[header["kind"]] = kinds.get(header["kind"], 0) + 1
            except (OSError, Unusable):
                damaged += 1
        return {
            "root": str(self.root),
            "exists": self.root.is_dir(),
            "kinds": kinds,
            "damaged": damaged,
            "entry_bytes": size,
            "inductor_bytes": _folder_bytes(self.root / "inductor"),
            "triton_bytes": _folder_bytes(self.root / "triton"),
        }

    def clear(self) -> int:
        """Remove everything in the cache; the bytes freed."""
        import shutil

        freed = 0
        for sub in ("kernels", "locks", "inductor", "triton"):
            folder = self.root / sub
            if folder.is_dir():
                freed += _folder_bytes(folder)
                shutil.rmtree(folder, ignore_errors=True)
        return freed


class KeyLock:
    """A key's lock file, held with `flock`: one holder at a time among the
    processes of a machine; the system releases it when its holder dies."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self.held = False

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock (waiting for it with `wait`); whether it is held."""
        import fcntl

        assert self.fd is not None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        self.held = True
        return True

    def release(self) -> None:
        """Let go of the lock (if held) and close its file."""
        if self.fd is None:
            return
        try:
            if self.held:
                import fcntl

                fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd, self.held = None, False


def _folder_bytes(folder: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


# ---- the entry format -------------------------------------------------------------
# MAGIC, a JSON header line (key, kind, the key's document, each section's
# name, length and SHA-256, when and how long it took to build), then the
# sections' bytes in order.


def _encode(key: KernelKey, sections: Mapping[str, bytes], seconds: float) -> bytes:
    header = {
        "key": key.digest,
        "kind": key.kind,
        "doc": key.doc,
        "sections": [[name, len(data), hashlib.sha256(data).hexdigest()] for name, data in sections.items()],
        "created": time.time(),
        "build_seconds": round(seconds, 3),
        "builder": f"{socket.gethostname()}:{os.getpid()}",
    }
    line = json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    return MAGIC + line + b"".join(sections.values())


def _header(data: bytes) -> dict[str, Any]:
    if not data.startswith(MAGIC):
        raise Unusable("is not a fuserc kernel of this format")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise Unusable("is truncated (no header)")
    try:
        header = json.loads(data[len(MAGIC) : end])
        if not isinstance(header, dict) or not isinstance(header.get("sections"), list):
            raise ValueError("not a header")
    except ValueError:
        raise Unusable("has a damaged header") from None
    header["_start"] = end + 1
    return header


def _decode(data: bytes, key: KernelKey) -> Sections:
    header = _header(data)
    if header.get("key") != key.digest:
        raise Unusable(f"holds another kernel ({str(header.get('key'))[:12]})")
    pos = header["_start"]
    out: Sections = {}
    for name, length, digest in header["sections"]:
        chunk = data[pos : pos + length]
        if len(chunk) != length:
            raise Unusable("is truncated")
        if hashlib.sha256(chunk).hexdigest() != digest:
            raise Unusable(f"is damaged (section '{name}' does not match its checksum)")
        out[name] = chunk
        pos += length
    if pos != len(data):
        raise Unusable("has trailing bytes")
    return out

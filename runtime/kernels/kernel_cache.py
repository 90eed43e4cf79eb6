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
import hmac
import json
import os
import socket
import stat
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
FORMAT = 2
"""The entry format and key layout; a change makes every older entry a miss."""

MAGIC = b"fuserc-kernel 2\n"
SUFFIX = ".kernel"
SECRET = "key"
SECRET_BYTES = 32
MAX_ENTRY_BYTES = 1 << 30
"""The largest entry read (a region's artifact and constants are megabytes)."""
LOCK_NOTE_S = 10.0
"""A wait for another process's build longer than this says what it waits on."""
LOCK_WAIT_S = 300.0
"""A wait for another process's build longer than this gives up: the kernel
is built here (the entry is written atomically either way)."""

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
    """An entry that is there but cannot be used (damaged, unsigned, not a
    regular file of the user's, or refused by whatever loads it): it is
    built again."""


class Untrusted(Exception):
    """A cache folder (or its secret) that someone else could have written:
    nothing in it is used."""


def _private_problem(st: os.stat_result, what: str, secret: bool = False) -> str | None:
    """Why a file or folder with status `st` could hold what someone else
    wrote (None: it cannot): not the user's, or writable (for the secret:
    readable) by its group or others."""
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    mask = 0o077 if secret else 0o022
    if st.st_mode & mask:
        who = "readable or writable" if secret else "writable"
        return f"{what} is {who} by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def private_dir(path: Path, what: str = "the cache folder", make: bool = True) -> None:
    """Make `path` (and its missing parents) a folder of mode 0700 whatever
    the umask (`make`), or check the one that is there: `Untrusted` when
    it is not a folder of the user's that only the user can write;
    `FileNotFoundError` when it is missing and not `make`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not make:
            raise
        if not path.parent.exists():
            private_dir(path.parent, what)
        with contextlib.suppress(FileExistsError):  # another process made it: checked below
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        st = os.stat(path)  # a link to the cache is fine when what it names is private
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{what} {path} is not a folder")
    problem = _private_problem(st, f"{what} {path}")
    if problem is not None:
        raise Untrusted(problem)


def read_private(path: Path, limit: int = MAX_ENTRY_BYTES, head: int | None = None) -> bytes:
    """The bytes of `path` (the first `head` of them when given), read only
    when it is a regular file of the user's that others cannot write, of at
    most `limit` bytes: a FIFO, a device or a symbolic link is refused
    without blocking. `FileNotFoundError` when there is none; `Unusable`
    for anything else found there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.islink(path):
            raise Unusable("is a symbolic link") from None
        raise
    except OSError as e:
        if os.path.islink(path):
            raise Unusable("is a symbolic link") from None
        raise Unusable(f"cannot be read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unusable(f"is not a regular file (a {_file_kind(st.st_mode)})")
        problem = _private_problem(st, "it")
        if problem is not None:
            raise Unusable(problem.removeprefix("it "))
        if st.st_size > limit:
            raise Unusable(f"is too large ({st.st_size} bytes; at most {limit})")
        want = st.st_size if head is None else min(head, st.st_size)
        chunks, got = [], 0
        while got <= want:  # one byte more than it said: a file that grows is not an entry
            chunk = os.read(fd, min(1 << 22, want + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > want and head is None:
            raise Unusable("changed while it was read")
        return b"".join(chunks)[:want]
    except OSError as e:
        raise Unusable(f"cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "named pipe"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "folder")):  # fmt: skip
        if test(mode):
            return name
    return "special file"


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


_TRUST: dict[Path, bytes | Untrusted] = {}
"""Per cache folder, once per process: its secret, or why it is not used."""
_SCRATCH: list[Path] = []
"""The private folder of this process's compiler caches when the kernel cache
is not used."""


class KernelCache:
    """The cache in folder `root` (default `cache_dir()`)."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    # -- trust --------------------------------------------------------------
    def secret(self) -> bytes:
        """The cache's secret, making the folder (0700) and the secret (0600)
        when they are missing; `Untrusted` (the same every time in a process)
        when the folder or the secret could be someone else's."""
        found = _TRUST.get(self.root)
        if found is None:
            try:
                found = self._open_secret()
            except Untrusted as e:
                found = e
            except OSError as e:
                found = Untrusted(f"{self.root} cannot be used ({e.strerror or e})")
            _TRUST[self.root] = found
        if isinstance(found, Untrusted):
            raise found
        return found

    def _open_secret(self) -> bytes:
        for folder in (self.root, self.root / "kernels", self.root / "locks"):
            private_dir(folder)
        path = self.root / SECRET
        for _ in range(2):
            try:
                data = read_private(path, limit=SECRET_BYTES)
            except FileNotFoundError:
                fd, tmp = tempfile.mkstemp(prefix=".tmp-key-", dir=self.root)
                try:
                    os.fchmod(fd, 0o600)
                    os.write(fd, os.urandom(SECRET_BYTES))
                    os.fsync(fd)
                    os.close(fd)
                    with contextlib.suppress(FileExistsError):  # another process made it first: theirs is read
                        os.link(tmp, path)
                finally:
                    os.unlink(tmp)
                continue
            except Unusable as e:
                raise Untrusted(f"its key file {path} {e}") from None
            st = os.stat(path, follow_symlinks=False)
            problem = _private_problem(st, f"its key file {path}", secret=True)
            if problem is not None:
                raise Untrusted(problem)
            if len(data) != SECRET_BYTES:
                raise Untrusted(f"its key file {path} is damaged ({len(data)} bytes, not {SECRET_BYTES})")
            return data
        raise Untrusted(f"its key file {path} could not be made")

    def untrusted(self) -> str | None:
        """Why the cache is not used (None: it is), with what to do."""
        try:
            self.secret()
        except Untrusted as e:
            return f"{e}: anything in it could be someone else's. {self.remedy(e)}"
        return None

    def remedy(self, why: Untrusted) -> str:
        if "owned by uid" in str(why) and self.root.exists() and os.stat(self.root).st_uid != os.geteuid():
            return f"Set ${CACHE_ENV} to a folder of your own, or remove {self.root}"
        return "`fuserc cache clear` empties it and makes it private"

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
                work = self._work_root()
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")
                os.environ["TRITON_CACHE_DIR"] = str(work / "triton")
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

    def _work_root(self) -> Path:
        """Where the compilers' own caches go: in the cache, or, when it is
        not used, in a private folder of this process (their caches load
        pickles and shared libraries too)."""
        if self.untrusted() is None:
            return self.root
        if not _SCRATCH:
            import atexit
            import shutil

            _SCRATCH.append(Path(tempfile.mkdtemp(prefix="fuserc-kernels-")))
            atexit.register(shutil.rmtree, _SCRATCH[0], True)
        return _SCRATCH[0]

    # -- reading and writing ------------------------------------------------
    def read(self, key: KernelKey) -> Sections | None:
        """The entry's sections, once its signature is checked; None when
        there is none; `Unusable` when it is damaged, unsigned, another
        key's or not a private regular file; `Untrusted` when the cache is
        not used."""
        secret = self.secret()
        try:
            private_dir(self.entry_path(key).parent, make=False)
        except FileNotFoundError:
            return None
        except Untrusted as e:
            raise Unusable(str(e)) from None
        try:
            data = read_private(self.entry_path(key))
        except FileNotFoundError:
            return None
        return _decode(data, key, secret)

    def write(self, key: KernelKey, sections: Mapping[str, bytes], seconds: float = 0.0) -> None:
        """Write the entry atomically (a temporary file, 0600, renamed into
        place), signed with the cache's secret; `Untrusted` when the cache
        is not used."""
        secret = self.secret()
        path = self.entry_path(key)
        private_dir(path.parent)
        data = _encode(key, sections, seconds, secret)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.replace(tmp, path)
            except IsADirectoryError:  # a folder where the entry goes (in the private folder: the user's own)
                import shutil

                shutil.rmtree(path)
                os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def key_lock(self, key: KernelKey) -> KeyLock:
        """The lock of `key` (not taken yet): a file of the private folder;
        one of this process alone when the cache is not used."""
        try:
            self.secret()
        except Untrusted:
            return KeyLock(None, key.short())
        path = self.lock_path(key)
        private_dir(path.parent)
        try:
            return KeyLock(path, key.short())
        except (Untrusted, OSError):  # not a lock file of ours (a link, a pipe): replaced by one
            with contextlib.suppress(OSError):
                os.unlink(path)
            return KeyLock(path, key.short())

    def load(self, key: KernelKey, load: Callable[[Sections], T]) -> T | None:
        """The entry loaded by `load`; None when there is none (or the cache
        is not used). `Unusable` when it is damaged or `load` fails on it."""
        try:
            sections = self.read(key)
        except Untrusted:
            return None
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
                lock.acquire()  # bounded: past it, built here too
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
        untrusted = self.untrusted()
        try:
            value = self.load(key, load)
            if value is not None:
                return Fetched(value, "waited" if waited else "loaded", time.perf_counter() - start)
        except Unusable as e:
            note = f"the cached kernel {self.entry_path(key)} {e}; building it again"
        how = "rebuilt" if note else "built"
        sections, value = build()
        if untrusted is not None:
            note = f"the kernel cache {self.root} is not used (each run builds its kernels): {untrusted}"
        elif isinstance(sections, NotKept):
            note = f"{key.kind} kernels are not kept in the cache ({sections.reason}): each run builds them again"
        else:
            self.write(key, sections, time.perf_counter() - start)
        return Fetched(value, how, time.perf_counter() - start, note)

    # -- the whole cache ----------------------------------------------------
    def entries(self) -> list[Path]:
        folder = self.root / "kernels"
        return sorted(folder.glob("*/*" + SUFFIX)) if folder.is_dir() else []

    def info(self) -> dict[str, Any]:
        """What the cache holds: entries by kind, their bytes, the bytes of
        TorchInductor's and Triton's working folders, and why the cache is
        not used, if it is not. Reads headers only, of private regular
        files only (a planted pipe or link is counted as unusable)."""
        kinds: dict[str, int] = {}
        damaged = 0
        size = 0
        exists = self.root.is_dir()
        untrusted = self.untrusted() if exists else None
        for path in self.entries():
            try:
                size += os.lstat(path).st_size
                header = self.header(path)
                kinds[header["kind"]] = kinds.get(header["kind"], 0) + 1
            except (OSError, Unusable):
                damaged += 1
        return {
            "root": str(self.root),
            "exists": exists,
            "untrusted": untrusted,
            "kinds": kinds,
            "damaged": damaged,
            "entry_bytes": size,
            "inductor_bytes": _folder_bytes(self.root / "inductor"),
            "triton_bytes": _folder_bytes(self.root / "triton"),
        }

    @staticmethod
    def header(path: Path) -> dict[str, Any]:
        """An entry's header (its key, kind, builder, sections), unchecked:
        for reports, never for loading. `Unusable` when there is none."""
        return _header(read_private(path, head=1 << 16))

    def clear(self) -> int:
        """Remove everything in the cache (its secret too) and make the
        folder private again; the bytes freed. `Untrusted` for a folder
        that is not the user's."""
        import shutil

        if not self.root.exists():
            return 0
        st = os.stat(self.root)
        if st.st_uid != os.geteuid():
            raise Untrusted(f"the cache folder {self.root} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})")
        freed = 0
        for sub in ("kernels", "locks", "inductor", "triton"):
            folder = self.root / sub
            if folder.is_dir() and not folder.is_symlink():
                freed += _folder_bytes(folder)
                shutil.rmtree(folder, ignore_errors=True)
            elif os.path.lexists(folder):
                os.unlink(folder)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / SECRET)
        os.chmod(self.root, 0o700)
        _TRUST.pop(self.root, None)
        return freed


class KeyLock:
    """A key's lock file (in the cache's private folder), held with `flock`:
    one holder at a time among the user's processes of a machine; the
    system releases it when its holder dies. The holder writes who it is
    into it, so that a process waiting says what it waits on. Without a
    path (the cache is not used) it is this process's alone."""

    def __init__(self, path: Path | None, what: str = "a kernel"):
        self.path, self.what = path, what
        self.fd: int | None = None
        if path is not None:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            st = os.fstat(self.fd)
            problem = None if stat.S_ISREG(st.st_mode) else "is not a regular file"
            problem = problem or _private_problem(st, "it")
            if problem is not None:
                os.close(self.fd)
                raise Untrusted(f"the lock file {path} {problem.removeprefix('it ')}")
        self.held = False
        self.open = True

    def acquire(self, wait: bool = True, wait_s: float | None = None) -> bool:
        """Take the lock; whether it is held. With `wait`, waits for it (at
        most `wait_s`, default `LOCK_WAIT_S`; after `LOCK_NOTE_S` it says on
        stderr which process holds it) and, when the wait runs out, goes on
        without it (True: the caller builds; entries are written whole)."""
        import fcntl

        if self.fd is None:
            self.held = self.open
            return self.held
        limit = LOCK_WAIT_S if wait_s is None else wait_s
        start = time.monotonic()
        pause = 0.005
        noted = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            waited = time.monotonic() - start
            if not wait:
                return False
            if waited >= limit:
                _say(f"fuserc: gave up waiting for {self.holder()} after {waited:.0f} s; building the kernel here")
                return True
            if waited >= LOCK_NOTE_S and not noted:
                noted = True
                _say(f"fuserc: waiting for {self.holder()} (at most {limit:.0f} s more; then it is built here)")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        self.held = True
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()} {socket.gethostname()} {self.what}\n".encode(), 0)
        return True

    def holder(self) -> str:
        """What the lock's holder wrote: the build this process waits on."""
        try:
            pid, host, what = os.pread(self.fd, 512, 0).decode(errors="replace").strip().split(" ", 2)  # type: ignore[arg-type]
            return f"the build of {what} by process {pid} on {host} (lock {self.path})"
        except (OSError, ValueError):
            return f"the build of {self.what} by another process (lock {self.path})"

    def release(self) -> None:
        """Let go of the lock (if held) and close its file."""
        self.open = False
        if self.fd is None:
            self.held = False
            return
        try:
            if self.held:
                import fcntl

                fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd, self.held = None, False


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def _folder_bytes(folder: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


# ---- the entry format -------------------------------------------------------------
# MAGIC, the signature line (the hex HMAC-SHA256, keyed by the cache's
# secret, of everything after it), a JSON header line (key, kind, the key's
# document, each section's name, length and SHA-256, when and how long it
# took to build), then the sections' bytes in order.

SIGNATURE_CHARS = 64


def _sign(secret: bytes, body: bytes) -> bytes:
    return hmac.new(secret, body, hashlib.sha256).hexdigest().encode()


def _encode(key: KernelKey, sections: Mapping[str, bytes], seconds: float, secret: bytes) -> bytes:
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
    body = line + b"".join(sections.values())
    return MAGIC + _sign(secret, body) + b"\n" + body


BODY_AT = len(MAGIC) + SIGNATURE_CHARS + 1


def _header(data: bytes) -> dict[str, Any]:
    if not data.startswith(MAGIC):
        raise Unusable("is not a fuserc kernel of this format")
    end = data.find(b"\n", BODY_AT)
    if end < 0 or data[BODY_AT - 1 : BODY_AT] != b"\n":
        raise Unusable("is truncated (no header)")
    try:
        header = json.loads(data[BODY_AT:end])
        if not isinstance(header, dict) or not isinstance(header.get("sections"), list):
            raise ValueError("not a header")
    except ValueError:
        raise Unusable("has a damaged header") from None
    header["_start"] = end + 1
    return header


def _decode(data: bytes, key: KernelKey, secret: bytes) -> Sections:
    """The sections of an entry of `key`, checked: its form and checksums
    (damage), then its signature (who wrote it), before anything loads it."""
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
    if not hmac.compare_digest(data[len(MAGIC) : BODY_AT - 1], _sign(secret, data[BODY_AT:])):
        raise Unusable("is not signed with this cache's key (written by someone else, or by another cache's fuserc): it is not loaded")
    return out

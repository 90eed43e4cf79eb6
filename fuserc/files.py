"""Files fuserc writes for a user (`opt -o`, `run --save-outputs`,
`--trace`): written whole or not at all.

A file is written under a temporary name in its own folder, then renamed
over the old one: a write that fails (a full disk, `ulimit -f`, an
interrupt) leaves the old file as it was, also when it is the program
being compiled (`fuserc opt s.mlir -o s.mlir`)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write `path`'s new contents to; on a normal exit it
    takes `path`'s place (its mode kept, or the umask's for a new file), on
    an exception it is removed and `path` is untouched. A path that is not
    a regular file (`/dev/null`, a named pipe, `/dev/stdout`) is written in
    place; a symbolic link keeps pointing where it did, at the new file."""
    target = os.path.realpath(path)
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "wb") as f:
            yield f
        return
    folder, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

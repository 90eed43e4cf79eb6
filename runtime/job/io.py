"""Global tensors in and out of a sharded run.

Inputs are global tensors (from .npy files, or random from a seed) that
every rank holds whole and cuts into its own shard with
`fuserc.sharding.shard_array`. Outputs are gathered from the ranks holding
shards to one rank and assembled at their global shape; partial results are
summed. NumPy has no bfloat16: bf16 tensors travel and are saved as float32.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fuserc.diagnostics import Diagnostic
from fuserc.runtime.evaluator.evaluator import ValueSpec
from fuserc.runtime.job.job import LOCAL_SIZE_ENVS
from fuserc.runtime.job.mpi_env import MpiEnv
from fuserc.sharding import Mesh, global_slots, shard_array

_FILE_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(np.float32),
    torch.int64: np.dtype(np.int64),
    torch.bool: np.dtype(np.bool_),
}
"""The NumPy dtype that holds a tensor of each dtype in files and in transit."""


def host_dtype(dtype: torch.dtype) -> np.dtype:
    return _FILE_DTYPES[dtype]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as NumPy (bf16 as float32)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32)
    return t.contiguous().numpy()


def _type_text(spec: ValueSpec) -> str:
    return str(spec.global_type)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def check_global_input(value: np.ndarray | torch.Tensor, spec: ValueSpec, source: str = "") -> torch.Tensor:
    """A global input as a tensor of the argument's dtype; a Diagnostic
    naming the argument when its shape or dtype is not the expected one.
    A bf16 argument takes float32 values (rounded to bf16)."""
    where = f"{spec.label}{f' ({source})' if source else ''}"
    want_np = host_dtype(spec.dtype)
    if isinstance(value, np.ndarray):
        got_shape, got_dtype = tuple(value.shape), str(value.dtype)
        ok = value.dtype == want_np
    elif isinstance(value, torch.Tensor):
        got_shape, got_dtype = tuple(value.shape), str(value.dtype).removeprefix("torch.")
        ok = value.dtype == spec.dtype or (spec.dtype == torch.bfloat16 and value.dtype == torch.float32)
    else:
        raise Diagnostic(f"{where}: expected an array, got {type(value).__name__}")
    if got_shape != spec.global_shape or not ok:
        raise _mismatch(spec, where, got_dtype, got_shape)
    if isinstance(value, np.ndarray):  # (ascontiguousarray makes a rank-0 array rank 1)
        t = torch.from_numpy(np.ascontiguousarray(value).reshape(value.shape))
    else:
        t = value.detach()  # where it is: a GPU tensor is cut into shards on its GPU
    return t.to(spec.dtype)


def _mismatch(spec: ValueSpec, where: str, got_dtype: str, got_shape: tuple[int, ...]) -> Diagnostic:
    want = host_dtype(spec.dtype)
    want_name = f"{want}" + (" (for bf16)" if spec.dtype == torch.bfloat16 else "")
    return Diagnostic(
        f"{where}: expected a {want_name} array of shape {list(spec.global_shape)} "
        f"for {_type_text(spec)}, got a {got_dtype} array of shape {list(got_shape)}"
    )


def load_inputs(paths: Sequence[str], params: Sequence[ValueSpec]) -> list[torch.Tensor]:
    """The global inputs from .npy files, one per argument in order; each
    file is checked (format, header, size, dtype and shape against the
    argument) before its data is read."""
    if len(paths) != len(params):
        raise Diagnostic(
            f"the program takes {len(params)} inputs, got {len(paths)} (-i/--input once per argument, in order)"
        )
    return [check_global_input(read_npy(path, spec), spec, path) for path, spec in zip(paths, params)]


NPY_MAGIC = b"\x93NUMPY"


def read_npy(path: str, spec: ValueSpec) -> np.ndarray:
    """The array of a .npy file, read only after its header was checked:
    the magic bytes and version, a well-formed header with a plain dtype (no
    objects: nothing is unpickled), the data's size against the file's
    length, and the dtype and shape the argument expects (so a forged
    header never allocates). Only a regular file is read: a named pipe or a
    device is refused before anything is read from it (a pipe with no
    writer would never deliver). A Diagnostic names the argument and the
    file."""
    from numpy.lib import format as npy

    from fuserc.cli import file_kind

    where = f"{spec.label} ({path})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a named pipe opens at once: it is refused below
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            kind = file_kind(path) or "something else"
            raise Diagnostic(f"{where}: it is {kind}, not a regular file; -i takes .npy files written by numpy.save")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            length = os.fstat(f.fileno()).st_size
            head = f.read(len(NPY_MAGIC) + 2)
            if len(head) < len(NPY_MAGIC) + 2 or not head.startswith(NPY_MAGIC):
                what = "is empty" if length == 0 else "does not start with NumPy's magic bytes \\x93NUMPY"
                raise Diagnostic(f"{where}: not a .npy file (it {what}); -i takes files written by numpy.save")
            version = (head[-2], head[-1])
            f.seek(0)
            try:
                npy.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = npy.read_array_header_1_0(f)
                elif version in ((2, 0), (3, 0)):
                    shape, fortran, dtype = npy.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unknown .npy format version {version[0]}.{version[1]}")
            except (ValueError, EOFError, OSError, SyntaxError) as e:
                raise Diagnostic(f"{where}: a malformed .npy header: {_first_line(e)}") from None
            if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
                raise Diagnostic(f"{where}: holds {dtype} values; -i takes arrays of plain numbers")
            offset = f.tell()
            if tuple(shape) != spec.global_shape or dtype != host_dtype(spec.dtype):
                raise _mismatch(spec, where, str(dtype), tuple(shape))
            count = math.prod(shape)
            nbytes = count * dtype.itemsize
            if length - offset != nbytes:
                state = "truncated" if length - offset < nbytes else "longer than its header says"
                raise Diagnostic(
                    f"{where}: the file is {state}: its header announces {nbytes} bytes of data "
                    f"({dtype} {list(shape)}), the file holds {length - offset}"
                )
            data = np.fromfile(f, dtype=dtype, count=count)
    except OSError as e:
        raise Diagnostic(f"{where}: cannot read it: {e.strerror or e}") from None
    return data.reshape(shape, order="F" if fortran else "C")


def _first_line(e: BaseException) -> str:
    text = re.sub(r"<(ast\.\w+) object at 0x[0-9a-f]+>", r"\1", str(e).strip())
    return text.splitlines()[0] if text else type(e).__name__


LOCAL_RANKS_ENV = LOCAL_SIZE_ENVS
"""How many ranks share this node: each of them holds the global inputs whole."""


def available_memory() -> int | None:
    """Bytes of host memory available for new allocations (MemAvailable on
    Linux), None where it cannot be known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _ranks_on_node() -> int:
    for name in LOCAL_RANKS_ENV:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def _size_text(n: int) -> str:
    units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    x, k = float(n), 0
    while x >= 1024 and k < len(units) - 1:
        x, k = x / 1024, k + 1
    return f"{n} bytes" if k == 0 else f"{n} bytes ({x:.1f} {units[k]})"


def check_inputs_fit(params: Sequence[ValueSpec], available: int | None = None, ranks: int | None = None) -> None:
    """A Diagnostic, before anything is allocated, when the global inputs
    (which every rank of the node holds whole, plus the float32 draw of the
    largest 16-bit one) do not fit in the host memory available."""
    itemsize = {spec.index: torch.empty((), dtype=spec.dtype).element_size() for spec in params}
    sizes = [(spec, math.prod(spec.global_shape)) for spec in params]
    need = sum(n * itemsize[spec.index] for spec, n in sizes)
    need += max((n * 4 for spec, n in sizes if spec.dtype.is_floating_point and itemsize[spec.index] < 4), default=0)
    available = available_memory() if available is None else available
    ranks = _ranks_on_node() if ranks is None else ranks
    if available is None or need * ranks <= available:
        return
    largest = max(sizes, key=lambda sn: sn[1] * itemsize[sn[0].index])[0]
    per_node = f" ({_size_text(need * ranks)} for the {ranks} ranks of this node)" if ranks > 1 else ""
    raise Diagnostic(
        f"the random inputs need {_size_text(need)} of host memory on each rank{per_node}, but "
        f"{_size_text(available)} are available (the largest is {largest.label}, {_type_text(largest)}); "
        "use smaller shapes, or give the inputs with -i"
    )


def random_inputs(
    params: Sequence[ValueSpec], seed: int, domains: Sequence[tuple[float, float] | None] | None = None
) -> list[torch.Tensor]:
    """Global inputs drawn from `seed`, identical on every rank: standard
    normal floats (rounded to the argument's dtype), integers in [-8, 8),
    booleans; argument i uses the generator seeded with seed + i. Where
    `domains[i]` gives a range [low, high) (`input_domains`), argument i is
    drawn uniformly from it instead. Refused first when they would not fit
    in memory (`check_inputs_fit`)."""
    check_inputs_fit(params)
    out = []
    for spec in params:
        g = torch.Generator().manual_seed(seed + spec.index)
        shape = spec.global_shape
        domain = domains[spec.index] if domains is not None else None
        if spec.dtype.is_floating_point:
            if domain is None:
                t = torch.randn(shape, generator=g, dtype=torch.float32)
            else:
                t = torch.rand(shape, generator=g, dtype=torch.float32) * (domain[1] - domain[0]) + domain[0]
            t = t.to(spec.dtype)
        elif spec.dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=g).to(torch.bool)
        else:
            low, high = (int(domain[0]), int(domain[1])) if domain is not None else (-8, 8)
            t = torch.randint(low, max(high, low + 1), shape, generator=g, dtype=spec.dtype)
        out.append(t)
    return out


def input_domains(func: Any) -> list[tuple[float, float] | None]:
    """Per argument of a fusion function, the range its random values are
    drawn from for the ops using it to be defined and well conditioned
    (`FusionOp.operand_domain`: ids of an embedding, labels of a
    cross_entropy, arguments of log, weights of a GEMM or a norm), followed
    through ops that only move elements (reshape, permute, set, ...); the
    intersection where several uses say one; None where none does."""
    from fuserc.dialects.fusion import FusionOp
    from fuserc.dialects.fusion_layout import MOVES_ELEMENTS

    out: list[tuple[float, float] | None] = []
    for arg in func.body.block.args:
        domain: tuple[float, float] | None = None
        todo, seen = [arg], set()
        while todo:
            value = todo.pop()
            for use in value.uses:
                op = use.operation
                if not isinstance(op, FusionOp) or (op, use.index) in seen:
                    continue
                seen.add((op, use.index))
                if isinstance(op, MOVES_ELEMENTS):
                    todo.append(op.results[0])
                    continue
                d = op.operand_domain(use.index)
                if d is not None:
                    domain = d if domain is None else (max(domain[0], d[0]), min(domain[1], d[1]))
        out.append(domain)
    return out


def shard_input(value: torch.Tensor, spec: ValueSpec, rank: int) -> torch.Tensor | None:
    """This rank's shard of a global input (None when it holds none). For a
    partial sharding the device at coordinate 0 of every partial axis holds
    the value and the others zeros, so that the sum is the value."""
    if not spec.present_on(rank):
        return None
    if spec.mesh is None:
        return value.contiguous()
    local = shard_array(value, spec.sharding, spec.mesh, rank).contiguous()
    coords = spec.mesh.coords(rank)
    if any(coords[spec.mesh.axis_of(p)] != 0 for p in spec.sharding.partial):
        local = torch.zeros_like(local)
    return local


def shard_inputs(values: Sequence[torch.Tensor], params: Sequence[ValueSpec], rank: int) -> list[torch.Tensor | None]:
    return [shard_input(v, s, rank) for v, s in zip(values, params, strict=True)]


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------


def contributors(spec: ValueSpec, size: int) -> list[int]:
    """The devices whose shards together make the global value: one per
    distinct block (and every summand of a partial value); replicas along
    mesh axes the sharding does not use are skipped."""
    mesh = spec.mesh
    if mesh is None:
        return [0]
    used = {mesh.axis_of(p) for p in (*spec.sharding.device_types(), *spec.sharding.partial)}
    return [d for d in mesh.devices if all(c == 0 for a, c in enumerate(mesh.coords(d)) if a not in used)]


def gather_outputs(
    results: Sequence[torch.Tensor | None], specs: Sequence[ValueSpec], env: MpiEnv, root: int = 0
) -> list[np.ndarray] | None:
    """Each result gathered at its global shape on `root` (None on the
    other ranks), also when `root` holds no shard of it. Collective: every
    rank calls it with its local results (CPU tensors, None where absent)."""
    comm = env.comm
    gathered: list[np.ndarray] = []
    for i, (local, spec) in enumerate(zip(results, specs, strict=True)):
        tag = 1000 + i % 30000
        senders = contributors(spec, env.size)
        if env.rank in senders and env.rank != root:
            if local is None:
                raise RuntimeError(f"{spec.label} is absent on rank {env.rank}, which holds a shard")
            comm.Send(np.ascontiguousarray(to_numpy(local)), dest=root, tag=tag)
        if env.rank != root:
            continue
        wire = host_dtype(spec.dtype)
        partial = bool(spec.sharding.partial)
        acc_dtype = np.float64 if partial and wire.kind == "f" else wire
        out = np.zeros(spec.global_shape, dtype=acc_dtype)
        for d in senders:
            if d == root:
                if local is None:
                    raise RuntimeError(f"{spec.label} is absent on rank {root}, which holds a shard")
                piece = to_numpy(local)
            else:
                piece = np.empty(spec.shape, dtype=wire)
                comm.Recv(piece, source=d, tag=tag)
            index = _block_index(spec, spec.mesh, d)
            if partial:
                out[index] += piece
            else:
                out[index] = piece
        gathered.append(out.astype(wire, copy=False))
    return gathered if env.rank == root else None


def _block_index(spec: ValueSpec, mesh: Mesh | None, device: int) -> Any:
    """The global positions of `device`'s shard, as a NumPy index."""
    if mesh is None:
        return ()
    slots = global_slots(spec.sharding, spec.global_shape, mesh, device)
    return np.ix_(*slots) if slots else ()


def gather_everywhere(results: Sequence[Any], specs: Sequence[ValueSpec], backend: Any) -> list[Any]:
    """Each result at its global shape on every rank (partials summed), as
    a new array of the backend (on a GPU it never leaves the device): one
    allgather over the job of each rank's shard (zeros where a rank holds
    none), then each contributor's block put in place. Collective: every
    rank calls it with its local results (None where absent)."""
    world = tuple(range(backend.size))
    if backend.size > 1:
        backend.prepare_teams([world])
    out = []
    for local, spec in zip(results, specs, strict=True):
        senders = contributors(spec, backend.size)
        if local is None:
            if backend.rank in senders:
                raise RuntimeError(f"{spec.label} is absent on rank {backend.rank}, which holds a shard")
            local = backend.empty(spec.shape, spec.dtype).zero_()
        if backend.size > 1:
            pieces = backend.empty((backend.size, *spec.shape), spec.dtype)
            backend.wait(backend.allgather(local.contiguous(), pieces, world))
        else:
            pieces = local.unsqueeze(0)
        partial = bool(spec.sharding.partial) if spec.mesh is not None else False
        acc = torch.float64 if partial and spec.dtype.is_floating_point else spec.dtype
        full = torch.zeros(spec.global_shape, dtype=acc, device=pieces.device)
        for d in senders:
            piece = pieces[d]
            if spec.mesh is None:
                full.copy_(piece)
                continue
            slots = global_slots(spec.sharding, spec.global_shape, spec.mesh, d)
            if all(isinstance(s, range) and s.step == 1 for s in slots):  # a block: a view, no index upload
                block = full[tuple(slice(s.start, s.stop) for s in slots)]
                block.add_(piece) if partial else block.copy_(piece)
                continue
            index = tuple(
                torch.as_tensor(list(s), dtype=torch.long, device=full.device).view(
                    [-1 if j == i else 1 for j in range(len(slots))]
                )
                for i, s in enumerate(slots)
            )
            full.index_put_(index, piece.to(acc), accumulate=partial)
        out.append(full.to(spec.dtype))
    return out


def save_outputs(directory: str, arrays: Sequence[np.ndarray]) -> list[str]:
    """DIR/out0.npy, DIR/out1.npy, ... (the directory is created); each
    file is whole or, when a write fails, as it was (`fuserc.files`)."""
    from fuserc.files import replacing

    try:
        os.makedirs(directory, exist_ok=True)
        paths = []
        for i, a in enumerate(arrays):
            path = os.path.join(directory, f"out{i}.npy")
            with replacing(path) as f:
                np.save(f, a)
            paths.append(path)
    except OSError as e:
        raise Diagnostic(f"cannot write outputs to {directory}: {e.strerror or e}") from None
    return paths

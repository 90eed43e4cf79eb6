"""A program's generated kernels through the kernel cache, on the CPU
(runtime/kernels/kernel_builds.py, runtime/kernels/cuda_regions.py): the dry run finds the
launches a run makes (with their layouts, views and aliases); the kernels
(Inductor's C++ ones here, Triton on a GPU: the same path) are built in
parallel by this process and a build worker, are right, and are loaded by
a later start; a damaged entry is rebuilt with a note; another version is
a miss; processes racing for a kernel build it once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fuserc.runtime.kernels import cuda_regions, kernel_builds
from fuserc.runtime.backends.cpu import CpuBackend, launch_with_torch
from fuserc.runtime.kernels.kernel_cache import KernelCache, kernel_key, versions
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.runtime.evaluator.program import compile_text
from fuserc.runtime.job.startup import KERNELS

ROOT = Path(__file__).parents[2]
CPU = torch.device("cpu")

STRIDED = """
func.func @main(%x: tensor<8x16xf32> {hir.global = tensor<8x16xf32>}) -> (tensor<8x16xf32> {hir.global = tensor<8x16xf32>}) attributes {hir.host} {
  %y = hir.alloc "main/y" : tensor<8x16xf32>
  hir.for %i = 0 to 2 {
    %xi = hir.chunk %x [%i] dim = 1 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<8x8xf32>
    %yi = hir.chunk %y [%i] dim = 1 chunks = 2 : (tensor<8x16xf32>, index) -> tensor<8x8xf32>
    hir.launch ins(%xi : tensor<8x8xf32>) outs(%yi : tensor<8x8xf32>) {
    ^bb0(%a: tensor<8x8xf32>):
      %e = fusion.exp %a : (tensor<8x8xf32>) -> tensor<8x8xf32>
      %t = fusion.tanh %e : (tensor<8x8xf32>) -> tensor<8x8xf32>
      hir.yield %t : tensor<8x8xf32>
    }
  }
  %v = hir.view %y : tensor<8x16xf32> -> tensor<4x32xf32>
  hir.launch ins(%v : tensor<4x32xf32>) outs(%v : tensor<4x32xf32>) {
  ^bb0(%b: tensor<4x32xf32>):
    %s = fusion.sum %b dims = [0] keepdim = true : (tensor<4x32xf32>) -> tensor<1x32xf32>
    %bb = fusion.broadcast_in_dim %s dims = [0, 1] : (tensor<1x32xf32>) -> tensor<4x32xf32>
    %m = fusion.mul %b, %bb : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    hir.yield %m : tensor<4x32xf32>
  }
  func.return %y : tensor<8x16xf32>
}
"""
"""Two regions: one launched twice on column chunks (strided views), one
whose output is its input (a reduction read before the buffer is written)."""

T = "tensor<16x8xf32, #fusion.sharding<@tp, [DIDx, -]>>"
INDEXED = f"""
fusion.mesh @tp shape = [1]
func.func @main(%x: {T}, %s: tensor<i64>) -> {T} {{
  %y = fusion.mul %x, %x : ({T}, {T}) -> {T}
  %d = fusion.dropout %y, %s p = 0.25 : ({T}, tensor<i64>) -> {T}
  func.return %d : {T}
}}
"""
"""A region with an INDEXED op: the global indices of its rows are
constants of its graph (inputs of the saved kernel)."""


class Recording(CpuBackend):
    """The cpu backend, noting each launch; with `check`, each launch also
    runs its generated kernel and compares it with the ops run one by one."""

    def __init__(self, check: bool = False):
        super().__init__(mpi_env())
        self.check = check
        self.seen: list[tuple[Any, ...]] = []
        self.wrong: list[str] = []

    def launch(self, body: Any, ins: Any, outs: Any, contexts: Any = None) -> None:
        operands = (*ins, *outs)
        key = (body, tuple(cuda_regions.layout_of(t) for t in operands), cuda_regions.aliases_of(operands))
        self.seen.append((*key, sorted(contexts or {}, key=id)))
        if not self.check:
            super().launch(body, ins, outs, contexts)
            return
        want = [o.clone() for o in outs]
        launch_with_torch(body, [i.clone() for i in ins], want, contexts)
        kernel = cuda_regions._COMPILED[key]
        assert kernel is not None
        kernel(*operands)
        if not all(torch.allclose(g, w, atol=1e-5) for g, w in zip(outs, want)):
            self.wrong.append(" ".join(op.name for op in body.ops))


def _program(text: str, check: bool = False) -> Any:
    return compile_text(text, pipeline="" if "hir.host" in text else "default", backend=Recording(check))


def _run(program: Any) -> None:
    program.execute(program.random_inputs(1))


def _gpt() -> str:
    return re.sub(r"(fusion\.mesh @tp shape = )\[\d+\]", r"\g<1>[1]", (ROOT / "examples" / "gpt_layer.mlir").read_text())


@pytest.mark.parametrize("text", [STRIDED, INDEXED, "gpt"], ids=["strided", "indexed", "gpt"])
def test_the_dry_run_finds_every_launch(text: str) -> None:
    program = _program(_gpt() if text == "gpt" else text)
    planned = kernel_builds.needed_launches(program.program)
    _run(program)
    assert all(t.is_meta for _, ins, outs, _ in planned for t in (*ins, *outs))
    got = [
        (body, tuple(cuda_regions.layout_of(t) for t in (*ins, *outs)), cuda_regions.aliases_of((*ins, *outs)), sorted(c or {}, key=id))
        for body, ins, outs, c in planned
        if not program.backend.makes_results(body)  # attention: its results made by its kernel (`launch_made`), no region kernel
    ]
    assert got == program.backend.seen
    if text == STRIDED:
        assert [a for _, _, a, _ in got] == [(0, 1), (0, 1), (0, 0)]
        assert got[0][1][0][1] == (16, 1)


def test_regions_pytorch_runs_get_no_generated_kernel() -> None:
    """A region of one attention op and layout views runs PyTorch's
    attention kernels on either backend (runtime/kernels/attention.py), a lone erf
    gelu PyTorch's gelu on cuda (runtime/kernels/torch_regions.py): no kernel is
    built for them, only for the regions the backend runs with one."""
    from fuserc.runtime.kernels import torch_regions

    program = _program(_gpt())
    launches = kernel_builds.needed_launches(program.program)
    alone = [body for body, *_ in launches if torch_regions.runs_region(body)]
    names = {op.name for body in alone for op in body.ops}
    assert {"fusion.sdpa", "fusion.gelu"} <= names, names
    jobs = [job for group in kernel_builds.group_jobs(launches, CPU) for job in group]
    assert jobs and not any(torch_regions.runs_region(job.body) for job in jobs)
    assert len({job.body for job in jobs}) == len({body for body, *_ in launches}) - len(set(alone))

EARLY = """
import sys
from fuserc.runtime.kernels import kernel_builds
from fuserc.runtime.evaluator.program import compile_text
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.job.mpi_env import mpi_env
program = compile_text(open(sys.argv[1]).read(), pipeline=sys.argv[2], backend=CpuBackend(mpi_env()))
assert "torch._inductor.compile_fx" not in sys.modules
from fuserc.runtime.job import mpi_env as env_module
from fuserc.runtime.backends.cuda import import_compiler_early  # what `fuserc run` and the cuda backend's `loaded` call
env_module.ENDS_PROCESS[0] = sys.argv[3] == "command"
import_compiler_early(program.program.func)
for thread in kernel_builds._EARLY:
    thread.join()
print(sorted(m for m in kernel_builds.EARLY_MODULES if m in sys.modules))
"""


BIG = """
func.func @main(%x: tensor<512x256xf32>, %w: tensor<256x8xf32>) -> tensor<512x8xf32> {
  %y = fusion.gelu %x : (tensor<512x256xf32>) -> tensor<512x256xf32>
  %z = fusion.mul %y, %x : (tensor<512x256xf32>, tensor<512x256xf32>) -> tensor<512x256xf32>
  %m = fusion.matmul %z, %w : (tensor<512x256xf32>, tensor<256x8xf32>) -> tensor<512x8xf32>
  %t = fusion.tanh %m : (tensor<512x8xf32>) -> tensor<512x8xf32>
  func.return %t : tensor<512x8xf32>
}
"""
"""A region of 131072 elements (the gelu), then a small one (the tanh's 4096)."""


@pytest.mark.parametrize(
    "which,caller,mode,imported",
    [
        ("gpt", "command", "inductor", True),
        ("gpt", "command", "auto", False),
        ("big", "command", "auto", True),
        ("attention only", "command", "inductor", False),
        ("gpt", "library", "inductor", False),
    ],
)
def test_inductor_is_imported_early_for_programs_that_need_it(which: str, caller: str, mode: str, imported: bool, tmp_path: Path) -> None:
    """Under the `fuserc` command, a program whose regions get Inductor's
    kernels starts importing Inductor in a thread (before the backend
    starts, and at its load); one whose only region is attention's does
    not, nor one whose regions are all small under kernels "auto" (the
    example GPT layer: 64 x 256 at most), nor any program in a caller's
    process (fuserc.torch), whose own threads may be importing Inductor."""
    script = tmp_path / "early.py"
    script.write_text(EARLY)
    source = tmp_path / "p.mlir"
    source.write_text({"gpt": _gpt(), "big": BIG, "attention only": ATTENTION_ONLY}[which])
    env = {**os.environ, "FUSERC_KERNELS": mode}
    p = subprocess.run([sys.executable, str(script), str(source), "default", caller], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    want = sorted(kernel_builds.EARLY_MODULES) if imported else []
    assert p.stdout.strip() == str(want)


@pytest.mark.parametrize("mode", ["auto", "inductor", "cupy"])
def test_kernels_mode_chooses_the_programs_that_get_kernels(mode: str) -> None:
    """Under "auto" a program gets generated kernels for every region (its
    small ones too: one run op by op with torch would keep its runs from
    being replayed) when one region has an operand of SMALL_REGION elements
    or more (BIG's gelu), none when all are small (the example GPT layer);
    "inductor" gives every program its kernels, "cupy" none. The static
    count (`launch_numels`, from the host IR's types) agrees with the run's
    tensors."""
    from fuserc.dialects import hir
    from fuserc.runtime.kernels import cuda_regions

    for text, big in ((_gpt(), False), (BIG, True)):
        program = _program(text)
        gets = mode == "inductor" or (mode == "auto" and big)
        assert cuda_regions.program_generates(mode, program.program.func) == gets
        launches = kernel_builds.launches_with_kernels([program.program], mode)
        everything = kernel_builds.needed_launches(program.program)
        assert len(launches) == (len(everything) if gets else 0)
        if gets and big:
            sizes = sorted(max(t.numel() for t in (*ins, *outs)) for _, ins, outs, _ in launches)
            assert sizes[0] < cuda_regions.SMALL_REGION <= sizes[-1]  # the small region is built too
            assert len(kernel_builds.group_jobs(launches, CPU)) == len(launches)
        static = sorted(tuple(cuda_regions.launch_numels(op)) for op in program.program.func.walk() if isinstance(op, hir.LaunchOp))
        assert sorted({tuple(t.numel() for t in (*ins, *outs)) for _, ins, outs, _ in everything}) == sorted(set(static))
    assert cuda_regions.generates("auto", [cuda_regions.SMALL_REGION - 1, 3]) is False
    assert cuda_regions.generates("auto", [3, cuda_regions.SMALL_REGION]) is True
    assert cuda_regions.generates("auto", [3, None]) is True


def test_a_kernels_mode_not_known_is_a_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    from fuserc.diagnostics import Diagnostic
    from fuserc.runtime.kernels import cuda_regions

    monkeypatch.setenv("FUSERC_KERNELS", "triton")
    with pytest.raises(Diagnostic, match="FUSERC_KERNELS must be one of auto, inductor, cupy, got 'triton'"):
        cuda_regions.kernels_mode()
    monkeypatch.setenv("FUSERC_KERNELS", "inductor")
    assert cuda_regions.kernels_mode() == "inductor"
    monkeypatch.delenv("FUSERC_KERNELS")
    assert cuda_regions.kernels_mode() == "auto"


def test_kernels_are_fetched_after_the_early_imports(cache_dir: Path) -> None:
    """Fetching waits for `import_early`'s thread: two threads importing
    Inductor side by side can deadlock."""
    import threading

    done: list[int] = []
    thread = threading.Thread(target=lambda: (time.sleep(0.5), done.append(1)), daemon=True)
    kernel_builds._EARLY.append(thread)
    try:
        thread.start()
        kernel_builds.build_all([], CPU)
        assert done == [1]
    finally:
        kernel_builds._EARLY.remove(thread)


ATTENTION_ONLY = """
func.func @main(%q: tensor<1x2x64x16xf32>, %k: tensor<1x2x64x16xf32>, %v: tensor<1x2x64x16xf32>) -> tensor<1x2x64x16xf32> {
  %o = fusion.sdpa %q, %k, %v causal = true : (tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>) -> tensor<1x2x64x16xf32>
  func.return %o : tensor<1x2x64x16xf32>
}
"""


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cache for this module's tests (the compilers' working files in
    it make later builds of the same kernels quicker)."""
    root = tmp_path_factory.mktemp("kernels")
    old = os.environ.get("FUSERC_CACHE_DIR")
    os.environ["FUSERC_CACHE_DIR"] = str(root)
    yield root
    if old is None:
        del os.environ["FUSERC_CACHE_DIR"]
    else:
        os.environ["FUSERC_CACHE_DIR"] = old


def _prepare(*programs: Any, workers: int = 0) -> Any:
    before = KERNELS.copy()
    kernel_builds.prepare([p.program for p in programs], CPU, workers=workers)
    return KERNELS.since(before)


@pytest.fixture(scope="module")
def built(cache_dir: Path) -> Any:
    """The kernels of both programs built on a cold cache, by this process
    and one build worker."""
    return _prepare(_program(STRIDED), _program(INDEXED), workers=1)


def _builders(root: Path) -> set[int]:
    pids = set()
    for path in KernelCache(root).entries():
        pids.add(int(KernelCache.header(path)["builder"].split(":")[1]))
    return pids


def test_kernels_are_built_in_parallel(built: Any, cache_dir: Path) -> None:
    assert (built.built, built.loaded, built.failed) == (3, 0, 0)
    builders = _builders(cache_dir)
    assert os.getpid() in builders and len(builders) == 2, "this process and its worker built them"


def test_a_later_start_loads_every_kernel_and_they_are_right(built: Any) -> None:
    programs = [_program(STRIDED, check=True), _program(INDEXED, check=True)]
    got = _prepare(*programs)
    assert (got.loaded, got.built, got.rebuilt) == (3, 0, 0)
    for p in programs:
        _run(p)
        assert p.backend.wrong == []


def _entry_of(program: Any, index: int) -> Any:
    (group,) = kernel_builds.group_jobs([kernel_builds.needed_launches(program.program)[index]], CPU)
    return group[0]


def test_a_damaged_entry_is_rebuilt_with_a_note(built: Any, cache_dir: Path) -> None:
    program = _program(STRIDED, check=True)
    job = _entry_of(program, 2)
    path = KernelCache().entry_path(job.key)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="is damaged .*; building it again"):
        got = _prepare(program)
    assert (got.rebuilt, got.loaded, got.built) == (1, 1, 0)
    _run(program)
    assert program.backend.wrong == []


def test_another_version_is_a_miss(built: Any) -> None:
    job = _entry_of(_program(STRIDED), 0)
    cache = KernelCache()
    assert cache.read(job.key) is not None
    for name in ("fuserc", "torch", "triton"):
        other = kernel_key(job.key.kind, job.key.doc["fields"], job.key.doc["device"], {**versions(), name: "0.0.0"})
        assert other.digest != job.key.digest and cache.read(other) is None


RACER = """
import json, os, sys, time
import torch
from fuserc.ir import make_context, parse
from fuserc.runtime.kernels import kernel_builds
from fuserc.runtime.kernels.cuda_regions import RegionJob
from fuserc.runtime.job.startup import KERNELS

text, go = sys.argv[1], sys.argv[2]
body = next(op for op in parse(open(text).read(), "strided.mlir", make_context()).walk() if op.name == "hir.launch").body.block
job = RegionJob(body, (((8, 8), (16, 1), torch.float32),) * 2, (0, 1), 1, None, torch.device("cpu"))
print(job.key.digest, flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
kernel_builds.build_all([[job]], torch.device("cpu"), workers=0)
print(json.dumps({"built": KERNELS.built, "waited": KERNELS.waited, "loaded": KERNELS.loaded}))
"""


def test_racing_processes_build_a_region_once(built: Any, cache_dir: Path, tmp_path: Path) -> None:
    """Three processes start at once on a kernel missing from the cache:
    one builds it, the others wait and load it."""
    job = _entry_of(_program(STRIDED), 0)
    KernelCache().entry_path(job.key).unlink()
    (tmp_path / "strided.mlir").write_text(STRIDED)
    (tmp_path / "racer.py").write_text(RACER)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, str(tmp_path / "racer.py"), str(tmp_path / "strided.mlir"), str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        for p in procs:  # each has its key: it is ready
            assert p.stdout is not None and p.stdout.readline().strip() == job.key.digest
        go.touch()
        results = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    finally:
        for p in procs:  # none is left waiting for `go`
            p.kill()
            p.wait()
    assert sorted(r["built"] for r in results) == [0, 0, 1]
    assert all(r["built"] + r["waited"] + r["loaded"] == 1 for r in results)
    assert KernelCache().read(job.key) is not None


def test_a_worker_builds_the_kernel_this_process_would(built: Any) -> None:
    """What a build worker gets (the job's spec, pickled: the region as
    text, its layouts, aliases and INDEXED ops' contexts) makes the same
    kernel as the region itself."""
    import pickle

    program = _program(INDEXED)
    (launch,) = kernel_builds.needed_launches(program.program)
    (group,) = kernel_builds.group_jobs([launch], CPU)
    with KernelCache().working_dirs():
        _, kernel = cuda_regions.build_spec(pickle.loads(pickle.dumps(group[0].spec())), CPU)
    body, ins, outs, contexts = launch
    args = [torch.randn(t.shape) if t.dtype.is_floating_point else torch.tensor(7) for t in (*ins, *outs)]
    want = torch.empty(outs[0].shape)
    launch_with_torch(body, args[: len(ins)], [want], contexts)
    kernel(*args)
    assert torch.allclose(args[-1], want, atol=1e-6) and (want == 0).any()  # dropped elements: the indices matter


def test_kept_when_the_caller_turned_autograds_cache_off(built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that turned AOTAutograd's cache off for its own
    torch.compile (tools/bench_layer.py does, to count its graphs) still
    gets region kernels that are kept: the artifact is saved from that
    cache's entry."""
    import torch._functorch.config as functorch

    monkeypatch.setattr(functorch, "enable_autograd_cache", False)
    job = _entry_of(_program(STRIDED), 0)
    with KernelCache().working_dirs():
        sections, _ = job.build()
    assert isinstance(sections, dict) and sections["artifact"], sections
    assert functorch.enable_autograd_cache is False


def test_a_long_build_ends_with_its_slowest_kernels(capsys: pytest.CaptureFixture[str], cache_dir: Path) -> None:
    """The end of a build that showed progress names its slowest kernels
    and how each was made (here, in a worker, or another process's build
    waited for): where a long build's time went."""

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def describe(self) -> str:
            return self.name

    progress = kernel_builds._Progress(4, True, 2, KernelCache())
    now = time.perf_counter()
    for name, ago, how in (("a", 1.0, "in this process"), ("b", 9.0, "in a build worker"), ("c", 4.0, "waited for another process's build"), ("d", 2.0, "in a build worker")):
        progress.done([Named(name)], now - ago, how)  # type: ignore[list-item]
    progress.shown = True
    progress.end()
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"fuserc: 4 kernels ready in \d+\.\d s \(kept in .*\)", lines[-2]), lines
    assert re.fullmatch(
        r"fuserc: slowest: b 9\.\d s \(in a build worker\); c 4\.\d s \(waited for another process's build\); d 2\.\d s \(in a build worker\)", lines[-1]
    ), lines


@pytest.mark.parametrize(
    "env,local",
    [
        ({}, 0),  # a process started alone
        ({"LOCAL_RANK": "3", "WORLD_SIZE": "4"}, 3),  # torchrun
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, 2),  # Open MPI
        ({"MPI_LOCALRANKID": "1", "PMI_SIZE": "4"}, 1),  # MPICH's Hydra
        ({"PMI_SIZE": "4"}, None),  # a launcher that does not say
    ],
)
def test_the_gpu_opened_early_is_the_launchers_local_rank(env: dict[str, str], local: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fuserc run` makes the GPU's context on a thread while the passes run
    (cuda.open_device_early): the GPU is the launcher's local rank, as the
    backend picks it; under the command only (a caller's process keeps its
    own CUDA start), nothing under a launcher that does not say, and a
    machine without a CUDA driver (this one) is no error."""
    from fuserc.runtime.backends import cuda
    from fuserc.runtime.job import job, mpi_env

    for name in (*job.LOCAL_RANK_ENVS, *job.SIZE_ENVS):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert job.launcher_local_rank() == local
    monkeypatch.setattr(mpi_env, "ENDS_PROCESS", [False])
    assert cuda.open_device_early() is None
    monkeypatch.setattr(mpi_env, "ENDS_PROCESS", [True])
    thread = cuda.open_device_early()
    assert (thread is None) == (local is None)
    if thread is not None:
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_a_rank_starts_few_build_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers start from MIN_JOBS_FOR_WORKERS kernels, one per kernel
    beyond the first, within the rank's share of the cores, and never more
    than MAX_WORKERS (2: more started slower than they built on 2 H200s),
    or MAX_BACKGROUND_WORKERS (4) for builds behind the runs;
    $FUSERC_BUILD_WORKERS overrides, a bad value is a diagnostic."""
    from fuserc.diagnostics import Diagnostic

    monkeypatch.delenv(kernel_builds.WORKERS_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)
    assert kernel_builds.worker_count(kernel_builds.MIN_JOBS_FOR_WORKERS - 1, 1) == 0
    assert kernel_builds.worker_count(14, 4) == kernel_builds.MAX_WORKERS == 2
    assert kernel_builds.worker_count(14, 4, background=True) == kernel_builds.MAX_BACKGROUND_WORKERS == 4
    assert kernel_builds.worker_count(14, 16, background=True) == 3  # 4 cores a rank
    assert kernel_builds.worker_count(14, 32) == 1  # 2 cores a rank: one for the rank, one worker
    assert kernel_builds.worker_count(14, 64) == 0
    monkeypatch.setenv(kernel_builds.WORKERS_ENV, "5")
    assert kernel_builds.worker_count(3, 4) == 5
    monkeypatch.setenv(kernel_builds.WORKERS_ENV, "many")
    with pytest.raises(Diagnostic, match="FUSERC_BUILD_WORKERS"):
        kernel_builds.worker_count(14, 1)


def _operands(launch: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Random tensors with a dry-run launch's layouts."""
    _, ins, outs, _ = launch
    made = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).normal_() for t in (*ins, *outs)]
    return made[: len(ins)], made[len(ins) :]


def test_background_builds_take_the_background_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `Background` asks for the workers of builds behind the runs
    (MAX_BACKGROUND_WORKERS), and feeds its build that many."""
    monkeypatch.delenv(kernel_builds.WORKERS_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)
    given: list[int] = []
    monkeypatch.setattr(kernel_builds, "build_all", lambda groups, device, lr, ls, workers, **kw: given.append(workers))
    jobs = [[SimpleNamespace(ident=("job", i))] for i in range(14)]
    background = kernel_builds.Background(jobs, CPU, 0, 1, None)  # type: ignore[arg-type]
    assert background.wait(timeout=30)
    assert given == [kernel_builds.MAX_BACKGROUND_WORKERS]


def test_kernels_built_in_the_background(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare(background=True)` on a cold cache returns at once; while a
    build worker makes the kernels, a launch of their region runs another
    way (run_region: None) without waiting for them and the dry run of a
    later first run does not queue them again; once in, each kernel runs
    and is right. The startup counts them as building in the background."""
    monkeypatch.setenv("FUSERC_CACHE_DIR", str(tmp_path / "cold"))
    monkeypatch.delenv(kernel_builds.WORKERS_ENV, raising=False)
    program = _program(STRIDED)
    launches = kernel_builds.needed_launches(program.program)
    before = KERNELS.copy()
    start = time.perf_counter()
    background = kernel_builds.prepare([program.program], CPU, background=True)
    assert background is not None and time.perf_counter() - start < 10
    assert KERNELS.since(before).background == 2
    assert "2 building in the background" in KERNELS.since(before).describe()
    body, _, _, contexts = launches[0]
    ins, outs = _operands(launches[0])
    ident = (body, tuple(cuda_regions.layout_of(t) for t in (*ins, *outs)), (0, 1))
    assert kernel_builds.building(ident)
    start = time.perf_counter()
    assert cuda_regions.run_region(body, ins, outs, contexts) is None
    assert time.perf_counter() - start < 1
    assert kernel_builds.prepare([program.program], CPU, background=True) is None  # nothing queued twice
    assert background.wait(timeout=600) and background.seconds is not None
    assert not kernel_builds.building(ident)
    want = torch.empty_like(outs[0])
    launch_with_torch(body, ins, [want], contexts)
    assert cuda_regions.run_region(body, ins, outs, contexts) is True
    assert torch.allclose(outs[0], want, atol=1e-6)
    assert KERNELS.since(before).built == 2


def test_background_builds_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopping a background build (a backend that closes) ends it at once:
    its workers end, and its launches are no longer waited for."""
    monkeypatch.setenv("FUSERC_CACHE_DIR", str(tmp_path / "cold"))
    program = _program(STRIDED)
    background = kernel_builds.prepare([program.program], CPU, background=True, workers=1)
    assert background is not None
    start = time.perf_counter()
    background.stop()
    assert time.perf_counter() - start < 10 and background.done()
    assert not any(kernel_builds.building(j.ident) for j in background.jobs)


def test_when_kernels_are_built_is_a_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """`$FUSERC_KERNEL_BUILDS` chooses (before, background) over the
    caller's default; fuserc.torch.function builds in the background unless
    told otherwise; a value not known is a diagnostic."""
    import fuserc.torch as ft
    from fuserc.diagnostics import Diagnostic

    monkeypatch.delenv(kernel_builds.BUILDS_ENV, raising=False)
    assert kernel_builds.builds_mode() == kernel_builds.BEFORE
    assert ft.function(STRIDED).background and not ft.function(STRIDED, kernel_builds="before").background
    monkeypatch.setenv(kernel_builds.BUILDS_ENV, "before")
    assert kernel_builds.builds_mode(kernel_builds.BACKGROUND) == kernel_builds.BEFORE
    assert not ft.function(STRIDED).background and ft.function(STRIDED, kernel_builds="background").background
    monkeypatch.setenv(kernel_builds.BUILDS_ENV, "later")
    with pytest.raises(Diagnostic, match="FUSERC_KERNEL_BUILDS must be one of before, background"):
        kernel_builds.builds_mode()
    with pytest.raises(Diagnostic, match="kernel_builds must be one of before, background, got 'soon'"):
        ft.function(STRIDED, kernel_builds="soon")


ENDING = """
import atexit, sys, time
atexit.register(time.sleep, 1.0)  # a teardown that takes time after fuserc's exit handlers (CUDA's on a GPU)
import torch
from fuserc.runtime.kernels import kernel_builds, kernel_worker
from fuserc.runtime.backends.cpu import CpuBackend
from fuserc.runtime.job.mpi_env import mpi_env
from fuserc.runtime.evaluator.program import compile_text
program = compile_text(open(sys.argv[1]).read(), backend=CpuBackend(mpi_env()))
background = kernel_builds.prepare([program.program], torch.device("cpu"), background=True, workers=1)
assert background is not None
def workers():
    return [w for pool in list(kernel_worker._LIVE_POOLS) for w in pool.workers]
while not workers() or (sys.argv[2] == "building" and not any(w.job for w in workers())):
    time.sleep(0.05)
print("workers", *[w.proc.pid for w in workers()], flush=True)
"""
"""A script that ends while its kernels are built in the background: while
its build worker starts, or while it builds."""


@pytest.mark.parametrize("when", ["starting", "building"])
def test_a_script_ending_while_kernels_build_exits_cleanly(when: str, tmp_path: Path) -> None:
    """The builds stop before the workers do, so that the build thread
    never sees a worker end and builds its kernels in an ending process (on
    a GPU: "a build worker ended (exit status -9) ... its kernels are built
    in this process", then SIGABRT from a build cut short by the process's
    end); the process exits 0 and leaves no worker running."""
    (tmp_path / "big.mlir").write_text(BIG)
    env = {**os.environ, "FUSERC_CACHE_DIR": str(tmp_path / "cache"), cuda_regions.DELAY_ENV: "60"}
    env.pop(kernel_builds.WORKERS_ENV, None)
    proc = subprocess.run([sys.executable, "-c", ENDING, str(tmp_path / "big.mlir"), when], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for said in ("build worker ended", "built in this process", "terminate called", "Traceback"):
        assert said not in proc.stderr, proc.stderr
    pids = [int(p) for p in proc.stdout.split()[1:]]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

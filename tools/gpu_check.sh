#!/usr/bin/env bash
# Checks the cuda backend on a machine with NVIDIA GPUs, in one go: installs
# the wheels carried in .whl/ (xdsl and its needs), puts this checkout on
# PYTHONPATH (it imports as the package `fuserc`), then runs the cuda
# backend's unit tests, the end-to-end tests (whose default backend, auto,
# is cuda there), every example through the lowering with --check on the
# cuda backend, and timings. NVLink multicast stays off throughout.
#
#   tools/gpu_check.sh --print-mpirun   the MPI launch command (by the MPI's flavour) and exit
#   tools/gpu_check.sh [STAGE ...]   stages: info unit mpi graphs e2e examples perf pipelined
#                                    (default: all, in that order), startup
#                                    (time to a first result: cold and warm kernel cache) and
#                                    firststep (bench_layer's first training step against torch.compile's)
#
# Each stage has its own time limit, sized for 4 H100s with room to spare
# (e2e took 162 s there): info 60, unit 150, mpi 240, graphs 240, e2e 300,
# examples 180, perf 150, pipelined 180, startup 600, firststep 400 s. Stages are skipped
# once GPU_CHECK_BUDGET_S seconds (default 560) are spent, so that one call
# of at most 10 minutes runs, for example, `info unit mpi`, then
# `graphs e2e`, then `examples perf pipelined`.
#
# Logs: $OUT/log.txt (everything) and $OUT/summary.txt (one line a step);
# $OUT defaults to /tmp/gpu_check.
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG=$OUT/log.txt
SUMMARY=$OUT/summary.txt
: >"$LOG"
: >"$SUMMARY"
BUDGET=${GPU_CHECK_BUDGET_S:-560}
N=${GPU_CHECK_RANKS:-4}
LOWERING=propagate-shardings,make-resharding-contiguous,lower-to-host-ir

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 OMP_NUM_THREADS=4 PYTHONDONTWRITEBYTECODE=1

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LIMIT_S FUNCTION: run an exported function with a time limit
# (in its own bash, so that timeout can end it), log, one summary line.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  if ((left < 10)); then
    note "SKIP $name (time budget spent)"
    return 1
  fi
  ((limit > left)) && limit=$left
  echo "===== $name (limit ${limit}s)" >>"$LOG"
  local t0=$SECONDS rc
  timeout -k 5 "$limit" bash -c "$*" >>"$LOG" 2>&1
  rc=$?
  if ((rc == 0)); then note "PASS $name ($((SECONDS - t0))s)"; else note "FAIL $name rc=$rc ($((SECONDS - t0))s)"; fi
  return $rc
}

# The launcher's flags by its flavour: Open MPI passes only the variables named
# with -x; MPICH's Hydra passes the whole environment and refuses -x.
if mpirun --version 2>/dev/null | grep -qi "open mpi\|open-rte\|prrte"; then
  MPI_FLAVOUR=openmpi
  xenv() { local v; for v in "$@"; do printf -- '-x %s ' "$v"; done; }
else
  MPI_FLAVOUR=mpich
  xenv() { :; }
fi
export -f xenv
export MPIRUN=${GPU_CHECK_MPIRUN:-"mpirun $([[ $MPI_FLAVOUR == openmpi ]] && echo --bind-to none) $(xenv NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS PYTHONPATH PYTHONSAFEPATH GPU_CHECK_BACKEND)"}
export REPO N LOWERING GPU_CHECK_BACKEND=${GPU_CHECK_BACKEND:-cuda}
if [[ ${1:-} == --print-mpirun ]]; then  # the launch command the stages use, and nothing else
  echo "$MPI_FLAVOUR: $MPIRUN"
  exit 0
fi

# Every stage needs a GPU and CuPy: without them, stop now (not a PASS for each stage).
no_gpu() {
  note "no GPU or CuPy here: the cuda backend cannot run ($1); tools/gpu_check.sh checks a GPU machine"
  exit 1
}
nvidia-smi -L >/dev/null 2>&1 || no_gpu "nvidia-smi -L finds no GPU"

# ---- setup: wheels; the checkout itself is the package fuserc -------------------
setup() {
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  fi
  python3 -c "import fuserc.runtime.backends.cuda as c, fuserc.passes, xdsl; print('fuserc from', fuserc.runtime.__file__); print('cuda backend:', c.unavailable_reason() or 'available')"
}
export PYTHONPATH=$REPO:/tmp/site
export -f setup
step setup 60 setup || { note "setup failed: see log.txt"; exit 1; }
why=$(grep -o "cuda backend: .*" "$LOG" | tail -1)
[[ $why == "cuda backend: available" ]] || no_gpu "${why:-see log.txt}"

info() {
  nvidia-smi -L
  nvidia-smi topo -m
  python3 - <<'EOF'
import cupy, mpi4py, torch
from cupy.cuda import nccl
print("torch", torch.__version__, "cupy", cupy.__version__, "nccl", nccl.get_version(), "mpi4py", mpi4py.__version__)
print("gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0))
EOF
  mpirun --version | head -1
}

unit() {  # in one process: planner, fused kernels, GEMMs, every op vs cpu, memory over 1000 runs
  python3 -m pytest -q -p no:cacheprovider -x tests/unit/test_cuda_backend.py -k "not under_mpiexec"
}

mpi() {  # the collectives program and large send/recv/put/get on NCCL and CUDA IPC, 2 to N GPUs
  # (the cpu variant is left out: MPI windows fail under the Open MPI of some GPU images)
  python3 -m pytest -q -p no:cacheprovider tests/unit/test_cuda_backend.py -k "under_mpiexec and not cpu and not cuda_graphs"
}

graphs() {  # runs captured once and replayed as CUDA graphs, on 2 and 4 GPUs
  python3 -m pytest -q -p no:cacheprovider tests/unit/test_cuda_backend.py -k "cuda_graphs_under_mpiexec"
}

e2e() {  # hand-written host programs; backend auto = cuda here
  python3 -m pytest -q -p no:cacheprovider tests/e2e/test_run.py -k "not test_collectives"
}

examples() {  # every example, one job: PIPELINE (default: the lowering alone) + --check on cuda
  $MPIRUN -n "$N" python3 tools/check_examples.py --pipeline "${1:-$LOWERING}" --backend "$GPU_CHECK_BACKEND"
}

perf() {  # GEMMs and a fused chain through the backend; the collectives program; AllGather+GEMM
  cat >/tmp/bench.py <<'PY'
"""One GPU: GEMM through the backend (its torch/CuPy choice) against plain
torch.matmul, and a bias+GeLU+tanh chain as one fused kernel against torch
op by op, timed with CUDA events on the backend's stream."""
import torch

from fuserc.ir import parse
from fuserc.runtime.backends.backend import make_backend
from fuserc.runtime.backends.cpu import launch_with_torch
from fuserc.runtime.job.mpi_env import mpi_env

be = make_backend("cuda", mpi_env())


def timed(fn, reps=20):
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps / 1e3


for dtype, (m, k, n) in [(torch.float32, (4096, 4096, 4096)), (torch.float16, (8192, 8192, 8192)),
                         (torch.bfloat16, (8192, 8192, 8192)), (torch.bfloat16, (8192, 16384, 2048)),
                         (torch.float32, (256, 8192, 8192)), (torch.float16, (256, 8192, 8192))]:
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    t_be = timed(lambda: be.matmul(a, b, out))
    t_torch = timed(lambda: torch.matmul(a, b, out=out))
    choice = [v for key, v in be.gemm.choices.items() if key[0] == (m, k) and key[-1] == dtype][-1]
    fl = 2 * m * n * k
    print(f"gemm {str(dtype)[6:]:8} {m}x{k}x{n}: backend ({choice}) {fl / t_be / 1e12:7.1f} TFLOP/s, "
          f"torch.matmul {fl / t_torch / 1e12:7.1f} TFLOP/s")

text = """
func.func @main(%y: tensor<8192x8192xbf16>, %b: tensor<8192xbf16>) -> (tensor<8192x8192xbf16>) attributes {hir.host} {
  hir.launch ins(%y, %b : tensor<8192x8192xbf16>, tensor<8192xbf16>) outs(%y : tensor<8192x8192xbf16>) {
  ^bb0(%a: tensor<8192x8192xbf16>, %bias: tensor<8192xbf16>):
    %bb = fusion.broadcast_in_dim %bias dims = [1] : (tensor<8192xbf16>) -> tensor<8192x8192xbf16>
    %s = fusion.add %a, %bb : (tensor<8192x8192xbf16>, tensor<8192x8192xbf16>) -> tensor<8192x8192xbf16>
    %g = fusion.gelu %s : (tensor<8192x8192xbf16>) -> tensor<8192x8192xbf16>
    %t = fusion.tanh %g : (tensor<8192x8192xbf16>) -> tensor<8192x8192xbf16>
    hir.yield %t : tensor<8192x8192xbf16>
  }
  func.return %y : tensor<8192x8192xbf16>
}"""
launch = next(op for op in parse(text, "chain.mlir").walk() if op.name == "hir.launch")
y = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
bias = torch.randn(8192, device="cuda").to(torch.bfloat16)
t_fused = timed(lambda: be.launch(launch.body.block, [y, bias], [y]))
t_ops = timed(lambda: launch_with_torch(launch.body.block, [y, bias], [y]))
gb = 2 * y.numel() * 2 / 1e9
print(f"bias+gelu+tanh 8192x8192 bf16: fused {t_fused * 1e3:.3f} ms ({gb / t_fused:.0f} GB/s, "
      f"{be.fused_launches} fused launches), torch op by op {t_ops * 1e3:.3f} ms")
be.close()
PY
  python3 /tmp/bench.py || return 1
  python3 -c "import sys; sys.path.insert(0, 'tests/e2e'); import harness, pathlib; print(harness.program('collectives.mlir.in', $N, pathlib.Path('/tmp')))"
  $MPIRUN -n "$N" python3 -m fuserc run "/tmp/collectives_n$N.mlir" -p '' --backend cuda --warmup 3 --iters 20 --seed 1 || return 1
  $MPIRUN -n 4 python3 -m fuserc run examples/allgather_matmul_large.mlir -p "$LOWERING" --backend cuda --warmup 3 --iters 10
}

pipelined() {  # every example through the default pipeline (stream-pipeline: rings over CUDA IPC)
  examples default || return 1
  $MPIRUN -n 4 python3 -m fuserc run examples/allgather_matmul_large.mlir --backend cuda --warmup 3 --iters 10
}

startup() {  # examples/gpt_layer.mlir --check on cuda, N ranks and one: wall time with an empty kernel cache
  # (cold: nothing of Inductor's or Triton's reused either), with it filled (warm), and cold without build
  # workers; each run prints its startup phases (--time). The example's regions are small, so by default
  # (FUSERC_KERNELS=auto) it has no generated kernels: these runs give every region Inductor's kernels
  # (FUSERC_KERNELS=inductor), and a last cold and warm pair runs the default. Python writes its bytecode
  # here (as an installed package has it: without .pyc files every start compiles torch's sources,
  # seconds), primed by one run first.
  unset PYTHONDONTWRITEBYTECODE
  FUSERC_CACHE_DIR=$(mktemp -d) $MPIRUN $(xenv FUSERC_CACHE_DIR) -n "$N" python3 -m fuserc run examples/gpt_layer.mlir --mesh "tp=$N" --backend cuda >/dev/null 2>&1
  local n sizes=("$N")
  [[ $N != 1 ]] && sizes+=(1)
  for n in "${sizes[@]}"; do
    local dir
    dir=$(mktemp -d)
    for run in cold warm cold-no-workers; do
      [[ $run == cold-no-workers ]] && dir=$(mktemp -d)
      local workers=""
      [[ $run == cold-no-workers ]] && workers=0
      local t0=$EPOCHREALTIME
      FUSERC_KERNELS=inductor FUSERC_CACHE_DIR=$dir FUSERC_BUILD_WORKERS=$workers $MPIRUN $(xenv FUSERC_KERNELS FUSERC_CACHE_DIR) \
        $(xenv FUSERC_BUILD_WORKERS) -n "$n" python3 -m fuserc run examples/gpt_layer.mlir --mesh "tp=$n" --backend cuda --check --time || return 1
      echo "STARTUP $n GPU(s) FUSERC_KERNELS=inductor $run: wall $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
    done
  done
  local dir
  dir=$(mktemp -d)
  for run in cold warm; do
    local t0=$EPOCHREALTIME
    FUSERC_CACHE_DIR=$dir CUPY_CACHE_DIR=$dir/cupy $MPIRUN $(xenv FUSERC_CACHE_DIR CUPY_CACHE_DIR) -n "$N" \
      python3 -m fuserc run examples/gpt_layer.mlir --mesh "tp=$N" --backend cuda --check --time || return 1
    echo "STARTUP $N GPU(s) $run: wall $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
  done
  local t0=$EPOCHREALTIME
  FUSERC_KERNELS=cupy $MPIRUN $(xenv FUSERC_KERNELS) -n "$N" python3 -m fuserc run examples/gpt_layer.mlir --mesh "tp=$N" --backend cuda --check || return 1
  echo "STARTUP $N GPU(s) FUSERC_KERNELS=cupy: wall $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
}

firststep() {  # tools/bench_layer.py's first forward+backward step, each variant alone, every cache empty:
  # fuserc with its kernels built in the background (fuserc.torch.function's default), fuserc with them
  # built before (FUSERC_KERNEL_BUILDS=before), torch.compile; the layer at hidden 4096 x 8192 tokens
  local v var builds dir
  for v in fuserc:background fuserc:before compile:background; do
    var=${v%%:*} builds=${v#*:} dir=$(mktemp -d)
    echo "FIRSTSTEP $var (kernels $builds)"
    FUSERC_KERNEL_BUILDS=$builds FUSERC_CACHE_DIR=$dir/f TORCHINDUCTOR_CACHE_DIR=$dir/i TRITON_CACHE_DIR=$dir/t \
      torchrun --nproc-per-node "$N" tools/bench_layer.py --hidden 4096 --tokens 8192 --mode fwdbwd --variants "$var" \
      --warmup 1 --iters 3 --repeats 1 2>&1 | grep -E "first|kernels|fuserc's|check \(" || return 1
  done
}

export -f info unit mpi graphs e2e examples perf pipelined startup firststep
STAGES=("$@")
((${#STAGES[@]})) || STAGES=(info unit mpi graphs e2e examples perf pipelined)
for s in "${STAGES[@]}"; do
  case $s in
    info) step info 60 info ;;
    unit) step unit 150 unit ;;
    mpi) step mpi 240 mpi ;;
    graphs) step graphs 240 graphs ;;
    e2e) step e2e 300 e2e ;;
    examples) step examples 180 examples ;;
    perf) step perf 150 perf ;;
    pipelined) step pipelined 180 pipelined ;;
    startup) step startup 600 startup ;;
    firststep) step firststep 400 firststep ;;
    *) note "unknown stage $s" ;;
  esac
done
echo "----- summary"
cat "$SUMMARY"

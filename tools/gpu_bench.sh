#!/usr/bin/env bash
# One GPU session: the cuda checks (tools/gpu_check.sh STAGES), then the
# benchmark of both patterns and traces of the pipelined AllGather+GEMM and
# GEMM+ReduceScatter at the headline shape, rendered to PNG. Logs and
# results under $OUT.
#   tools/gpu_bench.sh "info unit pipelined" "4096x4096x4096,32768x16384x8192"
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_bench}
mkdir -p "$OUT"
STAGES=${1:-"info unit pipelined"}
SHAPES=${2:-"4096x4096x4096,8192x8192x8192,16384x8192x8192,32768x16384x8192"}
# shellcheck disable=SC2086
GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-300} OUT=$OUT/check bash tools/gpu_check.sh $STAGES
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MPIRUN="mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x PYTHONPATH -x PYTHONSAFEPATH"
[ "$SHAPES" = none ] || timeout -k 5 ${BENCH_LIMIT_S:-240} $MPIRUN -n 4 python3 tools/bench.py --pattern both --shapes "$SHAPES" \
  --warmup 5 --iters 10 --json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
echo "bench rc=$?" >>"$OUT/bench.txt"
: >"$OUT/trace.txt"
for pattern in ag:allgather_matmul_large rs:matmul_reduce_scatter_large; do
  name=${pattern%%:*}
  timeout -k 5 90 $MPIRUN -n 4 python3 -m fuserc run "examples/${pattern#*:}.mlir" --backend cuda \
    --warmup 2 --iters 3 --trace "$OUT/${name}_trace.json" >>"$OUT/trace.txt" 2>&1
  echo "$name trace rc=$?" >>"$OUT/trace.txt"
  python3 tools/trace_png.py "$OUT/${name}_trace.json" -o "$OUT/${name}_trace.png" --labels >>"$OUT/trace.txt" 2>&1
done
cat "$OUT/check/summary.txt" "$OUT/bench.txt" "$OUT/trace.txt" | tail -80

#!/usr/bin/env bash
# On a machine with several GPUs (no internet; dependencies from .deps/, see prepare_gpu_deps.sh): build,
# run the multi-GPU tests and `mxmoe bench-multi`, and leave logs and JSON records in OUT_DIR:
# build.log, multi_tests.log, bench_multi.txt (every run's table) and bench_multi_<model>_<tp|ep>_<N>.json.
#   scripts/gpu_multi.sh [OUT_DIR]   env: ARCHS (90a), TESTS (1), TEST_FILTER (the multi-GPU suites),
#     BENCH ("tp:2 ep:2 tp:4 ep:4": parallel:gpus pairs, those with more GPUs than present skipped),
#     MODEL (gpt-oss-120b), BENCH_ARGS (extra bench-multi options), TEST_TIMEOUT (s, 900)
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): the lent machines require it.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a}" \
  -DMXMOE_BUILD_TESTS=ON -DMXMOE_DEPS_INCLUDE_DIR="$PWD/.deps/include" \
  -DMXMOE_GTEST_SOURCE_DIR="$PWD/.deps/googletest" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
ninja -C build-gpu mxmoe_gpu_tests mxmoe_cli >>"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
grep -E "NCCL" "$out/build.log" | head -2
echo "build: $(( $(date +%s) - start )) s"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee -a "$out/build.log"
nvidia-smi topo -m >>"$out/build.log" 2>&1
status=0
if [ "${TESTS:-1}" = 1 ]; then
  filter=${TEST_FILTER:-'*GpuMulti*:*GpuF32Output*'}
  timeout "${TEST_TIMEOUT:-900}" build-gpu/tests/mxmoe_gpu_tests --gtest_filter="$filter" >"$out/multi_tests.log" 2>&1 ||
    { echo "multi-GPU tests: exit $?" | tee -a "$out/multi_tests.log"; status=1; }
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|FAILED|tests ran" "$out/multi_tests.log" | tail -40
fi
model=${MODEL:-gpt-oss-120b}
for pair in ${BENCH-tp:2 ep:2 tp:4 ep:4}; do
  parallel=${pair%%:*} n=${pair##*:}
  [ "$n" -le "$gpus" ] || { echo "bench-multi $pair: skipped, $gpus GPUs"; continue; }
  tag=${model}_${parallel}_${n}
  timeout 400 build-gpu/tools/mxmoe/mxmoe bench-multi --preset "$model" --gpus "$n" --parallel "$parallel" ${BENCH_ARGS:-} \
    --json "$out/bench_multi_$tag.json" >"$out/bench_multi_$tag.part" 2>&1 || { echo "bench-multi $pair: exit $?" >>"$out/bench_multi_$tag.part"; status=1; }
  cat "$out/bench_multi_$tag.part" | tee -a "$out/bench_multi.txt"
  rm -f "$out/bench_multi_$tag.part"
done
echo "total: $(( $(date +%s) - start )) s"
exit $status

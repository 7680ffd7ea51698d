#!/usr/bin/env bash
# On a GPU machine without internet: build (dependencies from .deps/, see prepare_gpu_deps.sh), run the
# GPU tests and the benchmark, and leave logs and JSON records in one folder (default: $OUT or ./out):
# build.log, gpu_tests.log, cpu_tests.log, bench.txt, bench.err, bench_<model>.json.
#   scripts/gpu_run.sh [OUT_DIR]          env: ARCHS (default 90a), BENCH (default "120b 20b"), TESTS=0/1,
#   SANITIZE=1 (compute-sanitizer memcheck and racecheck over the GPU tests: sanitize_*.log; SANITIZE_TOOLS picks),
#   SOAK=N (mxmoe soak --forwards N on gpt-oss-20b: soak.log), PYTEST=1 (the Python package's pytest: pytest.log),
#   TUNE=1 (bench --tune for each BENCH model: tune_<model>.json, the planner's preference tables)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
archs=${ARCHS:-90a}
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" -DMXMOE_BUILD_TESTS=ON \
  -DMXMOE_DEPS_INCLUDE_DIR="$PWD/.deps/include" -DMXMOE_GTEST_SOURCE_DIR="$PWD/.deps/googletest" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
ninja -C build-gpu >>"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee -a "$out/build.log"
status=0
if [ "${TESTS:-1}" = 1 ]; then
  build-gpu/tests/mxmoe_gpu_tests >"$out/gpu_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" "$out/gpu_tests.log" | tail -25
  (cd build-gpu && ctest -L cpu --output-on-failure -j8 >"$out/cpu_tests.log" 2>&1) || status=1
  tail -3 "$out/cpu_tests.log"
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  # memcheck over every kernel at the small shapes plus the full-size decode shapes; racecheck (about 10x
  # slower) over the small shapes alone, which run the same kernels and shared-memory code.
  memcheck_filter='*small*:*odd_k*:*Determinism*:*Sequence*:*Routing*:*Expand*:*Paths*:*Cluster*:*one_expert*:*e128_2880*'
  racecheck_filter='*small*:*odd_k*:*Sequence*:*Routing*:*Expand*:*Paths*:*one_expert*'
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    filter=$memcheck_filter
    [ "$tool" = racecheck ] && filter=$racecheck_filter
    compute-sanitizer --tool "$tool" --error-exitcode 3 build-gpu/tests/mxmoe_gpu_tests --gtest_filter="$filter" \
      >"$out/sanitize_$tool.log" 2>&1 || status=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) " "$out/sanitize_$tool.log" | tail -3
  done
fi
if [ -n "${SOAK:-}" ]; then
  build-gpu/tools/mxmoe/mxmoe soak --preset gpt-oss-20b --forwards "$SOAK" >"$out/soak.log" 2>&1 || status=1
  tail -2 "$out/soak.log"
fi
if [ "${PYTEST:-0}" = 1 ]; then
  # No internet there: the extension built by CMake (nanobind is installed), the package staged by hand.
  (cmake -S . -B build-gpu-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" \
     -DMXMOE_BUILD_PYTHON=ON -DMXMOE_CUDART_STATIC=ON -DMXMOE_BUILD_TESTS=OFF -DMXMOE_BUILD_TOOLS=OFF \
     -DMXMOE_DEPS_INCLUDE_DIR="$PWD/.deps/include" && ninja -C build-gpu-py _mxmoe &&
   rm -rf build-gpu-py/stage && mkdir -p build-gpu-py/stage && cp -r python/mxmoe build-gpu-py/stage/ &&
   cp build-gpu-py/python/_mxmoe*.so build-gpu-py/stage/mxmoe/ &&
   PYTHONPATH="$PWD/build-gpu-py/stage" python3 -m pytest -q -p no:cacheprovider tests/python) \
    >"$out/pytest.log" 2>&1 || status=1
  tail -3 "$out/pytest.log"
fi
for model in ${BENCH:-120b 20b}; do
  tune_args=()
  [ "${TUNE:-0}" = 1 ] && tune_args=(--tune "$out/tune_gpt-oss-$model.json")
  build-gpu/tools/mxmoe/mxmoe bench --preset "gpt-oss-$model" ${BENCH_ARGS:-} "${tune_args[@]}" --json "$out/bench_gpt-oss-$model.json" \
    2>>"$out/bench.err" | tee -a "$out/bench.txt" || { status=1; tail -5 "$out/bench.err"; }
done
exit $status

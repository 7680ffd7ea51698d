#!/usr/bin/env bash
# Builds and runs every test: the default preset (all tests; GPU tests skip themselves without a
# GPU), the ampere preset (sm_80 / sm_89 code: build and SASS checks), then the sanitizer preset
# (host code under ASan + UBSan, CUDA arch 90a) with the CPU tests, then the Python package:
# `pip install .` into a virtual environment (CUDA arch 90a only, to keep CI short; a plain
# `pip install .` builds 90a;120a;121a) and its pytest suite, then a bounded libFuzzer run of the
# checkpoint reader from the committed seeds (scripts/fuzz.sh).
# Prints the build times and a summary; exits non-zero if any step failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh || exit 1

jobs="${MXMOE_JOBS:-$(nproc)}"
ctest_log=$(mktemp)
pytest_log=$(mktemp)
trap 'rm -f "$ctest_log" "$pytest_log"' EXIT
run_ctest() { ctest "$@" 2>&1 | tee -a "$ctest_log"; }
python_tests() {
  local venv=build-python/venv
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv" || return 1
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest numpy jax ml_dtypes || return 1
  CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90a" "$venv/bin/python" -m pip install -q --disable-pip-version-check . ||
    return 1
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python 2>&1 | tee "$pytest_log"
  return "${PIPESTATUS[0]}"
}
names=() results=() times=()
step() {
  local name="$1"
  shift
  echo
  echo "== $name"
  local start=$(date +%s) rc=0
  "$@" || rc=$?
  names+=("$name")
  times+=($(($(date +%s) - start)))
  results+=("$([[ $rc -eq 0 ]] && echo ok || echo "FAILED (exit $rc)")")
  return $rc
}

if step "build (default: CUDA 90a;120a;121a)" scripts/build.sh default; then
  step "ctest (default)" run_ctest --preset default -j "$jobs"
fi
# Ampere and Ada (docs/ampere-ada.md): the library and command compile for sm_80 and sm_89, and no kernel
# an sm_80 plan launches is a trap there (an SM90 instruction left in its path would compile to one).
if step "build (ampere: CUDA 80;89, library and CLI)" scripts/build.sh ampere; then
  step "check_sass (ampere: sm_80 / sm_89 kernels)" bash scripts/check_sass.sh build-ampere/src/libmxmoe.a "80;89"
fi
if step "build (sanitize: ASan+UBSan, CUDA 90a)" scripts/build.sh sanitize; then
  step "ctest (sanitize, label cpu)" run_ctest --preset sanitize -L cpu -j "$jobs"
fi
step "python: pip install . (venv), pytest" python_tests
step "fuzz: checkpoint reader, 60 s (libFuzzer)" bash scripts/fuzz.sh 60

echo
echo "== summary"
failed=0
for i in "${!names[@]}"; do
  printf '  %-42s %5d s  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
  [[ "${results[$i]}" == ok ]] || failed=1
done
# One closing line over the ctest runs and pytest: "tests: N passed, N failed".
read -r total_run total_failed < <(awk '/tests passed, [0-9]+ tests? failed out of/ {
  run += $NF; for (i = 1; i <= NF; ++i) if ($i == "failed") failed += $(i - 2) } END { print run + 0, failed + 0 }' "$ctest_log")
read -r py_passed py_failed < <(awk '/ in [0-9.]+s/ { for (i = 2; i <= NF; ++i) {
  if ($i ~ /^passed/) p += $(i - 1); if ($i ~ /^(failed|error)/) f += $(i - 1) } } END { print p + 0, f + 0 }' "$pytest_log")
total_run=$((total_run + py_passed + py_failed))
total_failed=$((total_failed + py_failed))
if ((failed)); then
  echo "test: FAILED"
  echo "tests: $((total_run - total_failed)) passed, $total_failed failed"
  exit 1
fi
echo "test: all passed"
echo "tests: $((total_run - total_failed)) passed, $total_failed failed"

#!/usr/bin/env bash
# Builds and runs every test: the default preset (all tests; GPU tests skip themselves without a
# GPU), then the sanitizer preset (host code under ASan + UBSan, CUDA arch 90a) with the CPU tests.
# Prints the build times and a summary; exits non-zero if any step failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh || exit 1

jobs="${MXMOE_JOBS:-$(nproc)}"
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
  step "ctest (default)" ctest --preset default -j "$jobs"
fi
if step "build (sanitize: ASan+UBSan, CUDA 90a)" scripts/build.sh sanitize; then
  step "ctest (sanitize, label cpu)" ctest --preset sanitize -L cpu -j "$jobs"
fi

echo
echo "== summary"
failed=0
for i in "${!names[@]}"; do
  printf '  %-42s %5d s  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
  [[ "${results[$i]}" == ok ]] || failed=1
done
if ((failed)); then
  echo "test: FAILED"
  exit 1
fi
echo "test: all passed"

#!/usr/bin/env bash
# Configures with a CMake preset (default: "default", CUDA 90a;120a;121a) and builds it.
# Usage: scripts/build.sh [PRESET]   (MXMOE_JOBS sets the parallel jobs; default: all cores)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

preset="${1:-default}"
jobs="${MXMOE_JOBS:-$(nproc)}"
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake --preset "$preset" >"$log" 2>&1; then
  cat "$log" >&2
  echo "build: configure (preset $preset) failed" >&2
  exit 1
fi
cmake --build --preset "$preset" -j "$jobs"
echo "build: preset $preset built in $(($(date +%s) - start)) s ($jobs jobs)"

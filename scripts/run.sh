#!/usr/bin/env bash
# The main job: set up, build, then check the MoE layer of gpt-oss-20b (random checkpoint-like
# MXFP4 weights) on every backend this machine can run, against the fp64 CPU reference; then a
# checkpoint round trip (write a gpt-oss-format checkpoint, run a layer from it).
# Without a GPU only the CPU reference runs, and the output says so.
# It builds only the `mxmoe` command and the library under it (the tests are scripts/test.sh's);
# MXMOE_JOBS sets the parallel jobs (default: all cores).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

# An Ampere or Ada GPU (compute capability 8.x) runs the `ampere` preset's sm_80 / sm_89 code
# (docs/ampere-ada.md); every other machine the default preset's Hopper and Blackwell code.
preset=default build_dir=build
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 || true)
if [[ $cc == 8.* ]]; then
  preset=ampere build_dir=build-ampere
  echo "run: an Ampere or Ada GPU (compute capability $cc): building the ampere preset (CUDA 80;89)"
fi
start=$(date +%s)
log=$(mktemp)
if ! cmake --preset "$preset" >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "run: configure (preset $preset) failed" >&2
  exit 1
fi
rm -f "$log"
cmake --build --preset "$preset" -j "${MXMOE_JOBS:-$(nproc)}" --target mxmoe_cli
echo "run: built $build_dir/tools/mxmoe/mxmoe in $(($(date +%s) - start)) s"

mxmoe=$build_dir/tools/mxmoe/mxmoe
echo
echo "== mxmoe probe"
"$mxmoe" probe
if "$mxmoe" probe --json | grep -q '"gpu_available": true'; then
  echo "A GPU is usable: every backend below runs on it and is compared with the CPU reference."
else
  echo "No GPU is usable here: only the CPU paths run (the fp64 oracle and the 'reference' backend)."
fi

echo
echo "== mxmoe check --preset gpt-oss-20b --tokens 16"
"$mxmoe" check --preset gpt-oss-20b --tokens 16

echo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== mxmoe gen-checkpoint --preset tiny --layers 2, then mxmoe run --layer 1"
"$mxmoe" gen-checkpoint --preset tiny --layers 2 --out "$work/ckpt" --seed 1
"$mxmoe" run --checkpoint "$work/ckpt" --layer 1 --tokens 4 --seed 2 --output "$work/out.bin"
if "$mxmoe" probe --json | grep -q '"gpu_available": true'; then
  echo
  echo "== mxmoe bench --preset gpt-oss-20b --tokens 1,4,16,64 (graph replay, L2 rotated)"
  "$mxmoe" bench --preset gpt-oss-20b --tokens 1,4,16,64
fi
echo
echo "run: done"

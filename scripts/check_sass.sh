#!/usr/bin/env bash
# SASS check of the MX atoms (issue 4): disassembles the library's cubins and fails unless
#   sm_120a / sm_121a: every native-atom kernel has the block-scaled MMA (QMMA.SF ... E4M3.E2M1.E8)
#                      and every emulated-atom kernel the FP8 MMA (QMMA ... E4M3.E4M3);
#   sm_90a:            every emulated-atom kernel has the FP8 mma.sync as Hopper lowers it (HMMA.16816.F32)
#                      and no kernel has a block-scaled MMA.
# Usage: scripts/check_sass.sh LIBRARY ARCHS   (ARCHS: the build's CUDA architectures, e.g. "90a;120a;121a")
# cuobjdump and nvdisasm come from PyPI (scripts/setup.sh puts them in .tools/), or from a CUDA toolkit.
set -euo pipefail
lib=$1
archs=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -d "$root/.tools/cuda-binutils/nvidia/cu13/bin" ]] && export PATH="$root/.tools/cuda-binutils/nvidia/cu13/bin:$PATH"
command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null ||
  { echo "check_sass: cuobjdump/nvdisasm not found (scripts/setup.sh installs them from PyPI)"; exit 1; }

# One disassembly per architecture, kept for the checks of that architecture.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sass_of() {
  [[ -f "$work/$1.sass" ]] || cuobjdump -sass -arch "$1" "$lib" >"$work/$1.sass"
  cat "$work/$1.sass"
}
# "functions whose name matches $2, and how many of them contain an instruction matching $3"
count() {
  sass_of "$1" | awk -v fp="$2" -v ip="$3" '
    /Function :/ { in_f = ($3 ~ fp); if (in_f) nf++; seen = 0; next }
    in_f && !seen && $0 ~ ip { seen = 1; ni++ }
    END { print nf + 0, ni + 0 }'
}
status=0
require() {  # arch, function pattern, instruction pattern, what
  local nf ni
  read -r nf ni < <(count "$1" "$2" "$3")
  if ((nf >= 2 && ni == nf)); then
    echo "check_sass: $1: $4 in all $nf $2 kernels"
  else
    echo "check_sass: $1: FAILED: $4 in $ni of $nf $2 kernels (want all, and at least 2)"
    status=1
  fi
}
present=$(cuobjdump -lelf "$lib" | grep -o 'sm_[0-9]*a\?' | sort -u | tr '\n' ' ')
for arch in ${archs//;/ }; do
  sm="sm_$arch"
  if [[ " $present " != *" $sm "* ]]; then
    echo "check_sass: FAILED: no $sm cubin in $lib (it has: $present)"
    status=1
    continue
  fi
  case "$arch" in
    120a | 121a)
      require "$sm" MxNativeAtom 'QMMA\.SF\.16832\.F32\.E4M3\.E2M1\.E8' "block-scaled mma (kind::mxf8f6f4)"
      require "$sm" MxEmulatedAtom 'QMMA\.16832\.F32\.E4M3\.E4M3' "fp8 mma" ;;
    90a)
      require "$sm" MxEmulatedAtom 'HMMA\.16816\.F32' "fp8 mma.sync (lowered to HMMA)"
      read -r _ blockscaled < <(count "$sm" '.' 'QMMA\.SF')
      if ((blockscaled == 0)); then echo "check_sass: $sm: no block-scaled mma, as expected"
      else echo "check_sass: $sm: FAILED: $blockscaled kernels have a block-scaled mma"; status=1; fi ;;
  esac
done
exit $status

#!/usr/bin/env bash
# SASS and PTX check of the MX atoms: disassembles a library or object file and fails unless
#   SM12x (120a, 121a, 120f, 121f): every native-atom kernel has the block-scaled MMA in its SASS
#       (QMMA.SF ... E4M3.E2M1.E8) and in its PTX (mma.sync ... block_scale), every emulated-atom
#       kernel the FP8 MMA (QMMA ... E4M3.E4M3), and no MX kernel traps (BPT.TRAP / trap;): a target
#       whose feature macros the atoms' guard misses (kernels/common/arch_features.cuh) compiles the
#       native atom to a trap, which this catches;
#   90a: every emulated-atom kernel has the FP8 mma.sync as Hopper lowers it (HMMA.16816.F32), no
#       emulated kernel traps, and no kernel has a block-scaled MMA.
#   80, 86, 89 (docs/ampere-ada.md): no kernel that an sm_80 plan launches traps (the GEMV kernels but
#       the cluster-combine ones, the mma.sync and swap-AB tiles, routing, expand, combine: an SM90
#       instruction left in their path compiles to a trap there), the GEMV ring copies by cp.async
#       (LDGSTS), and on 89 every emulated-atom kernel has the native FP8 mma (QMMA ... E4M3.E4M3).
# A family target (120f) is listed by cuobjdump as an sm_120 cubin beside its sm_120f PTX.
# Usage: scripts/check_sass.sh FILE ARCHS   (ARCHS: the build's CUDA architectures, e.g. "90a;120a;121a")
# cuobjdump and nvdisasm come from PyPI (scripts/setup.sh puts them in .tools/), or from a CUDA toolkit.
set -euo pipefail
lib=$1
archs=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -d "$root/.tools/cuda-binutils/nvidia/cu13/bin" ]] && export PATH="$root/.tools/cuda-binutils/nvidia/cu13/bin:$PATH"
command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null ||
  { echo "check_sass: cuobjdump/nvdisasm not found (scripts/setup.sh installs them from PyPI)"; exit 1; }

# One disassembly (SASS or PTX) per architecture, kept for the checks of that architecture.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
listing_of() {  # sass|ptx, arch
  [[ -f "$work/$2.$1" ]] || cuobjdump "-$1" -arch "$2" "$lib" >"$work/$2.$1"
  cat "$work/$2.$1"
}
# "functions whose name matches $3, and how many of them contain an instruction matching $4"
count() {  # sass|ptx, arch, function pattern, instruction pattern
  local head='Function :' name=3
  [[ $1 == ptx ]] && head='\\.entry ' name=2
  listing_of "$1" "$2" | awk -v fp="$3" -v ip="$4" -v head="$head" -v name="$name" '
    $0 ~ head { in_f = ($name ~ fp); if (in_f) nf++; seen = 0; next }
    in_f && !seen && $0 ~ ip { seen = 1; ni++ }
    END { print nf + 0, ni + 0 }'
}
status=0
require() {  # sass|ptx, arch, function pattern, instruction pattern, what
  local nf ni
  read -r nf ni < <(count "$1" "$2" "$3" "$4")
  if ((nf >= 2 && ni == nf)); then
    echo "check_sass: $2 $1: $5 in all $nf $3 kernels"
  else
    echo "check_sass: $2 $1: FAILED: $5 in $ni of $nf $3 kernels (want all, and at least 2)"
    status=1
  fi
}
forbid() {  # sass|ptx, arch, function pattern, instruction pattern, what
  local nf ni
  read -r nf ni < <(count "$1" "$2" "$3" "$4")
  if ((ni == 0)); then
    echo "check_sass: $2 $1: no $5 in the $nf $3 kernels"
  else
    echo "check_sass: $2 $1: FAILED: $5 in $ni of $nf $3 kernels"
    status=1
  fi
}
present=" $(cuobjdump -lelf -lptx "$lib" | grep -o 'sm_[0-9]*[af]\?\.\(cubin\|ptx\)' | sort -u | tr '\n' ' ')"
for arch in ${archs//;/ }; do
  arch=${arch%-real}
  sm="sm_$arch"
  cubin="$sm.cubin"
  [[ $arch == *f ]] && cubin="sm_${arch%f}.cubin"
  if [[ $present != *" $cubin "* || $present != *" $sm.ptx "* ]]; then
    echo "check_sass: FAILED: no $sm code (cubin and PTX) in $lib (it has: $present)"
    status=1
    continue
  fi
  case "$arch" in
    12[0-9]*)
      require sass "$sm" MxNativeAtom 'QMMA\.SF\.16832\.F32\.E4M3\.E2M1\.E8' "block-scaled mma (kind::mxf8f6f4)"
      require ptx "$sm" MxNativeAtom 'mma\.sync\.aligned\.m16n8k32\.row\.col\.kind::mxf8f6f4\.block_scale' \
        "block-scaled mma (kind::mxf8f6f4)"
      require sass "$sm" MxEmulatedAtom 'QMMA\.16832\.F32\.E4M3\.E4M3' "fp8 mma"
      forbid sass "$sm" 'Mx(Native|Emulated)Atom' 'BPT\.TRAP' "trap"
      forbid ptx "$sm" 'Mx(Native|Emulated)Atom' 'trap;' "trap" ;;
    90a)
      require sass "$sm" MxEmulatedAtom 'HMMA\.16816\.F32' "fp8 mma.sync (lowered to HMMA)"
      forbid sass "$sm" MxEmulatedAtom 'BPT\.TRAP' "trap"
      forbid sass "$sm" '.' 'QMMA\.SF' "block-scaled mma" ;;
    80 | 86 | 89)
      # Mangled names: a GEMV kernel's last template argument is kCluster (Lb0E: not the cluster combine).
      sm8x_planned='gemv_kernelILb[01]ELb[01]ELi[0-9]+ELi[0-9]+ELb0E|swap_gemm_kernel|[0-9]mma_gemm_kernel|route_|rank_segments|expand_|combine_kernel|permute_words|localize_kernel'
      forbid sass "$sm" "$sm8x_planned" 'BPT\.TRAP' "trap"
      require sass "$sm" 'gemv_kernelILb[01]ELb[01]ELi[0-9]+ELi[0-9]+ELb0E' 'LDGSTS' "cp.async (LDGSTS) in the weight ring"
      forbid sass "$sm" '.' 'UBLKCP|UTMALDG' "bulk or tensor copy"
      if [[ $arch == 89 ]]; then
        require sass "$sm" MxEmulatedAtom 'QMMA\.16832\.F32\.E4M3\.E4M3' "native fp8 mma.sync"
        forbid sass "$sm" MxEmulatedAtom 'BPT\.TRAP' "trap"
      fi ;;
  esac
done
exit $status

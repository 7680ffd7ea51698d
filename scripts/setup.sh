#!/usr/bin/env bash
# Installs what the build needs from Debian packages (only those missing; clang and its libFuzzer
# runtime for scripts/fuzz.sh), puts nvcc on PATH, and
# installs cuobjdump/nvdisasm from PyPI into .tools/ for the SASS check when the toolkit lacks them.
# Quiet, non-interactive and idempotent. Run it, or source it (the other scripts do) so that the
# PATH change reaches the calling shell.

mxmoe_setup() {
  local packages=(cmake ninja-build g++ libgtest-dev googletest nlohmann-json3-dev libcli11-dev clang libclang-rt-14-dev)
  local missing=() package
  if command -v dpkg-query >/dev/null 2>&1; then
    for package in "${packages[@]}"; do
      dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
  else
    echo "setup: not a Debian system; assuming cmake, ninja, g++, GoogleTest, nlohmann-json and CLI11 are there" >&2
  fi

  if ((${#missing[@]} > 0)); then
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
      if ! command -v sudo >/dev/null 2>&1; then
        echo "setup: missing packages (${missing[*]}) and not root, without sudo" >&2
        return 1
      fi
      sudo=(sudo -n)
    fi
    echo "setup: installing ${missing[*]}"
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null ||
       ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           "${missing[@]}" >/dev/null; then
      echo "setup: apt-get install ${missing[*]} failed" >&2
      return 1
    fi
  fi

  # The CUDA toolkit (nvcc 13.0) is installed on these machines but not always on PATH.
  if ! command -v nvcc >/dev/null 2>&1; then
    local dir
    for dir in "${CUDA_HOME:-/usr/local/cuda}/bin" /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
      if [[ -x "$dir/nvcc" ]]; then
        export PATH="$dir:$PATH"
        break
      fi
    done
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    echo "setup: nvcc not found: install the CUDA toolkit 13.0 (expected in /usr/local/cuda)" >&2
    return 1
  fi

  # cuobjdump and nvdisasm for the SASS check (scripts/check_sass.sh), from PyPI into .tools/ when
  # the toolkit here lacks them. A failure is not fatal here: the SASS check then fails and says why.
  local root tools
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  tools="$root/.tools/cuda-binutils"
  if ! command -v cuobjdump >/dev/null 2>&1 && [[ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]]; then
    echo "setup: installing cuobjdump and nvdisasm (PyPI) into .tools/"
    python3 -m pip install -q --disable-pip-version-check --target "$tools" \
      nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86 >/dev/null 2>&1 ||
      echo "setup: pip install of nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm failed" >&2
  fi
  return 0
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  mxmoe_setup
  exit $?
fi
mxmoe_setup

#!/usr/bin/env bash
# Puts OpenAI's triton_kernels (python/triton_kernels of the triton repository) into .deps/peers/ for
# bench/peers/peers.py, on a machine that reaches PyPI; the GPU machine gets the folder by the run
# tool's carry list (carry: [".deps/peers"]) and peers.py puts it on sys.path. Never committed
# (.gitignore: /.deps/).
#
# The PyPI package named triton_kernels (0.1.0) is an unrelated project. vLLM's wheels ship OpenAI's
# sources as vllm/third_party/triton_kernels, fetched by its build at a pinned triton tag; vLLM 0.19.0 is
# built for torch 2.10 / triton 3.6, and its copy imports with triton 3.6.0 (checked 2026-11-27). Only
# that folder (pure Python, ~0.4 MB) is taken from the wheel; vLLM itself is not installed.
#
#   bash bench/peers/prepare_peers.sh            # then: ls .deps/peers/triton_kernels
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

VLLM_VERSION=0.19.0
DEST=.deps/peers
PYTHON=python3

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: "vllm==$VLLM_VERSION" -d "$tmp"
wheel=$(ls "$tmp"/vllm-"$VLLM_VERSION"-*.whl)

rm -rf "$DEST/triton_kernels"
mkdir -p "$DEST"
"$PYTHON" - "$wheel" "$DEST" "$VLLM_VERSION" <<'EOF'
import hashlib
import sys
import zipfile
from pathlib import Path

wheel, dest, version = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
prefix = "vllm/third_party/triton_kernels/"
count = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and name.endswith(".py"):
            target = dest / "triton_kernels" / name[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
            count += 1
if count == 0:
    sys.exit(f"{wheel.name}: no {prefix} in the wheel")
digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
(dest / "PROVENANCE.txt").write_text(
    f"triton_kernels: {count} files from {wheel.name} (sha256 {digest}), {prefix}\n")
print(f"{dest}/triton_kernels: {count} files from {wheel.name}")
EOF

# Where torch and triton are installed here, the sources must import (the GPU machine checks the rest).
if "$PYTHON" -c "import torch, triton" 2>/dev/null; then
  PYTHONPATH="$DEST${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    "import triton, triton_kernels.matmul_ogs, triton_kernels.topk, triton_kernels.swiglu; \
print('imports with triton', triton.__version__)"
fi

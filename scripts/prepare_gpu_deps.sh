#!/usr/bin/env bash
# Copies the header-only dependencies and GoogleTest's sources into .deps/ (git-ignored), for a GPU
# machine that has no internet and none of these packages. Run here, then carry .deps to that machine.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
rm -rf .deps && mkdir -p .deps/include
cp -r /usr/include/nlohmann /usr/include/CLI .deps/include/
cp -r /usr/src/googletest .deps/googletest
du -sh .deps

#!/usr/bin/env bash
# Builds the libFuzzer target of the checkpoint reader (tests/fuzz/fuzz_checkpoint.cpp) with clang,
# ASan and UBSan, and runs it for a bounded time from the committed seeds (new inputs go to a
# temporary corpus, never into the repository). Exit 0: no finding.
#   scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out"
json_include=""
[[ -f /usr/include/nlohmann/json.hpp ]] || json_include="-I.deps/include"
clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc $json_include \
  tests/fuzz/fuzz_checkpoint.cpp src/checkpoint/*.cpp src/formats/*.cpp src/moe/config.cpp src/moe/weights.cpp \
  -o "$out/fuzz_checkpoint"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
"$out/fuzz_checkpoint" -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 "$corpus" tests/fuzz/corpus 2>&1 | tail -15
echo "fuzz: checkpoint reader, ${seconds} s: no finding"

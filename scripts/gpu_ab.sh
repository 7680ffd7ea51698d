#!/usr/bin/env bash
# An A/B of this tree against another commit's tree on one GPU machine (METHOD: old and new alternated):
#   build  OLD_DIR's `mxmoe` (sm_90a, tools only, in build-ab-old here) unless it is built; this tree's is
#          NEW (default build-gpu/tools/mxmoe/mxmoe, from scripts/gpu_run.sh);
#   same   one random checkpoint layer per model through `mxmoe run` (backend auto, the default plans)
#          with both binaries at each T of RUN_TOKENS: the output hashes must be equal (same.txt);
#   bench  `mxmoe bench` alternating old and new, ROUNDS times per model (ab_<model>.txt, ab_*.json).
# Usage: scripts/gpu_ab.sh OLD_DIR OUT_DIR   env: STEPS ("build same bench"), MODELS ("120b 20b"), ROUNDS (2),
#   RUN_TOKENS ("1 2 3 4 8 16 64 256 1000 4096"), BENCH_TOKENS (1,4,16,64,256,1024,4096), NEW, ARCHS (90a),
#   ARGS (more options for both `run` and `bench`, e.g. "--precision fp8")
set -uo pipefail
cd "$(dirname "$0")/.."
old_dir=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
out=$(cd "$out" && pwd)
new=${NEW:-$PWD/build-gpu/tools/mxmoe/mxmoe}
old=$PWD/build-ab-old/tools/mxmoe/mxmoe
steps=" ${STEPS:-build same bench} "
status=0
if [[ $steps == *" build "* && ! -x $old ]]; then
  cmake -S "$old_dir" -B build-ab-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a}" \
    -DMXMOE_BUILD_TESTS=OFF -DMXMOE_DEPS_INCLUDE_DIR="$PWD/.deps/include" >"$out/build_old.log" 2>&1 &&
    ninja -C build-ab-old mxmoe_cli >>"$out/build_old.log" 2>&1 || { tail -20 "$out/build_old.log"; exit 1; }
fi
if [[ $steps == *" same "* ]]; then
  for model in ${MODELS:-120b 20b}; do
    ckpt=/tmp/ab_ckpt_$model
    [[ -d $ckpt ]] || "$new" gen-checkpoint --preset "gpt-oss-$model" --layers 1 --out "$ckpt" --seed 11 >/dev/null || exit 1
    for t in ${RUN_TOKENS:-1 2 3 4 8 16 64 256 1000 4096}; do
      a=$("$old" run --checkpoint "$ckpt" --layer 0 --tokens "$t" --seed 5 ${ARGS:-} | grep -E '^(plan|output):' | tr '\n' ' ')
      b=$("$new" run --checkpoint "$ckpt" --layer 0 --tokens "$t" --seed 5 ${ARGS:-} | grep -E '^(plan|output):' | tr '\n' ' ')
      hash_a=${a##*fnv1a } hash_b=${b##*fnv1a }
      verdict=same
      [[ ${hash_a%% *} == "${hash_b%% *}" && -n ${hash_a%% *} ]] || { verdict=DIFFERENT; status=1; }
      printf '%s T=%-5s %s\n  old: %s\n  new: %s\n' "gpt-oss-$model" "$t" "$verdict" "$a" "$b" | tee -a "$out/same.txt"
    done
  done
fi
if [[ $steps == *" bench "* ]]; then
  for model in ${MODELS:-120b 20b}; do
    for round in $(seq "${ROUNDS:-2}"); do
      for side in old new; do
        bin=$old
        [[ $side == new ]] && bin=$new
        echo "== gpt-oss-$model round $round $side" | tee -a "$out/ab_$model.txt"
        "$bin" bench --preset "gpt-oss-$model" ${ARGS:-} --tokens "${BENCH_TOKENS:-1,4,16,64,256,1024,4096}" \
          --json "$out/ab_${model}_${side}_$round.json" 2>>"$out/ab_bench.err" | tee -a "$out/ab_$model.txt" || status=1
      done
    done
  done
fi
exit $status

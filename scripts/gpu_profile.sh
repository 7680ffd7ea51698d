#!/usr/bin/env bash
# Nsight Compute profile of one batch size's forward (after scripts/gpu_run.sh built build-gpu):
# warp-state, scheduler, memory and source-level counters of every kernel, as text in OUT_DIR.
#   scripts/gpu_profile.sh OUT_DIR [TOKENS] [PRESET]     env: KERNELS (ncu -k regex, default the forward's kernels),
#   ARGS (more `mxmoe bench` options, e.g. "--precision fp8"), SKIP and COUNT (ncu's --launch-skip / --launch-count, 8 / 8)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1; tokens=${2:-1}; preset=${3:-gpt-oss-120b}
mkdir -p "$out"
bin=build-gpu/tools/mxmoe/mxmoe
ncu --target-processes all -k "regex:${KERNELS:-gemv|route|combine}" --launch-skip "${SKIP:-8}" --launch-count "${COUNT:-8}" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy --section SchedulerStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters \
  --import-source no -o "$out/prof_t$tokens" -f \
  "$bin" bench --preset "$preset" ${ARGS:-} --tokens "$tokens" --iterations 50 --warmup 1 --layers 8 >"$out/prof_t${tokens}_run.log" 2>&1
ncu --import "$out/prof_t$tokens.ncu-rep" --page details >"$out/prof_t${tokens}.txt" 2>&1
# The SASS page of every profiled kernel is megabytes: keep the 60 instructions with the most stall samples.
ncu --import "$out/prof_t$tokens.ncu-rep" --page source --csv --print-source sass 2>&1 | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
head = next((r for r in rows if any("Sampling" in c for c in r)), None)
if head is None:
    print("no stall-sampling column; first lines:"); [print(",".join(r)) for r in rows[:40]]; sys.exit()
cols = [i for i, c in enumerate(head) if "Sampling" in c]
def samples(r):
    try: return max(float(r[i].replace(",", "")) for i in cols)
    except (ValueError, IndexError): return -1.0
print(",".join(head))
for r in sorted((r for r in rows if r is not head), key=samples, reverse=True)[:60]: print(",".join(r))
' >"$out/prof_t${tokens}_sass_top.csv" || true
rm -f "$out/prof_t$tokens.ncu-rep"

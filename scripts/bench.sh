#!/usr/bin/env bash
# Measures dbh's performance on this machine and prints the table of the
# README's "Performance" section (ratios side by side in one run, targets,
# met/missed). Run it on an idle machine: other processes skew every number.
#
#   scripts/bench.sh [OUT_DIR]        (default build/bench; `./dev bench` runs this)
#
# Writes OUT_DIR/{harness,loader,bisect}_<device>.json (Google Benchmark JSON)
# and OUT_DIR/table.md. DBH_BENCH_DEVICE=cuda measures the training steps on
# the GPU; DBH_BENCH_QUICK=1 takes one repetition instead of five (a smoke
# check, not a measurement). Takes about 8 minutes on 2 CPU cores.
# Exit status: 0 all targets met, 1 some missed, 2 setup/build errors.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-$root/build/bench}"
device="${DBH_BENCH_DEVICE:-cpu}"
reps=5
[[ "${DBH_BENCH_QUICK:-0}" == 1 ]] && reps=1
./dev build --target dbh_benchmarks dbh >/dev/null || exit 2
bench="$root/build/${DBH_PRESET:-dev}/bin/dbh_benchmarks"
mkdir -p "$out"
common=(--benchmark_out_format=json --benchmark_counters_tabular=true)
# dbh's default layout and thread count for the benchmarks' step on this
# machine: what `auto` chooses (measured afresh, cached only under OUT_DIR).
echo "bench: dbh's auto choice of layout and threads for the 640² step" >&2
rm -rf "$out/auto"
DBH_CACHE_DIR="$out/auto-cache" "$root/build/${DBH_PRESET:-dev}/bin/dbh" run tests/bench/scenarios/step-640.yaml \
  "hardware.device=$device" --out "$out/auto" -q >&2 || exit 2
rm -rf "$out/auto-cache"
DBH_BENCH_AUTO="$("$root/.venv/bin/python" -c '
import json, sys
m = json.load(open(sys.argv[1]))["measured_choices"]
print("%d,%d" % (m["channels_last"]["value"], m["threads"]["value"]))' "$out/auto/report.json")" || exit 2
export DBH_BENCH_AUTO
echo "bench: auto chose channels_last,threads = $DBH_BENCH_AUTO" >&2
echo "bench: harness overhead, C++ vs PyTorch eager, trial start-up ($reps repetitions, interleaved)" >&2
"$bench" --benchmark_filter='^BM_(Step|TrialSpawn|DbhRun)' --benchmark_repetitions="$reps" \
  --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true \
  --benchmark_out="$out/harness_$device.json" "${common[@]}" >&2
echo "bench: data loader and the trainer's consumption at 640²" >&2
"$bench" --benchmark_filter='^BM_LoaderThroughput|^BM_TrainStep/resnet:18/size:640' \
  --benchmark_repetitions="$(( reps > 1 ? 3 : 1 ))" --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/loader_$device.json" "${common[@]}" >&2
echo "bench: bisection cost on planted failures" >&2
"$bench" --benchmark_filter='^BM_Bisect' --benchmark_out="$out/bisect_cpu.json" "${common[@]}" >&2
rc=0
"$root/.venv/bin/python" tests/bench/table.py "$out" | tee "$out/table.md" || rc=${PIPESTATUS[0]}
echo "bench: results in $out" >&2
exit "$rc"

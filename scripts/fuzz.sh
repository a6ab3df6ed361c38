#!/usr/bin/env bash
# Builds the libFuzzer targets (CMake preset "fuzz": clang++-14, ASan+UBSan,
# no torch target is compiled) and runs each for a bounded time on a scratch
# copy of its seed corpus (tests/fuzz/corpus/<target>/, left untouched).
#   scripts/fuzz.sh [seconds-per-target]     (default 30; documented long run: 600)
# Env: DBH_FUZZ_TARGETS="scenario events" to run a subset; DBH_FUZZ_JOBS (-j, default 1);
# DBH_FUZZ_SEED=N fixes libFuzzer's seed (CI does, so a failure replays).
# Prints executions per target; exits non-zero if any target crashed. Crash
# reproducers land in $work/<target>/ (printed), named crash-*/leak-*/timeout-*/oom-*.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
secs="${1:-30}"
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [seconds-per-target]" >&2; exit 2; }
targets=(${DBH_FUZZ_TARGETS:-scenario override events event_structure ufo icdar})

command -v clang++-14 >/dev/null || {
  echo "fuzz: clang++-14 missing; run DBH_WITH_FUZZ=1 scripts/setup.sh" >&2; exit 2; }

cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j"${DBH_FUZZ_JOBS:-1}" --target $(printf '%s_fuzz ' "${targets[@]}")

work="$(mktemp -d /tmp/dbh-fuzz-run.XXXXXX)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
printf '%-10s %12s  %s\n' target executions result
for t in "${targets[@]}"; do
  bin="build/fuzz/fuzz/${t}_fuzz"
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$work/$t/corpus/"
  log="$work/$t/log.txt"
  rc=0
  seed=()
  [[ -n "${DBH_FUZZ_SEED:-}" ]] && seed=(-seed="$DBH_FUZZ_SEED")
  "$bin" "$work/$t/corpus" "${seed[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  if ((rc == 0)); then
    result=ok
  else
    result="CRASH (rc=$rc) $(ls "$work/$t/artifacts" | head -1) log: $log"
    failed+=("$t")
  fi
  printf '%-10s %12s  %s\n' "$t" "${execs:-?}" "$result"
done
if ((${#failed[@]})); then
  echo "fuzz: crashes in: ${failed[*]} (reproducers under $work/<target>/artifacts/;" \
       "replay with build/fuzz/fuzz/<target>_fuzz <file>)" >&2
  exit 1
fi
rm -rf "$work"

#!/usr/bin/env bash
# Builds the torch-free unit tests (dbh_core_tests, dbh_harness_tests) with
# ASan+UBSan in the CMake preset "asan" (build/asan) and runs them. Only these
# two targets are built: no torch translation unit is compiled.
#   scripts/sanitize.sh [gtest args...]     e.g. --gtest_filter='Scenario*'
# Env: DBH_SANITIZE_JOBS (-j, default 1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v clang++-14 >/dev/null || {
  echo "sanitize: clang++-14 missing; run DBH_WITH_FUZZ=1 scripts/setup.sh" >&2; exit 2; }
cmake --preset asan >/dev/null
cmake --build build/asan -j"${DBH_SANITIZE_JOBS:-1}" --target dbh_core_tests dbh_harness_tests
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
rc=0
for t in dbh_core_tests dbh_harness_tests; do
  echo "sanitize: running $t" >&2
  build/asan/bin/$t "$@" || rc=1
done
exit $rc

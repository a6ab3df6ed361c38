#!/usr/bin/env bash
# The GPU pack, on a machine with a CUDA GPU, LibTorch from its PyTorch (CUDA)
# and the Debian libraries carried in .gpu/ (docs/gpu.md):
#
#   scripts/gpu-check.sh build     configure and build build/gpu against the machine's LibTorch
#   scripts/gpu-check.sh pack      dbh env, the GPU fault-kernel probe, the scenarios in scenarios/gpu/
#                                  (or those DBH_GPU_PACK names: folders and files)
#   scripts/gpu-check.sh qualify   dbh qualify for the RTX 3060 and T4 profiles
#   scripts/gpu-check.sh tests     the GPU integration tests (the scenarios of scenarios/gpu/)
#   scripts/gpu-check.sh probe     which CUDA error each way of breaking a kernel gives here
#   scripts/gpu-check.sh diagnose  dbh diagnose on the GPU pack's real sticky fault
#   scripts/gpu-check.sh sanitize  compute-sanitizer memcheck on a one-step run
#   scripts/gpu-check.sh bench     the benchmarks on the GPU (scripts/bench.sh, DBH_BENCH_DEVICE=cuda):
#                                  dbh's step vs PyTorch eager, monitors, throughput and TFLOP/s
#   scripts/gpu-check.sh own       the user's own training on CUDA: the Lightning example
#                                  (examples/lightning-dbnet) under dbh run, repeat and qualify,
#                                  with a fault, the RTX 3060 profile and a budget it exceeds
#                                  (DBH_GPU_OWN picks: nan budget oom repeat qualify)
#   scripts/gpu-check.sh numerics  a numerics reference recorded on this machine's CPU (dbh repeat
#                                  --record) compared on its GPU (dbh qualify --reference): does the
#                                  training depart beyond the noise, and where? (Note [A numerics
#                                  reference])
#   scripts/gpu-check.sh noengine  seed 003's setup under tighter budgets: does cuDNN's "unable to
#                                  find an engine" appear for real? (about 2 min per budget)
#   scripts/gpu-check.sh all       build, pack, qualify, numerics, diagnose, sanitize, bench (each part's
#                                  time in the summary; the dry run checks every verb)
#   scripts/gpu-check.sh VERB VERB…  several parts in one call, in that order
#
# DBH_GPU_DEADLINE=S: the whole call ends within S seconds: each part runs
# under what is left of it (a part cut there is noted "cut"), the parts after
# it are noted "not run", and the results are still packed. The GPU machine
# ends a command after 600 s and sends back nothing of a killed one's $OUT
# that was not written yet, so give it a deadline below that, with a minute
# left for packing (a qualification's probes hold thousands of files).
#
# DBH_GPU_DRY_RUN=1 (on any machine, no GPU needed): every step checks its
# commands instead of running them: each scenario it runs loads with its
# overrides (`dbh run S … --print-config`), each profile exists, each input
# file and tool path it names is there, each output folder can be created;
# a line per check, exit 1 when one fails. DBH_GPU_BIN=DIR names the dbh to
# check with (default build/dev/bin). tests/integration/gpu_check_test.cc runs it,
# so the GPU run cannot fail on a typo.
#
# Results go to $OUT (or $DBH_GPU_OUT, default /tmp/dbh-gpu-out), at most 8
# files of at most 16 MiB: summary.txt (each part's result and time),
# bench-table.md and gpu-results.tar.gz (every report, log and JSON, from
# $DBH_GPU_WORK). The last lines printed are the summary.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dry="${DBH_GPU_DRY_RUN:-0}"
dry_failed=0
out="${OUT:-${DBH_GPU_OUT:-/tmp/dbh-gpu-out}}"
work="${DBH_GPU_WORK:-/tmp/dbh-gpu-work}"
build_dir="$root/build/gpu"
jobs="${DBH_JOBS:-$(nproc)}"
logs="$work/logs"
mkdir -p "$out" "$work" "$logs"
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }

# Dry run: one line per check, "ok" or "FAILED"; the run's exit says whether all passed.
check() {
  local what=$1
  shift
  if "$@" >"$work/dry-check.log" 2>&1; then
    note "dry-run ok: $what"
  else
    note "dry-run FAILED: $what: $(tail -c 600 "$work/dry-check.log" | tr '\n' ' ')"
    dry_failed=1
  fi
}

# Dry run of `dbh ARGS…`: the scenario (and overrides) a command would run load,
# a profile it names exists; nothing trains.
dry_dbh() {
  local cmd=$1
  shift
  local scenario="" overrides=() profile="" a suite_members=()
  while (($#)); do
    a=$1
    shift
    case "$a" in
      --profile) profile=$1; shift ;;
      --out|--junit|--cache|--budget|--steps|--record) shift ;;
      --reference) check "reference flag has a path" test -n "$1"; shift ;;
      -*) ;;
      *=*) overrides+=("$a") ;;
      *)
        [[ -z $scenario ]] && scenario=$a
        if [[ -d $a ]]; then suite_members+=("$a"/*.yaml); else suite_members+=("$a"); fi ;;
    esac
  done
  case "$cmd" in
    env) check "dbh env runs" "$bin_dir/dbh" env ;;
    suite)
      local f
      for f in "${suite_members[@]}"; do
        check "suite scenario $f loads" "$bin_dir/dbh" run "$f" "${overrides[@]}" --print-config
      done ;;
    *)
      check "$cmd $scenario ${overrides[*]} loads" "$bin_dir/dbh" run "$scenario" "${overrides[@]}" --print-config
      [[ -n $profile ]] && check "profile $profile exists" sh -c "\"$bin_dir/dbh\" list profiles | grep -qw -- '$profile'" ;;
  esac
  return 0
}

deps() {
  if [[ $dry == 1 ]]; then
    if [[ -z ${dry_deps_said:-} ]]; then
      dry_deps_said=1
      if [[ -f .gpu/bundle.tar.xz || -d /tmp/dbh-gpu-deps/prefix ]]; then
        note "dry-run ok: the Debian libraries for the GPU machine (.gpu/bundle.tar.xz)"
      else
        note "dry-run note: .gpu/bundle.tar.xz is not here: make it with shared/tools/gpu-bundle.sh before the GPU run"
      fi
    fi
    bin_dir=${DBH_GPU_BIN:-$root/build/dev/bin}
    [[ -x $bin_dir/dbh ]] || check "dbh binary $bin_dir/dbh" test -x "$bin_dir/dbh"
    return 0
  fi
  local dep=/tmp/dbh-gpu-deps
  P=$dep/prefix/usr
  if [[ ! -d $P ]]; then
    [[ -f .gpu/bundle.tar.xz ]] || { echo "gpu-check: .gpu/bundle.tar.xz is missing (docs/gpu.md)" >&2; exit 2; }
    mkdir -p "$dep" && tar -C "$dep" -xJf .gpu/bundle.tar.xz
    for deb in .gpu/*.deb; do [[ -f $deb ]] && dpkg -x "$deb" "$dep/prefix"; done
    # libjpeg's jconfig.h lives in the multiarch include folder.
    cp -n "$P"/include/x86_64-linux-gnu/*.h "$P/include/" 2>/dev/null || true
    # The -dev symlink is absolute in the package; point it into the prefix.
    ln -sfn libjpeg.so.62 "$P/lib/x86_64-linux-gnu/libjpeg.so"
  fi
  export DBH_DEP_LIB="$P/lib/x86_64-linux-gnu"
  # Binaries built elsewhere against the same torch wheel (.gpu/bin, see
  # docs/gpu.md) find LibTorch and the CUDA runtime here.
  local torch_lib cudart_lib
  torch_lib="$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')"
  cudart_lib="$(python3 -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13","lib"))' 2>/dev/null)"
  export DBH_RUN_LIBS="$torch_lib:${cudart_lib}:/usr/local/cuda/lib64:$DBH_DEP_LIB"
  if [[ -n ${DBH_GPU_BIN:-} ]]; then bin_dir=$DBH_GPU_BIN
  elif [[ -x $build_dir/bin/dbh ]]; then bin_dir=$build_dir/bin
  else bin_dir=$root/.gpu/bin; fi
}

build() {
  deps
  if [[ $dry == 1 ]]; then
    check "CMakeLists.txt and the build's sources" test -f CMakeLists.txt -a -f harness/cli/main.cc
    check "python3 with torch (its LibTorch is what the build links)" "${DBH_GPU_PYTHON:-python3}" -c 'import torch'
    return 0
  fi
  local torch_prefix
  torch_prefix="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
  local t0=$SECONDS
  if [[ ! -f $build_dir/build.ninja ]]; then
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDBH_CCACHE=OFF \
      -DCMAKE_PREFIX_PATH="$P;$torch_prefix" >"$logs/configure.log" 2>&1 ||
      { tail -30 "$logs/configure.log"; exit 1; }
  fi
  LD_LIBRARY_PATH="$DBH_DEP_LIB" ninja -C "$build_dir" -j "$jobs" "${@:-dbh}" >"$logs/build.log" 2>&1 ||
    { grep -m5 -B2 -A10 'error' "$logs/build.log"; exit 1; }
  note "build: $((SECONDS - t0)) s (${*:-dbh}, $jobs jobs)"
}

dbh() {
  if [[ $dry == 1 ]]; then dry_dbh "$@"; return 0; fi
  LD_LIBRARY_PATH="$DBH_RUN_LIBS" "$bin_dir/dbh" "$@"
}

pack() {
  deps
  if [[ $dry == 1 ]]; then
    dbh env
    check "scenarios/gpu holds scenarios" sh -c 'ls scenarios/gpu/*.yaml'
    # shellcheck disable=SC2086 # a list of folders and files
    dbh suite ${DBH_GPU_PACK:-scenarios/gpu} --out "$work/pack" --junit "$logs/gpu-junit.xml"
    check "output folder $work can be written" sh -c "mkdir -p '$work/pack-dry' && rmdir '$work/pack-dry'"
    return 0
  fi
  note "binaries: $bin_dir"
  LD_LIBRARY_PATH="$DBH_RUN_LIBS" ldd "$bin_dir/dbh" | grep 'not found' | tee -a "$summary"
  dbh env >"$logs/env.txt" 2>&1; note "dbh env: exit $?"; cat "$logs/env.txt"
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$summary"
  rm -rf "$work/pack"
  local t0=$SECONDS
  # shellcheck disable=SC2086 # a list of folders and files
  dbh suite ${DBH_GPU_PACK:-scenarios/gpu} --out "$work/pack" --junit "$logs/gpu-junit.xml" >"$logs/pack.log" 2>&1
  note "suite ${DBH_GPU_PACK:-scenarios/gpu}: exit $? in $((SECONDS - t0)) s"
  cp "$work/pack/suite.json" "$logs/gpu-suite.json" 2>/dev/null
  python3 - "$work/pack" <<'PY' | tee -a "$summary"
import json, sys, pathlib
root = pathlib.Path(sys.argv[1])
for rep in sorted(root.rglob("report.json")):
    j = json.loads(rep.read_text())
    f = j.get("failure") or {}
    real = [e.get("detail", {}).get("real") for e in j.get("faults", []) if isinstance(e, dict)]
    print(f"{j.get('scenario',{}).get('name', rep.parent.name):40s} {j.get('outcome'):10s} "
          f"class={f.get('class') or '-':24s} step={f.get('step','-')} module={f.get('module','-')} "
          f"met={j.get('expectation',{}).get('met')} real={real}")
PY
}

# One `dbh qualify` run, timed: its log as LOG, then (not in a dry run) a
# summary line saying WHAT and the log's lines matching PATTERN.
#   qualify_one WHAT LOG PATTERN ARGS…
qualify_one() {
  local what=$1 log=$2 pattern=$3 t0=$SECONDS rc
  shift 3
  dbh qualify "$@" >"$log" 2>&1
  rc=$?
  [[ $dry == 1 ]] && return 0
  note "$what: exit $rc in $((SECONDS - t0)) s"
  grep -iE "$pattern" "$log" | head -8 | tee -a "$summary"
}

qualify() {
  deps
  local p
  for p in ${DBH_GPU_PROFILES:-rtx3060-12gb t4-16gb}; do
    rm -rf "$work/qualify-$p"
    # cuDNN benchmark off: its first-step autotuning at 640 px costs about a
    # minute per trial and does not change the memory a step needs.
    qualify_one "qualify $p" "$logs/qualify-$p.log" 'trials|largest|recommend' \
      scenarios/gpu/seed-003-rtx3060.yaml hardware.cudnn_benchmark=false --profile "$p" --out "$work/qualify-$p"
  done
}

# Note [A numerics reference] across devices: the same first steps of the
# tiny DBNet recorded on the CPU (3 processes, the noise measured there) and
# repeated on the GPU (TF32 off, then on: a real numeric difference).
numerics() {
  deps
  local t0=$SECONDS rc tf32
  rm -rf "$work/numerics"
  mkdir -p "$work/numerics"
  dbh repeat scenarios/base/tiny-cpu.yaml data.size=128 train.max_steps=5 train.lr=0.0005 hardware.device=cpu \
    --record "$work/numerics/cpu.json" --out "$work/numerics/record" >"$logs/numerics-record.log" 2>&1
  rc=$?
  [[ $dry == 1 ]] || note "numerics: recorded on the CPU: exit $rc in $((SECONDS - t0)) s"
  for tf32 in false true; do
    qualify_one "numerics: GPU (tf32 $tf32) against the CPU reference" "$logs/numerics-qualify-tf32-$tf32.log" \
      'numerics|departs|the same|not decided' scenarios/base/tiny-cpu.yaml data.size=128 train.max_steps=5 \
      train.lr=0.0005 hardware.device=cuda hardware.allow_tf32="$tf32" --reference "$work/numerics/cpu.json" \
      --out "$work/numerics/qualify-tf32-$tf32"
  done
}

probe() {
  # Which CUDA error each way of breaking a kernel gives on this GPU.
  if [[ $dry == 1 ]]; then
    check "tests/gpu/fault_probe.cu and nvcc" sh -c 'test -f tests/gpu/fault_probe.cu && command -v nvcc'
    return 0
  fi
  local arch
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
  [[ $arch == 90 ]] && arch=90a
  nvcc -O1 -arch=sm_$arch -o "$work/fault_probe" tests/gpu/fault_probe.cu >"$logs/probe-build.log" 2>&1 ||
    { cat "$logs/probe-build.log"; return 1; }
  local v
  for v in trap brkpt null_call data_call bad_store misaligned setmaxnreg wgmma_fence_diverged; do
    timeout 60 "$work/fault_probe" "$v" 2>&1 | tee -a "$summary"
  done
}

tests() {
  deps
  if [[ $dry == 1 ]]; then
    check "the GPU integration tests (${DBH_GPU_TEST_FILTER:-Gpu*}) are in dbh_integration_tests" \
      sh -c "\"$bin_dir/dbh_integration_tests\" --gtest_list_tests --gtest_filter='${DBH_GPU_TEST_FILTER:-Gpu*}' | grep -q '^  '"
    return 0
  fi
  [[ -x $bin_dir/dbh_integration_tests ]] || { build dbh dbh_integration_tests; deps; }
  LD_LIBRARY_PATH="$DBH_RUN_LIBS" DBH_BINARY="$bin_dir/dbh" "$bin_dir/dbh_integration_tests" --gtest_filter="${DBH_GPU_TEST_FILTER:-Gpu*}" \
    --gtest_output=xml:"$logs/gpu-tests.xml" >"$logs/gpu-tests.log" 2>&1
  note "GPU integration tests: exit $?"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/gpu-tests.log" | tee -a "$summary"
}

diagnose() {
  # The diagnosis ladder end to end on CUDA, on the real sticky fault.
  deps
  local t0=$SECONDS
  rm -rf "$work/diagnose"
  dbh diagnose scenarios/gpu/seed-000-illegal-instruction.yaml --out "$work/diagnose" >"$logs/diagnose.log" 2>&1
  local rc=$?
  [[ $dry == 1 ]] && return 0
  note "diagnose gpu/seed-000-illegal-instruction: exit $rc in $((SECONDS - t0)) s"
  tail -25 "$logs/diagnose.log"
}

sanitize() {
  # compute-sanitizer (memcheck) on one training step of the GPU base
  # scenario; it follows the worker process dbh starts.
  deps
  local t0=$SECONDS
  rm -rf "$work/sanitize"
  # A fixed layout and thread count: measuring the `auto` ones under memcheck
  # took minutes on an H100 (every kernel runs instrumented).
  local args=(scenarios/gpu/cudnn-benchmark.yaml train.max_steps=1 train.channels_last=false train.threads=0)
  if [[ $dry == 1 ]]; then
    dbh run "${args[@]}"
    return 0
  fi
  LD_LIBRARY_PATH="$DBH_RUN_LIBS" compute-sanitizer --tool memcheck --target-processes all \
    --error-exitcode 86 "$bin_dir/dbh" run "${args[@]}" --out "$work/sanitize" >"$logs/sanitize.log" 2>&1
  note "compute-sanitizer memcheck, one step: exit $? in $((SECONDS - t0)) s"
  grep -E 'ERROR SUMMARY' "$logs/sanitize.log" | tail -3 | tee -a "$summary"
}

bench() {
  # The Google Benchmark programs on the GPU: dbh's step against PyTorch eager
  # (this machine's Python and torch), images/s, trial start-up, bisection
  # costs, and training throughput (ResNet-18/50 at 640² in fp32 and bf16:
  # images/s, TFLOP/s, fraction of the device's peak); the table lands in the
  # summary, its JSON in the results archive.
  deps
  if [[ $dry == 1 ]]; then
    check "scripts/bench.sh and its benchmark scenario" test -x scripts/bench.sh -a -f tests/bench/scenarios/step-640.yaml
    check "the throughput benchmarks (ResNet-18/50, 640², fp32 and bf16) are in dbh_benchmarks" \
      sh -c "\"$bin_dir/dbh_benchmarks\" --benchmark_list_tests --benchmark_filter='^BM_StepThroughput/resnet:(18|50)/size:640/' | grep -c . | grep -qx 4"
    check "tests/bench/table.py reads the throughput results" sh -c "grep -q 'BM_StepThroughput' tests/bench/table.py"
    dbh run tests/bench/scenarios/step-640.yaml hardware.device=cuda
    return 0
  fi
  # A carried build (DBH_GPU_BIN) brings its own dbh_benchmarks.
  if [[ ! -x $bin_dir/dbh_benchmarks ]]; then
    cmake -DDBH_BUILD_BENCHMARKS=ON "$build_dir" >>"$logs/configure.log" 2>&1 || { tail -30 "$logs/configure.log"; return 1; }
    build dbh dbh_benchmarks
    deps
  fi
  local t0=$SECONDS
  LD_LIBRARY_PATH="$DBH_RUN_LIBS" DBH_BENCH_DEVICE=cuda DBH_BENCH_BIN="$bin_dir" DBH_BENCH_PYTHON=python3 \
    DBH_BENCH_PARTS="${DBH_BENCH_PARTS:-steps,throughput}" DBH_BENCH_REPS="${DBH_BENCH_REPS:-3}" \
    scripts/bench.sh "$work/bench" >"$logs/bench.log" 2>&1
  note "bench (cuda): exit $? in $((SECONDS - t0)) s"
  tail -30 "$work/bench/table.md" 2>/dev/null | tee -a "$summary"
}

own() {
  # The user's own training on the GPU (examples/lightning-dbnet: Lightning +
  # Hydra through dbh_adapter), every trial a Python process dbh starts:
  # a fault found at its step and module on CUDA, the RTX 3060 profile applied
  # by the adapter (ballast + allocator cap), a budget the training exceeds
  # (1 GiB, of which the context takes about 620 MiB on an H100: the class
  # Python's out-of-memory error gets), two processes compared bit for bit on
  # the GPU, and qualify's answer for the 3060.
  deps
  local ex=examples/lightning-dbnet/scenarios shim="$work/python-shim" t0
  if [[ $dry == 1 ]]; then
    check "python3 with torch, lightning and hydra" "${DBH_GPU_PYTHON:-python3}" -c 'import torch, lightning, hydra'
  else
    # `python` in the example's worker.command: the machine's python3, without
    # the carried libraries that only dbh needs (the bundle's zlib is older).
    mkdir -p "$shim"
    printf '#!/bin/sh\nunset LD_LIBRARY_PATH\nexec python3 "$@"\n' >"$shim/python"
    chmod +x "$shim/python"
    # Hydra and its two dependencies, where the machine lacks them, from the
    # wheels carried in .whl/ (no package registry there).
    if ! python3 -c 'import hydra' 2>/dev/null && compgen -G '.whl/*.whl' >/dev/null; then
      python3 -m pip install --quiet --no-index --no-deps --target "$work/pylib" .whl/*.whl >"$logs/own-wheels.log" 2>&1 ||
        { note "own: installing .whl/*.whl failed: $(tail -c 300 "$logs/own-wheels.log")"; return 1; }
      export PYTHONPATH="$work/pylib${PYTHONPATH:+:$PYTHONPATH}"
    fi
  fi
  local run_own
  run_own() {
    local name=$1
    shift
    [[ " ${DBH_GPU_OWN:-nan budget oom repeat qualify} " == *" $name "* ]] || return 0
    if [[ $dry == 1 ]]; then dry_dbh "$@"; return 0; fi
    t0=$SECONDS
    rm -rf "$work/own-$name"
    PATH="$shim:$PATH" PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" timeout "${DBH_GPU_OWN_TIMEOUT:-150}" \
      env LD_LIBRARY_PATH="$DBH_RUN_LIBS" "$bin_dir/dbh" "$@" --out "$work/own-$name" >"$logs/own-$name.log" 2>&1
    note "own $name: exit $? in $((SECONDS - t0)) s: dbh $*"
    tail -n 4 "$logs/own-$name.log" | cut -c1-300 | sed 's/^/    /' | tee -a "$summary"
    python3 - "$work/own-$name" <<'PY' | tee -a "$summary"
import json, sys, pathlib
for rep in sorted(pathlib.Path(sys.argv[1]).rglob("report.json"))[:3]:
    j = json.loads(rep.read_text())
    f = j.get("failure") or {}
    print(f"    {rep.parent.name}: outcome {j.get('outcome')} class={f.get('class', '-')} step={f.get('step', '-')} "
          f"module={f.get('module', '-')} met={j.get('expectation', {}).get('met')} "
          f"message={(f.get('message') or '')[:160]!r}")
seen = set()
over = []  # trials whose reported peak exceeds their budget: the ballast counted as the training's
for ev in sorted(pathlib.Path(sys.argv[1]).rglob("events.jsonl")):
    budget, peak = 0, 0
    for line in ev.read_text().splitlines():
        e = json.loads(line)
        if e.get("type") in ("hello", "memory_budget") and e.get("type") not in seen:
            seen.add(e.get("type"))
            print("    " + json.dumps({k: e.get(k) for k in ("type", "device", "torch_version", "worker", "applied",
                                                           "method", "budget_bytes", "device_total") if k in e}))
        if e.get("type") == "memory_budget" and e.get("applied"):
            budget = int(e.get("budget_bytes", 0))
        peak = max(peak, int((e.get("memory") or {}).get("cuda_peak_reserved_bytes", 0)))
    if budget and peak > budget:
        over.append(f"{ev.parent.name}: peak {peak / 2**30:.1f} GiB over the {budget / 2**30:.1f} GiB budget")
print(f"    reported CUDA peaks within their budgets: {'no: ' + '; '.join(over[:3]) if over else 'yes'}")
PY
  }
  run_own nan run "$ex/nan-in-fusion.yaml" hardware.device=cuda
  run_own budget run "$ex/clean.yaml" hardware.device=cuda hardware.profile=rtx3060-12gb
  run_own oom run "$ex/clean.yaml" hardware.device=cuda hardware.memory_budget=1GiB data.size=640 data.batch_size=32 train.max_steps=2
  run_own repeat repeat "$ex/clean.yaml" hardware.device=cuda --processes 2
  run_own qualify qualify "$ex/clean.yaml" hardware.device=cuda data.size=640 --profile rtx3060-12gb
}

noengine() {
  # A real "unable to find an engine" (issue: cuDNN's FIND under a tight
  # budget): seed 003's setup (ResNet-50 + PAN, 640 px, fp32, cuDNN benchmark
  # on) at batch 8, which reserves 11.1 GiB on an H100, under budgets that
  # leave less and less room for cuDNN's workspace. Each run's failure class
  # (none, cuda_oom or cudnn_no_engine) and the error's first line are noted;
  # cuDNN's autotuning costs about two minutes per run, so this verb is not
  # part of `all`.
  deps
  local b t0 rc
  for b in ${DBH_GPU_NOENGINE_BUDGETS:-11.0GiB 10.6GiB}; do
    t0=$SECONDS
    rm -rf "$work/noengine-$b"
    dbh run scenarios/gpu/seed-003-rtx3060.yaml data.batch_size=8 train.max_steps=1 hardware.memory_budget="$b" \
      --out "$work/noengine-$b" >"$logs/noengine-$b.log" 2>&1
    rc=$?
    [[ $dry == 1 ]] && continue
    note "noengine, budget $b: exit $rc in $((SECONDS - t0)) s"
    python3 - "$work/noengine-$b/report.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except OSError as e:
    sys.exit(f"  no report: {e}")
f = j.get("failure") or {}
print(f"  outcome {j.get('outcome')}, class {f.get('class', '-')}: {(f.get('message') or '').splitlines()[:1]}")
PY
  done
}

# The results' trip back: at most 8 files of at most 16 MiB in $OUT
# (summary.txt, the bench table and gpu-results.tar.gz with every report, log
# and JSON; the training's overlay images stay behind); the largest files are
# left out of the archive, and named, until it fits.
pack_results() {
  if [[ $dry == 1 ]]; then
    check "tar can pack $work" sh -c "tar -C '$work' -czf /dev/null ."
    return 0
  fi
  local limit=$((16 * 1024 * 1024)) excludes=() big
  rm -f "$out/left-out.txt"
  [[ -f $work/bench/table.md ]] && cp "$work/bench/table.md" "$out/bench-table.md"
  # Largest first: the candidates to leave out if the archive is too big.
  mapfile -t big < <(find "$work" -type f ! -name '*.pt' ! -name fault_probe ! -path '*/checkpoints/*' \
    ! -path '*/overlays/*' -printf '%s %P\n' | sort -rn | cut -d' ' -f2-)
  # Left out in doubling groups (1, 2, 4, … of the largest), so a run of
  # thousands of files is packed in a few passes, not one pass per file.
  local i=0 group=1 j
  while :; do
    tar -C "$work" -czf "$out/gpu-results.tar.gz" --exclude='*.pt' --exclude='checkpoints' --exclude='fault_probe' \
      --exclude='overlays' "${excludes[@]}" . 2>/dev/null
    (($(stat -c %s "$out/gpu-results.tar.gz") <= limit)) || ((i >= ${#big[@]})) && break
    for ((j = 0; j < group && i < ${#big[@]}; j++, i++)); do
      echo "${big[i]}" >>"$out/left-out.txt"
      excludes+=("--exclude=./${big[i]}")
    done
    note "left out of gpu-results.tar.gz (16 MiB limit): the $i largest files (named in left-out.txt)"
    group=$((group * 2))
  done
  du -h "$out/gpu-results.tar.gz" | tee -a "$summary"
  local n
  n="$(find "$out" -type f | wc -l)"
  ((n <= 8)) || note "WARNING: $n files in $out (the trip back takes 8)"
}

# One part of the run, timed: "time: PART N s" in the summary, and the total
# against the 600 s a command may run on the GPU machine.
part() {
  local t0=$SECONDS
  "$@"
  note "time: $1 $((SECONDS - t0)) s"
}

all_verbs=" build pack qualify numerics tests probe diagnose sanitize bench noengine own "
usage() {
  echo "usage: scripts/gpu-check.sh {build [TARGET…]|VERB [VERB…]|all}; verbs:$all_verbs" >&2
  exit 2
}
# One part on its own (what a call with a deadline runs under `timeout`).
if [[ ${1:-} == --one ]]; then
  part "$2"
  exit
fi
run_start=$SECONDS
deadline="${DBH_GPU_DEADLINE:-}"
[[ -z $deadline || $deadline =~ ^[0-9]+$ ]] || { echo "gpu-check: DBH_GPU_DEADLINE=$deadline: expected whole seconds" >&2; exit 2; }
# Runs one part; under a deadline in a child that `timeout` ends, so a part
# that overruns leaves time to pack what the others wrote.
run_part() {
  if [[ -z $deadline || $dry == 1 ]]; then
    part "$@"
    return
  fi
  local left=$((deadline - (SECONDS - run_start)))
  if ((left < 15)); then
    note "not run: $1 (DBH_GPU_DEADLINE=$deadline s reached)"
    return
  fi
  local t0=$SECONDS rc
  timeout -k 10 "$left" "${BASH_SOURCE[0]}" --one "$1"
  rc=$?
  ((rc == 124 || rc == 137)) && note "cut: $1 after $((SECONDS - t0)) s (DBH_GPU_DEADLINE=$deadline s)"
  return 0
}
verbs=("${@:-all}")
if [[ ${verbs[0]} == build ]] && ((${#verbs[@]} > 1)) && [[ $all_verbs != *" ${verbs[1]} "* ]]; then
  # build TARGET…: those targets instead of dbh.
  part build "${verbs[@]:1}"
  verbs=()
fi
for v in "${verbs[@]}"; do
  [[ $v == all || $all_verbs == *" $v "* ]] || usage
done
packed=0
for v in "${verbs[@]}"; do
  case "$v" in
    # The GPU integration tests run the same scenarios as the pack with more
    # checks: `tests` on its own, when the time is there.
    all)
      for p in build pack qualify numerics diagnose sanitize bench; do run_part "$p"; done
      # The dry run checks the verbs `all` leaves out too.
      [[ $dry == 1 ]] && { tests; probe; noengine; own; }
      packed=1 ;;
    build|tests|probe) run_part "$v" ;;
    *) run_part "$v"; packed=1 ;;
  esac
done
((packed)) && pack_results
[[ $dry == 1 ]] || note "time: total $((SECONDS - run_start)) s (a command may run 600 s on the GPU machine)"
echo "---- summary ($(hostname), $(date -u +%FT%TZ))"
cat "$summary"
if [[ $dry == 1 ]]; then
  rm -f "$work/dry-check.log"
  exit "$dry_failed"
fi

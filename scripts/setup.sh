#!/usr/bin/env bash
# Installs what dbh needs and skips what is already there:
#   - Debian packages (apt-get), only the missing ones;
#   - LibTorch from the pinned torch wheel (requirements-torch.txt) in .venv/.
# Safe to re-run: on a ready machine it finishes in about a second.
# Arguments name the parts to run (default: all three): `apt`, `torch`,
# `python`; `venv` makes .venv alone (apt-installing python3 and python3-venv
# first when they are absent). On a machine without LibTorch, ./dev runs
# `venv`, then `torch` beside the rest of the Debian packages and the
# torch-free half of the build: the 4.6 GB download never waits for apt. DBH_SETUP_PLAIN=1: progress as plain lines even on a
# terminal (a step running beside another command's output).
# Extras: DBH_WITH_FUZZ=1 (clang-14 and libFuzzer), DBH_WITH_SLURM=1 (Slurm and
# munge for the scheduler test), DBH_WITH_BROWSER=1 (Chromium, which renders
# report.html in the HTML report test), DBH_WITH_DEBUGGER=1 (gdb, which takes
# a hung worker's stacks in the death test); .ci/run sets all four.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf 'setup: %s\n' "$*" >&2; }

venv="$root/.venv"
stamp="$venv/.dbh-torch-stamp"
want="$(sha256sum requirements-torch.txt | cut -d' ' -f1)"
py_stamp="$venv/.dbh-python-stamp"
py_want="$(cat requirements-python.txt requirements-torch.txt python/pyproject.toml python/dbh_adapter/*.py |
  sha256sum | cut -d' ' -f1)"
torch_ready() { [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; }
python_ready() { [[ -f "$py_stamp" && "$(cat "$py_stamp")" == "$py_want" ]]; }

# --missing: print the parts that a run would install (torch, python), one a
# line, and install nothing.
if [[ "${1:-}" == --missing ]]; then
  torch_ready || echo torch
  python_ready || echo python
  exit 0
fi

parts=("$@")
((${#parts[@]})) || parts=(apt torch python)
for part in "${parts[@]}"; do
  case "$part" in
    apt | venv | torch | python) ;;
    *)
      echo "setup: unknown part \"$part\": expected apt, venv, torch or python" >&2
      exit 2
      ;;
  esac
done
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }
live_line=0
[[ -t 2 && "${DBH_SETUP_PLAIN:-0}" != 1 ]] && live_line=1

# Runs a long step (a pip install) so nobody waits in silence: on a terminal
# one line counts the seconds; elsewhere (CI logs) a plain line every 30 s
# says what is still running and for how long.
long_step() {
  local what="$1"
  shift
  "$@" --progress-bar off &
  local pid=$! start=$SECONDS rc=0 tick=0
  # A command started with & ignores Ctrl-C in a script: stopping set-up stops it.
  trap 'kill "$pid" 2>/dev/null; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    tick=$((tick + 1))
    if ((live_line)); then
      printf '\rsetup: %s: %d s ' "$what" "$((SECONDS - start))" >&2
    elif ((tick % 30 == 0)); then
      log "still $what: $((SECONDS - start)) s"
    fi
  done
  ((live_line)) && printf '\n' >&2
  wait "$pid" || rc=$?
  trap - INT TERM
  return "$rc"
}

# Installs the Debian packages named that are not installed yet.
install_missing() {
  missing=()
  for p in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
  done
  # python3 may come from elsewhere (pyenv); only ask apt for it when absent.
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' 2>/dev/null; then
    filtered=()
    for p in "${missing[@]}"; do
      [[ "$p" == python3 || "$p" == python3-venv ]] || filtered+=("$p")
    done
    missing=("${filtered[@]+"${filtered[@]}"}")
  fi
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "Debian packages: all present"
  fi
}

# --- Python and .venv (what the torch download needs, and no more) --------
if wants venv; then
  if ! { command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' 2>/dev/null; }; then
    install_missing python3 python3-venv
  fi
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
fi

# --- Debian packages -------------------------------------------------------
if wants apt; then
  apt_packages=(
    build-essential cmake ninja-build ccache pkg-config git
    python3 python3-venv
    libopencv-dev libjpeg62-turbo-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libpolyclipping-dev
    libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  )
  # Optional: clang and libFuzzer for scripts/fuzz.sh and scripts/sanitize.sh.
  if [[ "${DBH_WITH_FUZZ:-0}" == 1 ]]; then
    apt_packages+=(clang-14 libclang-rt-14-dev)
  fi
  # Optional: Chromium, for the HTML report test's headless rendering (without
  # it that test checks the pages as text and skips the browser part).
  if [[ "${DBH_WITH_BROWSER:-0}" == 1 ]]; then
    apt_packages+=(chromium)
  fi
  # Optional: gdb, for the stacks of a hung worker (without gdb or eu-stack the
  # report says none could be taken and that test skips).
  if [[ "${DBH_WITH_DEBUGGER:-0}" == 1 ]]; then
    apt_packages+=(gdb)
  fi
  # Optional: Slurm and munge for the scheduler integration test
  # (scripts/slurm-local.sh starts them by hand; their services are not used).
  if [[ "${DBH_WITH_SLURM:-0}" == 1 ]]; then
    apt_packages+=(slurmctld slurmd slurm-client munge)
  fi
  install_missing "${apt_packages[@]}"
fi

# --- LibTorch from the pinned wheel ----------------------------------------
if wants torch; then
  if torch_ready; then
    log "LibTorch: $(grep -E '^torch==' requirements-torch.txt) present in .venv"
  else
    log "installing $(grep -E '^torch==' requirements-torch.txt) into .venv (4.6 GB: about 3 minutes from nothing)"
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    long_step "installing torch" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      -r requirements-torch.txt
    echo "$want" > "$stamp"
  fi
fi

# --- The Python side: the adapter and the example's packages --------------
if wants python; then
  # Lightning, Hydra and Pillow pinned (requirements-python.txt), with the torch
  # pin as a constraint so pip never replaces it, and the adapter in python/
  # (dbh_adapter: your own training under dbh, docs/own-training.md).
  if python_ready; then
    log "Python packages: lightning, hydra-core, pillow and dbh_adapter present in .venv"
  else
    log "installing lightning, hydra-core, pillow and the dbh_adapter package into .venv (about 30 s)"
    long_step "installing the Python packages" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      -r requirements-python.txt -c requirements-torch.txt
    # Built in a scratch copy: a build from python/ itself would leave build/
    # and *.egg-info in the checkout.
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    cp -r python "$scratch/adapter"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --progress-bar off --no-deps \
      "$scratch/adapter"
    rm -rf "$scratch"
    trap - EXIT
    echo "$py_want" > "$py_stamp"
  fi
fi

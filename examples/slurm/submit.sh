#!/usr/bin/env bash
# Runs a dbh suite on a Slurm cluster as an N-task array job, then merges the
# shards in a job that depends on the whole array.
#
#   examples/slurm/submit.sh [--wait] SUITE OUT [N]      (N defaults to 4)
#
# Extra sbatch options go through Slurm's own variables, e.g.
# SBATCH_PARTITION=gpu SBATCH_GRES=gpu:1 SBATCH_OUTPUT=logs/%x-%A_%a.log.
# Set DBH to the dbh binary when it is not on the PATH of the compute nodes.
# --wait blocks until the merge has run and exits with its status (0: every
# scenario met its expectation). Results: OUT/merged/suite.json and junit.xml.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wait=()
if [[ "${1:-}" == --wait ]]; then wait=(--wait); shift; fi
[[ $# -ge 2 && $# -le 3 ]] || { echo "usage: submit.sh [--wait] SUITE OUT [N]" >&2; exit 2; }
suite="$(realpath "$1")"
out="$(realpath -m "$2")"
n="${3:-4}"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: N: expected a positive integer, got '$n'" >&2; exit 2; }
mkdir -p "$out"
array="$(sbatch --parsable --array="0-$((n - 1))" "$here/dbh-suite.sbatch" "$suite" "$out")"
array="${array%%;*}"
echo "array job $array: $n shard(s) of $suite -> $out"
merge="$(sbatch --parsable "${wait[@]}" --dependency="afterany:$array" "$here/dbh-merge.sbatch" "$out")" || rc=$?
echo "merge job ${merge%%;*}: $out/merged/"
exit "${rc:-0}"

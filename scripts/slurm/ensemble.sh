#!/usr/bin/env bash
# Submits a `meridian sim` ensemble (or a `meridian sweep`) as a Slurm job array of PARTS tasks,
# each running its share of the seeds (points) with `--part slurm`, and a gather job that waits
# for the whole array (afterany) and writes the ensemble (table, figures) from the parts' runs:
# the same ensemble.json as one `meridian sim --seeds` process makes.
#
# usage: scripts/slurm/ensemble.sh PARTS sim SCENARIO.yaml --seeds LIST --out DIR [sim options]
#        scripts/slurm/ensemble.sh PARTS sweep SCENARIO.yaml --set K=V1,V2 --out DIR [options]
#   SBATCH_ARGS="--partition=p --time=1:00:00" are passed to both sbatch calls;
#   WAIT=1: wait for the gather job and exit with its status (sbatch --wait).
#   MERIDIAN=path/to/meridian (default build/bin/meridian).
# Prints the two job ids. Each task's output: DIR/slurm-<array job>_<task>.out; the gather's:
# DIR/slurm-gather-<job>.out.
set -euo pipefail

if [[ $# -lt 3 || ! $1 =~ ^[1-9][0-9]*$ || ( $2 != sim && $2 != sweep ) ]]; then
  sed -n '7,13p' "$0" >&2
  exit 2
fi
parts=$1
shift
meridian=${MERIDIAN:-build/bin/meridian}
out=
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case ${args[i]} in
  --out) out=${args[i + 1]:-} ;;
  --out=*) out=${args[i]#--out=} ;;
  esac
done
[[ -n $out ]] || { echo "ensemble.sh: give --out DIR (the parts and the gather share it)" >&2; exit 2; }
mkdir -p "$out"
read -r -a extra <<<"${SBATCH_ARGS:-}"

quoted=$(printf '%q ' "$meridian" "$@")
array=$(sbatch --parsable "${extra[@]}" --job-name=meridian-parts --array=0-$((parts - 1)) \
  --output="$out/slurm-%A_%a.out" --wrap "$quoted --part slurm")
array=${array%%;*}
wait=()
[[ ${WAIT:-0} == 1 ]] && wait=(--wait)
echo "parts: job $array (array of $parts)"
gather=$(sbatch --parsable "${extra[@]}" "${wait[@]}" --job-name=meridian-gather \
  --dependency=afterany:"$array" --output="$out/slurm-gather-%j.out" --wrap "$quoted --gather") || {
  status=$?
  echo "gather: failed (exit $status); see $out/slurm-gather-*.out" >&2
  exit $status
}
echo "gather: job ${gather%%;*}"

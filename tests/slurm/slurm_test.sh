#!/usr/bin/env bash
# The `slurm` label (tests/slurm/CMakeLists.txt): usage: slurm_test.sh MERIDIAN WORK_DIR CACHE_DIR
set -euo pipefail

meridian=$(realpath "$1")
work=$2
cache=$(realpath -m "$3")
repo=$(cd "$(dirname "$0")/../.." && pwd)
for tool in slurmctld slurmd sbatch srun; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (make deps installs it)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: slurmd runs its tasks as their user: needs root"; exit 77; }

# Everything runs in a network namespace of its own (unshare --net): slurmctld listens on every
# interface and the cluster has no authentication (auth/none). Loopback is up, and a veth pair
# with an address no route leads to, because glibc's getaddrinfo(AI_ADDRCONFIG), which Slurm
# uses, resolves nothing, not even "127.0.0.1", where loopback is the only interface.
if [[ -z ${MERIDIAN_SLURM_NETNS:-} ]]; then
  command -v unshare >/dev/null || { echo "SKIP: no unshare (util-linux)"; exit 77; }
  unshare --net true 2>/dev/null || { echo "SKIP: cannot create a network namespace (unshare --net)"; exit 77; }
  exec unshare --net env MERIDIAN_SLURM_NETNS=1 bash -c '
    set -e
    ip link set lo up
    ip link add mslurm0 type veth peer name mslurm1
    ip addr add 10.254.254.1/32 dev mslurm0
    ip link set mslurm0 up
    ip link set mslurm1 up
    exec "$0" "$@"' "$0" "$@"
fi

rm -rf "$work"
mkdir -p "$work"
work=$(realpath "$work")
cluster=$work/cluster
fail() { echo "FAIL: $*" >&2; exit 1; }
stop() { "$repo/scripts/slurm/local_cluster.sh" stop "$cluster" || true; }
trap stop EXIT
conf=$("$repo/scripts/slurm/local_cluster.sh" start "$cluster") || fail "the Slurm cluster did not start"
eval "$conf"
export SLURM_CONF MERIDIAN=$meridian
sinfo

# 1. A three-node real run, one node per task of `sbatch scripts/slurm/train.sbatch`: task 0
#    serves the store on a free port, the others find it on the step's first host.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s#dir: ../../runs/example#dir: $work/train#" "$repo/cli/train/run.example.yaml" >"$work/run.yaml"
cd "$work"
sbatch --wait --output="$work/train-%j.out" "$repo/scripts/slurm/train.sbatch" run.yaml \
  --serve-store "$port" --set run.outer_steps=3 --set diloco.H=4 --set data.cache_dir="$cache" ||
  { cat "$work"/train-*.out; fail "the three-node run under Slurm did not finish (exit $?)"; }
log=$(cat "$work"/train-*.out)
echo "$log" | grep -v "outer step" | head -20
for task in 0 1 2; do
  grep -q "node $((task + 1)): Slurm job [0-9]* step 0, task $task of 3 on " <<<"$log" ||
    fail "task $task did not take node id $((task + 1)) from Slurm"
done
grep -q "node 1: .*serving the run's store on 127.0.0.1:$port" <<<"$log" || fail "task 0 did not serve the store"
grep -q "node 2: .*the run's store: task 0's, $(hostname -s):$port" <<<"$log" || fail "task 1 did not find task 0's store"
last=""
for n in 1 2 3; do
  f=$work/train/node-$n/checksums.tsv
  [[ -s $f ]] || fail "node $n wrote no checksums"
  row=$(tail -n 1 "$f")
  [[ $(cut -f1 <<<"$row") == 2 ]] || fail "node $n ended at outer step '$(cut -f1 <<<"$row")', not 2"
  [[ -z $last || $row == "$last" ]] || fail "node $n's last checksum row '$row' differs from '$last'"
  last=$row
done
echo "ok: three nodes under Slurm agree at the last outer step: $last"

# 2. A step with fewer tasks than the run's initial nodes is refused, naming why.
if srun -n 2 "$meridian" train run.yaml --secret-file "$work/train-secret" >"$work/short.out" 2>&1; then
  fail "a 2-task step of a 3-node run was not refused"
fi
grep -q "the run starts with run.nodes = 3 nodes, but Slurm job .* has fewer tasks: srun -n 3" \
  "$work/short.out" || { cat "$work/short.out"; fail "the refusal does not say why"; }
echo "ok: a step with too few tasks is refused"

# 3. An ensemble as a job array of 2 tasks, gathered: the ensemble one process makes.
cat >"$work/ens.yaml" <<'YAML'
run: {name: ens, outer_steps: 2}
model: {layers: 2, hidden: 256, heads: 4, kv_heads: 4, ffn: 512, vocab: 1000, seq_len: 128}
hardware: {step_time_s: 1}
network:
  access_bandwidth_gbps: [0.5, 4.0]
  sites: [{name: a}, {name: b}]
  rtt: [{a: a, b: b, ms: 80, source: test}]
  nodes: [{site: a, count: 2}, {site: b, count: 2}]
diloco: {H: 2, buckets: "1", local_ranks: 1, checkpoint_s: 0}
YAML
"$meridian" sim ens.yaml --seeds 1-5 --out whole --no-plots --jobs 1 >/dev/null
WAIT=1 "$repo/scripts/slurm/ensemble.sh" 2 sim ens.yaml --seeds 1-5 --out array --no-plots --jobs 1 ||
  { cat array/slurm-*.out; fail "the job-array ensemble failed"; }
ls array/seed-1.exit array/seed-2.exit >/dev/null
python3 - whole/ensemble.json array/ensemble.json <<'PY' || fail "the gathered ensemble differs from one process's"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for j in (a, b):
    j.pop("command")
sys.exit(0 if a == b else 1)
PY
echo "ok: a 2-task job-array ensemble gathers to the ensemble of one process"

# 4. A sweep as a job array of 3 tasks, gathered: the table one process writes.
"$meridian" sweep ens.yaml --set diloco.H=1,2,3 --out sweep-whole --no-plots >/dev/null
WAIT=1 "$repo/scripts/slurm/ensemble.sh" 3 sweep ens.yaml --set diloco.H=1,2,3 --out sweep-array \
  --no-plots || { cat sweep-array/slurm-*.out; fail "the job-array sweep failed"; }
cmp sweep-whole/sweep.csv sweep-array/sweep.csv || fail "the gathered sweep table differs"
echo "ok: a 3-task job-array sweep gathers to the table of one process"

#!/usr/bin/env bash
# Starts N `meridian train` nodes of one run on this machine: node 1 embeds the store on a free
# port, nodes 2..N join it over loopback. Logs go to <log dir>/node<ID>.log. Not a cluster
# launcher (one machine, loopback); scripts/netns/ shapes links between namespaces.
#
# usage: scripts/start_nodes.sh N RUN.yaml [LOG_DIR] [-- extra args for every node]
#   MERIDIAN=path/to/meridian (default build/bin/meridian)
#   SECRET_FILE=path (default: a fresh random secret in LOG_DIR/secret)
# Waits for every node; exits with the first non-zero node status. Ctrl-C stops all nodes
# (each leaves gracefully after its current round).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '7,12p' "$0" >&2
  exit 2
fi
n=$1
run=$2
shift 2
log_dir=runs/nodes
if [[ $# -gt 0 && $1 != "--" ]]; then log_dir=$1; shift; fi
if [[ $# -gt 0 && $1 == "--" ]]; then shift; fi
extra=("$@")
meridian=${MERIDIAN:-build/bin/meridian}
[[ -x $meridian ]] || { echo "start_nodes: $meridian is not built (MERIDIAN=...)" >&2; exit 2; }
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "start_nodes: N must be a positive integer" >&2; exit 2; }

mkdir -p "$log_dir"
secret=${SECRET_FILE:-$log_dir/secret}
if [[ ! -f $secret ]]; then
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret")
fi
port_file=$log_dir/store.port
rm -f "$port_file"

pids=()
stop() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap stop INT TERM

"$meridian" train "$run" --node-id 1 --secret-file "$secret" --serve-store 0 \
  --bind 127.0.0.1 --store-port-file "$port_file" "${extra[@]}" >"$log_dir/node1.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do [[ -s $port_file ]] && break; sleep 0.1; done
if [[ ! -s $port_file ]]; then
  echo "start_nodes: node 1's store did not start (see $log_dir/node1.log)" >&2
  stop
  exit 1
fi
store=127.0.0.1:$(cat "$port_file")
echo "store on $store; logs in $log_dir"
for ((id = 2; id <= n; ++id)); do
  "$meridian" train "$run" --node-id "$id" --secret-file "$secret" --store "$store" \
    "${extra[@]}" >"$log_dir/node$id.log" 2>&1 &
  pids+=($!)
done
tail -q -n +1 -f "$log_dir/node1.log" | grep --line-buffered "outer step" &
tailer=$!
status=0
for p in "${pids[@]}"; do
  while true; do
    s=0
    wait "$p" || s=$?
    # A trapped signal interrupts `wait` (status > 128) while the node is still leaving.
    if [[ $s -gt 128 ]] && kill -0 "$p" 2>/dev/null; then continue; fi
    break
  done
  [[ $status -eq 0 ]] && status=$s
done
kill "$tailer" 2>/dev/null || true
echo "all $n nodes ended (status $status)"
exit $status

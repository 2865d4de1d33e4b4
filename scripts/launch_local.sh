#!/usr/bin/env bash
# Starts a standalone `meridian store` and N node processes on this machine, then waits for the
# nodes and stops the store. Placeholders in the node command: {node} (1..N: node ids start at
# 1), {store} (HOST:PORT of the store), {secret} (the secret file). Not a cluster scheduler.
#
#   scripts/launch_local.sh [--meridian BIN] [--secret-file F] N -- NODE_COMMAND...
# e.g. scripts/launch_local.sh 4 -- build/bin/meridian train run.yaml --node-id {node} \
#        --store {store} --secret-file {secret}
# Exit: the first non-zero node status.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
meridian=build/bin/meridian
secret=""
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --meridian) meridian=$2; shift 2 ;;
    --secret-file) secret=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
n=${1:?usage: launch_local.sh [--meridian BIN] [--secret-file F] N -- COMMAND...}
shift
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || { echo "launch_local.sh: no node command" >&2; exit 2; }

workdir=$(mktemp -d)
trap 'kill "$store_pid" 2>/dev/null; wait "$store_pid" 2>/dev/null; rm -rf "$workdir"' EXIT
if [[ -z $secret ]]; then
  secret=$workdir/secret
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret")
fi
"$meridian" store --bind 127.0.0.1 --port 0 --secret-file "$secret" > "$workdir/store.out" 2> "$workdir/store.log" &
store_pid=$!
# The store prints its bound address once listening; wait for that line (bounded).
for _ in $(seq 1 200); do
  grep -q '^store listening on ' "$workdir/store.out" 2>/dev/null && break
  kill -0 "$store_pid" 2>/dev/null || { cat "$workdir/store.log" >&2; exit 1; }
  sleep 0.05
done
store=$(sed -n 's/^store listening on \([^ ]*\).*/\1/p' "$workdir/store.out")
[[ -n $store ]] || { echo "launch_local.sh: the store did not start" >&2; exit 1; }
echo "store at $store" >&2

pids=()
for ((i = 1; i <= n; i++)); do
  args=()
  for a in "$@"; do
    a=${a//\{node\}/$i}; a=${a//\{store\}/$store}; a=${a//\{secret\}/$secret}
    args+=("$a")
  done
  "${args[@]}" &
  pids+=($!)
done
wait_all_pids "${pids[@]}"

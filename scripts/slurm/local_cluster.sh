#!/usr/bin/env bash
# A Slurm cluster of one host, for tests and for trying scripts/slurm/ without a cluster:
# slurmctld and slurmd (Debian's slurmctld, slurmd, slurm-client; run as root) on free ports,
# every file in DIR, no munge (auth/none: slurmd listens on loopback, slurmctld on every
# interface, so only on a machine of your own; tests/slurm runs it in a network namespace).
#
# usage: scripts/slurm/local_cluster.sh start DIR [CPUS]   # prints `export SLURM_CONF=DIR/slurm.conf`
#        scripts/slurm/local_cluster.sh stop DIR
# CPUS (default 16) is what the one node offers Slurm, beyond this machine's own if need be
# (SlurmdParameters=config_overrides): a three-node run needs three tasks on a 2-CPU machine.
set -euo pipefail

usage() { sed -n '7,10p' "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
action=$1
dir=$2
cpus=${3:-16}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case $action in
start)
  for tool in slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null || { echo "local_cluster: $tool is not installed (apt-get install slurmctld slurmd slurm-client)" >&2; exit 2; }
  done
  [[ $(id -u) -eq 0 ]] || { echo "local_cluster: slurmd runs tasks as their user: start it as root" >&2; exit 2; }
  mkdir -p "$dir/state" "$dir/spool"
  dir=$(cd "$dir" && pwd)
  host=$(hostname -s)
  cat >"$dir/slurm.conf" <<CONF
ClusterName=meridian-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
CommunicationParameters=NoInAddrAny
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -f "$SLURM_CONF" -i
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 100); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [[ $state == idle ]] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
    sleep 0.2
  done
  echo "local_cluster: the node is not idle after 20 s (state '${state:-none}'); see $dir/slurmctld.log and $dir/slurmd.log" >&2
  "$0" stop "$dir" || true
  exit 1
  ;;
stop)
  for daemon in slurmd slurmctld; do
    pid_file=$dir/$daemon.pid
    [[ -s $pid_file ]] || continue
    pid=$(cat "$pid_file")
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  ;;
*) usage ;;
esac

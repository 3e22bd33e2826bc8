#!/usr/bin/env bash
# Start a single-node SLURM (Debian slurm-wlm + munge) on this machine, for the opt-in SLURM test
# (tests/test_slurm.py: ROBOREEL_SLURM=1). Needs root and Debian apt. Idempotent: when the node already answers
# `sinfo` as idle/mixed, it only says so. Exits non-zero (with the reason) when SLURM cannot be started, so a CI
# runner can skip the SLURM test instead of failing for reasons outside roboreel.
#
#   sudo bash .ci/ci_slurm.sh && ROBOREEL_SLURM=1 .venv/bin/python -m pytest -q -m slurm tests/test_slurm.py
#
# What it writes: /etc/slurm/slurm.conf (this host, CPUs=$(nproc), proctrack/linuxproc, task/none,
# select/cons_tres, SlurmUser=root: no cgroups, no accounting), logs under /var/log/slurm.
set -euo pipefail

die() { echo "ci_slurm: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (installs packages, starts daemons)"

node_ready() {
  command -v sinfo >/dev/null 2>&1 || return 1
  local state
  state=$(timeout 10 sinfo -h -N -o '%T' 2>/dev/null | head -n1) || return 1
  [[ "$state" == idle* || "$state" == mixed* || "$state" == allocated* ]]
}

if node_ready; then
  echo "ci_slurm: SLURM already up ($(sinfo -h -N -o '%N %T %c CPUs'))"
  exit 0
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null || die "apt-get install slurm-wlm munge failed"
fi

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge
cat >/etc/slurm/slurm.conf <<EOF
# written by roboreel .ci/ci_slurm.sh: a single-node cluster for tests
ClusterName=roboreel-ci
SlurmctldHost=${host}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=30
NodeName=${host} CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=ci Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF

# munge: a key (the package usually made one), owned by the munge user, and the daemon
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
# Daemons outlive this script: start them with no descriptor of the caller's open beyond /dev/null stdio (a
# caller's `flock` lock file, a CI runner's output pipe), or they hold it until they die.
detached() {
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec ${fd}>&-"; fi
    done
    exec "$@" </dev/null >/dev/null 2>&1
  )
}

if ! pgrep -x munged >/dev/null; then
  detached runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
fi
munge -n | unmunge >/dev/null 2>&1 || die "munge does not round-trip a credential"

pgrep -x slurmctld >/dev/null || detached slurmctld || die "slurmctld did not start (see /var/log/slurm/slurmctld.log)"
pgrep -x slurmd >/dev/null || detached slurmd || die "slurmd did not start (see /var/log/slurm/slurmd.log)"

for _ in $(seq 60); do
  if node_ready; then
    echo "ci_slurm: SLURM up ($(sinfo -h -N -o '%N %T %c CPUs'))"
    exit 0
  fi
  scontrol update nodename="${host}" state=resume >/dev/null 2>&1 || true
  sleep 1
done
sinfo -N -l >&2 || true
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
die "the node did not become idle within 60 s"

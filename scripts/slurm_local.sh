#!/usr/bin/env bash
# A real Slurm cluster on this machine, on loopback, for tests: its own munged, slurmctld and
# slurmd(s), every file of it (key, sockets, state, spool, logs, pids, slurm.conf) under DIR, so it
# never touches a system munged or /etc/slurm.
#   scripts/slurm_local.sh start  DIR [NODES]   starts it; prints `export SLURM_CONF=DIR/slurm.conf`
#   scripts/slurm_local.sh status DIR           the daemons and sinfo; exit 0 when all run
#   scripts/slurm_local.sh stop   DIR           cancels its jobs, stops the daemons, waits for them
# Clients (sinfo, srun, sbatch, squeue, scancel) find it through SLURM_CONF. `start` refuses a DIR
# whose cluster is still running, and on any failure prints one line naming what failed and why
# (with the log's last lines) and exits 1; 3 when Slurm or munge is not installed
# (scripts/setup.sh installs slurmctld, slurmd, slurm-client and munge).
#
# One partition `debug` (the default) with NODES nodes, each with every CPU of this machine
# (CPUs=nproc: NODES > 1 overcommits the machine, which a test of several nodes wants). One node is
# named `localhost`, so that a job script's `scontrol show hostnames "$SLURM_JOB_NODELIST"` gives
# a name that resolves, as a real cluster's node names do (MASTER_ADDR in docs/distributed.md).
# Several are named n1..nN, which do not resolve here (Slurm reaches them by NodeAddr=127.0.0.1):
# a job that needs its hosts' addresses takes NodeAddr from `scontrol show node`.
# Several nodes on one host need several slurmd there, each with its own port, spool, log and pid
# file, which Slurm allows when built with --enable-multiple-slurmd: Debian's is (`scontrol show
# config` says MULTIPLE_SLURMD = Yes on Debian 12's 22.05; 3 nodes tested here). When several
# nodes fail to start, the message says whether that line was missing.
#
# Munge: the key is made here (mungekey, or 1 KiB from /dev/urandom) and munged serves it on
# DIR/run/munge.socket; AuthInfo=socket=... points auth/munge and cred/munge at that socket
# (read by both plugins in every Slurm Debian ships: 22.05 on Debian 12, 24.11 on Debian 13).
# SLURM_LOCAL_HIDE=FOLDER (an existing folder): the nodes see an empty folder there (slurmd runs in
# a mount namespace with a tmpfs over it), for testing a store the compute nodes cannot see.
# The daemons run as the current user (SlurmUser, SlurmdUser): root on the project's machines.
set -uo pipefail

die() { echo "slurm_local: $*" >&2; exit 1; }
# A start that failed half-way: what runs is stopped, then the one line (its text is expanded by
# the caller, before anything stops).
fail() { do_stop; die "$@"; }
usage() { echo "usage: $0 start|stop|status DIR [NODES]" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd="$1"; DIR="$2"; NODES="${3:-1}"
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || usage
if [ "$cmd" = start ]; then mkdir -p "$DIR" 2>/dev/null || die "cannot make $DIR"; fi
[ -d "$DIR" ] || { [ "$cmd" = stop ] && exit 0; die "no folder $DIR"; }
DIR="$(cd "$DIR" && pwd)"
CONF="$DIR/slurm.conf"
SOCK="$DIR/run/munge.socket"

# "a | b | c": the last lines of a log, on one line.
tail_of() { [ -f "$1" ] && tail -n "${2:-6}" "$1" | tr -s '\n' '|' | sed 's/|$//; s/|/ | /g' || echo "(no log at $1)"; }
# The pid in pid file $1 when that process runs and is this cluster's (its command line names DIR:
# a pid file left by a crash may hold the number of some other process by now).
pid_of() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" && [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$DIR/" || return 1
  echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }
pidfiles() { ls "$DIR"/run/*.pid 2>/dev/null; }
node_names() { sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$CONF" 2>/dev/null; }

# Stops the processes of the given pid files together (TERM; KILL after 10 s) and waits for them:
# slurmctld and slurmd take about 1.6 s to stop on TERM, munged about 2 s.
stop_pids() {
  local f pid pids=()
  for f in "$@"; do
    pid="$(pid_of "$f")" && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  for _ in $(seq 100); do
    local left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    pids=("${left[@]}")
    [ ${#pids[@]} -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  [ ${#pids[@]} -gt 0 ] && sleep 0.2
  rm -f "$@"
}

do_stop() {
  if alive "$DIR/run/slurmctld.pid"; then
    # Its jobs first, so that no slurmstepd outlives the cluster (bounded: 5 s).
    local jobs
    jobs="$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %A 2>/dev/null)"
    if [ -n "$jobs" ]; then
      SLURM_CONF="$CONF" timeout 5 scancel $jobs 2>/dev/null
      for _ in $(seq 50); do
        [ -z "$(SLURM_CONF="$CONF" timeout 5 squeue -h -t R,CG -o %A 2>/dev/null)" ] && break
        sleep 0.1
      done
    fi
  fi
  # All at once: nothing the daemons do on the way out needs another one.
  stop_pids $(pidfiles)
  return 0
}

do_status() {
  local ok=0 f
  for f in $(pidfiles); do
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"
    else echo "$(basename "$f" .pid): not running"; ok=1; fi
  done
  [ -z "$(pidfiles)" ] && { echo "no cluster in $DIR"; return 1; }
  SLURM_CONF="$CONF" timeout 5 sinfo -N -o '%N %t %c' 2>&1 || ok=1
  return $ok
}

# Distinct free TCP ports on 127.0.0.1, one a line (held together while picked, so distinct).
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in held))
EOF
}

write_conf() {
  local ports=($(free_ports $((NODES + 1)))) user
  [ ${#ports[@]} -eq $((NODES + 1)) ] || die "could not pick $((NODES + 1)) free ports (python3 missing?)"
  user="$(id -un)"
  {
    echo "# Written by scripts/slurm_local.sh start: a test cluster on loopback; everything under $DIR."
    echo "ClusterName=scaleinv"
    echo "SlurmctldHost=localhost(127.0.0.1)"
    echo "SlurmctldPort=${ports[0]}"
    echo "SlurmdPort=${ports[1]}"
    echo "SlurmUser=$user"
    echo "SlurmdUser=$user"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$SOCK"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "JobRequeue=1"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "StateSaveLocation=$DIR/state"
    echo "SlurmdSpoolDir=$DIR/spool/%n"
    echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/run/slurmd.%n.pid"
    echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$DIR/log/slurmd.%n.log"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "JobCompType=jobcomp/none"
    # Short timeouts: a finished job leaves squeue within ~2 s (MinJobAge), a cancelled one is
    # killed 1 s after its SIGTERM (KillWait), a lost slurmd is noticed within 10 s.
    echo "SlurmctldTimeout=10"
    echo "SlurmdTimeout=10"
    echo "MessageTimeout=10"
    echo "MinJobAge=2"
    echo "KillWait=1"
    echo "InactiveLimit=0"
    echo "Waittime=0"
    echo "SchedulerType=sched/backfill"
    echo "SchedulerParameters=batch_sched_delay=0,sched_interval=1"
    local i name
    # nproc without OMP_NUM_THREADS, which it honours (ctest sets it to 1 for the Python tests).
    local cpus
    cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
    for i in $(seq "$NODES"); do
      name="n$i"; [ "$NODES" -eq 1 ] && name=localhost
      echo "NodeName=$name NodeHostname=$name NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=$cpus RealMemory=100 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } > "$CONF"
}

# With several nodes, whether this Slurm says it allows several slurmd on one host (scontrol show
# config, asked while slurmctld runs; 22.05 prints MULTIPLE_SLURMD = Yes when built so).
multi_hint() {
  [ "$NODES" -gt 1 ] || return 0
  grep -q '^MULTIPLE_SLURMD *= *Yes' <<<"$(timeout 5 scontrol show config 2>/dev/null)" && return 0
  echo " (scontrol show config does not say MULTIPLE_SLURMD = Yes: this Slurm may not be built with --enable-multiple-slurmd, which $NODES nodes on one host need; one node needs no such build)"
}

# Waits up to $2 seconds for a process's pid file $1 (the daemon forked and wrote it).
wait_pidfile() {
  for _ in $(seq $(( $2 * 10 ))); do alive "$1" && return 0; sleep 0.1; done
  return 1
}

do_start() {
  local b
  for b in munged slurmctld slurmd sinfo scontrol srun; do
    command -v "$b" >/dev/null 2>&1 || {
      echo "slurm_local: cannot start: $b is not installed (fix: bash scripts/setup.sh installs slurmctld slurmd slurm-client munge)" >&2
      exit 3; }
  done
  local f
  for f in $(pidfiles); do
    alive "$f" && die "a cluster already runs in $DIR ($(basename "$f" .pid), pid $(cat "$f")): stop it first ($0 stop $DIR)"
  done
  # A unix socket path has at most 107 bytes.
  [ ${#SOCK} -le 100 ] || die "DIR is too long for munged's socket path ($SOCK); use a shorter one"
  (umask 077 && mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run") || die "cannot make folders in $DIR"
  # munged wants its key's folder private and its socket's folder (and those above) searchable by all.
  chmod 700 "$DIR/munge" && chmod 755 "$DIR/run" && chmod go+x "$DIR" || die "cannot set the modes of $DIR's folders"
  rm -f "$DIR"/run/*.pid

  # munged: its own key, socket, pid, log and seed files.
  if [ ! -s "$DIR/munge/munge.key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="$DIR/munge/munge.key" 2>"$DIR/log/mungekey.log" || die "mungekey failed: $(tail_of "$DIR/log/mungekey.log")"
    else
      (umask 077 && dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none) || die "cannot write a munge key"
    fi
    chmod 600 "$DIR/munge/munge.key"
  fi
  munged --socket="$SOCK" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
         --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" 2>>"$DIR/log/munged.log" \
    || die "munged failed to start: $(tail_of "$DIR/log/munged.log")"
  wait_pidfile "$DIR/run/munged.pid" 10 || die "munged did not start: $(tail_of "$DIR/log/munged.log")"

  write_conf
  export SLURM_CONF="$CONF"
  slurmctld -f "$CONF" 2>>"$DIR/log/slurmctld.log" || fail "slurmctld failed to start: $(tail_of "$DIR/log/slurmctld.log")"
  wait_pidfile "$DIR/run/slurmctld.pid" 15 || fail "slurmctld did not start: $(tail_of "$DIR/log/slurmctld.log")"
  local n
  for n in $(node_names); do
    mkdir -p "$DIR/spool/$n"
    if [ -n "${SLURM_LOCAL_HIDE:-}" ]; then
      # The nodes do not see SLURM_LOCAL_HIDE: slurmd (and so every job) runs in a mount namespace
      # of its own with an empty tmpfs over that folder, as on a cluster whose nodes do not mount
      # the disk the submitting machine wrote to.
      unshare -m --propagation private bash -c 'mount -t tmpfs scaleinv-hidden "$1" && shift && exec "$@"' \
        hide "$SLURM_LOCAL_HIDE" slurmd -f "$CONF" -N "$n" 2>>"$DIR/log/slurmd.$n.log" \
        || fail "slurmd $n failed to start in a namespace hiding $SLURM_LOCAL_HIDE: $(tail_of "$DIR/log/slurmd.$n.log")"
    else
      slurmd -f "$CONF" -N "$n" 2>>"$DIR/log/slurmd.$n.log" || fail "slurmd $n failed to start$(multi_hint): $(tail_of "$DIR/log/slurmd.$n.log")"
    fi
  done
  for n in $(node_names); do
    wait_pidfile "$DIR/run/slurmd.$n.pid" 15 || fail "slurmd $n did not start$(multi_hint): $(tail_of "$DIR/log/slurmd.$n.log")"
  done

  # Every node idle, within 30 s.
  local out="" ready=0
  for _ in $(seq 300); do
    out="$(timeout 5 sinfo -h -N -o '%N %t' 2>&1)"
    [ "$(grep -c ' idle$' <<<"$out")" -eq "$NODES" ] && { ready=1; break; }
    for f in $(pidfiles); do
      alive "$f" || { local d; d="$(basename "$f" .pid)"; fail "$d stopped while starting: $(tail_of "$DIR/log/$d.log")"; }
    done
    sleep 0.1
  done
  [ $ready -eq 1 ] || fail "the nodes are not idle after 30 s (sinfo: $(tr '\n' ' ' <<<"$out"))$(multi_hint): $(tail_of "$DIR/log/slurmctld.log")"
  echo "export SLURM_CONF=$CONF"
}

case "$cmd" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  *) usage ;;
esac

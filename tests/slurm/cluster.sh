# A real Slurm cluster for one test, on this machine (sourced, not run):
# Debian's slurmctld, slurmd and munged, started from a slurm.conf, a munge
# key and a munge socket of their own in a temporary directory, so nothing
# in /etc is written and a system Slurm or munge is left alone (SLURM_CONF
# points every Slurm command and daemon at the file, AuthInfo's socket at
# this munged).
#
#   slurm_prereqs           exit 77 with the reason unless root and every
#                           command is installed
#   slurm_gc                end what an earlier run left when it was killed
#                           before its trap ran (ctest's TIMEOUT is SIGKILL)
#   slurm_up DIR N PER ADDR... [NS...]
#                           nodes node1..nodeN with PER CPUs each at the
#                           addresses, each slurmd in its network namespace
#                           when namespaces are given (the controller then
#                           runs in the first); exit 77 with the daemon's
#                           own words when one cannot run here
#   sl CMD...               a client command (sbatch, srun, scontrol, ...)
#                           where the controller can be reached
#   slurm_down              SIGTERM, then SIGKILL, to every process the
#                           test started; removes the cgroups slurmd made
#
# Every process the test starts carries ZS_SLURM_OWNER=<the test's pid> in
# its environment (the daemons, the batch script, zs-run, srun, the ranks)
# except slurmstepd, which clears its own; it is known by the slurmd.log it
# keeps open in DIR, where the file `owner` holds the same pid. slurm_down
# ends them all, so a step still running when a check fails goes too;
# slurm_gc ends those whose owner has exited.
#
# Settings for a container: proctrack/linuxproc and task/none need no
# cgroups; one slurmd per network namespace (each simulated host has its
# own address and ports; Debian's Slurm is built with multiple-slurmd
# support, MULTIPLE_SLURMD = Yes in `scontrol show config`, which gives the
# %n below; slurmd is entered into the namespace with nsenter, which
# keeps /sys: `ip netns exec` remounts it and slurmd then finds no
# /sys/fs/cgroup and refuses to start); SlurmdSpoolDir and TmpFS per node
# (%n), since Slurm's PMIx plugin makes spmix_appdir_<uid>_<job>.<step> in
# TmpFS and the second node's would collide with the first's in a shared
# /tmp; SlurmdParameters=config_overrides so PER need not be the machine's
# core count; AuthInfo's cred_expire=5 and sched_interval=1 because a
# requeued job is held until cred_expire + 1 s after the requeue (121 s by
# default) and then waits for the scheduler's periodic pass (60 s).

skip() { echo "SKIP: $*"; exit 77; }

slurm_prereqs() {
    [ "$(id -u)" = 0 ] ||
        skip "needs root: the test starts slurmctld, slurmd (SlurmUser=root) and munged itself"
    local c missing=()
    for c in slurmctld slurmd slurmstepd sbatch srun scontrol scancel sinfo munged munge unmunge \
        nsenter python3; do
        command -v "$c" > /dev/null || missing+=("$c")
    done
    [ ${#missing[@]} -eq 0 ] || skip "not installed: ${missing[*]} (scripts/install-deps.sh" \
        "installs Debian's slurmctld, slurmd, slurm-client and munge when run as root)"
}

# slurm_procs — "pid owner" for every process of a cluster made here: those
# marked ZS_SLURM_OWNER=owner, and the slurmstepd, which clear their
# environment but keep their node's slurmd.log open, in the cluster's
# directory, whose file `owner` names the test.
slurm_procs() {
    local f pid link
    env -u ZS_SLURM_OWNER grep -lsaz '^ZS_SLURM_OWNER=' /proc/[0-9]*/environ 2> /dev/null |
        while read -r f; do
            pid=${f#/proc/}
            { tr '\0' '\n' < "$f" | sed -n "s/^ZS_SLURM_OWNER=/${pid%/environ} /p"; } 2> /dev/null
        done
    for pid in $(pgrep -x slurmstepd); do
        link=$(find "/proc/$pid/fd" -lname '*/node*/slurmd.log' -printf '%l\n' 2> /dev/null | head -n 1)
        f=${link%/node*/slurmd.log}/owner
        [ -n "$link" ] && [ -f "$f" ] && echo "$pid $(cat "$f")"
    done
}

slurm_gc() {
    local pid owner
    slurm_procs | while read -r pid owner; do
        kill -0 "$owner" 2> /dev/null && continue
        echo "slurm_gc: ending $pid ($(tr '\0' ' ' 2> /dev/null < "/proc/$pid/cmdline")):" \
            "its test $owner has exited"
        kill -9 "$pid" 2> /dev/null
    done
}

slurm_down() {
    [ -n "${ZS_SLURM_OWNER:-}" ] || return 0
    local i mine sig=TERM
    # SIGTERM first, so that slurmctld reaps its slurmscriptd and each
    # daemon exits cleanly; SIGKILL to what is left after a second.
    for i in $(seq 15); do
        mine=$(slurm_procs | sed -n "s/ $ZS_SLURM_OWNER\$//p")
        [ -n "$mine" ] || break
        [ "$i" -lt 10 ] || sig=KILL
        [ "$i" = 1 ] || [ "$i" -ge 10 ] && kill -s "$sig" $mine 2> /dev/null
        sleep 0.1
    done
    local d
    [ -f "$slurm_dir/cgroup-made" ] || return 0
    while read -r d; do
        [ ! -d "$d" ] || find "$d" -depth -type d -exec rmdir {} + 2> /dev/null
    done < "$slurm_dir/cgroup-made"
}

# in_node I CMD... — CMD in node I's network namespace (none: here).
in_node() {
    local i=$1
    shift
    if [ ${#slurm_ns[@]} -gt 0 ]; then
        nsenter --net="/run/netns/${slurm_ns[$i]}" "$@"
    else
        "$@"
    fi
}
sl() { in_node 0 "$@"; }

# daemon_failed WHAT LOG... — skip, showing why the daemon could not run.
daemon_failed() {
    local log
    for log in "${@:2}"; do
        echo "== $log"
        tail -n 15 "$log" 2> /dev/null
    done
    skip "$1 could not run here (its own words above)"
}

slurm_cgroup=/sys/fs/cgroup
slurm_up() {
    local dir=$1 n=$2 per=$3
    shift 3
    slurm_dir=$dir
    local addr=("${@:1:n}")
    slurm_ns=("${@:n+1}")
    export ZS_SLURM_OWNER=$$ SLURM_CONF=$dir/slurm.conf
    mkdir -p "$dir"
    echo $$ > "$dir/owner"
    # munged wants every directory above its socket searchable by all (DIR
    # and its parent are the test's; /tmp is) and its key readable by its
    # owner only.
    chmod go+x "$dir" "$dir/.."
    local sock=$dir/munge.sock i
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge.key"
    munged --foreground --socket="$sock" --key-file="$dir/munge.key" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
        > "$dir/munged.out" 2>&1 &
    local pid=$!
    disown
    for i in $(seq 50); do
        munge -n -S "$sock" 2> /dev/null | unmunge -S "$sock" > /dev/null 2>&1 && break
        [ "$i" = 50 ] || ! kill -0 "$pid" 2> /dev/null &&
            { cat "$dir/munged.out"; daemon_failed munged "$dir/munged.log"; }
        sleep 0.1
    done

    local ports
    ports=$(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("", 0))
print(*(x.getsockname()[1] for x in s))')
    {
        echo "ClusterName=zstest"
        echo "SlurmctldHost=$(hostname -s)(${addr[0]})"
        echo "SlurmctldPort=${ports% *}"
        echo "SlurmdPort=${ports#* }"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$sock,cred_expire=5"
        echo "StateSaveLocation=$dir/state"
        echo "SlurmctldPidFile=$dir/slurmctld.pid"
        echo "SlurmctldLogFile=$dir/slurmctld.log"
        echo "SlurmdSpoolDir=$dir/%n/spool"
        echo "SlurmdPidFile=$dir/%n/slurmd.pid"
        echo "SlurmdLogFile=$dir/%n/slurmd.log"
        echo "TmpFS=$dir/%n/tmp"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "SlurmdParameters=config_overrides"
        echo "JobRequeue=1"
        echo "ReturnToService=2"
        echo "MpiDefault=none"
        echo "SchedulerParameters=sched_interval=1"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        for ((i = 0; i < n; i++)); do
            echo "NodeName=node$((i + 1)) NodeAddr=${addr[$i]} CPUs=$per Boards=1 SocketsPerBoard=1" \
                "CoresPerSocket=$per ThreadsPerCore=1 State=UNKNOWN"
        done
        echo "PartitionName=zs Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } > "$SLURM_CONF"
    # slurmd loads a cgroup plugin even when nothing uses cgroups. Under
    # cgroup v2 it asks systemd (D-Bus) for a scope,
    # system.slice/nodeN_slurmstepd.scope; without systemd (a container)
    # IgnoreSystemdOnFailure lets it make the directories itself, under a
    # system.slice made here if there is none; slurm_down removes what was
    # not there before.
    echo "IgnoreSystemdOnFailure=yes" > "$dir/cgroup.conf"
    : > "$dir/cgroup-made"
    if [ -f "$slurm_cgroup/cgroup.controllers" ]; then
        for ((i = 1; i <= n; i++)); do
            [ -e "$slurm_cgroup/system.slice/node${i}_slurmstepd.scope" ] ||
                echo "$slurm_cgroup/system.slice/node${i}_slurmstepd.scope" >> "$dir/cgroup-made"
        done
        if [ ! -d "$slurm_cgroup/system.slice" ]; then
            mkdir "$slurm_cgroup/system.slice" 2> /dev/null &&
                echo "$slurm_cgroup/system.slice" >> "$dir/cgroup-made"
        fi
    fi
    mkdir -p "$dir/state"
    for ((i = 1; i <= n; i++)); do mkdir -p "$dir/node$i/spool" "$dir/node$i/tmp"; done

    in_node 0 slurmctld -D -c -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
    pid=$!
    disown
    for i in $(seq 50); do
        sl scontrol ping 2> /dev/null | grep -q 'is UP' && break
        [ "$i" = 50 ] || ! kill -0 "$pid" 2> /dev/null &&
            { cat "$dir/slurmctld.out"; daemon_failed slurmctld "$dir/slurmctld.log"; }
        sleep 0.2
    done
    local pids=()
    for ((i = 0; i < n; i++)); do
        in_node "$i" slurmd -D -f "$SLURM_CONF" -N "node$((i + 1))" > "$dir/node$((i + 1)).out" 2>&1 &
        pids+=($!)
        disown
    done
    local states
    for i in $(seq 75); do
        states=$(sl sinfo -h -N -o '%N %t' 2> /dev/null | sort -u)
        [ "$(grep -c ' idle$' <<< "$states")" = "$n" ] && break
        if [ "$i" = 75 ] || ! kill -0 "${pids[@]}" 2> /dev/null; then
            echo "nodes: $states"
            for ((i = 1; i <= n; i++)); do cat "$dir/node$i.out"; done
            daemon_failed slurmd "$dir"/node*/slurmd.log
        fi
        sleep 0.2
    done
    echo "Slurm $(slurmctld -V | sed 's/^slurm[^ ]* //'): slurmctld, munged and slurmd on" \
        "$(tr '\n' ' ' <<< "$states")in $dir"
}

#!/usr/bin/env bash
# netns-hosts.sh — two simulated "hosts" on this machine, for multi-host MPI
# runs: two network namespaces joined by a veth pair, optionally shaped with
# tc, and an mpirun that launches across them the way it would over ssh.
#
#   netns-hosts.sh check                       exit 0 if namespaces can be made, else 77 and why
#   netns-hosts.sh up [options]                make the hosts; prints the state directory
#   netns-hosts.sh mpirun STATE [mpirun args]  mpirun across the hosts (same as STATE/mpirun)
#   netns-hosts.sh exec STATE 0|1 CMD [ARGS]   a command inside host 0 or host 1
#   netns-hosts.sh down STATE                  remove everything `up` made (idempotent)
#   netns-hosts.sh gc                          `down` every state directory in $TMPDIR (/tmp)
#                                              whose owner process has exited (after a SIGKILL,
#                                              e.g. a ctest timeout, no trap could run)
#   netns-hosts.sh run [options] -- [mpirun args]
#                                              up, mpirun, down (also on failure or signal);
#                                              exits with mpirun's status
# Options of `up` and `run`:
#   --rate R      limit each direction of the link to R (tc units: 1gbit, 100mbit)
#   --delay D     add one-way delay D to each direction (tc units: 200us, 1ms);
#                 needs the kernel's netem qdisc (CONFIG_NET_SCH_NETEM)
#   --best-effort apply what this kernel supports and warn about the rest,
#                 instead of exiting 77 when --delay cannot be applied
#   --slots N     slots per host in the hostfile [2]
#   --subnet A.B.C  the /24 of the link [10.199.0]; host 0 is .1, host 1 is .2
#   --owner PID   the process whose exit makes the hosts garbage for `gc`
#                 [the caller of `up`; `run` itself for `run`]
#
# Host 0 is namespace zs_h0_<id>, host 1 is zs_h1_<id>, with <id> unique to
# this invocation, so concurrent runs do not collide (the addresses may repeat:
# each pair of namespaces is a separate network). The state directory holds
# `hostfile`, `agent` (Open MPI's plm_rsh_agent: runs the remote command inside
# the namespace of the host it names, with a cleared environment as ssh would
# give it), `mpirun` (a wrapper) and `env` (names, addresses, the shaping
# actually applied).
#
# mpirun runs inside host 0, so 10.199.0.1 is "local" to it and its ranks are
# forked directly; the orted daemon of host 1 is started by the agent and
# connects back over the veth. Only the TCP BTL is enabled and both MPI and the
# runtime's out-of-band channel are restricted to the link's subnet, so every
# byte between ranks of different hosts crosses the veth. Two ranks of the
# same host talk TCP through their namespace's own stack, not shared memory
# (as `--mca btl tcp,self` makes them do on real hosts too). Environment
# variables reach remote ranks only with `-x NAME` (Open MPI forwards OMPI_*
# variables by itself).
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) for `ip netns` and `ip link`.
set -euo pipefail

prog=${0##*/}
die() { echo "$prog: $*" >&2; exit 1; }
skip() { echo "$prog: SKIP: $*" >&2; exit 77; }

# ---- check ------------------------------------------------------------------

# Can this process make network namespaces and veth pairs? Prints the reason
# and returns 1 when not.
can_make_namespaces() {
    command -v ip > /dev/null || { echo "the ip command (iproute2) is not installed"; return 1; }
    local probe=zs_probe_$$_$RANDOM err
    if ! err=$(ip netns add "$probe" 2>&1); then
        echo "cannot create a network namespace ('ip netns add' needs root / CAP_SYS_ADMIN): $err"
        return 1
    fi
    if ! err=$(ip -n "$probe" link add zsp0 type veth peer name zsp1 2>&1); then
        ip netns del "$probe" 2> /dev/null || true
        echo "cannot create a veth pair (needs CAP_NET_ADMIN and the veth driver): $err"
        return 1
    fi
    ip netns del "$probe"
}

have_qdisc() { # NS DEV KIND ARGS... — can this kernel attach the qdisc?
    local ns=$1 dev=$2
    shift 2
    ip netns exec "$ns" tc qdisc replace dev "$dev" root "$@" > /dev/null 2>&1 &&
        ip netns exec "$ns" tc qdisc del dev "$dev" root > /dev/null 2>&1
}

# ---- down -------------------------------------------------------------------

cmd_down() {
    local state=${1:?usage: $prog down STATE}
    [ -d "$state" ] || return 0
    if [ -f "$state/env" ]; then
        # Deleting a namespace deletes the veth end inside it, and with it the peer.
        local ns
        for ns in $(sed -n 's/^ZS_NETNS_NS[01]=//p' "$state/env"); do
            ip netns del "$ns" 2> /dev/null || true
        done
    fi
    rm -rf -- "$state"
}

# ---- up ---------------------------------------------------------------------

cmd_gc() {
    local env owner
    for env in "${TMPDIR:-/tmp}"/zs-netns.*/env; do
        [ -f "$env" ] || continue
        owner=$(sed -n 's/^ZS_NETNS_OWNER=//p' "$env")
        # An instance still being made has no owner line yet: leave it.
        [ -n "$owner" ] && ! kill -0 "$owner" 2> /dev/null || continue
        echo "$prog: removing ${env%/env} (owner $owner has exited)" >&2
        cmd_down "${env%/env}"
    done
}

rate='' delay='' best_effort=0 slots=2 subnet=10.199.0 owner=$PPID
parse_up_options() {
    while [ $# -gt 0 ]; do
        case $1 in
            --rate) rate=${2:?--rate needs a value}; shift 2 ;;
            --delay) delay=${2:?--delay needs a value}; shift 2 ;;
            --best-effort) best_effort=1; shift ;;
            --slots) slots=${2:?--slots needs a value}; shift 2 ;;
            --subnet) subnet=${2:?--subnet needs a value}; shift 2 ;;
            --owner) owner=${2:?--owner needs a value}; shift 2 ;;
            --) shift; break ;;
            *) die "unknown option '$1' (see the header of $0)" ;;
        esac
    done
    rest=("$@")
    [[ $slots =~ ^[1-9][0-9]*$ ]] || die "--slots must be a positive integer, not '$slots'"
    [[ $owner =~ ^[1-9][0-9]*$ ]] || die "--owner must be a process id, not '$owner'"
    [[ $subnet =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet must be three octets like 10.199.0, not '$subnet'"
}

# tbf needs a bucket of at least one timer tick of traffic; 2 ms of the rate
# (and at least two full-size frames) keeps the average at the rate without
# stalling large segments.
tbf_burst_bytes() {
    local r=${1,,} bits
    case $r in
        *gbit) bits=$((${r%gbit} * 1000000000)) ;;
        *mbit) bits=$((${r%mbit} * 1000000)) ;;
        *kbit) bits=$((${r%kbit} * 1000)) ;;
        *bit) bits=${r%bit} ;;
        *) die "--rate '$1': use an integer with bit, kbit, mbit or gbit (e.g. 1gbit)" ;;
    esac
    local b=$((bits / 8 / 500))
    [ "$b" -ge 3200 ] || b=3200
    echo "$b"
}

# Shapes the egress of DEV in NS; one qdisc per direction, so each direction
# of the link gets the rate and the delay.
shape() {
    local ns=$1 dev=$2
    if [ -n "$delay" ] && [ "$applied_delay" != none ]; then
        local args=(netem delay "$delay" limit 100000)
        [ -z "$rate" ] || args+=(rate "$rate")
        ip netns exec "$ns" tc qdisc add dev "$dev" root "${args[@]}"
    elif [ -n "$rate" ]; then
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" \
            burst "$(tbf_burst_bytes "$rate")" latency 50ms
    fi
}

cmd_up() {
    parse_up_options "$@"
    [ ${#rest[@]} -eq 0 ] || die "up takes options only, not '${rest[*]}'"
    local why
    why=$(can_make_namespaces) || skip "$why"
    [ -z "$rate" ] || tbf_burst_bytes "$rate" > /dev/null

    local id
    # Always 8 hex digits: ${id: -8} of a shorter string is empty (a pid
    # below 4096 gave every instance the same names).
    id=$(printf '%04x%04x' $(($$ % 65536)) $((RANDOM % 65536)))
    state=$(mktemp -d "${TMPDIR:-/tmp}/zs-netns.$id.XXXX")
    # Until the hosts are complete, any failure removes what was made.
    trap 'cmd_down "$state"' EXIT
    trap 'exit 130' INT TERM

    local ns0=zs_h0_$id ns1=zs_h1_$id if0=zsv0_$id if1=zsv1_$id
    local ip0=$subnet.1 ip1=$subnet.2
    # Written first so that `down` finds the namespaces whatever fails next.
    printf 'ZS_NETNS_NS0=%s\nZS_NETNS_NS1=%s\n' "$ns0" "$ns1" > "$state/env"
    ip netns add "$ns0"
    ip netns add "$ns1"
    ip -n "$ns0" link add "$if0" type veth peer name "$if1" netns "$ns1"
    ip -n "$ns0" addr add "$ip0/24" dev "$if0"
    ip -n "$ns1" addr add "$ip1/24" dev "$if1"
    local ns
    for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
    ip -n "$ns0" link set "$if0" up
    ip -n "$ns1" link set "$if1" up

    applied_delay=${delay:-none}
    if [ -n "$delay" ] && ! have_qdisc "$ns0" "$if0" netem delay "$delay"; then
        local msg="this kernel cannot apply --delay $delay (no netem qdisc: CONFIG_NET_SCH_NETEM)"
        if [ "$best_effort" = 1 ]; then
            echo "$prog: warning: $msg; the link has no added delay" >&2
            applied_delay=none
        else
            skip "$msg; use --best-effort to run without it"
        fi
    fi
    shape "$ns0" "$if0"
    shape "$ns1" "$if1"

    cat >> "$state/env" << END
ZS_NETNS_IF0=$if0
ZS_NETNS_IF1=$if1
ZS_NETNS_IP0=$ip0
ZS_NETNS_IP1=$ip1
ZS_NETNS_SUBNET=$subnet.0/24
ZS_NETNS_RATE=${rate:-none}
ZS_NETNS_DELAY=$applied_delay
ZS_NETNS_OWNER=$owner
END
    printf '%s slots=%s\n%s slots=%s\n' "$ip0" "$slots" "$ip1" "$slots" > "$state/hostfile"

    # Open MPI's rsh agent is called as `agent HOST COMMAND...`, where the
    # words of COMMAND form one shell command line (as ssh joins them).
    cat > "$state/agent" << END
#!/bin/sh
# plm_rsh_agent for $state: runs the command inside the host's namespace.
case \$1 in
  $ip0) ns=$ns0 ;;
  $ip1) ns=$ns1 ;;
  *) echo "netns agent: unknown host '\$1' (hosts: $ip0 $ip1)" >&2; exit 255 ;;
esac
shift
# A cleared environment, as a non-interactive ssh session would start with:
# what the ranks need must travel with mpirun -x.
exec env -i PATH="\$PATH" HOME="\${HOME:-/}" ip netns exec "\$ns" /bin/sh -c "\$*"
END
    cat > "$state/mpirun" << END
#!/bin/sh
# mpirun across the hosts of $state; arguments go to mpirun.
exec ip netns exec $ns0 mpirun --hostfile $state/hostfile \\
    --mca plm_rsh_agent $state/agent \\
    --mca btl tcp,self \\
    --mca btl_tcp_if_include $subnet.0/24 \\
    --mca oob_tcp_if_include $subnet.0/24 \\
    "\$@"
END
    chmod +x "$state/agent" "$state/mpirun"
    trap - EXIT INT TERM
    echo "$state"
}

# ---- mpirun, exec, run ------------------------------------------------------

check_state() {
    [ -n "${1:-}" ] && [ -f "$1/env" ] && [ -x "$1/mpirun" ] ||
        die "'${1:-}' is not a state directory made by '$prog up'"
}

cmd_mpirun() {
    local state=${1:-}
    check_state "$state"
    shift
    command -v mpirun > /dev/null || skip "mpirun is not installed"
    exec "$state/mpirun" "$@"
}

cmd_exec() {
    local state=${1:-} host=${2:-}
    check_state "$state"
    case $host in 0 | 1) ;; *) die "exec: host is 0 or 1, not '$host'" ;; esac
    shift 2
    exec ip netns exec "$(sed -n "s/^ZS_NETNS_NS$host=//p" "$state/env")" "$@"
}

cmd_run() {
    parse_up_options "$@"
    command -v mpirun > /dev/null || skip "mpirun is not installed"
    local up_args=(--slots "$slots" --subnet "$subnet" --owner $$)
    [ -z "$rate" ] || up_args+=(--rate "$rate")
    [ -z "$delay" ] || up_args+=(--delay "$delay")
    [ "$best_effort" = 0 ] || up_args+=(--best-effort)
    local run_state
    run_state=$(cmd_up "${up_args[@]}") || exit $?
    trap 'cmd_down "$run_state"' EXIT
    trap 'exit 130' INT TERM
    local rc=0
    "$run_state/mpirun" "${rest[@]}" || rc=$?
    exit "$rc"
}

case ${1:-} in
    check) why=$(can_make_namespaces) || skip "$why" ;;
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    gc) cmd_gc ;;
    mpirun) shift; cmd_mpirun "$@" ;;
    exec) shift; cmd_exec "$@" ;;
    run) shift; cmd_run "$@" ;;
    *) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2 ;;
esac

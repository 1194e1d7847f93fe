# netns_lib.sh - real hosts on one machine, for multi-node tests (sourced by bash).
#
# Each host is a network namespace with one address in a private /24 that exists only
# inside them, so traffic goes only between the hosts, never through the machine's own
# interfaces. Two hosts (the default) are joined by a veth pair; more (NETNS_N=N, set
# before netns_setup or netns_start, 3 to 26) by a bridge in a namespace of its own
# (the switch: no address, nothing runs there), one veth from each host to it. Host I's
# device is vIDl in its namespace (l its letter), so a test sees the same shape either
# way. A command runs "on" a host through netns_on HOST CMD...: ip netns exec, in a UTS
# namespace of its own whose hostname is HOST, because OpenMPI tells nodes apart by
# hostname. mpirun reaches any other host through an rsh agent that does the same, and
# OpenMPI is told to use TCP on that subnet only (btl tcp,self; oob and btl
# if_include), so nothing goes through the machine's own interfaces.
#
#   netns_setup WORK     makes NETNS_HOSTS=(A B ...) (NETNS_N of them, default 2) with
#                        NETNS_ADDRS=(10.231.7.1 .2 ...), waits until each host's device
#                        is up, writes WORK/on-HOST for each host (below) and the agent
#                        WORK/rsh-agent, and exports the OMPI_MCA_* settings; exits 77
#                        with a message without the privilege; netns_cleanup (call it
#                        from the test's EXIT trap) kills what runs in them and removes
#                        them and the switch. A guard, out of the test's session and
#                        process group, does the same once the test's shell is gone, so
#                        a test killed before its trap ran (SIGKILL, a meson timeout)
#                        leaves nothing
#   netns_start TAG      a test's usual start: work=$(mktemp -d TMPDIR/netns-TAG.XXXXXX),
#                        an EXIT trap that runs netns_cleanup and removes $work, then
#                        netns_setup $work; sets work, and A and B (the first two hosts)
#   WORK/on-HOST CMD...  runs CMD on HOST, with no time bound, as the same process
#                        (exec all the way): started in the background, its $! is CMD's
#                        pid, which a test can kill as it would kill CMD on loopback
#   netns_on HOST CMD... runs CMD on HOST, for at most NETNS_TIMEOUT seconds (300)
#   netns_alive HOST     prints the pids still running on HOST
#   netns_ckptd I CKPTD ROOT WORK [ARGS...]
#                        starts ckptd on host I for ROOT, id nodeI, socket
#                        WORK/ckptd-I.sock, log WORK/ckptd-I.log, and waits for its
#                        socket; NETNS_DAEMONS[I] is its pid (netns_cleanup ends it)
#   netns_launch SHARDRUN PORT NPROC LOG PROGRAM [ARGS...]
#                        starts a job by rendezvous on every host (node I on host I, log
#                        LOG.I) in the background; netns_wait waits for all and returns
#                        node 0's exit status (node I's: NETNS_RCS[I], node 1's also
#                        NETNS_RC1)

NETNS_SUBNET=10.231.7
NETNS_HOSTS=()
NETNS_ADDRS=()
NETNS_SWITCH=
NETNS_WORK=
NETNS_LETTERS=abcdefghijklmnopqrstuvwxyz

netns_skip() { echo "skip: $*"; exit 77; }

# netns_guard NAME...: once this test's shell ($$) is gone (or a zombie: its parent may
# be slow to reap it), kills what runs in the namespaces NAME... and deletes them.
# setsid in a subshell that exits at once: the guard is nobody's child here (a test's
# bare wait never waits for it) and outlives a kill of the test's process group; its
# output goes nowhere, so meson does not wait for it either. After a clean exit it
# finds nothing left.
netns_guard() {
    ( setsid sh -c 'owner=$1; shift
        alive() { s=$(sed "s/.*) //; s/ .*//" "/proc/$owner/stat" 2>/dev/null) && [ "$s" != Z ]; }
        while alive; do sleep 0.5; done
        for h; do for p in $(ip netns pids "$h" 2>/dev/null); do kill -9 "$p"; done; done
        for h; do ip netns del "$h" 2>/dev/null; done' netns-guard "$$" "$@" \
        </dev/null >/dev/null 2>&1 & )
}

netns_setup() {
    local work=$1 n=${NETNS_N:-2}
    for tool in ip unshare nsenter setsid; do
        command -v "$tool" >/dev/null || netns_skip "no '$tool' (iproute2, util-linux)"
    done
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le ${#NETNS_LETTERS} ] ||
        { echo "FAILED: NETNS_N=$n: 2 to ${#NETNS_LETTERS} hosts"; exit 1; }
    # Short unique names: they are hostnames, and the veth names must fit in 15 bytes.
    local id=$(( $$ % 100000 )) i names=()
    for ((i = 0; i < n; i++)); do names+=("srn$id${NETNS_LETTERS:i:1}"); done
    [ "$n" -eq 2 ] || names+=("srn${id}sw")
    netns_guard "${names[@]}"
    ip netns add "${names[0]}" 2>/dev/null ||
        netns_skip "cannot create a network namespace (needs root or CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    NETNS_HOSTS=("${names[0]}")
    for ((i = 1; i < n; i++)); do
        ip netns add "${names[i]}" ||
            { netns_cleanup; netns_skip "cannot create network namespace $((i + 1)) of $n"; }
        NETNS_HOSTS+=("${names[i]}")
    done
    if [ "$n" -eq 2 ]; then
        ip link add "v${id}a" netns "${names[0]}" type veth peer name "v${id}b" netns "${names[1]}" ||
            { netns_cleanup; netns_skip "cannot create a veth pair (no veth support?)"; }
    else
        # The switch: a bridge without an address (it forwards, it is no host), STP
        # off (no forward delay: a port forwards once its link is up).
        NETNS_SWITCH=srn${id}sw
        ip netns add "$NETNS_SWITCH" &&
            ip -n "$NETNS_SWITCH" link add "br$id" type bridge stp_state 0 forward_delay 0 &&
            ip -n "$NETNS_SWITCH" link set "br$id" up ||
            { netns_cleanup; netns_skip "cannot create a bridge (no bridge support?)"; }
        for ((i = 0; i < n; i++)); do
            local l=${NETNS_LETTERS:i:1}
            ip link add "v$id$l" netns "${names[i]}" type veth peer name "w$id$l" \
                netns "$NETNS_SWITCH" ||
                { netns_cleanup; netns_skip "cannot create a veth pair (no veth support?)"; }
            ip -n "$NETNS_SWITCH" link set "w$id$l" master "br$id" &&
                ip -n "$NETNS_SWITCH" link set "w$id$l" up ||
                { netns_cleanup; echo "FAILED: joining w$id$l to the bridge br$id"; exit 1; }
        done
    fi
    NETNS_ADDRS=()
    for ((i = 0; i < n; i++)); do
        local h=${NETNS_HOSTS[i]} dev=v$id${NETNS_LETTERS:i:1}
        NETNS_ADDRS+=("$NETNS_SUBNET.$((i + 1))")
        ip -n "$h" link set lo up &&
            ip -n "$h" addr add "${NETNS_ADDRS[i]}/24" dev "$dev" &&
            ip -n "$h" link set "$dev" up ||
            { netns_cleanup; echo "FAILED: configuring $dev in $h"; exit 1; }
    done
    # A veth says "NO-CARRIER ... state DOWN" for a moment after it is set up, and a
    # program that picks its network devices when it starts (UCX) leaves out one that
    # is not running: a daemon started then never takes a connection on it.
    for ((i = 0; i < n; i++)); do
        local h=${NETNS_HOSTS[i]} dev=v$id${NETNS_LETTERS:i:1}
        for _ in $(seq 200); do
            ip -n "$h" -o link show dev "$dev" | grep -q 'state UP' && break
            sleep 0.05
        done
        ip -n "$h" -o link show dev "$dev" | grep -q 'state UP' ||
            { echo "FAILED: $dev in $h never came up: $(ip -n "$h" -o link show dev "$dev")"
              netns_cleanup; exit 1; }
        printf '#!/bin/sh\nexec ip netns exec %s unshare --uts sh -c '"'"'hostname "$0" && exec "$@"'"'"' %s "$@"\n' \
            "$h" "$h" >"$work/on-$h" && chmod +x "$work/on-$h" ||
            { netns_cleanup; echo "FAILED: writing $work/on-$h"; exit 1; }
    done
    NETNS_WORK=$work
    cat >"$work/rsh-agent" <<'EOF'
#!/bin/sh
# OpenMPI's rsh agent for namespace hosts: "rsh-agent HOST COMMAND..." runs COMMAND
# (a shell command line) on HOST, with HOST as its hostname.
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"
EOF
    chmod +x "$work/rsh-agent"
    export OMPI_MCA_plm_rsh_agent="$work/rsh-agent"
    export OMPI_MCA_btl=tcp,self
    export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET.0/24"
    export OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET.0/24"
    # The agent is not ssh: no tree spawn through it, no ssh options.
    export OMPI_MCA_plm_rsh_no_tree_spawn=1
}

netns_start() {
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/netns-$1.XXXXXX")
    trap 'netns_cleanup; rm -rf "$work"' EXIT
    netns_setup "$work"
    A=${NETNS_HOSTS[0]} B=${NETNS_HOSTS[1]}
}

netns_on() {
    local host=$1
    shift
    timeout "${NETNS_TIMEOUT:-300}" "$NETNS_WORK/on-$host" "$@"
}

NETNS_DAEMONS=()
netns_ckptd() {
    local i=$1 ckptd=$2 root=$3 work=$4
    shift 4
    rm -f "$work/ckptd-$i.sock"
    netns_on "${NETNS_HOSTS[$i]}" "$ckptd" --root "$root" --id "node$i" \
        --socket "$work/ckptd-$i.sock" --foreground --log "$work/ckptd-$i.log" "$@" &
    NETNS_DAEMONS[$i]=$!
    for _ in $(seq 200); do [ -S "$work/ckptd-$i.sock" ] && return 0; sleep 0.05; done
    echo "FAILED: ckptd on ${NETNS_HOSTS[$i]} did not start"; cat "$work/ckptd-$i.log"; exit 1
}

NETNS_NODE_PIDS=()
netns_launch() {
    local shardrun=$1 port=$2 nproc=$3 log=$4 i
    shift 4
    NETNS_NODE_PIDS=()
    for i in "${!NETNS_HOSTS[@]}"; do
        netns_on "${NETNS_HOSTS[$i]}" "$shardrun" --nproc-per-node "$nproc" \
            --nnodes "${#NETNS_HOSTS[@]}" \
            --node-rank "$i" --master-addr "${NETNS_ADDRS[0]}" --master-port "$port" \
            --join-timeout 60 "$@" >"$log.$i" 2>&1 &
        NETNS_NODE_PIDS+=($!)
    done
}

NETNS_RCS=()
NETNS_RC1=
netns_wait() {
    local i rc
    NETNS_RCS=()
    for i in "${!NETNS_NODE_PIDS[@]}"; do
        rc=0
        wait "${NETNS_NODE_PIDS[$i]}" || rc=$?
        NETNS_RCS[$i]=$rc
    done
    NETNS_RC1=${NETNS_RCS[1]}
    NETNS_NODE_PIDS=()
    return "${NETNS_RCS[0]}"
}

netns_alive() { ip netns pids "$1" 2>/dev/null | tr '\n' ' '; }

netns_cleanup() {
    local h p
    for p in "${NETNS_DAEMONS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    NETNS_DAEMONS=()
    for h in "${NETNS_HOSTS[@]}"; do
        for p in $(ip netns pids "$h" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    done
    # Deleting a namespace deletes the veth ends in it, and with them their peers.
    for h in "${NETNS_HOSTS[@]}" $NETNS_SWITCH; do ip netns del "$h" 2>/dev/null || true; done
    NETNS_HOSTS=()
    NETNS_SWITCH=
}

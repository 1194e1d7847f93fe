# netns_lib.sh - two real hosts on one machine, for multi-node tests (sourced by bash).
#
# Each host is a network namespace; a veth pair joins the two, with addresses in a
# private /24 that exists only inside them (traffic goes only between the two). A
# command runs "on" a host through netns_on HOST CMD...: ip netns exec, in a UTS
# namespace of its own whose hostname is HOST, because OpenMPI tells nodes apart by
# hostname. mpirun reaches the other host through an rsh agent that does the same, and
# OpenMPI is told to use TCP on that subnet only (btl tcp,self; oob and btl
# if_include), so nothing goes through the machine's own interfaces.
#
#   netns_setup WORK     makes NETNS_HOSTS=(A B) with NETNS_ADDRS=(10.231.7.1 .2), the
#                        agent WORK/rsh-agent, and exports the OMPI_MCA_* settings;
#                        exits 77 with a message without the privilege; netns_cleanup
#                        (call it from the test's EXIT trap) kills what runs in them and
#                        removes them
#   netns_start TAG      a test's usual start: work=$(mktemp -d TMPDIR/netns-TAG.XXXXXX),
#                        an EXIT trap that runs netns_cleanup and removes $work, then
#                        netns_setup $work; sets work, and A and B (the two hosts)
#   netns_on HOST CMD... runs CMD on HOST, for at most NETNS_TIMEOUT seconds (300)
#   netns_alive HOST     prints the pids still running on HOST
#   netns_ckptd I CKPTD ROOT WORK [ARGS...]
#                        starts ckptd on host I (0 or 1) for ROOT, id nodeI, socket
#                        WORK/ckptd-I.sock, log WORK/ckptd-I.log, and waits for its
#                        socket; NETNS_DAEMONS[I] is its pid (netns_cleanup ends it)
#   netns_launch SHARDRUN PORT NPROC LOG PROGRAM [ARGS...]
#                        starts a 2-node job by rendezvous (node 0 on host A, node 1 on
#                        B, logs LOG.0 and LOG.1) in the background; netns_wait waits for
#                        both and returns node 0's exit status (node 1's: NETNS_RC1)

NETNS_SUBNET=10.231.7
NETNS_HOSTS=()
NETNS_ADDRS=()

netns_skip() { echo "skip: $*"; exit 77; }

netns_setup() {
    local work=$1
    for tool in ip unshare nsenter; do
        command -v "$tool" >/dev/null || netns_skip "no '$tool' (iproute2, util-linux)"
    done
    # Short unique names: they are hostnames, and the veth names must fit in 15 bytes.
    local id=$(( $$ % 100000 ))
    local a=srn${id}a b=srn${id}b
    ip netns add "$a" 2>/dev/null ||
        netns_skip "cannot create a network namespace (needs root or CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    NETNS_HOSTS=("$a")
    ip netns add "$b" || { netns_cleanup; netns_skip "cannot create a second network namespace"; }
    NETNS_HOSTS+=("$b")
    NETNS_ADDRS=("$NETNS_SUBNET.1" "$NETNS_SUBNET.2")
    ip link add "v${id}a" netns "$a" type veth peer name "v${id}b" netns "$b" ||
        { netns_cleanup; netns_skip "cannot create a veth pair (no veth support?)"; }
    local i
    for i in 0 1; do
        local h=${NETNS_HOSTS[$i]} dev=v${id}$([ $i = 0 ] && echo a || echo b)
        ip -n "$h" link set lo up &&
            ip -n "$h" addr add "${NETNS_ADDRS[$i]}/24" dev "$dev" &&
            ip -n "$h" link set "$dev" up ||
            { netns_cleanup; echo "FAILED: configuring $dev in $h"; exit 1; }
    done
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
    timeout "${NETNS_TIMEOUT:-300}" ip netns exec "$host" unshare --uts \
        sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
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
    for i in 0 1; do
        netns_on "${NETNS_HOSTS[$i]}" "$shardrun" --nproc-per-node "$nproc" --nnodes 2 \
            --node-rank "$i" --master-addr "${NETNS_ADDRS[0]}" --master-port "$port" \
            --join-timeout 60 "$@" >"$log.$i" 2>&1 &
        NETNS_NODE_PIDS+=($!)
    done
}

NETNS_RC1=
netns_wait() {
    local rc0=0
    NETNS_RC1=0
    wait "${NETNS_NODE_PIDS[0]}" || rc0=$?
    wait "${NETNS_NODE_PIDS[1]}" || NETNS_RC1=$?
    NETNS_NODE_PIDS=()
    return "$rc0"
}

netns_alive() { ip netns pids "$1" 2>/dev/null | tr '\n' ' '; }

netns_cleanup() {
    local h p
    for p in "${NETNS_DAEMONS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    NETNS_DAEMONS=()
    for h in "${NETNS_HOSTS[@]}"; do
        for p in $(ip netns pids "$h" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    done
    for h in "${NETNS_HOSTS[@]}"; do ip netns del "$h" 2>/dev/null || true; done
    NETNS_HOSTS=()
}

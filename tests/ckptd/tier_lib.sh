# tier_lib.sh - the cluster of the restore tests (sourced after replica_lib.sh).
#
# Four daemons n0..n3 on loopback share one durable root SHARED, each with a local tier
# of its own (WORK/nI.local) and socket (WORK/nI.sock). Checkpoint step-8 is complete
# in SHARED: the durable tier. The newer step-12 is only in the local tiers: node nI
# holds its part, rank-0000I.dat, as its own partial copy, and its clique peer keeps a
# replica of it (F = 2, cliques {n0, n1} and {n2, n3}: made with PUT, as the save path
# will). Both checkpoints are on a 1-D mesh of 4 ranks, each rank's shard of every
# tensor in its own file. TRUTH holds complete copies of both that no daemon sees:
# what every restore is compared with (tier_load).
SHARED=$WORK/durable
TRUTH=$WORK/truth
TIER_ARGS=()                       # more ckptd options for every node of the cluster
declare -A NODE_ARGS=()            # NODE_ARGS[nI]: more for node nI alone, after them

# put FROM TO: FROM's own copy of step-12 kept by TO as a replica.
put() {
    run "$CKPTCTL" peer put --to "$2" --root "$SHARED" --id "$1" --from "$WORK/$1.local" step-12
    expect 0 "the replica of $1's part on $2"
}

cluster() {
    synth "$TRUTH" step-12 --mesh 4 --placements 'S(0)' --step 12 --seed 12 "$@"
    synth "$SHARED" step-8 --mesh 4 --placements 'S(0)' --step 8 --seed 8 "$@"
    cp -al "$SHARED/step-8" "$TRUTH/step-8" 2>/dev/null || cp -a "$SHARED/step-8" "$TRUTH/step-8" ||
        fail "linking step-8 into the truth"
    local i
    for i in 0 1 2 3; do
        mkdir -p "$WORK/n$i.local"
        run "$COPY_PARTIAL" "$TRUTH" step-12 "$WORK/n$i.local" "n$i" "rank-0000$i.dat"
        expect 0 "n$i's own part of step-12"
    done
    for i in 0 1 2 3; do
        # shellcheck disable=SC2086  # NODE_ARGS holds whole words
        daemon "n$i" --peer-timeout 5 "${TIER_ARGS[@]}" ${NODE_ARGS[n$i]:-}
    done
    put n0 n1
    put n1 n0
    put n2 n3
    put n3 n2
}

# stop_cluster: every node's daemon stopped by SIGTERM, each exiting 0; then PASS.
stop_cluster() {
    local id
    for id in n0 n1 n2 n3; do
        stop "$id"
    done
    echo "PASS [$TEST_NAME]"
}

# two_hosts TIMEOUT: the pair of network-namespace hosts (after netns_hosts_up; TRUTH
# holds step-12 on 2 ranks): n0 on host A holds rank 0's file and, put across the veth,
# a replica of n1's part; n1 on host B holds rank 1's. Daemons with --peer-timeout
# TIMEOUT; WRAP is left on host B. Sets A and B.
two_hosts() {
    A=${NETNS_HOSTS[0]} B=${NETNS_HOSTS[1]}
    mkdir -p "$SHARED"
    local i
    for i in 0 1; do
        mkdir -p "$WORK/n$i.local"
        run "$COPY_PARTIAL" "$TRUTH" step-12 "$WORK/n$i.local" "n$i" "rank-0000$i.dat"
        expect 0 "n$i's own part"
    done
    WRAP=("$WORK/on-$A")
    LISTEN=${NETNS_ADDRS[0]} daemon n0 --peer-timeout "$1"
    WRAP=("$WORK/on-$B")
    LISTEN=${NETNS_ADDRS[1]} daemon n1 --peer-timeout "$1"
    run "$WORK/on-$B" "$CKPTCTL" peer put --to n0 --root "$SHARED" --id n1 \
        --from "$WORK/n1.local" step-12
    expect 0 "n1's part kept by n0, across the veth"
}

# lose ID [TIMEOUT]: node ID is lost with its disk (its daemon killed, its local tier
# deleted), and a replacement of the same id starts with an empty local tier (on the
# host WRAP names, listening on LISTEN; --peer-timeout TIMEOUT, default 5).
lose() {
    crash "$1"
    rm -rf "$WORK/$1.local"
    daemon "$1" --peer-timeout "${2:-5}"
}

# load NODE WHAT [tier_load options]: restores through NODE's daemon.
load() {
    local node=$1
    shift
    run "$TIER_LOAD" "$WORK/$node.sock" "$SHARED" "$TRUTH" "$@"
}

# ask_drain NODE NAME [--offer]: asks NODE's daemon to drain NAME (ckptctl drain exits 0).
ask_drain() {
    run "$CKPTCTL" drain --socket "$WORK/$1.sock" "${@:2}"
    expect 0 "ckptctl drain ${*:2} at $1"
}

# drain NODE NAME [--offer]: ask_drain, then drained NODE NAME.
drain() {
    ask_drain "$@"
    drained "$@"
}

# fetched_nothing NODE: NODE's local tier holds no fetched copy (LOCAL/.fetched is
# empty or absent): what it drained, it read from its own tier or had written in parts.
fetched_nothing() {
    [ -z "$(ls -A "$WORK/$1.local/.fetched" 2>/dev/null)" ] ||
        fail "$1 fetched a file: $(ls -R "$WORK/$1.local/.fetched")"
}

# drained NODE NAME: waits (30 s at most) until ckptctl drain says NODE's newest drain
# of NAME (its last line of NAME) ended; $OUT then holds that last answer.
drained() {
    local node=$1
    shift
    timeout "$CMD_TIMEOUT" "$CKPTCTL" drain --socket "$WORK/$node.sock" >"$OUT" 2>&1
    for _ in $(seq 300); do
        grep "^$1:" "$OUT" | tail -1 | grep -qE "^$1: (done|failed)" && return 0
        sleep 0.1
        timeout "$CMD_TIMEOUT" "$CKPTCTL" drain --socket "$WORK/$node.sock" >"$OUT" 2>&1
    done
    cat "$OUT"
    fail "the drain of $1 by $node never ended"
}

# same_as_truth NAME: the durable copy of NAME holds the saved bytes, every block hashed.
same_as_truth() {
    local f
    run "$CKPT_VERIFY" "$SHARED" --deep
    expect 0 "ckpt-verify --deep of the durable root"
    said "^$1: ok: 3 tensors" "the durable copy of $1, verified"
    for f in "$TRUTH/$1"/rank-*.dat; do
        cmp "$f" "$SHARED/$1/${f##*/}" || fail "the durable ${f##*/} of $1 differs"
    done
}

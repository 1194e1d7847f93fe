# replica_lib.sh - shared helpers of the peer service's tests (sourced by bash).
#
# Daemons run in the foreground on loopback, each with a durable root, a local tier and
# a peer service on a port the kernel picks (published in ROOT/.ckptd.ID.peer). Every
# command runs under a timeout, so a hang fails the test instead of holding it; every
# daemon started is ended by its pid at exit. The paths come from meson: CKPTD,
# CKPTCTL, CKPT_SYNTH, CKPT_VERIFY, CKPT_INSPECT, COPY_PARTIAL, PEER_TOOL, TIER_LOAD.
set -u
export LC_ALL=C
TEST_NAME=${TEST_NAME:-$(basename "$0" .sh)}
CMD_TIMEOUT=${CMD_TIMEOUT:-60}

fail() { echo "FAIL [$TEST_NAME]: $*" >&2; exit 1; }
skip() { echo "SKIP [$TEST_NAME]: $*"; exit 77; }

for v in CKPTD CKPTCTL CKPT_SYNTH CKPT_VERIFY CKPT_INSPECT COPY_PARTIAL PEER_TOOL TIER_LOAD; do
    [ -x "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
done

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/replica.XXXXXX") || fail "mktemp failed"
# One peer key for every daemon and tool of the test, whatever durable root each has
# (the first daemon makes it): the daemons of one job, as on a cluster.
export CKPTD_PEER_KEY=$WORK/peer.key
declare -A PID
cleanup() {
    local id
    for id in "${!PID[@]}"; do
        kill -CONT "${PID[$id]}" 2>/dev/null
        kill -9 "${PID[$id]}" 2>/dev/null
        wait "${PID[$id]}" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# run CMD...: runs it under the timeout; its stdout+stderr in $OUT (shown), status in $RC.
OUT=$WORK/out.txt
RC=0
run() {
    echo "\$ ${*//$WORK/\$WORK}"
    timeout "$CMD_TIMEOUT" "$@" >"$OUT" 2>&1
    RC=$?
    sed "s|$WORK|\$WORK|g; s/^/  | /" "$OUT"
    [ "$RC" -ne 124 ] || fail "$1 hung (no end within $CMD_TIMEOUT s)"
    [ "$RC" -lt 128 ] || [ "$RC" -eq 137 ] || fail "$1 crashed (status $RC)"
    ! grep -q "Sanitizer" "$OUT" || fail "$1: a sanitizer report"
}
expect() { [ "$RC" -eq "$1" ] || fail "$2: exit $RC, expected $1"; }
said() { grep -qE -- "$1" "$OUT" || fail "$2: the output does not say /$1/"; }

# synth ROOT NAME [ckpt-synth options]: a committed checkpoint on a 2x2 mesh.
synth() {
    local root=$1 name=$2
    shift 2
    mkdir -p "$root"
    run "$CKPT_SYNTH" "$root" --name "$name" --mesh 2x2 --tensors 3 --bytes 12MiB \
        --block-size 1MiB "$@"
    expect 0 "ckpt-synth $name"
}

# daemon ID [ckptd options]: ckptd of id ID on WORK/ID.durable, local tier WORK/ID.local,
# peer service on $LISTEN (127.0.0.1), any port, run through ${WRAP[@]} (a host of
# netns_lib.sh: netns_on HOST); waits for its published address. With SHARED set, the
# durable root is SHARED for every daemon (one root, as on a cluster), and daemon ID's
# socket WORK/ID.sock. Each states the least window (--peer-checkers 1: 8 MiB, as on
# CI's two cores), so that "longer than a window" holds on a machine of any size; a
# later --peer-checkers in the options wins.
WRAP=()
durable_of() { echo "${SHARED:-$WORK/$1.durable}"; }
daemon() {
    local id=$1 root
    shift
    root=$(durable_of "$id")
    mkdir -p "$root" "$WORK/$id.local"
    rm -f "$root/.ckptd.$id.peer"
    "${WRAP[@]}" "$CKPTD" --root "$root" --id "$id" --local-root "$WORK/$id.local" \
        --peer-listen "${LISTEN:-127.0.0.1}:0" --foreground --log "$WORK/$id.log" \
        --staging 64MiB ${SHARED:+--socket "$WORK/$id.sock"} --peer-checkers 1 "$@" &
    PID[$id]=$!
    for _ in $(seq 400); do
        [ -s "$root/.ckptd.$id.peer" ] && return 0
        kill -0 "${PID[$id]}" 2>/dev/null || break
        sleep 0.05
    done
    cat "$WORK/$id.log" >&2
    fail "ckptd $id did not publish its peer address"
}

# pair OPTS...: two nodes of one job, daemons n0 and n1 with OPTS on one durable root
# SHARED (WORK/durable), and socks, their sockets in the ranks' order (ckpt-synth
# --daemon). N1_CKPTD, when set, runs n1 in place of ckptd (the test build), with the
# options N1_OPTS (an array) after OPTS.
N1_OPTS=()
pair() {
    SHARED=$WORK/durable
    mkdir -p "$SHARED"
    socks=$WORK/n0.sock,$WORK/n1.sock
    daemon n0 "$@"
    CKPTD=${N1_CKPTD:-$CKPTD} daemon n1 "$@" "${N1_OPTS[@]}"
}

# early_pair NFILES RX WHAT: for each way of a pair (n0's part at n1, n1's at n0) of
# checkpoint c: the sender sent its NFILES data files as they were written, its
# replica at the other came from that stream, the receiver's commit line says RX
# (somewhere after its opening parenthesis: WHAT), and the replica deep-verifies.
early_pair() {
    local s src dst
    for s in 0 1; do
        src=n$s dst=n$((1 - s))
        grep -E "checkpoint c: |replica c " "$WORK/$src.log" "$WORK/$dst.log" | sed 's/^/  /'
        logged "$src" "checkpoint c: its $1 data file\(s\) here go to 1 peer\(s\) of its clique" \
            "$src sends its part as it is written"
        logged "$src" "checkpoint c: replica committed by ckptd $dst at .*, begun beside the local write" \
            "$src's replica at $dst came from the stream begun beside the write"
        logged "$dst" "replica c of ckptd $src committed \(.*; $2" "$3 ($src's part at $dst)"
        run "$CKPT_VERIFY" "$WORK/$dst.local/.replicas/$src" c --deep
        expect 0 "$src's replica at $dst deep-verifies"
    done
}

# netns_hosts_up: makes the hosts of tests/launch/netns_lib.sh (sourced; NETNS_N of
# them, default 2; they go at exit, with the daemons; each host's device is up, and
# WORK/on-HOST runs a command there as the same process, for WRAP) and keeps UCX on
# TCP (UCX_TLS=tcp: the bytes cross the veth, as they would cross a cluster's
# network, rather than shared memory of the one machine).
netns_hosts_up() {
    netns_setup "$WORK"
    trap 'netns_cleanup; cleanup' EXIT
    export UCX_TLS=tcp
}

# addr ID: where daemon ID's peer service listens, from its address file.
addr() { sed -n 's/^address //p' "$(durable_of "$1")/.ckptd.$1.peer"; }

# stop ID: SIGTERM, and its exit status must be 0.
stop() {
    kill -TERM "${PID[$1]}"
    wait "${PID[$1]}" || fail "ckptd $1 exited $? on SIGTERM"
    unset "PID[$1]"
}

# crash ID: SIGKILL.
crash() {
    kill -9 "${PID[$1]}"
    wait "${PID[$1]}" 2>/dev/null
    unset "PID[$1]"
}

# no_pending ROOT: nothing under ROOT/.pending (a failed copy leaves nothing).
no_pending() {
    local left
    left=$(ls -A "$1/.pending" 2>/dev/null)
    [ -z "$left" ] || fail "$1/.pending holds: $left"
}

# wait_log ID REGEX WHAT [SECS]: daemon ID's log says it within SECS (default 30) s.
wait_log() {
    local i
    for i in $(seq $((${4:-30} * 10))); do
        grep -qE -- "$2" "$WORK/$1.log" && return 0
        sleep 0.1
    done
    sed 's/^/  log| /' "$WORK/$1.log"
    fail "$3: the log of ckptd $1 never said /$2/ within ${4:-30} s"
}

# logged ID REGEX WHAT: daemon ID's log says it.
logged() {
    grep -qE -- "$2" "$WORK/$1.log" || { sed 's/^/  log| /' "$WORK/$1.log"; fail "$3: the log of ckptd $1 does not say /$2/"; }
}

# hold ID: the four transfer slots of ckptd ID taken by PUTs stopped after their first
# acknowledgement (ID keeps each open until its --peer-timeout), each from its own
# source A1..A4, whose copy of c1 (two data files of src/c1: more than a transfer
# window) WORK/Ai.local must hold; the senders' pids in SENDERS. release: they are
# killed, and ID sees each connection fail at once.
SENDERS=()
hold() {
    local i
    SENDERS=()
    for i in 1 2 3 4; do
        rm -rf "$WORK/$1.local/.replicas/A$i"
        "$PEER_TOOL" put "$(addr "$1")" "$WORK/A$i.local" c1 "A$i" stop >"$WORK/held$i.out" 2>&1 &
        SENDERS+=($!)
    done
    for i in 1 2 3 4; do
        for _ in $(seq 300); do
            grep -q "acting: stop" "$WORK/held$i.out" && break
            sleep 0.1
        done
        grep -q "acting: stop" "$WORK/held$i.out" || fail "sender A$i never got its first ACK"
    done
}
release() {
    kill -9 "${SENDERS[@]}" 2>/dev/null
    wait "${SENDERS[@]}" 2>/dev/null
}

#!/usr/bin/env bash
# An engine lost in the middle of a tiered save's settling (issue 31) holds the others
# for --dead-after, not for --part-timeout: its heartbeat stands still, so what it owes
# (its replication's outcome, its settled record) is taken as never coming, and the
# others settle at the level reached, name it, and the coordinator removes the meeting
# and lets NAME's lock in the durable root go. Two ckptd on loopback, --replicas 2,
# --dead-after 2 and a --part-timeout of 300 s that the test never waits out (each
# wait below ends after 60 s).
#   1. the member n1 is killed once its copy is committed, before its replication
#      ended: the coordinator n0 settles at level local naming n1, and the meeting goes;
#   2. the coordinator n0 is killed the same way: the member n1 settles at level local
#      naming n0.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
mkdir -p "$SHARED"
opts=(--replicas 2 --peer-timeout 2 --dead-after 2 --part-timeout 300)
socks=$WORK/n0.sock,$WORK/n1.sock

# lost_mid_save NAME LOST: a save of NAME (level replicated, 56 MiB a rank) through n0
# and n1; daemon LOST is stopped as soon as its log says its copy is committed (its
# replication of that much has not ended: it owes its settled record), then killed.
lost_mid_save() {
    "$CKPT_SYNTH" "$SHARED" --name "$1" --mesh 2 --tensors 2 --bytes 112MiB --world 2 \
        --daemon "$socks" --level replicated >"$WORK/$1.out" 2>&1 &
    local saver=$!
    for _ in $(seq 6000); do
        grep -q "checkpoint $1: copy committed" "$WORK/$2.log" && break
        sleep 0.005
    done
    kill -STOP "${PID[$2]}"
    grep -q "checkpoint $1: copy committed" "$WORK/$2.log" ||
        { cat "$WORK/$1.out" "$WORK/$2.log"; fail "$2 never committed its copy"; }
    ! ls "$SHARED"/.pending/"$1".*-meet/settled."$2" >/dev/null 2>&1 ||
        fail "$2 settled before it was stopped: the test cannot show the wait"
    crash "$2"
    kill "$saver" 2>/dev/null
    wait "$saver" 2>/dev/null
}

# settles ID NAME: daemon ID logs NAME's final level within 60 s (--part-timeout 300).
settles() { wait_log "$1" "checkpoint $2: final level" "ckptd $1 settles $2" 60; }

echo "--- 1. the member lost"
daemon n0 "${opts[@]}"
daemon n1 "${opts[@]}"
lost_mid_save step-1 n1
settles n0 step-1
logged n0 "checkpoint step-1: engine n1 stopped beating .*--dead-after 2 s" \
    "n0 says n1 is taken for dead"
logged n0 "checkpoint step-1: final level local: not replicated" "n0's final level"
for _ in $(seq 50); do
    ls -d "$SHARED"/.pending/step-1.*-meet >/dev/null 2>&1 || break
    sleep 0.1
done
! ls -d "$SHARED"/.pending/step-1.*-meet 2>/dev/null || fail "the meeting of step-1 is left"
lock=$SHARED/.pending/step-1.lock
[ ! -e "$lock" ] || flock -n "$lock" true || fail "step-1's lock in the durable root is held"
stop n0

echo "--- 2. the coordinator lost"
daemon n0 "${opts[@]}"
daemon n1 "${opts[@]}"
lost_mid_save step-2 n0
settles n1 step-2
logged n1 "checkpoint step-2: engine n0 stopped beating .*--dead-after 2 s" \
    "n1 says n0 is taken for dead"
logged n1 "checkpoint step-2: final level local: not replicated" "n1's final level"
stop n1
echo "PASS [$TEST_NAME]"

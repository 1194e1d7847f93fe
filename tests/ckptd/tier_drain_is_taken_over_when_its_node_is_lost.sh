#!/usr/bin/env bash
# The drain the policy keeps is made by the first daemon of the save, and the others
# stand by (decision 0192): a node lost mid-drain never leaves the kept checkpoint out
# of the durable tier. Two ckptd on loopback, one durable root, --replicas 2,
# --drain-every 1, drains paced at 4 MiB/s (a 16 MiB save drains in about 4 s),
# --dead-after 2.
#   1. n0 drains step-1; n1 stands by and drains nothing. n0 is lost with its disk in
#      the middle of the drain: n1 says so and takes the drain over, reading n0's part
#      from its replica, and the durable root holds step-1 whole (deep-verified), and
#      nothing of the lost drain.
#   2. n0 is lost mid-drain of step-2 and replaced at once, under the same id with an
#      empty disk (its heartbeat names another instance before it could stand still):
#      n1 takes the drain over all the same, and step-2 is whole in the durable root.
#   3. a save that asks for level durable (drained at once, whatever the policy): n0 is
#      lost mid-drain; n1 takes the drain over and tells its rank level durable.
#   4. n1 dies while it stands by, and n0 is lost mid-drain and replaced at once while
#      n1 is down: the stand-by was written down with the drains owed, with the instance
#      of n0 it saw, and the new n1 sees the replacement and takes the drain over.
#   5. n1 is busy with a long drain of its own (asked by hand, --drain-every 0) when n0
#      is lost mid-drain of a save asked durable: n1 sees it within its stand-by's
#      second, not after its own drain, and drains the save once its own is done.
# While it stands by, n1 lists the drain (ckptctl drain: "standing by", naming n0) and
# its drains-owed file holds it.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
mkdir -p "$SHARED"
opts=(--replicas 2 --drain-every 1 --drain-rate 4MiB --dead-after 2 --peer-timeout 2)
socks=$WORK/n0.sock,$WORK/n1.sock

# standing_by NAME: n1 lists the drain of NAME as stood by for, naming n0, and its
# drains-owed file holds it.
standing_by() {
    local i
    for i in $(seq 50); do
        grep -q "^standby $1 [01] [0-9a-f]* n0\$" "$WORK/n1.local/.ckptd.n1.drain" 2>/dev/null && break
        sleep 0.1
    done
    grep -q "^standby $1 [01] [0-9a-f]* n0\$" "$WORK/n1.local/.ckptd.n1.drain" ||
        fail "n1's drains owed do not hold its stand-by for $1: $(cat "$WORK/n1.local/.ckptd.n1.drain")"
    run "$CKPTCTL" drain --socket "$WORK/n1.sock"
    expect 0 "ckptctl drain at n1"
    said "^$1: standing by: ckptd n0 drains it; this daemon takes the drain over if it is lost" \
        "n1 lists its stand-by for $1"
}

# lost_mid_drain NAME [BYTES [LEVEL]]: a save of NAME through n0 and n1 (16 MiB, level
# replicated); n0 is lost with its local tier once its drain of NAME started (unless
# KEEP_N0 is set: the caller does it).
lost_mid_drain() {
    run "$CKPT_SYNTH" "$SHARED" --name "$1" --mesh 2 --tensors 2 --bytes "${2:-16MiB}" \
        --world 2 --daemon "$socks" --level replicated
    expect 0 "the save of $1"
    said "rank 1: .*committed at level replicated" "$1 is replicated"
    wait_log n0 "drain of $1 to the durable root: started" "n0 drains $1" 60
    ! grep -q "drain of $1 to the durable root: started" "$WORK/n1.log" ||
        fail "n1 drains $1 beside n0"
    standing_by "$1"
    [ -n "${KEEP_N0:-}" ] && return
    crash n0
    rm -rf "$WORK/n0.local"
}

# whole NAME: the durable root holds NAME, every block checked.
whole() {
    grep "drain of $1" "$WORK/n1.log" | sed "s|$WORK|\$WORK|g; s/^/  n1| /"
    run "$CKPT_VERIFY" "$SHARED" "$1" --deep
    expect 0 "ckpt-verify --deep of the durable $1"
    [ ! -e "$SHARED/$1/copy" ] || fail "the durable $1 is a partial copy"
}

# told_durable OUT: the save running as $saver (its output in OUT) tells rank 1 level
# durable within 60 s.
told_durable() {
    for _ in $(seq 600); do
        grep -q "rank 1: .*committed at level" "$1" && break
        sleep 0.1
    done
    kill "$saver" 2>/dev/null
    wait "$saver" 2>/dev/null
    sed "s|$WORK|\$WORK|g; s/^/  | /" "$1"
    grep -qE "rank 1: .*committed at level durable$" "$1" || fail "rank 1 was not told level durable"
}

echo "--- 1. the draining node lost"
daemon n0 "${opts[@]}"
daemon n1 "${opts[@]}"
lost_mid_drain step-1
wait_log n1 "drain of step-1: ckptd n0, which was to drain it, stopped beating .*this daemon takes it over" \
    "n1 takes the drain over" 60
wait_log n1 "drain of step-1: committed in the durable root" "n1 drains step-1" 60
whole step-1
left=$(ls "$SHARED/.pending" | grep -v '\.lock$')
[ -z "$left" ] || fail "the lost drain left $left in the durable root's .pending"

echo "--- 2. the draining node replaced at once"
daemon n0 "${opts[@]}"
lost_mid_drain step-2
daemon n0 "${opts[@]}"
wait_log n1 "drain of step-2: ckptd n0, which was to drain it, was restarted .*this daemon takes it over" \
    "n1 takes the drain over from the replacement" 60
wait_log n1 "drain of step-2: committed in the durable root" "n1 drains step-2" 60
whole step-2

echo "--- 3. a save asked durable, its drainer lost"
"$CKPT_SYNTH" "$SHARED" --name step-3 --mesh 2 --tensors 2 --bytes 16MiB --world 2 \
    --daemon "$socks" --level durable >"$WORK/save3.out" 2>&1 &
saver=$!
wait_log n0 "drain of step-3 to the durable root: started" "n0 drains step-3" 60
standing_by step-3
crash n0
rm -rf "$WORK/n0.local"
wait_log n1 "drain of step-3: ckptd n0, which was to drain it, stopped beating .*this daemon takes it over" \
    "n1 takes the drain of a save asked durable over" 60
told_durable "$WORK/save3.out"
whole step-3

echo "--- 4. the stand-by dies, and the drainer is replaced while it is down"
daemon n0 "${opts[@]}"
# 32 MiB: n0's drain (8 s at 4 MiB/s) outlasts what is done before n0 is lost.
KEEP_N0=1 lost_mid_drain step-4 32MiB
for _ in $(seq 50); do
    grep -q "^standby step-4 0 [1-9a-f][0-9a-f]* n0\$" "$WORK/n1.local/.ckptd.n1.drain" && break
    sleep 0.1
done
grep -q "^standby step-4 0 [1-9a-f][0-9a-f]* n0\$" "$WORK/n1.local/.ckptd.n1.drain" ||
    fail "n1's stand-by for step-4 was not written with n0's instance: $(cat "$WORK/n1.local/.ckptd.n1.drain")"
crash n1
crash n0
rm -rf "$WORK/n0.local"
daemon n0 "${opts[@]}"
daemon n1 "${opts[@]}"
wait_log n1 "drain of step-4: stood by for since before the daemon started: ckptd n0 is to drain it" \
    "the new n1 stands by for step-4" 30
wait_log n1 "drain of step-4: ckptd n0, which was to drain it, was restarted .*this daemon takes it over" \
    "the restarted n1 takes the drain over from n0's replacement" 60
wait_log n1 "drain of step-4: committed in the durable root" "n1 drains step-4" 60
whole step-4
stop n0
stop n1

echo "--- 5. the stand-by busy with a long drain of its own"
opts=(--replicas 2 --drain-every 0 --drain-rate 4MiB --dead-after 2 --peer-timeout 2)
daemon n0 "${opts[@]}"
daemon n1 "${opts[@]}"
run "$CKPT_SYNTH" "$SHARED" --name own-5 --mesh 2 --tensors 2 --bytes 64MiB --world 2 \
    --daemon "$socks" --level replicated
expect 0 "the save of own-5"
# 64 MiB: n1's own drain (16 s at 4 MiB/s) outlasts the save below, n0's loss and
# --dead-after.
run "$CKPTCTL" drain --socket "$WORK/n1.sock" own-5
expect 0 "ckptctl drain own-5 at n1"
wait_log n1 "drain of own-5 to the durable root: started" "n1 drains own-5" 30
"$CKPT_SYNTH" "$SHARED" --name step-5 --mesh 2 --tensors 2 --bytes 16MiB --world 2 \
    --daemon "$socks" --level durable >"$WORK/save5.out" 2>&1 &
saver=$!
wait_log n0 "drain of step-5 to the durable root: started" "n0 drains step-5" 60
crash n0
rm -rf "$WORK/n0.local"
wait_log n1 "drain of step-5: ckptd n0, which was to drain it, stopped beating .*this daemon takes it over" \
    "n1, busy draining own-5, takes the drain of step-5 over" 60
! grep -q "drain of own-5: committed" "$WORK/n1.log" ||
    fail "n1 saw n0 lost only after its own drain of own-5 ended"
wait_log n1 "drain of own-5: committed in the durable root" "n1 drains own-5" 60
wait_log n1 "drain of step-5: committed in the durable root" "n1 drains step-5" 60
told_durable "$WORK/save5.out"
whole step-5
stop n1
echo "PASS [$TEST_NAME]"

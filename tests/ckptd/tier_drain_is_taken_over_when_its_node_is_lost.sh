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
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
mkdir -p "$SHARED"
opts=(--replicas 2 --drain-every 1 --drain-rate 4MiB --dead-after 2 --peer-timeout 2)
socks=$WORK/n0.sock,$WORK/n1.sock

# lost_mid_drain NAME: a save of NAME through n0 and n1, replicated; n0 is lost with its
# local tier once its drain of NAME started.
lost_mid_drain() {
    run "$CKPT_SYNTH" "$SHARED" --name "$1" --mesh 2 --tensors 2 --bytes 16MiB --world 2 \
        --daemon "$socks" --level replicated
    expect 0 "the save of $1"
    said "rank 1: .*committed at level replicated" "$1 is replicated"
    wait_log n0 "drain of $1 to the durable root: started" "n0 drains $1" 60
    ! grep -q "drain of $1 to the durable root: started" "$WORK/n1.log" ||
        fail "n1 drains $1 beside n0"
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
crash n0
rm -rf "$WORK/n0.local"
wait_log n1 "drain of step-3: ckptd n0, which was to drain it, stopped beating .*this daemon takes it over" \
    "n1 takes the drain of a save asked durable over" 60
for _ in $(seq 600); do
    grep -q "rank 1: .*committed at level" "$WORK/save3.out" && break
    sleep 0.1
done
kill "$saver" 2>/dev/null
wait "$saver" 2>/dev/null
sed "s|$WORK|\$WORK|g; s/^/  | /" "$WORK/save3.out"
grep -qE "rank 1: .*committed at level durable$" "$WORK/save3.out" ||
    fail "rank 1 was not told level durable"
whole step-3
stop n1
echo "PASS [$TEST_NAME]"

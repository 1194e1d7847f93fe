#!/usr/bin/env bash
# A save that asks for level durable hears durable even when its meeting is gone before
# its drain ends (decisions 0176, 0189). Once the drain is asked, NAME's lock in the
# durable root is the drain's to take; a drain queued behind another (a paced drain of
# an earlier checkpoint, 32 MiB at 4 MiB/s) holds none yet, and a daemon that starts
# meanwhile takes the save's meeting for debris and removes it, as recovery does with
# every unlocked pending entry. The drain still commits; every rank must then be told
# "committed at level durable" (the durable root holds this save whole), not "not
# durable: the meeting ended", and the durable copy deep-verifies.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
mkdir -p "$SHARED"
for i in 0 1; do
    daemon "n$i" --replicas 2 --peer-timeout 5 --part-timeout 60 --drain-rate 4MiB
done
socks="$WORK/n0.sock,$WORK/n1.sock"
run "$CKPT_SYNTH" "$SHARED" --name s0 --mesh 2 --tensors 2 --bytes 32MiB --world 2 \
    --daemon "$socks" --level replicated
expect 0 "s0 at level replicated"
run "$CKPTCTL" drain --socket "$WORK/n0.sock" s0
expect 0 "asking n0 to drain s0"
for _ in $(seq 200); do grep -q "drain of s0 to the durable root: started" "$WORK/n0.log" && break; sleep 0.05; done
logged n0 "drain of s0 to the durable root: started" "the paced drain of s0"

# s1 at level durable: its drain waits on n0 behind s0's, NAME's lock free meanwhile.
"$CKPT_SYNTH" "$SHARED" --name s1 --mesh 2 --tensors 2 --bytes 1MiB --world 2 \
    --daemon "$socks" --level durable >"$WORK/s1.out" 2>&1 &
synth=$!
for _ in $(seq 200); do
    [ "$(grep -c "checkpoint s1: this node's copy replicated" "$WORK"/n?.log | awk -F: '{ n += $2 } END { print n }')" -ge 2 ] && break
    sleep 0.05
done
sleep 0.5
grep -q "drain of s0: committed" "$WORK/n0.log" && fail "s0's drain ended before the test could start a daemon beside s1's"

# A daemon starts on the durable root: its recovery removes s1's meeting.
daemon n9
logged n9 "removed incomplete save $SHARED/\.pending/s1\.[0-9a-f]+-meet" \
    "the starting daemon took s1's meeting for debris (the case this test is about)"

wait "$synth" || { cat "$WORK/s1.out"; fail "ckpt-synth of s1 exited $?"; }
sed "s|$WORK|\$WORK|g; s/^/  | /" "$WORK/s1.out"
for r in 0 1; do
    grep -qE "rank $r: .*committed at level durable$" "$WORK/s1.out" ||
        fail "rank $r was not told durable once the drain committed s1"
done
[ -f "$SHARED/s1/manifest.mdb" ] && [ ! -e "$SHARED/s1/copy" ] ||
    fail "s1 is not a complete checkpoint in the durable root"
run "$CKPT_VERIFY" "$SHARED" s1 --deep
expect 0 "the durable copy of s1 deep-verifies"
for id in n9 n1 n0; do stop "$id"; done
echo "PASS [$TEST_NAME]"

#!/usr/bin/env bash
# A receiver killed (SIGKILL) in the middle of a PUT begun beside the local write
# (decision 0204), after the sender's DATA landed on its disk and before the MANIFEST,
# leaves nothing torn and hangs nothing. Two ckptd on loopback, one durable root,
# --replicas 2 (a clique of both), level replicated. Rank 0 is at n1, the test build,
# whose first fsync takes 5 s (--inject-fault slow@0): n1 coordinates, and its part,
# sent as it is written, waits at n0 for a manifest that comes seconds later. n0
# (rank 1), a member, is killed once n1's bytes are in its pending replica. A tiered
# save cannot commit without a member, which commits its own copy; so:
#   - the save fails, said to both ranks with why (n0 named), within --dead-after and
#     n1's fsync: not a hang; n1 gives its PUT up;
#   - nothing of c anywhere: no checkpoint, no copy, no replica;
#   - restarted, n0's recovery removes what it held of the save: its pending copy and
#     the torn replica of n1's part;
#   - the next save, both up, is replicated both ways, and each replica deep-verifies.
. "$(dirname "$0")/replica_lib.sh"
N1_CKPTD=$CKPTD_TEST N1_OPTS=(--inject-fault slow@0)
opts=(--replicas 2 --peer-timeout 5 --part-timeout 30 --dead-after 3 --staging 160MiB)
pair "${opts[@]}"
socks=$WORK/n1.sock,$WORK/n0.sock

"$CKPT_SYNTH" "$SHARED" --name c --mesh 2 --tensors 3 --bytes 64MiB --world 2 \
    --daemon "$socks" --level replicated >"$WORK/save.out" 2>&1 &
saver=$!
wait_log n1 "checkpoint c: its 1 data file\(s\) here go to 1 peer\(s\) of its clique" \
    "n1 sends its part as it is written" 30
# n1's file at n0, as its DATA land: killed once some are written there.
pend=$WORK/n0.local/.replicas/n1/.pending
for _ in $(seq 300); do
    [ -n "$(find "$pend" -name '*.dat' -size +0 2>/dev/null)" ] && break
    sleep 0.01
done
[ -n "$(find "$pend" -name '*.dat' -size +0 2>/dev/null)" ] ||
    fail "n1's DATA never landed at n0"
! grep -q "replica c of ckptd n1 committed" "$WORK/n0.log" ||
    fail "n1's replica at n0 was committed before the kill: the test killed nothing mid-PUT"
crash n0
echo "killed n0 with n1's PUT open: $(find "$pend" -name '*.dat' -printf '%f %s bytes\n')"

for _ in $(seq $((CMD_TIMEOUT * 10))); do
    kill -0 "$saver" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$saver" 2>/dev/null && { kill -9 "$saver"; fail "the save hung after n0 was killed"; }
wait "$saver"
rc=$?
sed "s|$WORK|\$WORK|g; s/^/  | /" "$WORK/save.out"
grep -E "checkpoint c" "$WORK/n1.log" | sed 's/^/  n1| /'
[ "$rc" -ne 0 ] || fail "the save of c succeeded without its member n0"
grep -qE "rank 0: .*checkpoint c: engine n0 stopped beating .*the save cannot complete without it" \
    "$WORK/save.out" || fail "rank 0 was not told that the save failed for want of n0"
# Its client finds n0 gone reading (the connection closed) or sending (EPIPE), which
# ever it does first (under ThreadSanitizer, sending was seen).
grep -qE "rank 1: ckptd at .*n0.sock .*(closed the connection|sending to ckptd: Broken pipe)" \
    "$WORK/save.out" || fail "rank 1 was not told that its daemon is gone"
wait_log n1 "checkpoint c: its PUT begun beside the local write is given up: the save failed" \
    "n1 gives its PUT to n0 up" 5
stop n1
for i in 0 1; do
    [ ! -e "$WORK/n$i.local/c" ] || fail "n$i keeps a copy of the failed save"
    [ ! -e "$WORK/n$i.local/.replicas/n$((1 - i))/c" ] ||
        fail "n$i keeps a replica of the failed save"
done
[ ! -e "$SHARED/c" ] || fail "the failed save is a checkpoint of the durable root"
no_pending "$WORK/n1.local"
no_pending "$WORK/n1.local/.replicas/n0"

[ -n "$(find "$pend" -name '*.dat' 2>/dev/null)" ] ||
    fail "n0 left no torn replica to recover: the test proves nothing of its recovery"
daemon n0 "${opts[@]}"
logged n0 "recovered the local tier .*: removed 2 incomplete copies of dead writers" \
    "n0's recovery removes its own pending copy and n1's torn replica"
no_pending "$WORK/n0.local"
no_pending "$WORK/n0.local/.replicas/n1"

daemon n1 "${opts[@]}"
run "$CKPT_SYNTH" "$SHARED" --name d --mesh 2 --tensors 3 --bytes 16MiB --world 2 \
    --daemon "$socks" --level replicated
expect 0 "the next save"
for r in 0 1; do said "rank $r: .*committed at level replicated$" "rank $r's level of d"; done
for pair in "0 1" "1 0"; do
    set -- $pair
    run "$CKPT_VERIFY" "$WORK/n$2.local/.replicas/n$1" d --deep
    expect 0 "n$1's replica of d at n$2"
done
for i in 0 1; do stop "n$i"; done
echo "PASS [$TEST_NAME]"

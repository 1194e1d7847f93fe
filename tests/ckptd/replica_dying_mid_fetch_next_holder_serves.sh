#!/usr/bin/env bash
# A holder that dies mid-transfer (issue 31): the fetch fails at once, leaves nothing,
# and the next holder serves (tier_lib.sh's cluster, 12 MiB per data file, more than
# the transfer window). A fake service "a-dying" (peer_tool serve-dying) keeps a replica
# of n2's part of step-12 and, its id first in order, is asked first: it sends a GET's
# first window and dies at the first acknowledgement. n2 is lost; its replacement's
# restore of rank 2 names the failure, fetches the file from n3, and loads the saved
# data; no pending copy is left.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster --bytes 48MiB
mkdir -p "$WORK/dying.local/.replicas/n2"
run "$COPY_PARTIAL" "$TRUTH" step-12 "$WORK/dying.local/.replicas/n2" n2 rank-00002.dat
expect 0 "the dying holder's replica of n2's part"
"$PEER_TOOL" serve-dying "$SHARED" a-dying "$WORK/dying.local" >"$WORK/dying.out" 2>&1 &
PID[dying]=$!
for _ in $(seq 200); do
    grep -q "^serving" "$WORK/dying.out" && break
    sleep 0.05
done
grep -q "^serving" "$WORK/dying.out" || fail "the dying holder did not start: $(cat "$WORK/dying.out")"
lose n2

load n2 step- --newest --rank 2
expect 0 "rank 2 through n2'"
said "^resolved: step-12$" "the newest checkpoint"
said "^rank 2: 3 tensors equal to the saved data" "the load"
wait "${PID[dying]}"
[ $? -eq 137 ] || fail "the dying holder did not die mid-transfer: $(cat "$WORK/dying.out")"
unset "PID[dying]"
grep -q "^dying at the first ACK of a GET" "$WORK/dying.out" || fail "it died elsewhere"
logged n2 "FETCH of step-12: the copy of ckptd n2 at ckptd a-dying failed: peer .*: (the connection|a send) failed.*; trying the next holder" \
    "the failure, at once"
logged n2 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n2 at ckptd n3" \
    "the next holder"
for d in "$WORK"/n2.local/.fetched/*; do
    no_pending "$d"
done
for id in n0 n1 n2 n3; do
    stop "$id"
done
echo "PASS [$TEST_NAME]"

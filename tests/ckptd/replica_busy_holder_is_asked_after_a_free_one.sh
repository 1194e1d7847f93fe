#!/usr/bin/env bash
# A holder busy with other transfers delays a restore only when it alone holds what is
# needed (kd_tiers.c, from_peers; tier_lib.sh's cluster, 12 MiB per data file). A real
# daemon "a-busy" keeps a replica of n2's part of step-12 and, its id first in order,
# is asked first; four PUTs stopped mid-transfer hold all its transfer slots. n2 is lost:
#   1. its replacement's restore of rank 2 is refused by a-busy as busy, asks n3 at
#      once (no wait for a-busy's turn), and loads the saved data;
#   2. with n3's replica of it gone as well, a-busy is the last holder: the fetch asks
#      it again, waiting for a turn, and gets the part once the stopped senders die.
# No wall-clock time is asserted: which holder served, and why, is in the log.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster --bytes 48MiB
mkdir -p "$WORK/a-busy.local/.replicas/n2"
run "$COPY_PARTIAL" "$TRUTH" step-12 "$WORK/a-busy.local/.replicas/n2" n2 rank-00002.dat
expect 0 "a-busy's replica of n2's part"
daemon a-busy --peer-timeout 60
synth "$WORK/src" c1 --bytes 48MiB
for i in 1 2 3 4; do
    mkdir -p "$WORK/A$i.local"
    run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A$i.local" "A$i" rank-00000.dat rank-00002.dat
    expect 0 "A$i's part of c1"
done

echo "--- 1. a busy holder is passed over for a free one"
hold a-busy
lose n2 30
load n2 step-12 --rank 2
expect 0 "rank 2 through the replacement n2"
said "^rank 2: 3 tensors equal to the saved data" "the load"
logged n2 "FETCH of step-12: ckptd a-busy, which holds a copy of ckptd n2, is busy \(.*serves 4 transfers already.*\); asking another holder first" \
    "a-busy's refusal, passed over at once"
logged n2 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n2 at ckptd n3" "n3 served"
! grep -q "FETCH of step-12: .*from the copy of ckptd n2 at ckptd a-busy" "$WORK/n2.log" ||
    fail "a-busy served while it was busy"
release

echo "--- 2. the last holder busy: waited for"
hold a-busy
rm -rf "$WORK/n3.local/.replicas/n2"
lose n2 30
"$TIER_LOAD" "$WORK/n2.sock" "$SHARED" "$TRUTH" step-12 --rank 2 >"$WORK/load2.out" 2>&1 &
loader=$!
wait_log n2 "FETCH of step-12: only holders busy with other transfers are left; asking them again, waiting for a turn" \
    "the fetch waits for the last holder"
release
wait "$loader" || fail "the load that waited for a-busy: exit $?: $(cat "$WORK/load2.out")"
grep -q "^rank 2: 3 tensors equal to the saved data" "$WORK/load2.out" ||
    fail "the load that waited: $(cat "$WORK/load2.out")"
logged n2 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n2 at ckptd a-busy" \
    "a-busy served once it had room"
for d in "$WORK"/n2.local/.fetched/*; do
    no_pending "$d"
done
for id in n0 n1 n2 n3 a-busy; do
    stop "$id"
done
echo "PASS [$TEST_NAME]"

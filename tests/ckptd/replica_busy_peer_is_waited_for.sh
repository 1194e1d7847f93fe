#!/usr/bin/env bash
# A peer that serves as many transfers as it takes (4) refuses one more with -EBUSY: it
# is busy, not lost. A PUT it refuses so is made again, the pause growing from 50 ms to
# 1 s, for at most the caller's --timeout in all (kd_peer_client.c):
#   1. four PUTs hold ckptd B (each sender stopped after its first acknowledgement, so
#      each transfer stays open until B's --peer-timeout, 3 s, drops it); a fifth PUT,
#      --timeout 30, is refused as busy, waits, and commits once B dropped the four;
#      the replica deep-verifies;
#   2. the same four again, and a fifth with --timeout 1: it gives up within its bound,
#      saying the peer is busy, and B keeps nothing of it. No refused PUT is followed
#      by an ABORT (it had no stream to give up).
# Each sender sends its own source's copy of c1 (A1..A5), so the PUTs never meet on a
# name. No wall-clock time is asserted: which bound ended each wait is in the messages.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1 --bytes 48MiB
for i in 1 2 3 4 5; do
    mkdir -p "$WORK/A$i.local"
    run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A$i.local" "A$i" rank-00000.dat rank-00002.dat
    expect 0 "making A$i's part of c1 (24 MiB)"
done
daemon B --peer-timeout 3

echo "--- 1. busy, then free: the PUT waits and commits"
hold B
run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A5 --from "$WORK/A5.local" c1 \
    --timeout 30
expect 0 "the fifth PUT, made again until B had room"
said "c1: committed as a replica at peer" "the fifth PUT committed"
n=$(grep -c "silent for 3 s (--peer-timeout): PUT of c1" "$WORK/B.log")
[ "$n" -eq 4 ] || fail "B dropped $n of the four stopped PUTs, not 4, before it took the fifth"
release
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/A5" c1 --deep
expect 0 "the replica that waited deep-verifies"

echo "--- 2. busy past the caller's timeout: it gives up, saying so"
rm -rf "$WORK/B.local/.replicas/A5"
hold B
run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A5 --from "$WORK/A5.local" c1 \
    --timeout 1
expect 1 "a PUT to a peer busy for longer than its timeout"
said "ckptd B serves 4 transfers already \(at most 4 at once\)" "the refusal names the busy peer"
release
[ ! -e "$WORK/B.local/.replicas/A5/c1" ] || fail "B kept a replica of a PUT it refused"
# A PUT refused before its stream has nothing to give up: no ABORT follows a refusal.
! grep -q "an ABORT outside a PUT" "$WORK/B.log" ||
    fail "a PUT refused as busy was given up with an ABORT, which B refused"
stop B
echo "PASS [$TEST_NAME]"

#!/usr/bin/env bash
# A node lost with its disk (issue 31): its replacement restores the newest checkpoint
# from the replicas of its part (tier_lib.sh's cluster: step-12 only in the local tiers,
# each part on two nodes; step-8 durable).
#   - every data file of step-12 has a live copy (ckptctl tiers);
#   - n2 is killed and its local tier deleted; n2' starts with an empty one: RESOLVE
#     gives step-12, the newest, with no reason to give; FETCH brings its manifest,
#     then rank-00002.dat from n3's replica, each into a root of its own under
#     n2'.local/.fetched/, and rank 2's load through the copies equals the saved data;
#   - rank 0 through n0 reads its node's own copy, fetching nothing;
#   - onto another mesh (2 ranks), rank 1 through n2' needs rank-00002.dat (now local)
#     and rank-00003.dat (fetched from n3): both read, each from its copy;
#   - the same loads again fetch nothing more;
#   - ckpt-verify --deep of a local tier checks its own copies, its replicas and its
#     fetched copies, and says what each is.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
run "$CKPTCTL" tiers --socket "$WORK/n0.sock" step-12
expect 0 "ckptctl tiers"
said "^step-12 \(step 12, committed at [0-9]+ ns\): every data file has a live copy" \
    "step-12 can be restored"
said "^  peer +n3 +replica +of ckptd n2 +partial: 1 of 4 data files: rank-00002.dat" \
    "n3 keeps n2's part"

lose n2
load n2 step- --newest --rank 2
expect 0 "rank 2 restored through the replacement of n2"
said "^resolved: step-12$" "the newest checkpoint"
! grep -q "^why:" "$OUT" || fail "the newest checkpoint needs no reason"
said "^reads rank-00002.dat from $WORK/n2.local/.fetched/2/step-12$" "rank 2's file, fetched"
said "^rank 2: 3 tensors equal to the saved data" "rank 2's load"
logged n2 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n2 at ckptd n3" \
    "the fetch from n3's replica"

load n0 step-12 --rank 0
expect 0 "rank 0 through n0"
said "^reads rank-00000.dat from $WORK/n0.local/step-12$" "n0's own copy"
! grep -q "FETCH of step-12: [1-9]" "$WORK/n0.log" || fail "n0 fetched what it holds"

load n2 step-12 --mesh 2 --rank 1
expect 0 "rank 1 of 2 through n2'"
said "^reads rank-00002.dat from $WORK/n2.local/.fetched/2/step-12$" "the file fetched before"
said "^reads rank-00003.dat from $WORK/n2.local/.fetched/3/step-12$" "the file it lacked"
said "^rank 1: 3 tensors equal to the saved data" "the load onto 2 ranks"
load n2 step-12 --mesh 2 --rank 1
expect 0 "the same load again"
[ "$(ls "$WORK/n2.local/.fetched")" = "$(printf '1\n2\n3')" ] ||
    fail "a load of what is local fetched again: $(ls "$WORK/n2.local/.fetched")"
run "$CKPT_VERIFY" "$WORK/n2.local" --deep
expect 0 "ckpt-verify --deep of n2's local tier"
said "^$WORK/n2.local/.fetched/3: copies fetched to restore from$" "the fetched roots, named"
said "^step-12: ok: a partial copy from ckptd n3: 1 of 4 data files \(rank-00003.dat\);" \
    "the fetched copy of n3's part"
run "$CKPT_VERIFY" "$WORK/n3.local" --deep
expect 0 "ckpt-verify --deep of n3's local tier"
said "^step-12: ok: a partial copy from ckptd n3: 1 of 4 data files \(rank-00003.dat\);" \
    "n3's own part"
said "^$WORK/n3.local/.replicas/n2: the replicas kept for ckptd n2$" "the replica root, named"
said "^step-12: ok: a partial copy from ckptd n2: 1 of 4 data files \(rank-00002.dat\);" \
    "the replica of n2's part"
for id in n0 n1 n2 n3; do
    stop "$id"
done
echo "PASS [$TEST_NAME]"

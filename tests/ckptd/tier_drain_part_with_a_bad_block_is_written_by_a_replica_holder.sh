#!/usr/bin/env bash
# A part of a drain whose local copy went bad is written by another holder (decisions
# 0197, 0198, 0203), on tier_lib.sh's cluster (step-12 only in the local tiers, each
# node's part with a replica on its clique peer):
#   - a byte of rank-00002.dat flips in n2's own copy (block 1 of 3);
#   - n0 drains step-12 in parts: n2's part writer, reading its copy through the drain
#     pipe, finds the block bad on its checker thread and fails its part, naming the
#     file and the block; nothing of n2's part is left in the pending directory;
#   - n0 gives n2's file to n3, which holds n2's replica, in a new attempt, carrying the
#     files written whole; the durable copy is complete and equal to what was saved,
#     and no pending directory is left. n2's own copy is left as it was (bad): a drain
#     never writes a local tier.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
# rank-00002.dat holds 3 MiB: blocks 0 to 2 of 1 MiB; the byte is in block 1.
printf '\377' | dd of="$WORK/n2.local/step-12/rank-00002.dat" bs=1 seek=1572864 conv=notrunc \
    2>/dev/null || fail "flipping a byte of n2's copy"
! cmp -s "$WORK/n2.local/step-12/rank-00002.dat" "$TRUTH/step-12/rank-00002.dat" ||
    fail "the byte was 0xff already"
drain n0 step-12
said "^step-12: done, 12615680 of 12615680 bytes$" "the drain, n2's copy bad"
logged n0 "drain of step-12: in parts: .*ckptd n2 1" "the drain in parts"
logged n2 "PART of step-12 failed: .*data file rank-00002\.dat, block 1 \(bytes 1048576-2097152\): its SHA-256 is not the manifest's; nothing of it is kept" \
    "n2's part failed at the bad block, named"
logged n0 "drain of step-12: the part of ckptd n2 \(1 data file\(s\)\) failed: .*rank-00002\.dat, block 1 " \
    "n2's failed part, named at the committer"
logged n0 "drain of step-12: in parts: .*\(ckptd n3 1 \(replica of n2\)\)$" \
    "the new attempt: n3 writes n2's file from its replica"
logged n3 "PART of step-12: writing 1 data file\(s\) of the copy in $WORK/n3\.local/\.replicas/n2 into" \
    "n3 writes n2's file from its replica"
if grep -q "drains it alone" "$WORK/n0.log"; then
    fail "n0 drained step-12 alone: n2's file had a live holder"
fi
fetched_nothing n0
same_as_truth step-12
no_pending "$SHARED"
cmp -s "$WORK/n2.local/step-12/rank-00002.dat" "$TRUTH/step-12/rank-00002.dat" &&
    fail "n2's local copy was changed by the drain"
stop_cluster

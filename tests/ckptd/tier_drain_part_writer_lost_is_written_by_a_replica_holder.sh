#!/usr/bin/env bash
# A node lost while it writes its part of a drain (decisions 0197-0199), on
# tier_lib.sh's cluster (step-12 only in the local tiers, each node's part with a
# replica on its clique peer), drains paced at 2 MiB/s so that the parts take seconds,
# n2's at 512 KiB/s and n3's at 1 MiB/s:
#   - n0 drains step-12 in parts: n2 and n3 each write their own file into the durable
#     copy's pending directory, n0 streams its own and n1's (its replica);
#   - n2 dies (SIGKILL) while it writes, and n3 is still writing: n2's part fails at
#     n0, naming n2; n3's part is not given up for it, and ends written;
#   - n0 gives n2's file to the node that holds its replica, n3, in a new attempt in
#     parts, and carries the three files written whole (n0's, n1's, n3's) into it
#     rather than having them written again: n3 writes n2's file and not its own again,
#     n0 fetches nothing and never drains alone; the durable copy is complete and equal
#     to what was saved, and no pending directory is left.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

TIER_ARGS=(--drain-rate 2MiB)
NODE_ARGS[n2]="--drain-rate 512KiB"
NODE_ARGS[n3]="--drain-rate 1MiB"
cluster
ask_drain n0 step-12
wait_log n2 "PART of step-12: writing 1 data file\(s\) of the copy in $WORK/n2\.local into $SHARED/\.pending/step-12\.[0-9a-f]{12}" \
    "n2 writes its own part" 10
wait_log n3 "PART of step-12: writing 1 data file\(s\) of the copy in $WORK/n3\.local into" \
    "n3 writes its own part" 10
crash n2
# n3's 3 MiB at 1 MiB/s: still being written as n2 dies.
if grep -q "PART of step-12: written" "$WORK/n3.log"; then
    fail "n3's part was written before n2 was lost: the case of a part still running is not tested"
fi
wait_log n0 "drain of step-12: ckptd n3 wrote its part \(1 data file\(s\)\)" \
    "n3's part, not given up when n2's failed, written" 15
drained n0 step-12
said "^step-12: done, 12615680 of 12615680 bytes$" "the drain, after n2 was lost"
logged n0 "drain of step-12: in parts: .*ckptd n2 1" "the drain in parts"
logged n0 "drain of step-12: the part of ckptd n2 \(1 data file\(s\)\) failed: " \
    "n2's part failed, named"
logged n0 "drain of step-12: ckptd n2's part failed; its data files are asked of the other nodes that hold them, and the 3 written whole \([0-9]+ bytes\) are carried into the new attempt" \
    "n2's files given to another holder, the others carried, said"
logged n0 "drain of step-12: in parts: .*\(ckptd n3 1 \(replica of n2\)\)$" \
    "the new attempt: n3 writes n2's file from its replica, and nothing else"
logged n3 "PART of step-12: writing 1 data file\(s\) of the copy in $WORK/n3\.local/\.replicas/n2 into" \
    "n3 writes n2's file from its replica"
[ "$(grep -c "PART of step-12: written ([0-9]* bytes), checked and fsynced" "$WORK/n3.log")" -eq 2 ] ||
    fail "n3 did not write its own part once and n2's once: $(grep "PART of" "$WORK/n3.log")"
if grep -q "drains it alone" "$WORK/n0.log"; then
    fail "n0 drained step-12 alone: n2's file had a live holder"
fi
fetched_nothing n0
logged n0 "drain of step-12: committed in the durable root, 12615680 bytes" "the commit"
same_as_truth step-12
no_pending "$SHARED"
for id in n0 n1 n3; do
    stop "$id"
done
echo "PASS [$TEST_NAME]"

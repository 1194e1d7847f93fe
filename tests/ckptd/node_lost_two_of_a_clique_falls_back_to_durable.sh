#!/usr/bin/env bash
# Two nodes of one clique lost (issue 31): their parts of the newest checkpoint have no
# surviving copy, so the restore falls back to the newest durable checkpoint and says
# why (tier_lib.sh's cluster: step-12 only in the local tiers, cliques {n0, n1} and
# {n2, n3}; step-8 durable).
#   - n2 and n3 killed: RESOLVE through n0 gives step-8, naming the files of step-12
#     that have no live copy (rank-00002.dat, rank-00003.dat) and the daemons it could
#     not reach (n2, n3); every rank's load of step-8 equals the saved data;
#   - asking for step-12 by name is refused, saying the same;
#   - ckptctl tiers says step-12 cannot be restored, and names the lost daemons.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
crash n2
crash n3
load n0 step- --newest --rank 0
expect 0 "the restore through n0"
said "^resolved: step-8$" "the newest durable checkpoint"
said "^why: step-12 \(step 12\): rank-00002.dat, rank-00003.dat have no live copy; unreachable: ckptd n2 \(.*\); ckptd n3 \(.*\); restoring step-8 \(step 8\) from the durable tier$" \
    "the reason names the lost files and daemons"
said "^reads rank-00000.dat from $SHARED/step-8$" "step-8 read where it is"
logged n0 "RESOLVE of step-<step>: step-8: step-12 \(step 12\): rank-00002.dat" "the daemon's log"
for r in 1 2 3; do
    load n0 step-8 --rank "$r"
    expect 0 "rank $r of step-8"
    said "^rank $r: 3 tensors equal to the saved data" "rank $r's load"
done

load n1 step-12 --rank 1
expect 1 "step-12 by name"
said "error: resolve: .*step-12 \(step 12\): rank-00002.dat, rank-00003.dat have no live copy" \
    "the refusal names what is lost"

run "$CKPTCTL" tiers --socket "$WORK/n1.sock"
expect 0 "ckptctl tiers"
said "^1 peer\(s\) answered, 2 lost" "the lost peers counted"
said "^lost: ckptd n2: " "n2 named"
said "^lost: ckptd n3: " "n3 named"
said "^step-12 \(step 12, .*\): some data file has no live copy" "step-12 cannot be restored"
said "^step-8 \(step 8, .*\): every data file has a live copy" "step-8 can"
stop n0
stop n1
echo "PASS [$TEST_NAME]"

#!/usr/bin/env bash
# A drain whose checkpoint has a part with no copy left (issue 31, part 3), on
# tier_lib.sh's cluster (step-12 only in the local tiers): n2's own copy of step-12
# and n3's replica of it are gone. n0's drain fails naming rank-00002.dat; the durable
# root holds nothing of step-12 (no checkpoint, no pending directory), and step-8 is
# intact; ckptctl drain says why, and so does the log.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
rm -rf "$WORK/n2.local/step-12" "$WORK/n3.local/.replicas/n2/step-12"
drain n0 step-12
said "^step-12: failed: checkpoint step-12: rank-00002.dat: no copy could be had" \
    "the drain names the file no node holds"
logged n0 "drain of step-12 failed: .*rank-00002.dat.*the durable root holds nothing of it" \
    "the failure, logged"
[ ! -e "$SHARED/step-12" ] || fail "a drain without rank-00002.dat committed step-12"
no_pending "$SHARED"
run "$CKPT_VERIFY" "$SHARED" --deep
expect 0 "ckpt-verify of the durable root"
said "^step-8: ok" "step-8 intact"
! grep -q "^step-12" "$OUT" || fail "the durable root shows step-12"
stop_cluster

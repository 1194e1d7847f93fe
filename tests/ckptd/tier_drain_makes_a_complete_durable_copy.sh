#!/usr/bin/env bash
# The drain (issue 31, part 3): step-12 lies only in the local tiers (tier_lib.sh's
# cluster: each node's part as its own partial copy, a replica on its clique peer).
#   - an offer goes by the policy (--drain-every 2): the first is not drained, the
#     second is, and only by the node whose own copy holds the first data file: n1,
#     offered it, leaves it to n0; n0 is restarted between its two offers, and its
#     count goes on (kept in .ckptd.n0.drain), so the second is still the second;
#   - n0 drains it in parts (decision 0197): its own part and n1's replica read in place,
#     n2 and n3 each writing their own part into the durable copy's pending directory,
#     every block checked; n0 fetches nothing (its local tier has no .fetched copy);
#     the durable copy is complete, equal to what was saved, and committed in the
#     catalog (ckptctl tiers sees it);
#   - ckptctl drain says done, with its bytes; a drain of it again has nothing to do;
#   - the drains owed (n0.local/.ckptd.n0.drain) list none once done.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

TIER_ARGS=(--drain-every 2)
cluster
for id in n0 n1; do
    ask_drain "$id" step-12 --offer
    said "^policy: --drain-every 2 " "the policy"
    ! grep -q "^step-12:" "$OUT" || fail "the first of two offers was drained"
done
stop n0
daemon n0 --peer-timeout 5 "${TIER_ARGS[@]}"
drain n1 step-12 --offer
said "^step-12: done, 0 of 0 bytes: left to the node whose own copy holds rank-00000.dat$" \
    "n1 leaves it to n0"
drain n0 step-12 --offer
said "^step-12: done, 12615680 of 12615680 bytes$" "n0 drained it"
logged n0 "drain of step-12: committed in the durable root, 12615680 bytes" "the commit"
logged n0 "drain of step-12: in parts: .*\(ckptd n[23] 1, ckptd n[23] 1\)" "the drain in parts"
for id in n2 n3; do
    logged "$id" "PART of step-12: written \(3145728 bytes\), checked and fsynced in the durable root" \
        "$id's part"
done
fetched_nothing n0
same_as_truth step-12
no_pending "$SHARED"
[ "$(cat "$WORK/n0.local/.ckptd.n0.drain")" = "$(printf 'ckptd drain 3\noffers 2')" ] ||
    fail "drains still owed: $(cat "$WORK/n0.local/.ckptd.n0.drain")"
run "$CKPTCTL" tiers --socket "$WORK/n2.sock" step-12
expect 0 "ckptctl tiers"
said "^  durable - +complete$" "the durable copy, seen from n2"
drain n0 step-12
said "^step-12: done, 0 of 12615680 bytes: the durable root holds it already$" \
    "a second drain has nothing to do"
stop_cluster

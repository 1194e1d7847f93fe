#!/usr/bin/env bash
# A node lost on four hosts (issue 31): network namespaces joined by a bridge
# (tests/launch/netns_lib.sh, NETNS_N=4), one ckptd on each (node ni on host i), each
# with its own local tier, one shared durable root, UCX on TCP (the bytes cross the
# bridge), --replicas 2 --jump 2: cliques {n0, n2} and {n1, n3}. step-8 is complete in
# the durable root; four ranks then save the newer step-12 through their nodes'
# daemons (rank i on node ni) at level replicated, so step-12 is only in the local
# tiers. Host 1 loses its node: n1's daemon killed, its local tier deleted, and a
# replacement n1 started on host 1 with an empty local tier. Rank 1 restored there by
# the newest step (tier_load --newest through n1's daemon): RESOLVE gives step-12, not
# the durable step-8; FETCH brings rank-00001.dat from the replica on n3 (host 3, the
# only other member of n1's clique), which served it to host 1's address; the fetched
# file is bitwise the file n1 lost, and the load equals the saved data.
# Skipped (77) where network namespaces cannot be made.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/replica_lib.sh"
. "$here/tier_lib.sh"
. "$here/../launch/netns_lib.sh"
NETNS_N=4
netns_hosts_up
mesh=(--mesh 4 --placements 'S(0)')
synth "$TRUTH" step-12 "${mesh[@]}" --step 12 --seed 12
synth "$SHARED" step-8 "${mesh[@]}" --step 8 --seed 8

# on I CMD...: CMD with WRAP and LISTEN on host I.
on() {
    local i=$1
    shift
    WRAP=("$WORK/on-${NETNS_HOSTS[i]}")
    LISTEN=${NETNS_ADDRS[i]} "$@"
}
for i in 0 1 2 3; do
    on "$i" daemon "n$i" --replicas 2 --jump 2 --peer-timeout 5 --part-timeout 30
done
run "$CKPT_SYNTH" "$SHARED" --name step-12 "${mesh[@]}" --tensors 3 --bytes 12MiB \
    --step 12 --seed 12 --world 4 --daemon "$WORK/n0.sock,$WORK/n1.sock,$WORK/n2.sock,$WORK/n3.sock" \
    --level replicated
expect 0 "the save of step-12 through four daemons"
said "rank 1: .*committed at level replicated$" "rank 1's level"
[ ! -e "$SHARED/step-12" ] || fail "a tiered save committed step-12 in the durable root"
lost=$WORK/n1.local/step-12/rank-00001.dat
[ -f "$WORK/n3.local/.replicas/n1/step-12/rank-00001.dat" ] ||
    fail "n3 keeps no replica of n1's part (clique {n1, n3})"
cp "$lost" "$WORK/lost.dat" || fail "keeping the bytes n1 is about to lose"

on 1 lose n1
[ ! -e "$lost" ] || fail "n1's local tier survived its loss"
run "$WORK/on-${NETNS_HOSTS[1]}" "$TIER_LOAD" "$WORK/n1.sock" "$SHARED" "$TRUTH" step- --newest --rank 1
expect 0 "rank 1 restored on host 1"
said "^resolved: step-12$" "the newest checkpoint (the durable tier's newest is step-8)"
said "^reads rank-00001.dat from $WORK/n1.local/.fetched/[0-9]+/step-12$" "the fetched file"
said "^rank 1: 3 tensors equal to the saved data" "the load"
logged n1 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n1 at ckptd n3" \
    "the fetch from n3's replica"
# Its last ACK can be lost to the requester's close, which the service then says
# ("hung up with all N bytes sent").
logged n3 "peer ${NETNS_ADDRS[1]//./\\.}:[0-9]+ \(ckptd n1\): GET of step-12: (sent|hung up with all) [0-9]+ bytes" \
    "n3 on host 3 serving host 1"
fetched=$(sed -n 's/^reads rank-00001.dat from //p' "$OUT")/rank-00001.dat
cmp "$WORK/lost.dat" "$fetched" || fail "the fetched rank-00001.dat differs from the one n1 lost"
for i in 0 1 2 3; do stop "n$i"; done
echo "PASS [$TEST_NAME]"

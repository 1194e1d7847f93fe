#!/usr/bin/env bash
# A node lost, restored across hosts (issue 31): two network-namespace hosts joined by a
# veth pair (tests/launch/netns_lib.sh), a ckptd on each, one durable root, UCX on TCP
# (UCX_TLS=tcp: the bytes cross the veth). step-12 (2 ranks) is only in the local tiers:
# n0 on host A holds rank 0's file and a replica of n1's part; n1 on host B holds rank
# 1's. n1 is lost with its disk; n1' on host B restores rank 1: RESOLVE gives step-12,
# FETCH brings rank-00001.dat from n0 across the veth, and the load equals the saved
# data. Skipped (77) where network namespaces cannot be made.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/replica_lib.sh"
. "$here/tier_lib.sh"
. "$here/../launch/netns_lib.sh"
netns_hosts_up
synth "$TRUTH" step-12 --mesh 2 --placements 'S(0)' --step 12 --seed 12
two_hosts 5
LISTEN=${NETNS_ADDRS[1]} lose n1
run "$WORK/on-$B" "$TIER_LOAD" "$WORK/n1.sock" "$SHARED" "$TRUTH" step- --newest --rank 1
expect 0 "rank 1 restored on host B"
said "^resolved: step-12$" "the newest checkpoint"
said "^reads rank-00001.dat from $WORK/n1.local/.fetched/[0-9]+/step-12$" "the fetched file"
said "^rank 1: 3 tensors equal to the saved data" "the load"
logged n1 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n1 at ckptd n0" \
    "the fetch from host A"
stop n0
stop n1
echo "PASS [$TEST_NAME]"

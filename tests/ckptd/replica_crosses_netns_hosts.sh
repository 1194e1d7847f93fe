#!/usr/bin/env bash
# PUT and GET between two hosts (issue 31): network namespaces joined by a veth pair
# (tests/launch/netns_lib.sh), one ckptd on each, their peer services on the veth's
# addresses, UCX on TCP (UCX_TLS=tcp: the bytes cross the veth, as they would cross a
# cluster's network, rather than shared memory of the one machine). A's part goes to B
# as a replica and comes back to A's side as a fetched copy; both deep-verify.
# Skipped (77) where network namespaces cannot be made.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/replica_lib.sh"
. "$here/../launch/netns_lib.sh"
netns_hosts_up
A=${NETNS_HOSTS[0]} B=${NETNS_HOSTS[1]}

synth "$WORK/src" c1
mkdir -p "$WORK/A.local" "$WORK/C.local"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A.local" A rank-00000.dat rank-00002.dat
expect 0 "making A's part of c1"
WRAP=("$WORK/on-$A")
LISTEN=${NETNS_ADDRS[0]} daemon A
WRAP=("$WORK/on-$B")
LISTEN=${NETNS_ADDRS[1]} daemon B
[ "$(addr B | cut -d: -f1)" = "${NETNS_ADDRS[1]}" ] || fail "B publishes $(addr B)"

run "$WORK/on-$A" "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A \
    --from "$WORK/A.local" c1
expect 0 "PUT from host A to host B"
logged B "peer ${NETNS_ADDRS[0]}:[0-9]+ \(ckptd A\): replica c1 of ckptd A committed" \
    "B took the replica from A's address"
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/A" c1 --deep
expect 0 "B's replica"
run "$WORK/on-$A" "$CKPTCTL" peer inventory --to B --root "$WORK/B.durable"
expect 0 "INVENTORY of B from A"
said "^c1 .*replica +of ckptd A +partial: 2 of 4" "B's replica, seen from A"
run "$WORK/on-$A" "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" \
    c1 --all
expect 0 "GET from host B on host A"
run "$CKPT_VERIFY" "$WORK/C.local" c1 --deep
expect 0 "the fetched copy"
said "a partial copy from ckptd A: 2 of 4 data files" "what came back"
echo "PASS [$TEST_NAME]"

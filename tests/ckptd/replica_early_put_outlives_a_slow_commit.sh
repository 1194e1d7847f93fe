#!/usr/bin/env bash
# A replica's PUT begun beside the local write (decision 0204) outlives a commit that
# comes later than --peer-timeout. Two ckptd on loopback, one durable root,
# --replicas 2 (a clique of both), --peer-timeout 2, level replicated. n1 is the test
# build, whose first fsync takes 5 s (--inject-fault slow@0: a disk slow to flush), so
# the save commits seconds after both parts were written and sent: n0's stream waits
# for a commit that waits for n1's part, n1's for its own fsync. Each sender says
# WAITING while it has nothing to send (peer protocol 8), and the receivers keep the
# PUTs open. Then: both ranks hear level replicated; each node's replica at the other
# was committed from the stream begun beside the write (no PUT after the commit, no
# connection closed for silence), and the receivers say how many WAITING they took;
# each replica deep-verifies.
# Without WAITING, each receiver would close its PUT after 2 s of silence and the
# replicas would go again after the commit: the test fails on that.
. "$(dirname "$0")/replica_lib.sh"
N1_CKPTD=$CKPTD_TEST N1_OPTS=(--inject-fault slow@0)
pair --replicas 2 --peer-timeout 2 --part-timeout 30 --dead-after 15 --staging 160MiB

run "$CKPT_SYNTH" "$SHARED" --name c --mesh 2 --tensors 3 --bytes 64MiB --world 2 \
    --daemon "$socks" --level replicated
expect 0 "the save of c"
for r in 0 1; do
    said "rank $r: .*committed at level replicated$" "rank $r's level"
done
early_pair 1 "its sender said WAITING [1-9][0-9]* time" "the receiver kept the PUT open through WAITING"
! grep -h "silent for\|its replicas go after the commit\|goes after the commit" \
    "$WORK"/n*.log || fail "a PUT begun beside the write was given up while its save committed"
for i in 0 1; do stop "n$i"; done
echo "PASS [$TEST_NAME]"

#!/usr/bin/env bash
# A PUT begun beside the local write follows every file of its node as it lands, not
# the first file at its share of the write's pace (peer protocol 9, decision 0206). Two
# ckptd on loopback, one durable root, --replicas 2 (a clique of both), level
# replicated, four ranks a node (ranks 0-3 at n0, 4-7 at n1): each daemon's writers
# write its four files at once. n1 is the test build, whose first fsync takes 5 s
# (--inject-fault slow@0), so both nodes' PUTs send all their files before the commit.
# Then: every rank hears level replicated; each node's replica at the other came from
# the stream begun beside the write, its four files interleaved (the receiver says how
# many times a piece of another file followed one of a file not yet whole: with
# protocol 8's order, files one after the other, none); each replica deep-verifies and
# its files are the node's, byte for byte.
. "$(dirname "$0")/replica_lib.sh"
N1_CKPTD=$CKPTD_TEST N1_OPTS=(--inject-fault slow@0)
pair --replicas 2 --peer-timeout 5 --part-timeout 30 --staging 160MiB

run "$CKPT_SYNTH" "$SHARED" --name c --mesh 8 --tensors 3 --bytes 128MiB --world 8 \
    --daemon "$socks" --level replicated
expect 0 "the save of c"
for r in 0 1 2 3 4 5 6 7; do
    said "rank $r: .*committed at level replicated$" "rank $r's level"
done
early_pair 4 "its data files came interleaved, [1-9][0-9]* time\(s\) from a file not yet whole" \
    "the node's four files came interleaved"
for pair in "0 1" "1 0"; do
    set -- $pair
    for f in "$WORK/n$1.local/c/"rank-*.dat; do
        cmp -s "$f" "$WORK/n$2.local/.replicas/n$1/c/${f##*/}" ||
            fail "${f##*/} of n$1's replica at n$2 differs from n$1's"
    done
done
! grep -h "its replicas go after the commit\|goes after the commit" "$WORK"/n*.log ||
    fail "a PUT begun beside the write fell back to one after the commit"
for i in 0 1; do stop "n$i"; done
echo "PASS [$TEST_NAME]"

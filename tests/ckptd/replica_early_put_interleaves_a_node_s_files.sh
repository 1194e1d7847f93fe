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
for pair in "0 1" "1 0"; do
    set -- $pair
    src=n$1 dst=n$2
    grep -E "checkpoint c: |replica c " "$WORK/$src.log" "$WORK/$dst.log" | sed 's/^/  /'
    logged "$src" "checkpoint c: its 4 data file\(s\) here go to 1 peer\(s\) of its clique" \
        "$src sends its part as it is written"
    logged "$src" "checkpoint c: replica committed by ckptd $dst at .*, begun beside the local write" \
        "$src's replica at $dst came from the stream begun beside the write"
    logged "$dst" "replica c of ckptd $src committed \(.*; its data files came interleaved, [1-9][0-9]* time\(s\) from a file not yet whole" \
        "$src's four files came to $dst interleaved"
    run "$CKPT_VERIFY" "$WORK/$dst.local/.replicas/$src" c --deep
    expect 0 "$src's replica at $dst deep-verifies"
    for f in "$WORK/$src.local/c/"rank-*.dat; do
        cmp -s "$f" "$WORK/$dst.local/.replicas/$src/c/${f##*/}" ||
            fail "${f##*/} of $src's replica at $dst differs from $src's"
    done
done
! grep -h "its replicas go after the commit\|goes after the commit" "$WORK"/n*.log ||
    fail "a PUT begun beside the write fell back to one after the commit"
for i in 0 1; do stop "n$i"; done
echo "PASS [$TEST_NAME]"

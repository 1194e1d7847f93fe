#!/usr/bin/env bash
# A sender that cannot read its copy on, mid-stream, gives the transfer up with ABORT,
# naming the file, and the receiver keeps nothing (decision 0202: the stream's readers
# meet the error, the sending thread reports it when the stream reaches it):
#   1. a GET from ckptd A, whose copy's second data file was cut short after it was
#      committed: ckptctl fails naming the file and both sizes; nothing of c1 is in
#      INTO; A's log says the GET failed;
#   2. a PUT of that copy to B and C at once (one read for both, decision 0201): the
#      sender's error names the file; each peer ends the PUT (told why by ABORT, or
#      seeing the connection go when the sender's exit is first) and keeps neither a
#      replica nor a pending copy;
#   3. the same copy made whole again: the GET and the PUT both commit, and each copy
#      deep-verifies (the failures left nothing behind that stands in the way).
# The first data file (32 MiB) is larger than a window (8 MiB) plus the read-ahead
# (8 MiB), so its DATA has gone out before the readers reach the second file: the
# error is met mid-stream, not before it.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1 --bytes 192MiB --block-size 4MiB
mkdir -p "$WORK/A.local" "$WORK/G.local"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A.local" A rank-00000.dat rank-00002.dat
expect 0 "making A's part of c1"
first=$(stat -c %s "$WORK/A.local/c1/rank-00000.dat")
[ "$first" -gt $((16 << 20)) ] || fail "rank-00000.dat is $first bytes: too small to be mid-stream"
size=$(stat -c %s "$WORK/A.local/c1/rank-00002.dat")
cp "$WORK/A.local/c1/rank-00002.dat" "$WORK/whole.dat"
truncate -s $((4 << 20)) "$WORK/A.local/c1/rank-00002.dat"
daemon A
daemon B
daemon C

echo "--- 1. a GET whose sender meets a file cut short"
run "$CKPTCTL" peer get --to A --root "$WORK/A.durable" --into "$WORK/G.local" c1 --all
expect 1 "GET of a copy whose second file is cut short"
said "rank-00002.dat: 4194304 bytes, its manifest records $size" \
    "the error names the file and both sizes"
[ ! -e "$WORK/G.local/c1" ] || fail "the failed GET committed c1"
no_pending "$WORK/G.local"
logged A "GET of c1 failed: .*rank-00002.dat: 4194304 bytes" "A's log says the GET failed"

echo "--- 2. a PUT to two peers from that copy"
run "$CKPTCTL" peer put --addr "$(addr B),$(addr C)" --id A --from "$WORK/A.local" c1
expect 1 "PUT of a copy whose second file is cut short"
said "peer put: .*rank-00002.dat: 4194304 bytes, its manifest records $size" \
    "the sender's error names the file"
for p in B C; do
    # Told why (ABORT), or, when the sender's exit beats its ABORT there, the
    # connection gone: either way the PUT ends and nothing of it stays.
    wait_log "$p" "PUT of c1 (given up by its sender .*rank-00002.dat: 4194304 bytes|failed: ).*nothing of it is kept" \
        "$p ends the PUT"
    [ ! -e "$WORK/$p.local/.replicas/A/c1" ] || fail "$p kept a replica of a broken stream"
    no_pending "$WORK/$p.local/.replicas/A"
done

echo "--- 3. the copy whole again"
cp "$WORK/whole.dat" "$WORK/A.local/c1/rank-00002.dat"
run "$CKPTCTL" peer get --to A --root "$WORK/A.durable" --into "$WORK/G.local" c1 --all
expect 0 "GET of the whole copy"
run "$CKPT_VERIFY" "$WORK/G.local" c1 --deep
expect 0 "the copy fetched"
run "$CKPTCTL" peer put --addr "$(addr B),$(addr C)" --id A --from "$WORK/A.local" c1
expect 0 "PUT of the whole copy to B and C"
for p in B C; do
    run "$CKPT_VERIFY" "$WORK/$p.local/.replicas/A" c1 --deep
    expect 0 "$p's replica of c1"
done
echo "PASS"

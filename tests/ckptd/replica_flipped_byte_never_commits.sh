#!/usr/bin/env bash
# A flipped byte is caught where it arrives (issue 31): the manifest's block hashes are
# the truth, and a copy is committed only when every block of it matched.
#   - PUT of a copy whose data file has a flipped byte: refused naming the file and the
#     block, at the receiver and at the sender; nothing of it at the receiver;
#   - GET from a replica that went bad on the server's disk: the requester refuses it
#     naming the file and the block, and keeps nothing; both daemons live on.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1
mkdir -p "$WORK/A.local"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A.local" A rank-00000.dat rank-00002.dat
expect 0 "making A's part of c1"
cp -a "$WORK/A.local" "$WORK/bad.local"
# rank-00002.dat holds 2 MiB: blocks 0 and 1 of 1 MiB; the byte is in block 1.
printf '\377' | dd of="$WORK/bad.local/c1/rank-00002.dat" bs=1 seek=1572864 conv=notrunc \
    2>/dev/null || fail "flipping a byte"
daemon B

run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A --from "$WORK/bad.local" c1
expect 1 "PUT of a copy with a flipped byte"
said "data file rank-00002.dat, block 1 \(bytes 1048576-2097152\): its SHA-256 is not the manifest's" \
    "the sender's error"
logged B "PUT of c1 failed: .*data file rank-00002.dat, block 1 .*nothing of it is kept" \
    "the receiver"
[ ! -e "$WORK/B.local/.replicas/A/c1" ] || fail "B committed the damaged copy"
no_pending "$WORK/B.local/.replicas/A"

run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A --from "$WORK/A.local" c1
expect 0 "PUT of the good copy"
# B's replica goes bad on B's disk: block 2 of rank-00000.dat (4 MiB).
printf '\377' | dd of="$WORK/B.local/.replicas/A/c1/rank-00000.dat" bs=1 seek=2621440 \
    conv=notrunc 2>/dev/null || fail "flipping a byte"
mkdir -p "$WORK/C.local"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" c1 --all
expect 1 "GET from a damaged replica"
said "copy of c1: data file rank-00000.dat, block 2 \(bytes 2097152-3145728\): its SHA-256 is not the manifest's" \
    "the requester's error"
[ ! -e "$WORK/C.local/c1" ] || fail "the requester committed the damaged copy"
no_pending "$WORK/C.local"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" c1 rank-00002.dat
expect 0 "GET of the file that is still good"
run "$CKPTCTL" peer inventory --to B --root "$WORK/B.durable"
expect 0 "B lives on"
stop B
echo "PASS [$TEST_NAME]"

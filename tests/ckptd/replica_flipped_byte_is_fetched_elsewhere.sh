#!/usr/bin/env bash
# A replica that went bad on a peer's disk (issue 31) is caught as it arrives, named,
# and the file is fetched from the next holder, or read from the durable tier
# (tier_lib.sh's cluster, with n2's part of step-12 kept by n0 too).
#   - n0's replica of n2's part of step-12 has a flipped byte; n2 is lost, and its
#     replacement's FETCH tries n0 first (ids in order), refuses its copy naming the
#     file and the block, and fetches from n3: rank 2's load equals the saved data;
#     nothing of the bad copy is kept;
#   - n3's replica of n2's part of step-8 (durable) has a flipped byte: rank 2's load
#     of step-8 reads that file from the durable tier instead.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
put n2 n0
# rank-00002.dat holds 3 MiB: blocks 0 to 2 of 1 MiB; the byte is in block 1.
printf '\377' | dd of="$WORK/n0.local/.replicas/n2/step-12/rank-00002.dat" bs=1 seek=1572864 \
    conv=notrunc 2>/dev/null || fail "flipping a byte"
run "$COPY_PARTIAL" "$TRUTH" step-8 "$WORK/n3.local/.replicas/n2" n2 rank-00002.dat
expect 0 "n3's replica of n2's part of step-8"
printf '\377' | dd of="$WORK/n3.local/.replicas/n2/step-8/rank-00002.dat" bs=1 seek=2621440 \
    conv=notrunc 2>/dev/null || fail "flipping a byte"
lose n2

load n2 step-12 --rank 2
expect 0 "rank 2 of step-12 through n2'"
said "^rank 2: 3 tensors equal to the saved data" "the load"
logged n2 "FETCH of step-12: the copy of ckptd n2 at ckptd n0 failed: .*data file rank-00002.dat, block 1 \(bytes 1048576-2097152\): its SHA-256 is not the manifest's; trying the next holder" \
    "the bad copy, named"
logged n2 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n2 at ckptd n3" \
    "the next holder"
for d in "$WORK"/n2.local/.fetched/*; do
    no_pending "$d"
done

load n2 step-8 --rank 2
expect 0 "rank 2 of step-8 through n2'"
said "^reads rank-00002.dat from $SHARED/step-8$" "the durable tier's copy"
said "^rank 2: 3 tensors equal to the saved data" "the load"
logged n2 "FETCH of step-8: the copy of ckptd n2 at ckptd n3 failed: .*data file rank-00002.dat, block 2 .*SHA-256 is not the manifest's" \
    "the bad replica of step-8, named"
logged n2 "FETCH of step-8: 1 data file\(s\) read from the durable tier's copy" "the fallback"
for id in n0 n1 n2 n3; do
    stop "$id"
done
echo "PASS [$TEST_NAME]"

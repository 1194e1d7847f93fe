#!/usr/bin/env bash
# A drain never commits a bad durable copy (issue 31, part 3), on tier_lib.sh's cluster
# (step-12 only in the local tiers):
#   - a byte of rank-00000.dat flips in n0's own copy and in n1's replica of it: n0's
#     drain fails naming the file and block, and the durable root holds nothing of
#     step-12 (no checkpoint, no pending directory); step-8 stays intact;
#   - n1's replica mended, and n0's replica of n1's part, rank-00001.dat, cut short to
#     1 MiB, the drain again: n0's block fails its hash as it is read, its read of the
#     short file meets the file's end (named, with the offset), both files are fetched
#     from the other copies (checked on arrival), and the durable copy is complete and
#     equal to what was saved.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
# rank-00000.dat holds 3 MiB: blocks 0 to 2 of 1 MiB; the byte is in block 1.
flip() {
    printf '\377' | dd of="$1" bs=1 seek=1572864 conv=notrunc 2>/dev/null || fail "flipping $1"
    ! cmp -s "$1" "$TRUTH/step-12/rank-00000.dat" || fail "the byte was 0xff already"
}
flip "$WORK/n0.local/step-12/rank-00000.dat"
flip "$WORK/n1.local/.replicas/n0/step-12/rank-00000.dat"
drain n0 step-12
said "^step-12: failed: .*data file rank-00000.dat, block 1 .*SHA-256 is not the manifest's" \
    "the drain names the bad file and block"
said "rank-00000.dat: no peer's copy could be had" "and that no copy was good"
logged n0 "drain of step-12 failed: .*the durable root holds nothing of it" "the failure"
[ ! -e "$SHARED/step-12" ] || fail "a bad drain left $SHARED/step-12"
no_pending "$SHARED"
run "$CKPT_VERIFY" "$SHARED" --deep
expect 0 "ckpt-verify of the durable root after the failed drain"
said "^step-8: ok" "step-8 intact"

cp "$TRUTH/step-12/rank-00000.dat" "$WORK/n1.local/.replicas/n0/step-12/rank-00000.dat" ||
    fail "mending n1's replica"
truncate -s 1M "$WORK/n0.local/.replicas/n1/step-12/rank-00001.dat" || fail "cutting a file short"
drain n0 step-12
said "^step-12: done, 12615680 of 12615680 bytes$" "the drain with one good copy of each"
logged n0 "drain of step-12: the copy at $WORK/n0.local/step-12 is bad \(.*block 1 .*\); fetching rank-00000.dat from a peer" \
    "the bad local block, said"
logged n0 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n0 at ckptd n1" \
    "the file from n1's replica"
logged n0 "drain of step-12: the copy at $WORK/n0.local/.replicas/n1/step-12 is bad \($WORK/n0.local/.replicas/n1/step-12/rank-00001.dat: file ends before offset 1048576.*\); fetching rank-00001.dat from a peer" \
    "the file cut short, said"
logged n0 "FETCH of step-12: 1 data file\(s\) from the copy of ckptd n1 at ckptd n1" \
    "the file from n1's own copy"
same_as_truth step-12
no_pending "$SHARED"
stop_cluster

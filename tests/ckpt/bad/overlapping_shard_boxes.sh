#!/usr/bin/env bash
# Shard 1 of t1 moved to start half-way into shard 0: verify exits 1 naming the
# tensor and both shards as overlapping.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" overlap-box t1
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "t1.*(shards?|boxes) 0.*1.*overlap|t1.*overlap.*0.*1" "tensor t1, shards 0 and 1, overlapping"
finish

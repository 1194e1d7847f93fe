#!/usr/bin/env bash
# An extent of one shard moved onto another shard's extent in the same data file:
# verify exits 1 naming the file, both tensors and both shards.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" overlap-extent
file=$(mf_get file) ta=$(mf_get tensor_a) sa=$(mf_get shard_a) tb=$(mf_get tensor_b) sb=$(mf_get shard_b)
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$(re "$file")" "the data file $file"
expect_msg "$(re "$ta") shard $sa([^0-9]|$)" "tensor $ta shard $sa"
expect_msg "$(re "$tb") shard $sb([^0-9]|$)" "tensor $tb shard $sb"
finish

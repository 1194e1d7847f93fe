#!/usr/bin/env bash
# Two tensor records (t1, t2) with the same id, so the same shards: verify exits 1
# naming both tensors as duplicates.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" dup-id t1 t2
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "(^|[^A-Za-z0-9_.-])t1([^A-Za-z0-9_.-]|$)" "tensor t1"
expect_msg "(^|[^A-Za-z0-9_.-])t2([^A-Za-z0-9_.-]|$)" "tensor t2"
expect_msg "[Dd]uplicate" "the problem (duplicate)"
finish

#!/usr/bin/env bash
# A shard record whose extent starts past the end of its data file: verify exits 1
# naming the tensor, the shard record and the file; so does inspect --tensor.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" extent-past-eof t1
rec=$(mf_get record) file=$(mf_get file)
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "(^|[^A-Za-z0-9_.-])t1([^A-Za-z0-9_.-]|$)" "tensor t1"
expect_msg "$(re "$rec")" "the record $rec"
expect_msg "$(re "$file")" "the data file $file"

expect_exit 1 "$CKPT_INSPECT" "$WORK/root" c --tensor t1
expect_msg "$(re "$rec")" "the record $rec"
finish

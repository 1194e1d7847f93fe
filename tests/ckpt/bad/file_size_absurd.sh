#!/usr/bin/env bash
# A file record with a size near 2^64: the checkpoint does not open; inspect and verify
# exit 1 naming the record (files/N).
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" file-size-absurd t1
rec=$(mf_get record)
guard "$WORK/root/c"

expect_exit 1 "$CKPT_INSPECT" "$WORK/root" c
expect_msg "$(re "$rec")([^0-9]|$)" "the record $rec"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$(re "$rec")([^0-9]|$)" "the record $rec"
finish

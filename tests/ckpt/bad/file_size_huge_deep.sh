#!/usr/bin/env bash
# A file record that claims 2^62 bytes (the most a reader accepts) for a 256 KiB file:
# verify exits 1 naming the file as truncated, and so does verify --deep, in bounded
# time and output - it must not try to read (and report) 2^40 missing 4 MiB blocks.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" file-size-huge t1
file=$(mf_get file)
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$(re "$file")" "the data file $file"
expect_msg "truncated" "the damage (truncated)"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$(re "$file")" "the data file $file"
expect_msg "truncated" "the damage (truncated)"
finish

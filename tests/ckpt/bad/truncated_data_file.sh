#!/usr/bin/env bash
# A data file shorter than its manifest says: verify and verify --deep exit 1 and name
# the file as truncated.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
f=rank-00002.dat
size=$(stat -c %s "$WORK/root/c/$f")
truncate -s $((size / 2 + 123)) "$WORK/root/c/$f"   # short and unaligned
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$(re "$f")" "the data file $f"
expect_msg "truncated" "the damage (truncated)"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$(re "$f")" "the data file $f"
expect_msg "truncated" "the damage (truncated)"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root"
expect_msg "$(re "$f")" "the data file $f"
finish

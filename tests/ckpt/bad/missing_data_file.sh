#!/usr/bin/env bash
# A data file the manifest lists is gone: verify and verify --deep exit 1 and name it.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c --uneven
corrupt_copy "$WORK/src/c" "$WORK/root/c"
f=rank-00003.dat
rm "$WORK/root/c/$f"
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$(re "$f")" "the data file $f"
expect_msg "missing" "the damage (missing)"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$(re "$f")" "the data file $f"
expect_msg "missing" "the damage (missing)"
finish

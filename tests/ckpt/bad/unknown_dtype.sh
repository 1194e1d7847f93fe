#!/usr/bin/env bash
# A tensor record with dtype code 238: inspect and verify exit 1 naming the tensor and
# the code.
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" dtype t1
guard "$WORK/root/c"

for tool in "$CKPT_INSPECT" "$CKPT_VERIFY"; do
    expect_exit 1 "$tool" "$WORK/root" c
    expect_msg "(^|[^A-Za-z0-9_.-])t1([^A-Za-z0-9_.-]|$)" "tensor t1"
    expect_msg "dtype" "the field (dtype)"
    expect_msg "238" "the unknown code 238"
done
finish

#!/usr/bin/env bash
# The checkpoint record says format 2.x: ckpt-inspect and ckpt-verify exit 1 and say
# which version they found (2.x) and which they read (1.x).
. "$(dirname "$0")/lib.sh"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
mf_corrupt "$WORK/root/c/manifest.mdb" version
guard "$WORK/root/c"

for tool in "$CKPT_INSPECT" "$CKPT_VERIFY"; do
    expect_exit 1 "$tool" "$WORK/root" c
    expect_msg "manifest\.mdb" "manifest.mdb"
    expect_msg "(^|[^0-9.])2\.[0-9]+" "the version found (2.x)"
    expect_msg "(^|[^0-9.])1\.(x|[0-9]+)" "the version this build reads (1.x)"
done
expect_exit 1 "$CKPT_VERIFY" "$WORK/root"
expect_msg "(^|[^0-9.])2\.[0-9]+" "the version found (2.x)"
finish

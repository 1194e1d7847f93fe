#!/usr/bin/env bash
# A data file planted as a link is never read (issue 21, defect 9; docs/FORMAT.md,
# "Links and special files"). On the build this test was written against, a data file
# linked to /dev/zero was exported by ckpt-consolidate as zeros with exit 0 (while
# ckpt-verify said "not a regular file"). Now every tool that reads data refuses it,
# naming the file: ckpt-consolidate and ckpt-verify (with and without --deep) exit 1,
# ckpt-reshard exits non-zero whether it would link the file or copy from it, and
# nothing is exported or committed.
. "$(dirname "$0")/../ckpt/bad/lib.sh"
for v in CKPT_CONSOLIDATE CKPT_RESHARD; do
    [ -x "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
done

make_ckpt "$WORK/root" c
rm "$WORK/root/c/rank-00000.dat"
ln -s /dev/zero "$WORK/root/c/rank-00000.dat"
guard "$WORK/root/c"
f=$(re "$WORK/root/c/rank-00000.dat")

expect_exit 1 "$CKPT_CONSOLIDATE" "$WORK/root" c -o "$WORK/out"
expect_msg "$f: a symbolic link" "the linked data file"
[ ! -e "$WORK/out/model.safetensors" ] || fail "a model.safetensors was exported from a link"
expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$f: not a regular file \(a symbolic link" "the linked data file"
expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$f: not a regular file \(a symbolic link" "the linked data file"
for mode in --copy ""; do
    expect_exit "$([ -n "$mode" ] && echo 1 || echo 2)" "$CKPT_RESHARD" "$WORK/root" c \
        --to-mesh 4 --name r $mode
    expect_msg "$f" "the linked data file"
    [ ! -e "$WORK/root/r" ] || fail "ckpt-reshard $mode committed r from a linked data file"
done
finish

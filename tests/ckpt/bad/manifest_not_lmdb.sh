#!/usr/bin/env bash
# manifest_not_lmdb.sh random|empty|truncated
# A manifest.mdb that is not a readable LMDB file: random bytes, an empty file, or a
# real manifest cut to half its size. ckpt-inspect and ckpt-verify exit 1 and name
# manifest.mdb.
. "$(dirname "$0")/lib.sh"
kind=${1:-}
TEST_NAME="$TEST_NAME $kind"

make_ckpt "$WORK/src" c
corrupt_copy "$WORK/src/c" "$WORK/root/c"
m=$WORK/root/c/manifest.mdb
case $kind in
random)
    size=$(stat -c %s "$m")
    head -c "$size" /dev/urandom >"$m" ;;
empty)
    : >"$m" ;;
truncated)
    # LMDB's two meta pages survive; the pages they point to do not.
    size=$(stat -c %s "$m")
    truncate -s $((size / 2 / 4096 * 4096)) "$m" ;;
*)
    fail "usage: manifest_not_lmdb.sh random|empty|truncated" ;;
esac
guard "$WORK/root/c"

expect_exit 1 "$CKPT_INSPECT" "$WORK/root" c
expect_msg "manifest\.mdb" "manifest.mdb"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "manifest\.mdb" "manifest.mdb"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "manifest\.mdb" "manifest.mdb"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root"
expect_msg "manifest\.mdb" "manifest.mdb"
finish

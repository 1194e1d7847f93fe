#!/usr/bin/env bash
# box_list.sh CASE - a box-list checkpoint (format 1.1) whose records are hostile:
# two boxes overlapping (dup), a box shrunk with its bytes so that the list leaves a
# gap (gap), a box outside the shape (outside), an absurd box count (count). verify
# and inspect --tensor exit 1 naming the tensor and what is wrong; verify --deep too.
. "$(dirname "$0")/lib.sh"

case_=$1
make_ckpt "$WORK/src" c --mesh 4 --boxes --seed 3
corrupt_copy "$WORK/src/c" "$WORK/root/c"
case $case_ in
dup)     mf_corrupt "$WORK/root/c/manifest.mdb" box-dup t1; want="t1: boxes .* overlap" ;;
gap)     mf_corrupt "$WORK/root/c/manifest.mdb" box-gap t1; want="t1: its [0-9]+ boxes cover .* \(a gap\)" ;;
outside) mf_corrupt "$WORK/root/c/manifest.mdb" box-outside t1; want="shards/t1#[0-9]+ has a box outside" ;;
count)   mf_corrupt "$WORK/root/c/manifest.mdb" box-count t1; want="t1 says it has 2147483647 boxes" ;;
*)       fail "unknown case $case_" ;;
esac
guard "$WORK/root/c"

expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c
expect_msg "$want" "tensor t1 and what is wrong with its boxes"
expect_exit 1 "$CKPT_VERIFY" "$WORK/root" c --deep
expect_msg "$want" "tensor t1 and what is wrong with its boxes (--deep)"
expect_exit 1 "$CKPT_INSPECT" "$WORK/root" c --tensor t1
expect_msg "t1" "tensor t1"
finish

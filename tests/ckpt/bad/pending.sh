#!/usr/bin/env bash
# pending.sh inspect_lists|verify_root|verify_name|inspect_name
# Incomplete saves left under ROOT/.pending: p1.123abc (a whole checkpoint copied
# there, as if the process died before the rename) and p2.xyz789 (a partial data file,
# no manifest), next to a good committed checkpoint c.
#   inspect_lists  ckpt-inspect ROOT lists both as incomplete, exit 0
#   verify_root    ckpt-verify ROOT exits 1 and names both
#   verify_name    ckpt-verify ROOT p1 exits 1: it was never committed
#   inspect_name   ckpt-inspect ROOT p1 exits 2: no such checkpoint
. "$(dirname "$0")/lib.sh"
sub=${1:-}
TEST_NAME="$TEST_NAME $sub"

make_ckpt "$WORK/root" c --uneven
mkdir -p "$WORK/root/.pending/p2.xyz789"
corrupt_copy "$WORK/root/c" "$WORK/root/.pending/p1.123abc"
head -c 100000 "$WORK/root/c/rank-00000.dat" >"$WORK/root/.pending/p2.xyz789/rank-00000.dat"
guard "$WORK/root/c"
guard "$WORK/root/.pending"

case $sub in
inspect_lists)
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root"
    expect_msg "p1\.123abc.*incomplete|incomplete.*p1\.123abc" "p1.123abc as incomplete"
    expect_msg "p2\.xyz789.*incomplete|incomplete.*p2\.xyz789" "p2.xyz789 as incomplete"
    expect_msg "^c " "the committed checkpoint c"
    ;;
verify_root)
    expect_exit 1 "$CKPT_VERIFY" "$WORK/root"
    expect_msg "p1\.123abc" "the incomplete save p1.123abc"
    expect_msg "p2\.xyz789" "the incomplete save p2.xyz789"
    expect_msg "^c: ok" "the good checkpoint c as ok"
    ;;
verify_name)
    expect_exit 1 "$CKPT_VERIFY" "$WORK/root" p1
    expect_msg "(^|[^A-Za-z0-9_.-])p1([^A-Za-z0-9_-]|$)" "the checkpoint p1"
    expect_msg "never committed" "that it was never committed"
    ;;
inspect_name)
    expect_exit 2 "$CKPT_INSPECT" "$WORK/root" p1
    expect_msg "(^|[^A-Za-z0-9_.-])p1([^A-Za-z0-9_-]|$)" "the checkpoint p1"
    expect_msg "[Nn]o (such )?checkpoint" "that there is no such checkpoint"
    ;;
*)
    fail "usage: pending.sh inspect_lists|verify_root|verify_name|inspect_name" ;;
esac
finish

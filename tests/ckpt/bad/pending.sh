#!/usr/bin/env bash
# pending.sh inspect_lists|verify_root|verify_name|inspect_name|live
# Incomplete saves left under ROOT/.pending: p1.123abc (a whole checkpoint copied
# there, as if the process died before the rename) and p2.xyz789 (a partial data file,
# no manifest), next to a good committed checkpoint c.
#   inspect_lists  ckpt-inspect ROOT lists both as incomplete, exit 0
#   verify_root    ckpt-verify ROOT exits 1 and names both
#   verify_name    ckpt-verify ROOT p1 exits 1: it was never committed
#   inspect_name   ckpt-inspect ROOT p1 exits 2: no such checkpoint
#   live           beside them p3.aaa111, whose lock .pending/p3.lock a live process
#                  holds (flock, as a writer does): ckpt-verify ROOT calls p3 a save
#                  in progress naming its holder and p1, p2 debris, in words and in
#                  --json; exit 1 for the debris, and 0 once only the live save is left;
#                  ckpt-inspect ROOT tells them apart too
. "$(dirname "$0")/lib.sh"
sub=${1:-}
TEST_NAME="$TEST_NAME $sub"

make_ckpt "$WORK/root" c --uneven
mkdir -p "$WORK/root/.pending/p2.xyz789"
corrupt_copy "$WORK/root/c" "$WORK/root/.pending/p1.123abc"
head -c 100000 "$WORK/root/c/rank-00000.dat" >"$WORK/root/.pending/p2.xyz789/rank-00000.dat"
holder=
if [ "$sub" = live ]; then
    command -v python3 >/dev/null || skip "no python3 to read the JSON"
    mkdir -p "$WORK/root/.pending/p3.aaa111"
    hold_lock "$WORK/root/.pending/p3.lock"
    holder=$HOLDER
fi
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
live)
    expect_exit 1 "$CKPT_VERIFY" "$WORK/root"
    expect_msg "p3\.aaa111: a save in progress \(its writer, pid $holder on " "p3 as a live save of pid $holder"
    expect_msg "p1\.123abc: debris" "p1.123abc as debris"
    expect_msg "p2\.xyz789: debris" "p2.xyz789 as debris"
    expect_exit 1 "$CKPT_VERIFY" "$WORK/root" --json
    python3 -c '
import json, sys
p = {e["entry"]: e for e in json.load(open(sys.argv[1]))["pending"]}
assert p["p3.aaa111"]["live"] is True and p["p3.aaa111"]["owner"].startswith("pid " + sys.argv[2] + " on "), p
assert p["p1.123abc"]["live"] is False and p["p1.123abc"]["owner"] is None, p
assert p["p2.xyz789"]["live"] is False, p' "$OUT_STDOUT" "$holder" ||
        fail "--json does not tell the live save p3 from the debris p1, p2"
    expect_exit 1 "$CKPT_VERIFY" "$WORK/root" p3
    expect_msg "p3 is a save in progress .*pid $holder" "p3 by name as a save in progress"
    expect_exit 0 "$CKPT_INSPECT" "$WORK/root"
    expect_msg "p3\.aaa111 .*in progress, its writer is pid $holder" "p3 as in progress"
    expect_msg "p1\.123abc .*debris" "p1.123abc as debris"
    # Only the live save left: the root is healthy.
    check_guards
    GUARDED=()
    rm -rf "$WORK/root/.pending/p1.123abc" "$WORK/root/.pending/p2.xyz789"
    expect_exit 0 "$CKPT_VERIFY" "$WORK/root"
    expect_msg "p3\.aaa111: a save in progress" "p3 as a live save"
    kill $holder
    wait $holder 2>/dev/null
    expect_exit 1 "$CKPT_VERIFY" "$WORK/root"
    expect_msg "p3\.aaa111: debris" "p3 as debris once its holder died"
    ;;
*)
    fail "usage: pending.sh inspect_lists|verify_root|verify_name|inspect_name|live" ;;
esac
finish

#!/usr/bin/env bash
# rm.sh names|busy|keep_last|usage: ckpt-rm removes only through the core, and only
# what it is told.
#   names      ckpt-rm ROOT a nope b: a and b go (out of the catalog too: ckpt-inspect
#              lists only c), "nope" is named as no such checkpoint, exit 2; c is
#              untouched
#   busy       a save of p in progress (its lock .pending/p.lock held by a live
#              process, nothing committed): ckpt-rm ROOT p exits 2 saying that p is
#              being saved, by whom; the lock and c are untouched
#   keep_last  step-9, step-10, step-100, best-model, step-10-2x8 (ckpt-reshard's
#              default name) and ft-1: --keep-last 2 removes step-9 alone (by number,
#              not by name); --keep-last 1 --prefix ft- removes nothing (one ft- only)
#   usage      no names, --keep-last 0, names with --keep-last, --prefix alone: exit 2
. "$(dirname "$0")/lib.sh"
sub=${1:-}
TEST_NAME="$TEST_NAME $sub"
[ -n "${CKPT_RM:-}" ] && [ -x "$CKPT_RM" ] || skip "\$CKPT_RM is not set"

root=$WORK/root
small=(--mesh 2 --tensors 1 --bytes 64KiB)
case $sub in
names)
    for n in a b c; do make_ckpt "$root" $n "${small[@]}"; done
    guard "$root/c"
    expect_exit 2 "$CKPT_RM" "$root" a nope b
    expect_msg "removed .*/a$" "a as removed"
    expect_msg "removed .*/b$" "b as removed"
    expect_msg "no checkpoint named nope" "nope as no such checkpoint"
    [ ! -e "$root/a" ] && [ ! -e "$root/b" ] || fail "a or b is still there"
    expect_exit 0 "$CKPT_INSPECT" "$root"
    expect_msg "^c " "c in the catalog"
    expect_no_msg "^(a|b) " "a removed checkpoint in the catalog"
    ;;
busy)
    make_ckpt "$root" c "${small[@]}"
    mkdir -p "$root/.pending/p.aaa111"
    hold_lock "$root/.pending/p.lock"
    holder=$HOLDER
    guard "$root/c"
    guard "$root/.pending"
    expect_exit 2 "$CKPT_RM" "$root" p
    expect_msg "p is being saved \(held by pid $holder " "p as being saved by pid $holder"
    kill $holder
    wait $holder 2>/dev/null
    ;;
keep_last)
    for n in step-9 step-10 step-100 best-model step-10-2x8 ft-1; do
        make_ckpt "$root" $n "${small[@]}"
    done
    for n in step-10 step-100 best-model step-10-2x8 ft-1; do guard "$root/$n"; done
    expect_exit 0 "$CKPT_RM" "$root" --keep-last 2
    expect_msg "removed .*/step-9$" "step-9 as removed"
    [ "$(grep -c removed "$OUT")" -eq 1 ] || fail "more than step-9 was removed"
    [ ! -e "$root/step-9" ] || fail "step-9 is still there"
    expect_exit 0 "$CKPT_RM" "$root" --keep-last 1 --prefix ft-
    expect_msg "nothing to remove" "that nothing was removed"
    ;;
usage)
    make_ckpt "$root" c "${small[@]}"
    guard "$root"
    expect_exit 2 "$CKPT_RM" "$root"
    expect_msg "at least one NAME" "the missing NAME"
    expect_exit 2 "$CKPT_RM" "$root" --keep-last 0
    expect_msg "keep-last" "--keep-last"
    expect_exit 2 "$CKPT_RM" "$root" c --keep-last 1
    expect_msg "no names" "that names do not go with --keep-last"
    expect_exit 2 "$CKPT_RM" "$root" c --prefix step-
    expect_msg "--prefix goes with --keep-last" "--prefix without --keep-last"
    expect_exit 2 "$CKPT_RM" "$root" --keep-last 1 --prefix ../x
    expect_msg "prefix" "the bad prefix"
    ;;
*)
    fail "usage: rm.sh names|busy|keep_last|usage" ;;
esac
finish

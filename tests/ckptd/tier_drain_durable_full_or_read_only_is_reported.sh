#!/usr/bin/env bash
# The durable tier full, then read-only (issue 31, part 3), on tier_lib.sh's cluster
# (step-12 only in the local tiers; step-8 durable) with the durable root a tmpfs of
# 20 MiB: step-8 takes 12 of them, so step-12's 12 MiB cannot fit.
#   - n0's drain of step-12 fails with ENOSPC: ckptctl drain and the log say so; the
#     durable root holds nothing of step-12 (no checkpoint, no pending directory) and
#     step-8 is intact; n0 does not then drain alone, fetching the files its tier
#     lacks into its local disk for a root that takes nothing; the daemon goes on: a
#     replica is still taken into its local tier, and its status answers;
#   - the durable root behind a read-only bind mount: the drain fails saying so,
#     nothing there, and again nothing is fetched;
#   - writable again, with room: the same drain commits a complete copy.
# Needs root (mount); skipped without it.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

mkdir -p "$SHARED"
mount -t tmpfs -o size=20m,mode=0755 tmpfs "$SHARED" 2>/dev/null ||
    skip "cannot mount a tmpfs (not root, or no CAP_SYS_ADMIN)"
trap 'umount -l "$SHARED" 2>/dev/null; umount -l "$SHARED"; cleanup' EXIT
cluster
drain n0 step-12
said "^step-12: failed: .*No space left on device" "the drain says the durable tier is full"
logged n0 "drain of step-12 failed: .*No space left on device.*the durable root holds nothing of it" \
    "the log says it"
[ ! -e "$SHARED/step-12" ] || fail "a failed drain left $SHARED/step-12"
no_pending "$SHARED"
if grep -q "drains it alone" "$WORK/n0.log"; then
    fail "n0 drained alone into a full durable root: $(grep "drains it alone" "$WORK/n0.log")"
fi
fetched_nothing n0
run "$CKPT_VERIFY" "$SHARED" --deep
expect 0 "ckpt-verify of the full durable root"
said "^step-8: ok" "step-8 intact"
put n2 n0
run "$CKPTCTL" status --socket "$WORK/n0.sock"
expect 0 "n0's status after the failed drain"

# A read-only bind mount over the root: what the daemons hold open stays writable, as
# a file system gone read-only under them would not, but every path opened anew
# (the drain's) meets the read-only mount.
mount --bind "$SHARED" "$SHARED" && mount -o remount,bind,ro "$SHARED" ||
    fail "a read-only bind mount over $SHARED"
drain n0 step-12
said "^step-12: failed: .*Read-only file system" "the drain says the durable tier is read-only"
[ ! -e "$SHARED/step-12" ] || fail "a failed drain left $SHARED/step-12"
grep -q "drains it alone" "$WORK/n0.log" && fail "n0 drained alone into a read-only durable root"
fetched_nothing n0
umount -l "$SHARED" || fail "unmounting the read-only bind mount"

mount -o remount,size=40m "$SHARED" || fail "growing $SHARED"
drain n0 step-12
said "^step-12: done, 12615680 of 12615680 bytes$" "the drain once the durable tier has room"
same_as_truth step-12
no_pending "$SHARED"
stop_cluster
